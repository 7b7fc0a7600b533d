"""Constants bound to node inputs (`hpvm.node(f, k=3)`): typed by the input they feed."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import VerificationError
from ..ir import kernel as K
from ..support.loc import Loc
from ..types import ScalarType, int_to_float
from .lower.values import float_in

Number = bool | int | float


def is_constant(value: Any) -> bool:
    """A Python or NumPy number (NumPy's own scalars keep only their value: the input types it)."""
    return isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating))


def input_constant(value: Any, param: K.Param, node: str, loc: Loc) -> K.Const:
    """value as a constant of param's type; a located error when it cannot be one."""
    where = f"input {param.name!r} of node {node}"
    t = param.type
    if not isinstance(t, ScalarType):
        raise _error(f"{where} is a {t}: a constant cannot feed a pointer (bind a buffer parameter "
                     "of the graph instead)", loc)
    number: Number = value.item() if isinstance(value, np.generic) else value
    if t.is_bool:
        if isinstance(number, bool) or (isinstance(number, int) and number in (0, 1)):
            return K.Const(value=bool(number), type=t, loc=loc)
        raise _error(f"{where} is an i1: bind True or False, not {number!r}", loc)
    if t.is_float:
        out_of_range = _error(f"{where} is a {t}: {number!r} is out of its range", loc)
        if isinstance(number, int):
            # rounded once (float(number) first would round twice: to f64, then to t)
            rounded = int_to_float(number, t)
            if math.isinf(rounded):
                raise out_of_range
        else:
            rounded = float_in(t, number)
            if math.isinf(rounded) and not math.isinf(number):
                raise out_of_range
        return K.Const(value=rounded, type=t, loc=loc)
    if isinstance(number, float):
        raise _error(f"{where} is a {t}: the float {number!r} cannot become an integer implicitly; "
                     "bind an int", loc)
    number = int(number)
    if not t.min_value() <= number <= t.max_value():
        raise _error(f"{where} is a {t}: {number} is out of its range [{t.min_value()}, "
                     f"{t.max_value()}]", loc)
    return K.Const(value=number, type=t, loc=loc)


def _error(message: str, loc: Loc) -> VerificationError:
    return VerificationError(message, loc, rule="node-inputs")
