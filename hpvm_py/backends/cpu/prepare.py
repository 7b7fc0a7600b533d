"""Normalise a leaf before planning: scalar parameters the body assigns become locals.

Python lets a leaf reassign a scalar parameter. Giving such a parameter a fresh local, copied from
the argument by a first statement, lets the rest of the backend treat parameters as read-only
values (uniform when their input mode is) and locals as the only mutable state.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ...ir import kernel as K
from ...types import PtrType


def localize_assigned_params(leaf: K.LeafFunc) -> K.LeafFunc:
    assigned = {s.target for s in K.walk_stmts(leaf.body) if isinstance(s, K.Assign)}
    assigned |= {s.var for s in K.walk_stmts(leaf.body) if isinstance(s, K.For)}
    params = [p for p in leaf.params if p.name in assigned and not isinstance(p.type, PtrType)]
    if not params:
        return leaf
    taken = set(leaf.locals) | {p.name for p in leaf.params}
    mapping: dict[str, str] = {}
    for p in params:
        fresh = f"{p.name}_local"
        while fresh in taken:
            fresh += "_"
        taken.add(fresh)
        mapping[p.name] = fresh
    body = _rename(leaf.body, mapping)
    copies: K.Block = [K.Assign(target=mapping[p.name], value=K.Var(name=p.name, type=p.type,
                                                                     loc=p.loc), loc=p.loc)
                       for p in params]
    local_types = dict(leaf.locals)
    local_types.update({mapping[p.name]: p.type for p in params})
    return dataclasses.replace(leaf, body=copies + body, locals=local_types)


_NAME_FIELDS = {("name", K.Var), ("target", K.Assign), ("var", K.For)}


def _rename(node: Any, mapping: dict[str, str]) -> Any:
    """A copy of an IR tree with variables renamed (Var names, assignment and loop targets)."""
    if isinstance(node, list):
        return [_rename(n, mapping) for n in node]
    if not dataclasses.is_dataclass(node) or isinstance(node, type):
        return node
    if isinstance(node, K.Malloc):
        return node  # a malloc size reads the parameters' inputs (the front end substituted them)
    changes: dict[str, Any] = {}
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if (f.name, type(node)) in _NAME_FIELDS:
            changes[f.name] = mapping.get(value, value)
        elif isinstance(value, (list, K.Expr, K.Stmt)):
            changes[f.name] = _rename(value, mapping)
    return dataclasses.replace(node, **changes)
