"""Scalar and pointer types of hpvm-py, and the In/Out/InOut direction wrappers.

Types are immutable values, compared by value, so that kernel IR built from Python source and kernel
IR parsed from text agree. Every scalar type is also callable inside a leaf as a cast (`hpvm.f32(x)`);
called from host code it converts a number to the matching NumPy scalar by the same rules (`cast`).
"""
from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import FrontendError
from .support.loc import Loc


class Type:
    """Base of every hpvm type."""

    def text(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True, eq=True)
class ScalarType(Type):
    """An integer, unsigned integer, boolean (i1) or floating-point type."""

    name: str
    kind: str  # "bool" | "int" | "uint" | "float"
    bits: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        """Integer in the wide sense: signed, unsigned or i1."""
        return self.kind in ("int", "uint", "bool")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def nbytes(self) -> int:
        return max(1, self.bits // 8)

    @property
    def numpy_dtype(self) -> np.dtype:
        """NumPy has no bfloat16: bf16 buffers hold its bits as uint16."""
        return _DTYPES[self.name]

    @functools.cached_property
    def host_value(self) -> tuple[type, int | float, int | float]:
        """How a host argument of this type is made (rt/args.py's scalar_argument, per launch):
        the NumPy scalar type its values are computed in (bf16: float32) and the range of values
        it holds (for floats the finite ones: a number beyond them becomes inf, which NumPy's
        conversion warns about)."""
        scalar = np.float32 if self.name == "bf16" else _DTYPES[self.name].type
        if self.is_float:
            largest = float(np.finfo(value_dtype(self)).max)
            return scalar, -largest, largest
        return scalar, self.min_value(), self.max_value()

    def min_value(self) -> int:
        if self.kind == "int":
            return -(1 << (self.bits - 1))
        return 0

    def max_value(self) -> int:
        if self.kind == "int":
            return (1 << (self.bits - 1)) - 1
        return (1 << self.bits) - 1

    def text(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"hpvm.{self.name}"

    def __call__(self, value: Any) -> Any:
        """Host-side conversion by the rules of the cast a leaf's `hpvm.T(x)` is (cast() below):
        integers wrap, floats saturate into integers (NaN gives 0), a bf16 is rounded and kept in
        float32. A Python int is an i64 (a u64 from 2**63 on), a float an f64, a bool an i1."""
        if self.is_float and isinstance(value, int) and not isinstance(value, bool) \
                and not -(1 << 63) <= value < (1 << 64):
            # beyond 64 bits an int still rounds once to a float (inf past its range), as the
            # same literal does in a leaf: hpvm.f32(2**128) is inf
            return value_dtype(self).type(int_to_float(value, self))
        src = _host_type(value)
        if src is None:
            refuse = getattr(value, "refuse_host_use", None)  # a graph parameter being traced
            if refuse is not None:
                raise refuse(f"hpvm.{self.name}()")
            raise TypeError(f"hpvm.{self.name}() converts a number (or a NumPy scalar), not "
                            f"{type(value).__name__}")
        return cast(np.asarray(value, dtype=value_dtype(src))[()], src, self)


@dataclass(frozen=True, eq=True)
class PtrType(Type):
    """A pointer to elements of a scalar type; the memory object is (pointer, size in bytes)."""

    elem: ScalarType

    def text(self) -> str:
        return f"ptr<{self.elem.name}>"

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        return f"Ptr[{self.elem!r}]"


@dataclass(frozen=True, eq=True)
class NodeHandleType(Type):
    """The opaque node handle returned by get_node()/get_parent_node()."""

    def text(self) -> str:
        return "node"


@dataclass(frozen=True, eq=True)
class VoidType(Type):
    """The result type of a helper call that returns nothing."""

    def text(self) -> str:
        return "void"


@dataclass(frozen=True, eq=True)
class Directed:
    """A pointer type with its in/out attribute, as written in a parameter annotation."""

    type: PtrType
    direction: str  # "in" | "out" | "inout"

    @property
    def reads(self) -> bool:
        return self.direction in ("in", "inout")

    @property
    def writes(self) -> bool:
        return self.direction in ("out", "inout")


_NUMPY_NAMES = {
    "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "f16": "float16", "f32": "float32", "f64": "float64",
}

i1 = ScalarType("i1", "bool", 1)
i8 = ScalarType("i8", "int", 8)
i16 = ScalarType("i16", "int", 16)
i32 = ScalarType("i32", "int", 32)
i64 = ScalarType("i64", "int", 64)
u8 = ScalarType("u8", "uint", 8)
u16 = ScalarType("u16", "uint", 16)
u32 = ScalarType("u32", "uint", 32)
u64 = ScalarType("u64", "uint", 64)
f16 = ScalarType("f16", "float", 16)
bf16 = ScalarType("bf16", "float", 16)
f32 = ScalarType("f32", "float", 32)
f64 = ScalarType("f64", "float", 64)
node_handle = NodeHandleType()
void = VoidType()

_DTYPES = {name: np.dtype(numpy_name) for name, numpy_name in _NUMPY_NAMES.items()}
_DTYPES["bf16"] = np.dtype(np.uint16)

SCALAR_TYPES: dict[str, ScalarType] = {
    t.name: t for t in (i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64)
}

# -- conversions between scalar types: a cast's rules on every target, and host code's


def bf16_to_bits(x: Any) -> Any:
    """float32 values to bfloat16 bit patterns (uint16): round to nearest even; a NaN stays a
    (quiet) NaN even when its payload lies in the bits that are dropped."""
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    chosen = np.where(np.isnan(f), bits | np.uint32(0x00400000), rounded)
    out = (chosen >> np.uint32(16)).astype(np.uint16)
    return out if np.ndim(x) else np.uint16(out[()])


def bf16_from_bits(bits: Any) -> Any:
    """bfloat16 bit patterns to float32. The bits are integers of which the low 16 count, as
    hpvm.u16(bits) keeps them (70000 is 0x1170, -1 is 0xffff): a Python int past uint16 raised
    NumPy's OverflowError where a NumPy int64 of the same value wrapped. A float is no bit
    pattern (1.5 was read as 1): TypeError."""
    raw = np.asarray(bits)
    if raw.dtype != np.uint16:  # (the fast path: buffers and outputs hold uint16)
        if raw.dtype.kind not in "biu" and not (raw.dtype == object and all(
                isinstance(v, (int, np.integer)) for v in raw.flat)):
            given = f"{raw.dtype} values" if raw.ndim else type(bits).__name__
            raise TypeError(f"bf16_from_bits() takes bit patterns (integers), not {given}")
        # NumPy's integer casts keep the low bits; Python ints beyond int64 are kept first
        raw = (np.asarray(raw & 0xFFFF) if raw.dtype == object else raw).astype(np.uint16)
    b = raw.astype(np.uint32) << np.uint32(16)
    out = b.view(np.float32)
    return out if np.ndim(bits) else np.float32(out[()])


def bf16_round(x: Any) -> Any:
    """Round float32 values to the nearest bfloat16; the result stays float32."""
    return bf16_from_bits(bf16_to_bits(x))


def value_dtype(t: ScalarType) -> np.dtype:
    """The NumPy dtype a value of type t is computed in (bf16 values live in float32)."""
    return np.dtype(np.float32) if t == bf16 else t.numpy_dtype


def cast(value: Any, src: ScalarType, dst: ScalarType) -> Any:
    """Convert between scalar types: wrapping for ints, saturating for float to int (NaN -> 0).

    A cast to bf16 rounds through float32 (a double rounding from f64 in rare ties).
    """
    if dst.is_bool:
        return value != 0
    if src.is_float and not dst.is_float:
        return _saturate(value, dst)
    arr = np.asarray(value)
    with np.errstate(over="ignore"):  # beyond the target's range a float becomes inf, by rule
        out = bf16_round(arr.astype(np.float32)) if dst == bf16 else arr.astype(value_dtype(dst))
    return out if np.ndim(value) else out[()]


def int_to_float(value: int, dst: ScalarType) -> float:
    """A Python int of any size as float type dst (returned as a Python float holding dst's value),
    rounded once to nearest even, as a leaf's integer to float cast rounds; inf beyond dst's range.

    float(value) or np.float32(value) would round twice (to f64, then to f32): 2**60 + 2**36 + 1
    is 2**60 + 2**37 as an f32, but 2**60 by way of f64. Rounded to odd at 53 bits first, a value
    rounds to any type of at most 51 bits as it would have in one step. bf16 goes on through f32,
    as its cast from an integer type does.
    """
    if dst == f64:
        try:
            return float(value)  # Python rounds an int to a float once
        except OverflowError:
            return math.inf if value > 0 else -math.inf
    magnitude = abs(value)
    dropped = magnitude.bit_length() - 53
    if dropped > 0:
        kept = magnitude >> dropped
        if magnitude & ((1 << dropped) - 1):
            kept |= 1  # sticky: the value lies strictly between kept and kept + 1
        try:
            wide = math.ldexp(float(kept), dropped)
        except OverflowError:
            wide = math.inf
    else:
        wide = float(magnitude)
    with np.errstate(over="ignore"):
        out = float(cast(np.float64(wide), f64, dst))
    return -out if value < 0 else out


def float_value(value: int | float, dst: ScalarType) -> float:
    """A number as float type dst holds it (a Python float): an int rounded once (int_to_float),
    a float rounded from f64 as a cast is; inf beyond dst's range. The front end rounds a literal
    so, and the textual IR's parser a constant, so that every target starts from the same value."""
    if isinstance(value, int):
        return int_to_float(value, dst)
    with np.errstate(over="ignore"):
        return float(cast(np.float64(value), f64, dst))


def _saturate(value: Any, dst: ScalarType) -> Any:
    v = np.asarray(value, dtype=np.float64)
    out = np.zeros(v.shape, dtype=dst.numpy_dtype)
    lo, hi = dst.min_value(), dst.max_value()
    # float(hi) rounds up to a power of two for 64-bit types: `>=` then saturates exactly
    too_big = v >= float(hi)
    too_small = v <= float(lo)
    inside = ~np.isnan(v) & ~too_big & ~too_small
    out[inside] = np.trunc(v[inside]).astype(dst.numpy_dtype)
    out[too_big] = hi
    out[too_small] = lo
    return out if np.ndim(value) else out[()]


# The type an unannotated literal takes when nothing else decides it (DESIGN.md: literal rules).
DEFAULT_INT = i64
DEFAULT_FLOAT = f32


def _annotation_error(message: str) -> FrontendError:
    """A type written wrongly (`In[i64]`), at the line that wrote it: Python evaluates a `def`'s
    annotations in the frame that runs the `def` (a string annotation's error is located again
    by the front end, at its parameter)."""
    frame = sys._getframe(2)
    return FrontendError(message, Loc(frame.f_code.co_filename, frame.f_lineno, 0))


class _PtrFactory:
    """`Ptr[T]` builds a PtrType; `Ptr` alone is not a type."""

    def __getitem__(self, elem: Any) -> PtrType:
        t = resolve_scalar(elem)
        if t is None:
            raise _annotation_error(f"Ptr[...] needs a scalar element type such as hpvm.f32, got "
                                    f"{elem!r}")
        return PtrType(t)

    def __repr__(self) -> str:
        return "hpvm.Ptr"


class _DirectionFactory:
    def __init__(self, direction: str, spelling: str):
        self.direction = direction
        self.spelling = spelling

    def __getitem__(self, inner: Any) -> Directed:
        if not isinstance(inner, PtrType):
            raise _annotation_error(f"{self.spelling}[...] wraps a pointer type such as Ptr[f32], "
                                    f"got {inner!r}")
        return Directed(inner, self.direction)

    def __repr__(self) -> str:
        return f"hpvm.{self.spelling}"


Ptr = _PtrFactory()
"""`Ptr[T]`: a buffer of elements of the scalar type T, e.g. `Ptr[f32]` (at launch: a NumPy array
or torch tensor). A pointer parameter carries a direction, `In[Ptr[T]]`, and is followed by an
`i64` parameter holding its size in bytes."""
In = _DirectionFactory("in", "In")
"""`In[Ptr[T]]`: a buffer parameter the node only reads."""
Out = _DirectionFactory("out", "Out")
"""`Out[Ptr[T]]`: a buffer parameter the node only writes (where a launch may write it only in
part, the runtime copies it in like `InOut`, with a warning)."""
InOut = _DirectionFactory("inout", "InOut")
"""`InOut[Ptr[T]]`: a buffer parameter the node reads and writes."""


def resolve_scalar(obj: Any) -> ScalarType | None:
    """Map an hpvm, NumPy or torch dtype (or the Python int/bool classes) to a ScalarType."""
    if isinstance(obj, ScalarType):
        return obj
    if obj is int:
        return i64
    if obj is bool:
        return i1
    if isinstance(obj, str):
        return SCALAR_TYPES.get(obj)
    torch_name = _torch_dtype_name(obj)
    if torch_name is not None:
        return _TORCH_NAMES.get(torch_name)
    if isinstance(obj, np.dtype):
        return _BY_DTYPE.get(obj)
    if obj is None:  # (np.dtype(None) is float64: `x: None` is no f64)
        return None
    try:
        dt = np.dtype(obj)
    except (TypeError, ValueError):  # ValueError: an object whose `.dtype` is no dtype (`Ptr[np]`)
        return None
    return _BY_DTYPE.get(dt)


_BY_DTYPE = {t.numpy_dtype: t for t in SCALAR_TYPES.values() if t.name != "bf16"}


def _host_type(value: Any) -> ScalarType | None:
    """The scalar type a host value converts from (ScalarType.__call__); None for no number."""
    if isinstance(value, (bool, np.bool_)):
        return i1
    if isinstance(value, int):
        if -(1 << 63) <= value < (1 << 63):
            return i64
        if 0 <= value < (1 << 64):
            return u64
        raise OverflowError(f"{value} does not fit in 64 bits")
    if isinstance(value, float):
        return f64
    if isinstance(value, np.generic):
        return _BY_DTYPE.get(value.dtype)
    return None

_TORCH_NAMES = {
    "bool": i1, "int8": i8, "int16": i16, "int32": i32, "int64": i64, "uint8": u8, "uint16": u16,
    "uint32": u32, "uint64": u64, "float16": f16, "bfloat16": bf16, "float32": f32, "float64": f64,
}


def _torch_dtype_name(obj: Any) -> str | None:
    cls = type(obj)
    if cls.__module__ == "torch" and cls.__name__ == "dtype":
        return str(obj).removeprefix("torch.")
    return None


def parse_type(text: str) -> Type | None:
    """The inverse of Type.text()."""
    if text in SCALAR_TYPES:
        return SCALAR_TYPES[text]
    if text == "node":
        return node_handle
    if text == "void":
        return void
    if text.startswith("ptr<") and text.endswith(">"):
        elem = SCALAR_TYPES.get(text[4:-1])
        return PtrType(elem) if elem else None
    return None


def promote(a: ScalarType, b: ScalarType) -> ScalarType:
    """The common type of a binary operation between two strongly typed operands.

    floats beat integers; between floats the wider wins (f16 with bf16 gives f32); between
    integers the wider wins and, at equal width, unsigned wins (as in C); i1 yields to any integer.
    """
    if a == b:
        return a
    if a.is_float or b.is_float:
        if not a.is_float:
            return b
        if not b.is_float:
            return a
        if a.bits == b.bits:  # f16 with bf16
            return f32
        return a if a.bits > b.bits else b
    if a.is_bool:
        return b
    if b.is_bool:
        return a
    if a.bits != b.bits:
        return a if a.bits > b.bits else b
    return a if a.kind == "uint" else b
