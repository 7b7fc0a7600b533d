"""The nvptx target: leaves compiled to SIMT GPU code, one thread per dynamic instance.

The kernel IR is lowered by the cpu target's shared lowering (cpu/codegen.py and below) with this
target's parts (libdevice math, relaxed atomics, block barriers), into an LLVM kernel for
`nvptx64-nvidia-cuda`, turned into PTX by llvmlite and into a cubin by ptxas. The pieces:

  simt.py      the kernel: instance ids from special registers, group and flat mappings
  scratch.py   malloc() as shared memory (static or dynamic), sizes evaluated on the host
  mathlib.py   math functions from libdevice
  abi.py       the kernel parameters, shared by code generation and launch
  toolchain.py LLVM IR -> PTX (libdevice linked) -> cubin (ptxas)
  device.py    the CUDA driver through cuda-bindings (imported on first use)
  launch.py    NvptxKernel: argument packing, grid and block, launch, checked-mode errors
  backend.py   NvptxBackend: build() and the disk-cache keys (the caches are backends/base.py's)
"""
from .backend import NvptxBackend

__all__ = ["NvptxBackend"]
