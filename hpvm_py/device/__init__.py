"""The CUDA layer shared by the GPU targets (`gpu` through Triton, `nvptx` through LLVM NVPTX).

Device names are `cuda:N` (`fake:N` without CUDA); a node placed on GPU number N (hint "gpu:N",
rt/placement.py) runs on device N of that kind, the one `selected()` makes current for its launch. A memory object's copy on a device is a flat, contiguous uint8 torch
tensor there (a user's own CUDA tensor is used as it is); backends launch on
`BufferArg.address`, the copy's device pointer. Transfers and allocation are the
memory tracker's (rt/tracker.py) way to the devices; it counts every copy.

Without CUDA (CI), the `fake` device kind stands in: its "device memory" is host NumPy arrays,
copied and counted exactly like real device memory, so transfer counts are tested without a GPU.
The Triton interpreter (TRITON_INTERPRET=1) runs kernels on it.
"""
from .devices import FAKE, cuda_available, device_count, gpu_device, selected, typed_tensor

__all__ = ["FAKE", "cuda_available", "device_count", "gpu_device", "selected", "typed_tensor"]
