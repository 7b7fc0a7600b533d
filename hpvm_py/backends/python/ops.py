"""Run-time helpers that generated Python leaf code calls (the python target).

Values are NumPy scalars of the IR type's dtype (per-instance mode) or NumPy arrays of it, one
element per instance (vector mode). NumPy's operators already implement the kernel semantics for
same-typed operands; these helpers cover what they do not: bounds-checked memory access (negative
indices must not wrap), masked access, saturating casts, bf16 rounding, math in f32 for 16-bit
floats, and atomics.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ...ir import semantics as S
from ...ir.kernel import PREDICATE_FUNCTIONS
from ...types import ScalarType, bf16


class BoundsError(IndexError):
    """An access outside [0, limit): the kernel turns it into the located error of access `site`
    (an index into the generated leaf's sites)."""

    def __init__(self, site: int, index: int, limit: int):
        super().__init__(f"access {site}: index {index} outside [0, {limit})")
        self.site = site
        self.index = index
        self.limit = limit


class Buffer:
    """A pointer argument: a flat typed NumPy view limited to the size the user passed.

    `journal`, when a launch sets it, makes the first write through this buffer keep a copy of
    its contents (`original`) and list the buffer there, so that the launch can put every
    written buffer back as it was (the vector mode does before it reruns instance by instance)."""

    __slots__ = ("name", "array", "is_bf16", "journal", "original")

    def __init__(self, name: str, array: np.ndarray, is_bf16: bool,
                 journal: list[Buffer] | None = None):
        self.name = name
        self.array = array
        self.is_bf16 = is_bf16
        self.journal = journal
        self.original: np.ndarray | None = None

    def __repr__(self) -> str:
        return f"<buffer {self.name}: {len(self.array)} elements>"


def _before_write(buf: Buffer) -> None:
    """Keep the contents a journaled buffer had before the launch's first write through it."""
    if buf.journal is not None and buf.original is None:
        buf.original = buf.array.copy()
        buf.journal.append(buf)


def restore(journal: list[Buffer]) -> None:
    """Put the journaled buffers back as they were, the last one saved first: two parameters may
    view the same memory, and the later snapshot already holds the earlier buffer's writes."""
    for buf in reversed(journal):
        assert buf.original is not None
        buf.array[...] = buf.original
        buf.original = None
    journal.clear()


def load(site: int, buf: Buffer, index: Any) -> Any:
    i = int(index)
    if i < 0 or i >= len(buf.array):
        raise BoundsError(site, i, len(buf.array))
    v = buf.array[i]
    return S.bf16_from_bits(v) if buf.is_bf16 else v


def store(site: int, buf: Buffer, index: Any, value: Any) -> None:
    i = int(index)
    if i < 0 or i >= len(buf.array):
        raise BoundsError(site, i, len(buf.array))
    _before_write(buf)
    buf.array[i] = S.bf16_to_bits(value) if buf.is_bf16 else value


def _check(site: int, buf: Buffer, index: np.ndarray) -> None:
    if index.size:
        limit = len(buf.array)
        if int(index.min()) < 0 or int(index.max()) >= limit:
            # the first instance out of bounds, as an instance-by-instance run meets it
            first = int(np.flatnonzero((index < 0) | (index >= limit))[0])
            raise BoundsError(site, int(index[first]), limit)


def vload(site: int, buf: Buffer, index: Any, mask: Any = None) -> Any:
    """Gather for every instance (only the lanes of `mask` must be in bounds; others read 0)."""
    idx = np.asarray(index, dtype=np.int64)
    if mask is not None:
        _check(site, buf, idx[np.broadcast_to(mask, idx.shape)] if idx.ndim
               else np.atleast_1d(idx)[:1 if np.any(mask) else 0])
        if not len(buf.array):  # no lane of the mask reads it (checked): there is no element 0
            v = np.zeros(np.broadcast_shapes(idx.shape, np.shape(mask)), buf.array.dtype)
            return S.bf16_from_bits(v) if buf.is_bf16 else v
        idx = np.where(mask, idx, 0)
    else:
        _check(site, buf, np.atleast_1d(idx))
    v = buf.array[idx]
    if mask is not None and np.ndim(v):
        v = np.where(mask, v, np.zeros((), v.dtype))
    return S.bf16_from_bits(v) if buf.is_bf16 else v


def vstore(site: int, buf: Buffer, index: Any, value: Any, mask: Any = None, lanes: int = 1) -> None:
    """Scatter for every (masked) instance; when indices repeat, the last instance wins."""
    idx = np.broadcast_to(np.asarray(index, dtype=np.int64), (lanes,))
    val = np.broadcast_to(np.asarray(S.bf16_to_bits(value) if buf.is_bf16 else value), (lanes,))
    if mask is not None:
        m = np.broadcast_to(mask, (lanes,))
        idx, val = idx[m], val[m]
    _check(site, buf, idx)
    _before_write(buf)
    buf.array[idx] = val


def atomic(site: int, op: str, buf: Buffer, index: Any, value: Any) -> Any:
    """Read-modify-write of one element (instances run one at a time here, so it is atomic)."""
    old = load(site, buf, index)
    if buf.array.dtype == np.bool_:
        # i1 computes in integers and stores `!= 0`, as the compiled targets do (add is or, sub
        # is xor): NumPy has no boolean subtract
        store(site, buf, index, _ATOMIC[op](np.int64(old), np.int64(value)) != 0)
    else:
        store(site, buf, index, _ATOMIC[op](old, value))
    return old


def vatomic(site: int, op: str, buf: Buffer, index: Any, value: Any, mask: Any = None,
            lanes: int = 1) -> None:
    """Atomics of every (masked) instance whose old values are unused: ufunc.at accumulates repeats."""
    idx = np.broadcast_to(np.asarray(index, dtype=np.int64), (lanes,))
    val = np.broadcast_to(np.asarray(value), (lanes,))
    if mask is not None:
        m = np.broadcast_to(mask, (lanes,))
        idx, val = idx[m], val[m]
    _check(site, buf, idx)
    if buf.is_bf16:
        raise NotImplementedError  # vector mode is not chosen for bf16 atomics
    ufunc = _ATOMIC_UFUNC[op]
    _before_write(buf)
    with np.errstate(all="ignore"):
        ufunc.at(buf.array, idx, val.astype(buf.array.dtype))


_ATOMIC: dict[str, Callable[[Any, Any], Any]] = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b,
    "min": S.fmin, "max": S.fmax,  # on floats: a NaN operand is ignored, -0 < +0
    "xchg": lambda a, b: b, "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "xor": lambda a, b: a ^ b,
}
_ATOMIC_UFUNC = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum,
                 "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


def vector_atomic(op: str, t: ScalarType) -> bool:
    """Whether ufunc.at computes the atomic exactly: bf16 needs rounding, and no ufunc orders
    signed zeros for float min/max."""
    return op in _ATOMIC_UFUNC and t != bf16 and not (t.is_float and op in ("min", "max")) \
        and not (t.is_bool and op == "sub")  # NumPy has no boolean subtract


def cast_function(src: ScalarType, dst: ScalarType) -> Callable[[Any], Any]:
    """A fast converter for one (src, dst) pair."""
    if dst.is_bool:
        return lambda v: v != 0
    if src.is_float and not dst.is_float:
        return lambda v: S.cast(v, src, dst)
    if dst == bf16:
        return lambda v: S.bf16_round(np.asarray(v).astype(np.float32))[()] if np.ndim(v) == 0 \
            else S.bf16_round(np.asarray(v).astype(np.float32))
    dtype = S.value_dtype(dst)

    def convert(v: Any) -> Any:
        if isinstance(v, (np.generic, np.ndarray)):
            return v.astype(dtype)
        return np.asarray(v).astype(dtype)[()]

    return convert


def _f32_then(t: ScalarType, fn: Callable[..., Any]) -> Callable[..., Any]:
    """16-bit floats compute math in f32 and round back; other types compute natively."""
    if t.bits != 16:
        return fn
    back = (lambda r: S.bf16_round(r)) if t == bf16 else (lambda r: np.asarray(r).astype(np.float16)[()]
                                                          if np.ndim(r) == 0 else r.astype(np.float16))

    def wrapped(*args: Any) -> Any:
        return back(fn(*[np.asarray(a).astype(np.float32) if np.ndim(a) else np.float32(a) for a in args]))

    return wrapped


_MATH: dict[str, Callable[..., Any]] = {
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "exp": np.exp, "exp2": np.exp2,
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": S.erf, "erfc": S.erfc,
    "fabs": np.fabs, "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint,
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "pow": S.power,
    "atan2": np.arctan2, "fmod": np.fmod, "copysign": S.copysign, "hypot": S.hypot,
    "fmin": S.fmin, "fmax": S.fmax, "fma": S.fma, "abs": np.abs, "min": S.minimum, "max": S.maximum,
}


def math_function(name: str, t: ScalarType) -> Callable[..., Any]:
    fn = _MATH[name]
    if name in ("abs", "min", "max") and not t.is_float:
        return fn
    if name in PREDICATE_FUNCTIONS:
        # an i1, not a number to round back to f16/bf16: a float16 "truth" breaks `or`/`and`,
        # which the vector mode computes with | and &
        return fn
    return _f32_then(t, fn)


def py_range(start: Any, stop: Any, step: Any) -> range:
    """Python's range, except that a zero step runs no iteration (kernel semantics)."""
    s = int(step)
    return range(int(start), int(stop), s) if s else range(0)
