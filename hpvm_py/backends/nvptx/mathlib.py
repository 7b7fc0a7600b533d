"""The nvptx target's math library: libdevice's `__nv_*` functions (linked in by toolchain.py).

LLVM's NVPTX target lowers only approximations of the transcendental intrinsics (sin.approx,
ex2.approx) and `frem` to an inexact `x - trunc(x / y) * y`, so these come from libdevice, which
is accurate to a few ulps like the host's libm, and exact for fmod.
"""
from __future__ import annotations

from llvmlite import ir

from ..cpu.intrinsics import declare
from ..cpu.lltypes import F32

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
        return b.call(declare(b.module, symbol, ft, [ft] * len(args), pure=True), args)
