"""GPU devices and transfers: `cuda:N` (torch CUDA memory) and `fake:N` (host NumPy arrays).

The memory tracker (rt/tracker.py) copies through `TRANSFERS`: fn(source copy, destination device,
existing destination copy or None) -> destination copy, by (source kind, destination kind). A copy into the host always lands in the user's own
buffer (the tracker passes it as the existing copy).
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, Iterator

import numpy as np

from ..errors import LaunchError
from ..support import settings
from ..support.world import current as current_world
from ..types import ScalarType, bf16
from . import faults
from .staging import staged

FAKE = "fake"


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def gpu_device(index: int | None = None) -> str:
    """The device GPU targets run on: $HPVM_GPU_DEVICE, else the GPU of this rank when
    hpvm.distributed runs on GPUs, else cuda:0, else the fake device fake:0. With an index, GPU
    number `index` of that device's kind (the caller checks that it exists against
    device_count())."""
    faults.check_usable()
    wanted = settings.GPU_DEVICE.text()
    if wanted:
        kind, _, number = wanted.partition(":")
        if kind not in ("cuda", FAKE) or not settings.is_decimal(number):
            raise LaunchError(f"HPVM_GPU_DEVICE={wanted!r}: expected cuda:N or fake:N")
        if kind == "cuda" and not cuda_available():
            raise LaunchError(f"HPVM_GPU_DEVICE={wanted!r}, but CUDA is not available here")
        if int(number) >= device_count(kind):
            raise LaunchError(f"HPVM_GPU_DEVICE={wanted!r}, but this machine has "
                              f"{device_count(kind)} {kind} device(s) (numbered from 0)")
        default = wanted
    else:
        default = _rank_device() or ("cuda:0" if cuda_available() else f"{FAKE}:0")
    if index is None:
        return default
    return f"{default.partition(':')[0]}:{index}"


def _rank_device() -> str | None:
    """The GPU of this rank when hpvm.distributed runs its ranks on GPUs."""
    world = current_world()
    return world.device if world is not None and world.device.startswith("cuda") else None


def device_count(kind: str) -> int:
    """GPUs of a device kind in this process: CUDA's, or $HPVM_FAKE_DEVICES fake ones (default 2)."""
    if kind == "cuda":
        import torch

        return int(torch.cuda.device_count()) if cuda_available() else 0
    text = settings.FAKE_DEVICES.get()
    if not settings.is_decimal(text):
        raise LaunchError(f"HPVM_FAKE_DEVICES={text!r}: expected a number of fake GPUs")
    return int(text)


@contextlib.contextmanager
def selected(device: str) -> Iterator[None]:
    """Make `device` the current CUDA device while a node's kernel is launched (Triton and the
    nvptx launcher launch on the current device); nothing to select for a fake device."""
    kind, _, number = device.partition(":")
    if kind != "cuda":
        yield
        return
    import torch

    with torch.cuda.device(int(number)):
        yield


# -- bytes of any buffer ---------------------------------------------------------------------


def byte_tensor(buf: Any) -> Any:
    """A flat uint8 torch view (no copy) of a NumPy array or a contiguous torch tensor."""
    import torch

    if isinstance(buf, np.ndarray):
        return torch.from_numpy(host_bytes(buf))
    if buf.dtype == torch.uint8 and buf.dim() == 1:
        return buf  # a device copy the tracker made: already flat bytes (a view costs ~2 us)
    return buf.reshape(-1).view(torch.uint8)


def host_bytes(buf: Any) -> np.ndarray:
    """A flat uint8 NumPy view of a host buffer (NumPy array or CPU tensor). An ndarray subclass
    is viewed as a plain ndarray: np.matrix stays 2-D through reshape(-1), and torch refused to
    copy its (1, n) shape into a flat device copy."""
    if isinstance(buf, np.ndarray):
        return np.asarray(buf).reshape(-1).view(np.uint8)
    return tensor_bytes(byte_tensor(buf))


class _TensorMemory:
    """A contiguous CPU tensor's bytes as NumPy takes them (`__array_interface__`); the view's
    base, so it keeps the tensor alive."""

    __slots__ = ("tensor", "__array_interface__")

    def __init__(self, tensor: Any):
        self.tensor = tensor
        self.__array_interface__ = {"shape": (tensor.numel() * tensor.element_size(),),
                                    "typestr": "|u1", "data": (tensor.data_ptr(), False),
                                    "version": 3}


def tensor_bytes(tensor: Any) -> np.ndarray:
    """A flat uint8 NumPy view of a contiguous CPU tensor. Not Tensor.numpy(): that marks the
    tensor's storage as never resizable again, so a launch on the python target or a copy
    through a fake device left the user's tensor refusing resize_() for good (and the
    untrack, resize, track again that docs/runtime.md describes failed inside torch)."""
    return np.asarray(_TensorMemory(tensor))


def _to_cuda(src: Any, device: str, existing: Any) -> Any:
    import torch

    if existing is None:
        existing = torch.empty(_nbytes(src), dtype=torch.uint8, device=device)
    copies = staged()
    if copies is not None and (isinstance(src, np.ndarray) or src.device.type == "cpu"):
        copies.to_device(host_bytes(src), byte_tensor(existing))
    else:
        byte_tensor(existing).copy_(byte_tensor(src))
    return existing


def _allocate_cuda(home: Any, device: str, _: Any) -> Any:
    return allocate(_nbytes(home), device)


def allocate(nbytes: int, device: str) -> Any:
    """Flat bytes on a device, as the tracker's copies are (a fake device's: zeroed host bytes)."""
    if not device.startswith("cuda"):
        return np.zeros(nbytes, np.uint8)
    import torch

    return torch.empty(nbytes, dtype=torch.uint8, device=device)


def _to_host(src: Any, device: str, existing: Any) -> Any:
    if existing is None:
        existing = np.empty(_nbytes(src), np.uint8)
    copies = staged()
    if copies is not None:  # filled once the copies queued so far are done
        copies.to_host(host_bytes(src) if isinstance(src, np.ndarray) else byte_tensor(src),
                       host_bytes(existing))
        return existing
    if isinstance(src, np.ndarray):
        host_bytes(existing)[...] = host_bytes(src)
        return existing
    try:
        byte_tensor(existing).copy_(byte_tensor(src))  # waits for the device's work on src
    except Exception as exc:  # noqa: BLE001 - a kernel that wrote src may have faulted
        raise faults.reported(exc) from None
    return existing


def _to_fake(src: Any, device: str, existing: Any) -> Any:
    if existing is None:
        existing = np.empty(_nbytes(src), np.uint8)
    host_bytes(existing)[...] = host_bytes(src) if isinstance(src, np.ndarray) or \
        src.device.type == "cpu" else byte_tensor(src).cpu().numpy()
    return existing


def _allocate_fake(home: Any, device: str, _: Any) -> Any:
    return allocate(_nbytes(home), device)


def _nbytes(buf: Any) -> int:
    return int(buf.nbytes) if isinstance(buf, np.ndarray) else int(buf.numel() * buf.element_size())


# (source device kind, destination device kind; "alloc": a new copy) -> how to copy
TRANSFERS: dict[tuple[str, str], Callable[[Any, str, Any], Any]] = {
    ("host", "cuda"): _to_cuda, ("cuda", "cuda"): _to_cuda, ("cuda", "host"): _to_host,
    ("alloc", "cuda"): _allocate_cuda,
    ("host", FAKE): _to_fake, (FAKE, FAKE): _to_fake, (FAKE, "host"): _to_host,
    ("alloc", FAKE): _allocate_fake,
}


# -- typed views for kernels ------------------------------------------------------------------


def torch_dtype(elem: ScalarType) -> Any:
    """The torch dtype a kernel sees a buffer of `elem` as (bf16 as its 16 bits in int16)."""
    import torch

    if elem == bf16:
        return torch.int16
    return {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
            "i64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
            "u64": torch.uint64, "f16": torch.float16, "f32": torch.float32,
            "f64": torch.float64}[elem.name]


def typed_tensor(buf: Any, elem: ScalarType) -> Any:
    """A flat torch view (no copy) of a device copy as elements of `elem`."""
    data = byte_tensor(buf)
    extra = data.numel() % elem.nbytes
    return (data[:-extra] if extra else data).view(torch_dtype(elem))
