"""Math functions (MathCall) as LLVM intrinsics or C library calls.

LLVM intrinsics are preferred: they are known to have no side effects, so loops that call them
still vectorise (the calls are scalarised). The C functions used where LLVM has no intrinsic are
declared as reading no memory for the same reason. f16/bf16 arguments arrive in f32 form and the
result is rounded back to the 16-bit type.
"""
from __future__ import annotations

from llvmlite import ir

from ...types import ScalarType
from .intrinsics import declare, overloaded
from .lltypes import F32, I1, round_to

_INTRINSIC = {
    "sqrt": "llvm.sqrt", "exp": "llvm.exp", "exp2": "llvm.exp2", "log": "llvm.log",
    "log2": "llvm.log2", "log10": "llvm.log10", "sin": "llvm.sin", "cos": "llvm.cos",
    "tan": "llvm.tan", "asin": "llvm.asin", "acos": "llvm.acos", "atan": "llvm.atan",
    "sinh": "llvm.sinh", "cosh": "llvm.cosh", "tanh": "llvm.tanh", "fabs": "llvm.fabs",
    "floor": "llvm.floor", "ceil": "llvm.ceil", "trunc": "llvm.trunc",
    "round": "llvm.roundeven",  # half to even, as Python's round and NumPy's rint
    "pow": "llvm.pow", "atan2": "llvm.atan2", "copysign": "llvm.copysign",
    "fma": "llvm.fma",
}
_FLOAT_BITS = {ir.HalfType: 16, ir.FloatType: 32, ir.DoubleType: 64}
_LIBM = ("expm1", "log1p", "asinh", "acosh", "atanh", "erf", "erfc", "hypot")


def call(b: ir.IRBuilder, name: str, t: ScalarType, args: list[ir.Value],
         arg_type: ScalarType, result_name: str = "") -> ir.Value:
    """name(args) where the arguments have type arg_type and the result type t."""
    if name in ("isnan", "isinf", "isfinite"):
        return _predicate(b, name, args[0], result_name)
    if name in ("abs", "min", "max") and not arg_type.is_float:
        return _int_function(b, name, arg_type, args, result_name)
    return round_to(b, _float_function(b, name, args), t, result_name)


def _float_function(b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
    ft = args[0].type
    if name == "rsqrt":
        root = b.call(overloaded(b.module, "llvm.sqrt", ft, [ft]), args)
        return b.fdiv(ir.Constant(ft, 1.0), root)
    if name == "fmod":
        return b.frem(args[0], args[1])  # frem is C fmod
    if name == "abs":
        return b.call(overloaded(b.module, "llvm.fabs", ft, [ft]), args)
    if name in ("min", "max", "fmin", "fmax"):
        return float_minmax(b, name, args[0], args[1])
    if name in _LIBM:
        c_name = name + "f" if ft == F32 else name
        return b.call(declare(b.module, c_name, ft, [ft] * len(args), pure=True), args)
    fn = overloaded(b.module, _INTRINSIC[name], ft, [ft] * len(args))
    return b.call(fn, args)


def float_minmax(b: ir.IRBuilder, name: str, x: ir.Value, y: ir.Value) -> ir.Value:
    """min/max (IEEE minimum/maximum: NaN propagates) and fmin/fmax (minimumNumber/
    maximumNumber: a NaN operand is ignored); all order -0 below +0. Compare and select rather
    than llvm.minnum & co., whose signed-zero and NaN rules have changed between LLVM versions
    and differ between lowerings."""
    lower = name in ("min", "fmin")
    pred = "<" if lower else ">"
    # the NaN that decides: x's for min/max (x NaN -> x), y's for fmin/fmax (y NaN -> x)
    nan_operand = x if name in ("min", "max") else y
    int_type = ir.IntType(_FLOAT_BITS[type(x.type)])
    negative = b.icmp_signed("<", b.bitcast(x, int_type), ir.Constant(int_type, 0))
    zero_tie = b.and_(b.fcmp_ordered("==", x, y), negative if lower else b.not_(negative))
    take_x = b.or_(b.or_(b.fcmp_ordered(pred, x, y), b.fcmp_unordered("uno", nan_operand,
                                                                        nan_operand)), zero_tie)
    return b.select(take_x, x, y)


def _int_function(b: ir.IRBuilder, name: str, t: ScalarType, args: list[ir.Value],
                  result_name: str) -> ir.Value:
    x = args[0]
    if name == "abs":
        if not t.is_signed:
            return x
        # is_int_min_poison = false: abs(INT_MIN) wraps to INT_MIN
        fn = overloaded(b.module, "llvm.abs", x.type, [x.type, I1])
        return b.call(fn, [x, ir.Constant(I1, 0)], name=result_name)
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
