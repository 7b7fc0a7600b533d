"""The nvptx target's math library: libdevice's `__nv_*` functions (linked in by toolchain.py).

LLVM's NVPTX target lowers only approximations of the transcendental intrinsics (sin.approx,
ex2.approx) and `frem` to an inexact `x - trunc(x / y) * y`, so these come from libdevice, which
is accurate to a few ulps like the host's libm, and exact for fmod.
"""
from __future__ import annotations

from llvmlite import ir

from ..cpu.intrinsics import declare, overloaded
from ..cpu.lltypes import F32, F64

LIBDEVICE_FUNCTIONS = frozenset((
    "exp", "exp2", "log", "log2", "log10", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
    "cosh", "tanh", "pow", "atan2", "fmod", "expm1", "log1p", "asinh", "acosh", "atanh", "erf",
    "erfc", "hypot"))


class LibdeviceMath:
    selects_bits = True  # (MathLibrary says why)
    wide_abs = True

    def call(self, b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
        assert name in LIBDEVICE_FUNCTIONS, name
        ft = args[0].type
        symbol = f"__nv_{name}f" if ft == F32 else f"__nv_{name}"
        fn = declare(b.module, symbol, ft, [ft] * len(args), pure=True)
        if name == "hypot" and ft == F64:
            return _scaled_hypot(b, fn, args)
        return b.call(fn, args)


# libdevice's f64 hypot overflows to inf for operands near the largest double (hypot(1.0,
# DBL_MAX) is inf on an H200, DBL_MAX on the host): operands above 2**1000 are scaled by 2**-600
# and the result back by 2**600, both exact, which leaves every other result as libdevice's
HYPOT_BIG, HYPOT_DOWN, HYPOT_UP = 2.0 ** 1000, 2.0 ** -600, 2.0 ** 600


def _scaled_hypot(b: ir.IRBuilder, hypot: ir.Function, args: list[ir.Value]) -> ir.Value:
    fabs = overloaded(b.module, "llvm.fabs", F64, [F64])
    big = b.or_(*(b.fcmp_ordered(">", b.call(fabs, [a]), ir.Constant(F64, HYPOT_BIG)) for a in args))
    down = b.select(big, ir.Constant(F64, HYPOT_DOWN), ir.Constant(F64, 1.0))
    up = b.select(big, ir.Constant(F64, HYPOT_UP), ir.Constant(F64, 1.0))
    return b.fmul(b.call(hypot, [b.fmul(a, down) for a in args]), up)
