"""What a user buffer is: NumPy array or torch tensor, where it lives, its size and element type."""
from __future__ import annotations

import ctypes
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..device.devices import byte_tensor, tensor_bytes
from ..types import ScalarType, bf16, resolve_scalar

HOST = "host"


@dataclass(frozen=True)
class BufferInfo:
    kind: str  # "numpy" | "torch"
    device: str  # "host" or "cuda:N"
    nbytes: int
    elem: ScalarType | None
    contiguous: bool
    address: int


def is_buffer(obj: Any) -> bool:
    return isinstance(obj, np.ndarray) or _is_torch_tensor(obj)


def _is_torch_tensor(obj: Any) -> bool:
    cls = type(obj)
    return cls.__module__.startswith("torch") and cls.__name__ in ("Tensor", "Parameter")


def not_dense(buf: Any) -> str | None:
    """Why a torch tensor is no memory a kernel can index (a sparse layout: its nbytes, data
    pointer and contiguity are not defined), or None."""
    if not _is_torch_tensor(buf):
        return None
    layout = buf.layout
    return None if layout is sys.modules["torch"].strided else f"is a {layout} tensor"


def negated(buf: Any) -> bool:
    """Whether buf is a torch tensor with the negative bit (`z.conj().imag`, `torch._neg_view`):
    its memory holds its values negated, which a kernel indexing that memory would read."""
    return _is_torch_tensor(buf) and buf.is_neg()


def zero_tensor(buf: Any) -> bool:
    """Whether buf is torch's efficient zero tensor (`torch._efficientzerotensor`, which some
    gradient formulas make): it has no memory (its data pointer is 0) that a kernel could index."""
    return _is_torch_tensor(buf) and buf._is_zerotensor()


def foreign_device(info: BufferInfo) -> str | None:
    """Why a buffer's device is none the runtime runs on or copies from (a meta tensor, which has
    no memory; an mps or xpu tensor), or None for the host and CUDA GPUs."""
    kind = info.device.partition(":")[0]
    if info.device == HOST or kind == "cuda":
        return None
    if kind == "meta":
        return "is a meta tensor, which has a shape but no memory"
    return f"lives on {info.device}, a device hpvm-py does not run on (it runs on the host and CUDA GPUs)"


def given_nbytes(buf: Any) -> int | None:
    """A launch argument's size in bytes, for a pointer's size left out (None: it has none)."""
    return None if not_dense(buf) is not None else getattr(buf, "nbytes", None)


def describe(buf: Any) -> BufferInfo:
    if isinstance(buf, np.ndarray):
        elem = resolve_scalar(buf.dtype)
        return BufferInfo("numpy", HOST, int(buf.nbytes), elem, bool(buf.flags.c_contiguous),
                          int(buf.ctypes.data))
    if _is_torch_tensor(buf):
        device = HOST if buf.device.type == "cpu" else f"{buf.device.type}:{buf.device.index or 0}"
        return BufferInfo("torch", device, int(buf.numel() * buf.element_size()),
                          resolve_scalar(buf.dtype), bool(buf.is_contiguous()), int(buf.data_ptr()))
    raise TypeError(type(buf).__name__)


def buffer_kind(buf: Any) -> tuple[Any, ...] | None:
    """What a launch's checks of a buffer look at but its size (rt/args.py): buffers of one kind
    pass or fail them alike. None for what is not a buffer."""
    cls = type(buf)
    if cls is np.ndarray:
        flags = buf.flags
        return cls, buf.dtype, flags.c_contiguous, flags.writeable
    if _is_torch_tensor(buf):
        if buf.layout is not sys.modules["torch"].strided or buf.is_neg() or buf._is_zerotensor():
            return None  # (checked, and refused, by the launch's full checks)
        return cls, buf.dtype, buf.device, buf.is_contiguous(), _grad_recorded(buf)
    if isinstance(buf, np.ndarray):  # a subclass (np.matrix): a kind too, else a dtype or a
        flags = buf.flags  # writability changed in place since its checks passed goes unchecked
        return cls, buf.dtype, flags.c_contiguous, flags.writeable
    return None


def _grad_recorded(tensor: Any) -> bool:
    """Whether autograd records what is done to tensor now: it requires grad and grad mode is on.
    Under torch.no_grad() (an optimizer's step) torch writes such tensors in place, and so may a
    kernel."""
    return tensor.requires_grad and sys.modules["torch"].is_grad_enabled()


def span(buf: Any) -> tuple[int, int]:
    """The address and size in bytes of a contiguous buffer (what describe() says of them, for
    less: a launch asks it of every device copy)."""
    if isinstance(buf, np.ndarray):
        return int(buf.ctypes.data), int(buf.nbytes)
    return int(buf.data_ptr()), int(buf.numel() * buf.element_size())


def extent(buf: Any) -> tuple[int, int]:
    """The lowest address of a buffer's elements and the end of the highest: the memory it
    shares with others, a strided or reversed view's included (whose address and nbytes
    cover other memory)."""
    if isinstance(buf, np.ndarray):
        address, size, strides = int(buf.ctypes.data), buf.itemsize, buf.strides
    else:
        address, size = int(buf.data_ptr()), buf.element_size()
        strides = tuple(stride * size for stride in buf.stride())
    if 0 in buf.shape:
        return address, address
    steps = [(n - 1) * stride for n, stride in zip(buf.shape, strides)]
    return (address + sum(s for s in steps if s < 0),
            address + sum(s for s in steps if s > 0) + size)


def _data_field() -> int | None:
    """Where a NumPy array object holds its data pointer: on CPython (an object's id is its
    address) the first field of NumPy's public PyArrayObject_fields, after the object's header,
    when reading it there gives what `array.ctypes.data` says; else None."""
    if sys.implementation.name != "cpython":
        return None
    probe = np.empty(3)
    offset = object.__basicsize__
    return offset if ctypes.c_size_t.from_address(id(probe) + offset).value == probe.ctypes.data \
        else None


_DATA_FIELD = _data_field()
_READ_WORD = ctypes.c_size_t.from_address


def array_address(array: np.ndarray) -> int:
    """`array.ctypes.data`, read in a tenth of its time (it makes a ctypes object per call): a
    stream's push asks it of every array pushed again, to see that the array was not moved."""
    if _DATA_FIELD is None:
        return int(array.ctypes.data)
    return _READ_WORD(id(array) + _DATA_FIELD).value


def moved(buf: Any, address: int, nbytes: int) -> bool:
    """Whether buf no longer is the memory it was when tracked: resized, or its storage freed
    (its data pointer is then 0) or replaced. A NumPy array cannot lose its memory while
    referenced; only a resize moves it: to another size, or back to its size elsewhere
    (`a.resize(2 * n, refcheck=False); a.resize(n, refcheck=False)`, the old memory freed)."""
    if isinstance(buf, np.ndarray):
        return int(buf.nbytes) != nbytes or array_address(buf) != address
    return buf.data_ptr() != address or buf.numel() * buf.element_size() != nbytes


def why_not_writable(buf: Any) -> str | None:
    """Why a kernel must not write into buf (None when it may)."""
    if isinstance(buf, np.ndarray):
        return None if buf.flags.writeable else "is a read-only array"
    if _is_torch_tensor(buf) and _grad_recorded(buf):
        # as torch's own in-place error: autograd would not see what a kernel writes
        return ("is a torch tensor that requires grad, and grad mode is on: autograd cannot see "
                "what a kernel writes into it (torch refuses such in-place writes too); launch "
                "under torch.no_grad() (as an optimizer step does), pass tensor.detach(), which "
                "shares its memory, or write into a tensor that does not require grad")
    return None


def note_written(buf: Any) -> None:
    """Count a launch's write into a torch tensor in its version counter, as torch's in-place ops
    do: autograd then refuses a backward that needs the values the tensor held when an op saved
    it (`y = w * x`, a launch writes x, `y.backward()`), where it used the new ones silently."""
    if _is_torch_tensor(buf):
        sys.modules["torch"].autograd.graph.increment_version(buf)


def elem_matches(info: BufferInfo, elem: ScalarType) -> bool:
    """NumPy has no bfloat16: a uint16 array is accepted as raw bf16 bits."""
    if info.elem is elem or info.elem == elem:
        return True
    return elem == bf16 and info.kind == "numpy" and info.elem is not None and info.elem.name == "u16"


def host_view(buf: Any, elem: ScalarType) -> np.ndarray:
    """A flat NumPy view (no copy) of a host buffer, typed as elem (bf16 as uint16 bits)."""
    if isinstance(buf, np.ndarray):
        # (as a plain ndarray: a subclass indexes otherwise, np.matrix's m[0] is a whole row)
        return np.asarray(buf).reshape(-1).view(elem.numpy_dtype)
    # (bf16 as its bits: NumPy has no bfloat16)
    dtype = np.uint16 if elem == bf16 else elem.numpy_dtype
    return tensor_bytes(byte_tensor(buf.detach())).view(dtype)
