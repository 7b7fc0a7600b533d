"""Math functions (MathCall): the lowering shared by the LLVM targets, and the host's library.

Functions with an exact, target-independent LLVM lowering (sqrt, floor, fma, min/max, ...) become
LLVM intrinsics on every target. The others (sin, exp, pow, fmod, ...) come from the target's math
library (`MathLibrary`): on the host, `HostMath` uses LLVM intrinsics where LLVM has them (known to
have no side effects, so loops that call them still vectorise) and C library functions declared as
reading no memory otherwise. f16/bf16 arguments arrive in f32 form and the result is rounded back
to the 16-bit type.
"""
from __future__ import annotations

from typing import Protocol

from llvmlite import ir

from ...types import ScalarType
from .intrinsics import declare, overloaded
from .lltypes import F32, I1, I32, I64, round_to

# Exact on every target (correctly rounded or exact by definition): LLVM intrinsics everywhere.
EXACT_INTRINSICS = {
    "sqrt": "llvm.sqrt", "fabs": "llvm.fabs", "floor": "llvm.floor", "ceil": "llvm.ceil",
    "trunc": "llvm.trunc",
    "round": "llvm.roundeven",  # half to even, as Python's round and NumPy's rint
    "fma": "llvm.fma",
}
# The host's library: LLVM intrinsics where LLVM has them, else the C library.
_HOST_INTRINSICS = {
    "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log", "log2": "llvm.log2",
    "log10": "llvm.log10", "sin": "llvm.sin", "cos": "llvm.cos", "tan": "llvm.tan",
    "asin": "llvm.asin", "acos": "llvm.acos", "atan": "llvm.atan", "sinh": "llvm.sinh",
    "cosh": "llvm.cosh", "tanh": "llvm.tanh", "pow": "llvm.pow", "atan2": "llvm.atan2",
}
_LIBM = ("expm1", "log1p", "asinh", "acosh", "atanh", "erf", "erfc", "hypot")
# C's pow and hypot answer a signaling NaN as an invalid operation (glibc's pow(sNaN, 0) is NaN
# where pow(NaN, 0) is 1, hypot(inf, sNaN) NaN where hypot(inf, NaN) is inf); the language has one
# kind of NaN (semantics.power), so their operands are made quiet first.
_QUIET_OPERANDS = ("pow", "hypot")


class MathLibrary(Protocol):
    """A target's float functions that have no exact LLVM lowering."""

    # min/max select on the operands' bits: NVPTX turns a float select of a compare of the same
    # operands into max.f64 / min.f32, whose choice between -0.0 and +0.0 is not the language's
    selects_bits: bool
    # abs of i8 and i16 computes in i32 on a value LLVM cannot see is narrow (an identity):
    # LLVM narrows any form of it back to NVPTX's abs.s16, after which ptxas's shr.s16 of
    # abs(-32768) shifted +32768 (tests/differential/reproducers/pingpong-1158526871.json)
    wide_abs: bool

    def call(self, b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
        """name(args) on f32 or f64 register values: a transcendental function, pow or fmod."""


class HostMath:
    """The host CPU's math: LLVM intrinsics, C libm, and `frem` (which is C fmod)."""

    selects_bits = False  # x86's maxps/minps pick the second operand on ties, as min/max do
    wide_abs = False

    def call(self, b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
        ft = args[0].type
        if name == "fmod":
            return b.frem(args[0], args[1])
        if name in _QUIET_OPERANDS:
            args = [_quiet(b, a) for a in args]
        if name in _LIBM:
            c_name = name + "f" if ft == F32 else name
            return b.call(declare(b.module, c_name, ft, [ft] * len(args), pure=True), args)
        fn = overloaded(b.module, _HOST_INTRINSICS[name], ft, [ft] * len(args))
        return b.call(fn, args)


def _quiet(b: ir.IRBuilder, x: ir.Value) -> ir.Value:
    """x with its quiet bit set where it is a NaN. In integer operations: LLVM may fold a float
    identity (`x + -0.0`) away, and llvm.canonicalize, which SLP packs two of into a <2 x float>,
    aborts the x86 backend ("Do not know how to custom type legalize this operation")."""
    it = I32 if x.type == F32 else I64
    bits = b.bitcast(x, it)
    quiet = b.or_(bits, ir.Constant(it, 1 << (22 if x.type == F32 else 51)))
    return b.bitcast(b.select(b.fcmp_unordered("uno", x, x), quiet, bits), x.type)


def call(b: ir.IRBuilder, name: str, t: ScalarType, args: list[ir.Value],
         arg_type: ScalarType, lib: MathLibrary, result_name: str = "") -> ir.Value:
    """name(args) where the arguments have type arg_type and the result type t."""
    if name in ("isnan", "isinf", "isfinite"):
        return _predicate(b, name, args[0], result_name)
    if name in ("abs", "min", "max") and not arg_type.is_float:
        return _int_function(b, name, arg_type, args, result_name, lib.wide_abs)
    return round_to(b, _float_function(b, name, args, lib), t, result_name)


def _float_function(b: ir.IRBuilder, name: str, args: list[ir.Value],
                    lib: MathLibrary) -> ir.Value:
    ft = args[0].type
    if name == "rsqrt":
        root = b.call(overloaded(b.module, "llvm.sqrt", ft, [ft]), args)
        return b.fdiv(ir.Constant(ft, 1.0), root)
    if name == "abs":
        return b.call(overloaded(b.module, "llvm.fabs", ft, [ft]), args)
    if name in ("min", "max", "fmin", "fmax"):
        return _float_minmax(b, name, args[0], args[1], lib.selects_bits)
    if name == "copysign":
        return _copysign(b, args[0], args[1])
    if name in EXACT_INTRINSICS:
        fn = overloaded(b.module, EXACT_INTRINSICS[name], ft, [ft] * len(args))
        return b.call(fn, args)
    return lib.call(b, name, args)


def _float_minmax(b: ir.IRBuilder, name: str, x: ir.Value, y: ir.Value, bits: bool) -> ir.Value:
    """min/max: `x if x < y or isnan(x) else y` (NumPy's minimum: a NaN operand gives NaN; a tie
    of zeros gives y), one compare-and-select that maps to vminps/vmaxps.
    fmin/fmax: IEEE-754 minimumNumber/maximumNumber (a NaN operand is ignored, -0 < +0): LLVM's
    minimumnum/maximumnum on a GPU (one min.f32/max.f32), compares and selects on the CPU
    (_number_minmax says why; llvm.minnum leaves the sign of a zero result open)."""
    if name in ("fmin", "fmax"):
        if not bits:
            return _number_minmax(b, name, x, y)
        intrinsic = "llvm.minimumnum" if name == "fmin" else "llvm.maximumnum"
        return b.call(overloaded(b.module, intrinsic, x.type, [x.type, x.type]), [x, y])
    pred = "<" if name == "min" else ">"
    take_x = b.or_(b.fcmp_ordered(pred, x, y), b.fcmp_unordered("uno", x, x))
    if not bits:
        return b.select(take_x, x, y)
    it = ir.IntType(32 if x.type == F32 else 64)
    # The operands' bits pass through an identity LLVM cannot look into: InstCombine folds
    # bitcast(select(c, bitcast x, bitcast y)) back into a float select, then rewrites
    # `x > 0 ? 0 : x` as `x >= 0 ? 0 : x`, which turns a -0.0 into +0.0.
    xb, yb = (_ptx_identity(b, b.bitcast(v, it)) for v in (x, y))
    return b.bitcast(b.select(take_x, xb, yb), x.type)


def _ptx_identity(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """v (i32 or i64) through a PTX move, which ptxas drops and LLVM cannot see through."""
    width = v.type.width
    move = ir.FunctionType(v.type, [v.type])
    reg = "r" if width == 32 else "l"
    return b.asm(move, f"mov.b{width} $0, $1;", f"={reg},{reg}", [v], False)


def _number_minmax(b: ir.IRBuilder, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """fmin/fmax as compares and selects. LLVM 22 lowers a scalar maximumnum on AVX-512 CPUs,
    where it knows one operand is never NaN, to a vmaxss that returns the other operand's NaN
    (tests/differential/reproducers/mixed-239505244.json: fmax(inf, 0/0) gave NaN)."""
    better = b.fcmp_ordered("<" if name == "fmin" else ">", x, y)
    pick = b.select(b.fcmp_unordered("uno", y, y), x, b.select(better, x, y))
    # equal operands have equal bits but for a tie of zeros: -0 < +0 decides its sign
    it = ir.IntType(32 if x.type == F32 else 64)
    xb, yb = b.bitcast(x, it), b.bitcast(y, it)
    tie = b.bitcast(b.or_(xb, yb) if name == "fmin" else b.and_(xb, yb), x.type)
    return b.select(b.fcmp_ordered("==", x, y), tie, pick)


def _copysign(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """copysign with a NaN y counted as positive (semantics.copysign says why)."""
    ft = x.type
    signed = b.call(overloaded(b.module, "llvm.copysign", ft, [ft, ft]), [x, y])
    magnitude = b.call(overloaded(b.module, "llvm.fabs", ft, [ft]), [x])
    return b.select(b.fcmp_unordered("uno", y, y), magnitude, signed)


def _int_function(b: ir.IRBuilder, name: str, t: ScalarType, args: list[ir.Value],
                  result_name: str, wide_abs: bool) -> ir.Value:
    x = args[0]
    if name == "abs":
        if not t.is_signed:
            return x
        wide = wide_abs and t.bits < 32
        value = _ptx_identity(b, b.sext(x, I32)) if wide else x
        # is_int_min_poison = false: abs(INT_MIN) wraps to INT_MIN
        fn = overloaded(b.module, "llvm.abs", value.type, [value.type, I1])
        result = b.call(fn, [value, ir.Constant(I1, 0)], name="" if wide else result_name)
        return b.trunc(result, x.type, name=result_name) if wide else result
    pred = "<" if name == "min" else ">"
    cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned
    return b.select(cmp(pred, x, args[1]), x, args[1], name=result_name)


def _predicate(b: ir.IRBuilder, name: str, x: ir.Value, result_name: str) -> ir.Value:
    if name == "isnan":
        return b.fcmp_unordered("uno", x, x, name=result_name)
    magnitude = b.call(overloaded(b.module, "llvm.fabs", x.type, [x.type]), [x])
    inf = ir.Constant(x.type, float("inf"))
    if name == "isinf":
        return b.fcmp_ordered("==", magnitude, inf, name=result_name)
    return b.fcmp_ordered("<", magnitude, inf, name=result_name)
