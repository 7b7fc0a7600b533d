"""Forwarded outputs: which of a leaf's outputs are one of its scalar inputs, unchanged.

HPVM-C leaves often return a size they were given (`return bytes_out;`), and the graph carries it
over an edge to the next node's size port, only to order the two. Such an output is known on the
host as soon as the input is, so a stream need not wait for the kernel to read it back
(rt/stream/items.py). An output is forwarded when every `return` of the body returns the same
scalar parameter at its place, with the output's type, the parameter is never assigned, and the
body ends with a `return` (no path falls off its end).
"""
from __future__ import annotations

from ..ir import kernel as K
from ..types import ScalarType


def forwarded_outputs(leaf: K.LeafFunc) -> dict[int, int]:
    """Output index -> the index of the scalar parameter it always equals."""
    if not leaf.outputs or not leaf.body or not isinstance(leaf.body[-1], K.Return):
        return {}
    params = {p.name: i for i, p in enumerate(leaf.params) if isinstance(p.type, ScalarType)}
    returns: list[K.Return] = []
    for stmt in K.walk_stmts(leaf.body):
        if isinstance(stmt, K.Assign):
            params.pop(stmt.target, None)
        elif isinstance(stmt, K.For):
            params.pop(stmt.var, None)
        elif isinstance(stmt, K.Return):
            returns.append(stmt)
    forwarded: dict[int, int] = {}
    for k, out in enumerate(leaf.outputs):
        sources = {_param_of(ret.values[k], params) if k < len(ret.values) else None
                   for ret in returns}
        if len(sources) != 1:
            continue
        source = sources.pop()
        if source is not None and leaf.params[source].type == out.type:
            forwarded[k] = source
    return forwarded


def _param_of(value: K.Expr, params: dict[str, int]) -> int | None:
    if isinstance(value, K.Var):
        return params.get(value.name)
    return None
