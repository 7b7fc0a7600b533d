"""Math functions usable inside leaves (`hpvm.math.sqrt(x)`, as `math.sqrt(x)` is).

Inside a leaf they are lowered to typed kernel IR (an f32 argument gives an f32 result). Called
from host code they compute with NumPy, so the same helper can be tried out on the host.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .ir import semantics as S
from .ir.kernel import MATH_FUNCTIONS

# name -> host implementation; the front end maps these objects back to their names.
_HOST = {
    "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "exp": np.exp, "exp2": np.exp2,
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "erf": S.erf, "erfc": S.erfc, "fabs": np.fabs,
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "round": np.rint, "isnan": np.isnan,
    "isinf": np.isinf, "isfinite": np.isfinite, "pow": S.power, "atan2": np.arctan2,
    "fmod": np.fmod, "copysign": S.copysign, "hypot": S.hypot, "fmin": S.fmin, "fmax": S.fmax,
    "fma": S.fma, "abs": np.abs, "min": S.minimum, "max": S.maximum,
}


def _host(name: str):
    impl = _HOST[name]

    def fn(*args: Any) -> Any:
        return impl(*args)

    fn.__name__ = name
    fn.__qualname__ = name
    fn.__doc__ = f"{name} ({MATH_FUNCTIONS[name]} argument(s)); lowered to kernel IR inside leaves."
    return fn


FUNCTIONS = {name: _host(name) for name in MATH_FUNCTIONS}
globals().update(FUNCTIONS)
__all__ = sorted(FUNCTIONS)
