"""The Triton generator's math calls: exact helpers from the prelude, library functions
(libdevice on the GPU, NumPy in the interpreter) for the rest (codegen.py uses it)."""
from __future__ import annotations

from ...errors import CompileError
from ...ir import kernel as K
from ...support.loc import Loc
from ...types import ScalarType
from . import values as V
from .prelude import LIBRARY_FUNCTIONS

SUGGESTION = "use target=\"nvptx\" (the SIMT GPU target) or \"cpu\" for this leaf"


def unsupported(construct: str, loc: Loc) -> CompileError:
    return CompileError(f"{construct} is not supported by target 'gpu' (Triton) yet; {SUGGESTION}",
                        loc, rule="gpu-supported")


class MathCalls:
    """Mixed into the generator: uses its expr and its set of library functions."""

    def math(self, e: K.MathCall, m: str) -> str:
        t = e.type
        assert isinstance(t, ScalarType)
        args = [self.expr(a, m) for a in e.args]
        arg_t = e.args[0].type
        assert isinstance(arg_t, ScalarType)
        name = e.name
        if name == "isnan":
            return f"_isnan({args[0]})"
        if name in ("isinf", "isfinite"):
            inf = V.constant(float("inf"), arg_t)
            return f"(tl.abs({args[0]}) {'==' if name == 'isinf' else '<'} {inf})"
        if not arg_t.is_float and name in ("abs", "min", "max"):
            x = args[0]
            if name == "abs" and arg_t.is_signed and arg_t.bits < 32:
                return f"_narrow_abs({x})"  # (prelude.py says why)
            if name == "abs":
                return f"_iabs({x})" if arg_t.is_signed else x
            if arg_t.bits < 32:
                return f"_narrow_{name}({x}, {args[1]})"  # (prelude.py says why)
            return f"_i{name}({x}, {args[1]})"
        simple = {"abs": "tl.abs", "fabs": "tl.abs", "floor": "tl.floor", "ceil": "tl.ceil",
                  "sqrt": "_sqrt", "fma": "tl.fma", "min": "_fmin_numpy", "max": "_fmax_numpy",
                  "fmin": "_minnum", "fmax": "_maxnum", "copysign": "_copysign"}
        if name in simple:
            code = f"{simple[name]}({', '.join(args)})"
        elif name == "rsqrt":
            code = f"_fdiv({V.constant(1.0, arg_t)}, _sqrt({args[0]}))"
        elif name in LIBRARY_FUNCTIONS:
            self.library.add(name)
            code = f"_m_{name}({', '.join(args)})"
        else:
            raise unsupported(f"math function {name}", e.loc)
        return V.round_to(code, t)
