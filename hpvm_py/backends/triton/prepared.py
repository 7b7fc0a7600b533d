"""A packed launch of one generated Triton kernel (TritonKernel.prepare).
(docs/architecture.md, "Module notes": backends/triton/prepared.py)"""
from __future__ import annotations

import contextlib
import struct
import sys
import threading
from dataclasses import dataclass
from typing import Any, Iterator, Protocol

import numpy as np

from ...errors import HPVMError
from ...ir import kernel as K
from ...ir import semantics as S
from ...types import ScalarType, bf16
from ..base import BufferArg
from ..access_errors import recorded
from ...device import faults, typed_tensor
from ...device.outputs import DeviceLaunch, DeviceOutputs
from ...support.torch_streams import torch_stream
from .codegen import TritonSource
from .host_math import fix_interpreter, interpreting
from .launcher import OwnLauncher, TritonRunner, fast_launcher


@dataclass(frozen=True)
class Layout:
    """How a launch covers its instances: the kernel's constexpr options (BLOCK, warps, ...), the
    grid of programs, and the blocks of lanes per parent instance (a kernel argument)."""

    options: dict[str, Any]
    grid: tuple[int, int, int]
    blocks: int


class LaunchedKernel(Protocol):
    """What a launch reads of its kernel (kernel.py's TritonKernel)."""

    leaf: K.LeafFunc

    def _failure(self, exc: Exception) -> HPVMError:
        """The error to raise for an exception of Triton's compiler or interpreter."""


# Triton's interpreter patches triton.language while a kernel runs: one kernel at a time.
_INTERPRETER_LOCK = threading.Lock()


def scalar_bits(value: Any, t: ScalarType) -> int:
    """A uniform scalar as the integer the kernel decodes (values/_from_bits)."""
    if t == bf16 and np.asarray(value).dtype == np.uint16:
        value = S.bf16_from_bits(value)
    if t.is_bool:
        return int(bool(value))
    if not t.is_float:
        v = int(value)
        return v - (1 << 64) if v >= 1 << 63 else v
    if t.bits == 64:
        return struct.unpack("<q", struct.pack("<d", float(value)))[0]
    return struct.unpack("<i", struct.pack("<f", np.float32(value)))[0]


def specialisation(v: int) -> tuple[Any, ...]:
    """What Triton's compiled code assumes about an integer argument."""
    if v == 1:
        return (1,)
    width = 32 if -(1 << 31) <= v < (1 << 31) else (64 if v < (1 << 63) else 65)
    return width, v % 16 == 0


class TritonLaunch(DeviceLaunch):
    def __init__(self, kernel: LaunchedKernel, source: TritonSource | None, jit: Any, call: list[Any],
                 options: dict[str, Any], grid: tuple[int, int, int], outputs: DeviceOutputs,
                 error: Any, scratch: list[Any], uniforms: dict[int, int], values: dict[int, int],
                 blocks_at: int, buffers: dict[int, int] | None = None, heap: bool = False):
        self.kernel = kernel
        self.source = source
        self.jit = jit  # None: an empty launch (no instance)
        self.call = call
        self.options = options
        self.grid = grid
        self.outputs = outputs
        self.error = error
        self.scratch = scratch
        self.uniforms = uniforms  # param -> position in call
        self.values = values  # per-parent / per-instance param -> position in call
        self.buffers = buffers or {}  # pointer param -> position in call
        self.heap = heap  # it reaches other ranks' memory (checked per launch, backends/heapview.py)
        self.stale = set(values)  # those copied from the host for this launch only
        self.blocks_at = blocks_at  # position in call of the blocks of lanes per parent instance
        # what relaunches the compiled kernel (launcher.py), once Triton's dispatch gave it
        self._fast: OwnLauncher | TritonRunner | None = None
        self._stream: Any = None
        self._issued_on: int | None = None  # the stream of the last issue() (None: torch's current)

    def relaid(self, layout: Layout) -> "TritonLaunch":
        """The same launch over another layout of programs (autotune.py tries several)."""
        call = self._typed_call()
        call[self.blocks_at] = layout.blocks
        return TritonLaunch(self.kernel, self.source, self.jit, call, layout.options, layout.grid,
                            self.outputs, self.error, self.scratch, self.uniforms, self.values,
                            self.blocks_at, self.buffers, self.heap)

    @property
    def on_any_stream(self) -> bool:
        return not self.scratch  # (zeroed on torch's current stream)

    @property
    def movable_buffers(self) -> bool:
        """set_buffer() is sound: nothing in the call depends on a buffer but its address and size
        (a checked kernel's limits were set for these buffers; the heap's accesses go through
        its bases)."""
        return self.jit is not None and self.error is None and not self.heap

    @property
    def repointable(self) -> bool:
        """set_buffer() may point it at other buffers for another launch: movable buffers, and
        neither malloc scratch (sized by scalars too) nor per-instance inputs, which are per
        launch."""
        return self.movable_buffers and not self.scratch and not self.values

    @property
    def patchable(self) -> bool:
        return not self.scratch

    def set_buffer(self, i: int, arg: Any) -> None:
        """Point buffer parameter i at `arg` (a BufferArg of a device copy): the call keeps the
        BufferArg (it holds the device copy alive) until a dispatch needs its typed view."""
        pos = self.buffers[i]
        old, self.call[pos] = self.call[pos], arg
        if self._fast is not None:
            old_address, old_device = (old.address, old.obj.device) \
                if isinstance(old, BufferArg) else (old.data_ptr(), old.device)
            if (arg.address % 16 == 0) != (old_address % 16 == 0) or arg.obj.device != old_device:
                self._fast = None  # Triton specialises pointers on 16-byte alignment: dispatch again
            else:
                self._fast.set(pos, arg.address)

    @property
    def copyable(self) -> bool:
        return self.jit is not None and self.error is None and not self.scratch and \
            not self.heap and not self.stale

    def copy(self) -> "TritonLaunch":
        assert self.copyable
        twin = object.__new__(TritonLaunch)
        twin.__dict__.update(self.__dict__)  # every field shared but these (a relaunch's cost)
        twin.call, twin.stale = list(self.call), set()
        twin._fast = None if self._fast is None else self._fast.copy()
        return twin

    def _typed_call(self) -> list[Any]:
        """The call with every buffer as the typed torch view Triton's dispatch binds."""
        call = list(self.call)
        for i, pos in self.buffers.items():
            if isinstance(call[pos], BufferArg):
                call[pos] = typed_tensor(call[pos].obj, self.kernel.leaf.params[i].type.elem)
        return call

    def set_uniform(self, i: int, value: Any) -> None:
        if self.jit is None:
            return  # an empty launch (no instance) packs no scalars: a replay's new ones go nowhere
        pos = self.uniforms[i]
        bits = scalar_bits(value, self.kernel.leaf.params[i].type)
        old, self.call[pos] = self.call[pos], bits
        if self._fast is not None:
            if specialisation(bits) != specialisation(old):
                self._fast = None  # compiled for another class of value: dispatch again
            else:
                self._fast.set(pos, bits)

    def bind_values(self, i: int, values: Any) -> bool:
        """Read per-instance input i from a device array (a producer's outputs): False when it
        does not fit."""
        pos = self.values[i]
        old = self.call[pos]
        if values.dtype != old.dtype or values.numel() != old.numel() or values.device != old.device:
            return False
        self.call[pos] = values
        if self._fast is not None:
            self._fast.set(pos, values)
        self.stale.discard(i)
        return True

    def each_kernel(self, visit: Any) -> bool:
        if self.jit is None:
            return True  # an empty launch: no kernel
        fast = self._fast
        if self.scratch or not isinstance(fast, OwnLauncher):
            return False  # (scratch zeroed on torch's stream; Triton's launcher, or its dispatch)
        return fast.each_kernel(visit)

    def issue(self, stream: Any = None) -> None:
        """Queue the kernel (on `stream`, a CUDA stream handle, else the one it was prepared on;
        its scratch is zeroed on torch's current stream)."""
        if self.jit is None:
            return
        leaf = self.kernel.leaf
        for area in self.scratch:
            area.zero_()
        if self.error is not None:
            self.clear_error_word()
        faults.launched(leaf.name, leaf.loc)
        # the stream the kernel runs on, where check() reads the error word behind it (None:
        # torch's current one)
        fast_stream = self._stream if stream is None else stream
        self._issued_on = fast_stream if self._fast is not None else stream
        try:
            if self._fast is not None:
                self._fast(fast_stream)
            elif stream is None or interpreting():
                self._dispatch()
            else:
                import torch  # noqa: PLC0415

                with torch.cuda.stream(torch_stream(stream)):
                    self._dispatch()
        except HPVMError:
            raise
        except Exception as exc:  # noqa: BLE001 - Triton's compiler or interpreter, or a fault
            raise self._reported(exc) from None

    def check(self, ran: bool = False) -> None:
        if self.error is None or self.jit is None:
            return
        try:
            code, index, limit = (int(v) for v in self.read_error_word(self._issued_on, ran))
        except Exception as exc:  # noqa: BLE001 - a fault of this kernel shows at the copy
            raise self._reported(exc) from None
        if code:
            assert self.source is not None
            raise recorded(K.shown_name(self.kernel.leaf), self.source.sites, code, index, limit)
        self.error_clear = True

    def _reported(self, exc: Exception) -> HPVMError:
        leaf = self.kernel.leaf
        return faults.fault_error(exc, leaf.name, leaf.loc) if faults.is_fault(exc) \
            else self.kernel._failure(exc)

    def _dispatch(self) -> None:
        self.call = self._typed_call()
        fn = self.jit[self.grid]
        if interpreting():
            fix_interpreter()
            with _INTERPRETER_LOCK:
                fn(*self.call, **self.options)
            return
        with room_to_recurse():
            compiled = fn(*self.call, **self.options)
        rest = self.jit.arg_names[len(self.call):]
        if compiled is not None and all(name in self.options for name in rest):
            args = self.call + [self.options[name] for name in rest]  # the kernel's order
            leaf = self.kernel.leaf
            self._stream = current_stream()
            self._fast = fast_launcher(compiled, args, self.grid, current_device(), leaf.name,
                                       leaf.loc)


# Python frames Triton's compiler may need: its code generator recurses a few frames per level of an
# expression, and a 128-deep one (the language's limit) went past Python's default of 1000 (a
# RecursionError on a real GPU; the interpreter compiles nothing)
COMPILE_RECURSION_LIMIT = 10000


@contextlib.contextmanager
def room_to_recurse() -> Iterator[None]:
    """Python's recursion limit raised to COMPILE_RECURSION_LIMIT around a Triton compile."""
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(max(before, COMPILE_RECURSION_LIMIT))
    try:
        yield
    finally:
        sys.setrecursionlimit(before)


def current_stream() -> int:
    """The handle of torch's current CUDA stream (where Triton's dispatch launched)."""
    import torch  # noqa: PLC0415

    return torch.cuda.current_stream().cuda_stream


def current_device() -> int:
    """Torch's current CUDA device (where Triton's dispatch loaded the kernel)."""
    import torch  # noqa: PLC0415

    return torch.cuda.current_device()
