"""Reference semantics of kernel-IR operations on NumPy values (scalars or arrays).

The python target and constant folding evaluate with these functions; the compiled backends
implement the same rules (kernel.py's docstring lists them). NumPy's own integer `//`, `%`,
shifts and float `//`, `%` already follow those rules; casts (saturating float to int), bf16
rounding and the float min/max choice are spelled out here.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..types import ScalarType, bf16

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
    """bfloat16 bit patterns (uint16) to float32."""
    b = np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)
    out = b.view(np.float32)
    return out if np.ndim(bits) else np.float32(out[()])


def bf16_round(x: Any) -> Any:
    """Round float32 values to the nearest bfloat16; the result stays float32."""
    return bf16_from_bits(bf16_to_bits(x))


def value_dtype(t: ScalarType) -> np.dtype:
    """The NumPy dtype a value of type t is computed in (bf16 values live in float32)."""
    return np.dtype(np.float32) if t == bf16 else t.numpy_dtype


def typed_value(value: int | float | bool, t: ScalarType) -> Any:
    """A constant of type t as the NumPy value the targets compute with (a bf16 in float32)."""
    if t.is_bool:
        return np.bool_(value)
    if t == bf16:
        return np.float32(bf16_round(np.float32(value)))
    return value_dtype(t).type(value)


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


def _zero_order(a: Any, b: Any, chosen: Any, pick_negative: bool) -> Any:
    """Where a == b (both zeros of either sign, or one value twice) choose by sign bit: -0 < +0."""
    with np.errstate(invalid="ignore"):
        tie = np.equal(a, b)
    if not np.any(tie):
        return chosen
    first_negative = np.signbit(a)
    by_sign = np.where(first_negative == pick_negative, a, b)
    out = np.where(tie, by_sign, chosen).astype(np.result_type(chosen))
    return out if np.ndim(out) else out[()]


def minimum(a: Any, b: Any) -> Any:
    """`min(a, b)` on floats: `a if a < b or isnan(a) else b` (as NumPy's minimum: a NaN operand
    gives NaN; of two equal zeros, b). Cheap on every target: one compare and a select."""
    with np.errstate(invalid="ignore"):
        out = np.where((a < b) | np.isnan(a), a, b).astype(np.result_type(a, b))
    return out if np.ndim(out) else out[()]


def maximum(a: Any, b: Any) -> Any:
    """`max(a, b)` on floats: `a if a > b or isnan(a) else b`."""
    with np.errstate(invalid="ignore"):
        out = np.where((a > b) | np.isnan(a), a, b).astype(np.result_type(a, b))
    return out if np.ndim(out) else out[()]


def fmin(a: Any, b: Any) -> Any:
    """`hpvm.math.fmin`, IEEE-754 minimumNumber: a NaN operand is ignored (NaN only when both
    are), -0 < +0."""
    with np.errstate(invalid="ignore"):
        return _zero_order(a, b, np.fmin(a, b), pick_negative=True)


def fmax(a: Any, b: Any) -> Any:
    """`hpvm.math.fmax`, IEEE-754 maximumNumber: a NaN operand is ignored, -0 < +0."""
    with np.errstate(invalid="ignore"):
        return _zero_order(a, b, np.fmax(a, b), pick_negative=False)


def copysign(a: Any, b: Any) -> Any:
    """|a| with the sign of b; a NaN b counts as positive. The sign of a NaN made by an invalid
    operation differs between CPUs (x86: negative) and GPUs (positive): copysign would carry
    that difference into a number."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(b), np.abs(a), np.copysign(a, b))[()]


_NP_BINOPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "floordiv": np.floor_divide, "mod": np.remainder, "and": np.bitwise_and, "or": np.bitwise_or,
    "xor": np.bitwise_xor, "shl": np.left_shift, "shr": np.right_shift,
}
_NP_COMPARE = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


def binop(op: str, a: Any, b: Any, t: ScalarType) -> Any:
    """a op b for operands of type t (NumPy values of value_dtype(t)); wraps, never raises."""
    with np.errstate(all="ignore"):
        result = _NP_BINOPS[op](a, b)
    return bf16_round(result) if t == bf16 else result


def compare(op: str, a: Any, b: Any) -> Any:
    with np.errstate(invalid="ignore"):
        return _NP_COMPARE[op](a, b)


def unary(op: str, a: Any, t: ScalarType) -> Any:
    with np.errstate(all="ignore"):
        if op == "neg":
            return np.negative(a)
        if op == "not":
            return np.logical_not(a)
        return np.invert(a)
