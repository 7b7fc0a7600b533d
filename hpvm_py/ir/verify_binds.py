"""The verifier's checks of one graph's binds (parameters, constants and expressions feeding child
inputs): ir/verify.py calls them for every graph."""
from __future__ import annotations

import math
from typing import Any

from ..errors import VerificationError
from ..support.loc import Loc
from ..types import PtrType, ScalarType, float_value
from . import dfg as D
from . import kernel as K


def _fail(message: str, loc: Loc, rule: str) -> VerificationError:
    # (the rules named here are in verify.RULES; tests/test_rules.py checks every rule's errors)
    return VerificationError(message, loc, rule)


def _check_input_bind(g: D.GraphFunc, b: D.InputBind, dst_params: list[K.Param]) -> None:
    if not 0 <= b.parent_port < len(g.params):
        raise _fail(f"bind_input: graph {K.shown_name(g)} has {len(g.params)} input(s), not port "
                    f"{b.parent_port}", b.loc, "ports-exist")
    if not 0 <= b.dst_port < len(dst_params):
        raise _fail(f"bind_input: node {b.dst} has {len(dst_params)} input(s), not port {b.dst_port}",
                    b.loc, "ports-exist")
    parent_p, child_p = g.params[b.parent_port], dst_params[b.dst_port]
    if parent_p.type is not child_p.type and parent_p.type != child_p.type:
        raise _fail(f"bind_input {parent_p.name} -> {b.dst}.{child_p.name}: type {parent_p.type} "
                    f"does not match {child_p.type}", b.loc, "bind-types")
    if isinstance(child_p.type, PtrType) and child_p.direction in ("out", "inout") and \
            parent_p.direction == "in":
        raise _fail(f"bind_input {parent_p.name} -> {b.dst}.{child_p.name}: the child writes "
                    f"({child_p.direction}) through a pointer the parent declares In", b.loc,
                    "bind-direction")


def _check_const_bind(c: D.ConstBind, param: K.Param) -> None:
    where = f"constant {c.value.value!r} for input {param.name!r} of {c.dst}"
    t = param.type
    if not isinstance(t, ScalarType):
        raise _fail(f"{where}: the input is a {t}; constants feed scalar inputs only", c.loc,
                    "node-inputs")
    if c.value.type != t:
        raise _fail(f"{where}: the constant is a {c.value.type}, the input a {t}", c.loc, "bind-types")
    value = c.value.value
    if t.is_bool:
        fits = isinstance(value, bool)
    elif t.is_float:  # a value of the type, as the front end rounds it (`0.1:f16` is none)
        fits = isinstance(value, float) and (float_value(value, t) == value or math.isnan(value))
    else:
        fits = isinstance(value, int) and not isinstance(value, bool) and \
            t.min_value() <= value <= t.max_value()
    if not fits:
        raise _fail(f"{where}: not a value of type {t}", c.loc, "node-inputs")


def _check_expr_bind(g: D.GraphFunc, x: D.ExprBind, param: K.Param,
                     param_names: dict[str, K.Param]) -> None:
    text = D.dim_text(x.expr)
    where = f"expression {text} for input {param.name!r} of {x.dst}"
    t = param.type
    if not isinstance(t, ScalarType) or not t.is_int or t.is_bool:
        raise _fail(f"{where}: the input is a {t}; an expression of integer parameters feeds integer "
                    "inputs only (a pointer input takes a pointer parameter as it is)", x.loc,
                    "node-inputs")
    for name in sorted(D.dim_params(x.expr)):
        p = param_names.get(name)
        if p is None or not (isinstance(p.type, ScalarType) and p.type.is_int and not p.type.is_bool):
            raise _fail(f"{where} uses {name!r}, which is not an integer parameter of graph "
                        f"{K.shown_name(g)}",
                        x.loc, "node-inputs")


def fed_twice(g: D.GraphFunc, feeders: tuple[Any, Any], what: str, rule: str,
              advice: str = "") -> VerificationError:
    """The error of an input fed by two sources (`feeders`: the one seen first, then the other),
    located at the one written later in the source, the one that conflicts, naming the other with
    its line. (Edges, binds, constants and expressions are checked kind by kind, not in the order
    they were written.)"""
    first, second = sorted(feeders, key=lambda item: (item.loc.line, item.loc.col))
    where = f" (line {first.loc.line})" if first.loc.line else ""
    return _fail(f"{what} is already fed by {_feeder(first, g)}{where}{advice}", second.loc, rule)


def _feeder(source: Any, g: D.GraphFunc) -> str:
    if isinstance(source, D.Edge):
        return f"the edge from {source.src}"
    if isinstance(source, D.ConstBind):
        return "a constant"
    if isinstance(source, D.ExprBind):
        return f"the expression {D.dim_text(source.expr)}"
    return f"a bind of {g.params[source.parent_port].name!r}"
