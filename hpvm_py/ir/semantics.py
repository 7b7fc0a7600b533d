"""Reference semantics of kernel-IR operations on NumPy values (scalars or arrays).

The python target and constant folding evaluate with these functions; the compiled backends
implement the same rules (kernel.py's docstring lists them). NumPy's own integer `//`, `%`,
shifts and float `//`, `%` already follow those rules; the float min/max choice is spelled out
here, casts (saturating float to int) and bf16 rounding in types.py, whose scalar types convert
host values by them too.
"""
from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

# the conversions between scalar types live with the types (host code converts by them too); the
# python target and constant folding reach them here, with the other operations
from ..types import (ScalarType, bf16, bf16_from_bits, bf16_round, bf16_to_bits,  # noqa: F401
                     cast, value_dtype)


def typed_value(value: int | float | bool, t: ScalarType) -> Any:
    """A constant of type t as the NumPy value the targets compute with (a bf16 in float32)."""
    if t.is_bool:
        return np.bool_(value)
    if t == bf16:
        return np.float32(bf16_round(np.float32(value)))
    return value_dtype(t).type(value)


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


def _number_or(a: Any, b: Any, both: Any) -> Any:
    """`both` where neither operand is a NaN, else the other operand. Not np.fmin/np.fmax: their
    scalar loops (C's fminf, and every lane past the last full vector) give NaN for a signaling
    NaN operand, where minimumNumber ignores it as it ignores a quiet one."""
    out = np.where(np.isnan(b), a, np.where(np.isnan(a), b, both)).astype(np.result_type(a, b))
    return out if np.ndim(out) else out[()]


def fmin(a: Any, b: Any) -> Any:
    """`hpvm.math.fmin`, IEEE-754 minimumNumber: a NaN operand is ignored (NaN only when both
    are), -0 < +0."""
    with np.errstate(invalid="ignore"):
        return _zero_order(a, b, _number_or(a, b, np.minimum(a, b)), pick_negative=True)


def fmax(a: Any, b: Any) -> Any:
    """`hpvm.math.fmax`, IEEE-754 maximumNumber: a NaN operand is ignored, -0 < +0."""
    with np.errstate(invalid="ignore"):
        return _zero_order(a, b, _number_or(a, b, np.maximum(a, b)), pick_negative=False)


def _quiet(x: Any) -> Any:
    """x with a signaling NaN made quiet (multiplying by one is exact for every other value, -0.0
    included): C's pow and hypot answer a signaling NaN as an invalid operation (glibc's
    pow(sNaN, 0) is NaN, not 1), while the language has one kind of NaN."""
    return np.multiply(x, 1)


def power(x: Any, y: Any) -> Any:
    """pow(x, y) as C's pow, for every NaN alike. NumPy computes a scalar exponent 0.5 as
    sqrt(x), whose sqrt(-0.0) is -0.0 and sqrt(-inf) NaN where pow gives +0.0 and +inf."""
    with np.errstate(all="ignore"):
        x, y = _quiet(x), _quiet(y)
        result = np.power(x, y)
        out = np.where((y == 0.5) & ((x == 0) | (x == -np.inf)), np.abs(x), result)
    out = out.astype(np.result_type(result))
    return out if np.ndim(out) else out[()]


def hypot(x: Any, y: Any) -> Any:
    """hypot(x, y) as C's hypot, for every NaN alike (hypot(inf, NaN) is inf)."""
    with np.errstate(all="ignore"):
        return np.hypot(_quiet(x), _quiet(y))


def copysign(a: Any, b: Any) -> Any:
    """|a| with the sign of b; a NaN b counts as positive. The sign of a NaN made by an invalid
    operation differs between CPUs (x86: negative) and GPUs (positive): copysign would carry
    that difference into a number."""
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(b), np.abs(a), np.copysign(a, b))[()]


def _fma_f64(x: float, y: float, z: float) -> float:
    """x * y + z rounded once, on Python floats (f64)."""
    if not (math.isfinite(x) and math.isfinite(y)):
        return x * y + z  # the product is exactly an infinity, or NaN: nothing to round twice
    if not math.isfinite(z):
        return z  # a finite product never meets z's infinity (unfused, x * y could overflow)
    if x == 0 or y == 0:
        return x * y + z  # an exact zero product: the sum's rounding and zero sign are IEEE's
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        return 0.0  # a nonzero product cancelled exactly: +0 when rounding to nearest
    try:
        return float(exact)  # int / int in Python is correctly rounded, subnormals included
    except OverflowError:
        return math.inf if exact > 0 else -math.inf


_fma_f64_lanes = np.frompyfunc(_fma_f64, 3, 1)


def _fma_f32(a: Any, b: Any, c: Any) -> Any:
    """fma for operands of at most 24 significant bits: their product is exact in f64, the sum's
    error is exact by TwoSum, and rounding that sum to odd at 53 bits before rounding it to f32
    rounds the exact value once (53 >= 24 + 2)."""
    p = np.asarray(a, np.float64) * np.asarray(b, np.float64)
    c64 = np.asarray(c, np.float64)
    s = p + c64
    bp = s - c64
    err = (p - bp) + (c64 - (s - bp))  # TwoSum: p + c == s + err exactly (NaN when s is not finite)
    odd = (s.view(np.uint64) & np.uint64(1)).astype(bool)
    # an inexact sum with an even last bit moves one ulp toward the exact value, whose odd
    # neighbour that is
    nudge = np.isfinite(err) & (err != 0) & ~odd
    s = np.where(nudge, np.nextafter(s, np.where(err > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def fma(a: Any, b: Any, c: Any) -> Any:
    """`hpvm.math.fma(a, b, c)`: a * b + c rounded once (IEEE fusedMultiplyAdd), as llvm.fma and
    tl.fma compute it. f32 operands give f32, f64 operands f64 (16-bit floats arrive in f32)."""
    dtype = np.result_type(a, b, c)
    if not np.issubdtype(dtype, np.floating):
        dtype = np.dtype(np.float64)
    shape = np.broadcast_shapes(np.shape(a), np.shape(b), np.shape(c))
    with np.errstate(all="ignore"):
        if dtype.itemsize <= 4:
            out = np.asarray(_fma_f32(*np.broadcast_arrays(a, b, c))).astype(dtype)
        else:
            out = np.asarray(_fma_f64_lanes(np.asarray(a, np.float64), np.asarray(b, np.float64),
                                            np.asarray(c, np.float64)), np.float64).astype(dtype)
    return out.reshape(shape) if shape else dtype.type(out.reshape(())[()])


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


def _in_own_precision(fn: Any) -> Any:
    """A libm function of one float that NumPy lacks, on arrays and scalars: computed in double
    and rounded to the argument's float type (an integer argument gives float64, as np.sqrt's)."""
    vec = np.vectorize(fn, otypes=[np.float64])

    def apply(x: Any) -> Any:
        dtype = np.asarray(x).dtype
        dtype = dtype if dtype.kind == "f" else np.dtype(np.float64)
        r = vec(x).astype(dtype)
        return r if np.ndim(x) else dtype.type(r[()])

    return apply


erf = _in_own_precision(math.erf)
erfc = _in_own_precision(math.erfc)


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
