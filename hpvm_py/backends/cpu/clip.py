"""Index-range clipping: a guard on instance ids becomes the range of the instance loops.

GPU-style leaves guard their work with `if i > 0 and i < nx - 1: ...` or `if i >= n: return`.
Evaluated per instance, such a guard makes the vectorised x loop use masked loads and stores on
every iteration. When the guard wraps everything the body does (after side-effect free
assignments), the instances it rejects do nothing at all, so the driver can instead start and end
its loops where the guard allows: `for x in [max(0, 1), min(nx, nx - 1))`.

Comparisons of a leaf instance id with an i64 value that is the same for every instance of the
leaf become bounds; the other conjuncts of the guard stay in the body.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ...ir import kernel as K
from ...types import PtrType, i1, i64

_FLIP = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}
_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


@dataclass(frozen=True)
class Bound:
    """dim >= value + offset (lower) or dim < value + offset (upper); offset 0 or 1, saturating."""

    dim: int
    lower: bool
    value: K.Expr  # i64; reads only parameters, counts and ancestor ids
    offset: int


def clip_instances(leaf: K.LeafFunc, input_modes: tuple[str, ...]
                   ) -> tuple[K.LeafFunc, list[Bound]]:
    """The leaf without the guard conjuncts that became bounds, and the bounds."""
    if leaf.outputs:
        return leaf, []  # every instance returns its outputs: none may be skipped
    body = leaf.body
    g = 0
    while g < len(body) and isinstance(body[g], K.Assign) and _pure(body[g].value):
        g += 1
    defs = _pure_single_definitions(body, g)
    if g == len(body) or not isinstance(body[g], K.If) or body[g].orelse:
        return leaf, []
    guard = body[g]
    if g == len(body) - 1:  # if cond: <the rest>
        conditions, rest = _conjuncts(guard.cond), guard.then
    elif len(guard.then) == 1 and isinstance(guard.then[0], K.Return):  # if cond: return
        conditions = [_negate(c) for c in _disjuncts(guard.cond)]
        rest = body[g + 1:]
    else:
        return leaf, []
    uniform_params = {p.name for p, mode in zip(leaf.params, input_modes)
                      if mode in ("uniform", "per_parent") and not isinstance(p.type, PtrType)}
    bounds: list[Bound] = []
    residual: list[K.Expr] = []
    for cond in conditions:
        # Lazy `and`: a conjunct after one with effects (an atomic) runs only where that one
        # holds, so only conjuncts before it may decide which instances run at all.
        found = None if any(not _pure(c) for c in residual) else _bounds(cond, defs, uniform_params)
        if found is None:
            residual.append(cond)
        else:
            bounds.extend(found)
    if not bounds:
        return leaf, []
    kept = rest
    if residual:
        kept = [K.If(cond=_and(residual), then=rest, orelse=[], loc=guard.loc)]
    return dataclasses.replace(leaf, body=body[:g] + kept), bounds


def _bounds(cond: K.Expr, defs: dict[str, K.Expr], params: set[str]) -> list[Bound] | None:
    if not (isinstance(cond, K.Compare) and cond.lhs.type == i64 and cond.op != "ne"):
        return None
    op, left, right = cond.op, cond.lhs, cond.rhs
    dim = _instance_dim(left, defs)
    if dim is None:
        op, left, right = _FLIP[op], right, left
        dim = _instance_dim(left, defs)
    if dim is None or not _invariant(right, defs, params):
        return None
    value = _substitute(right, defs)
    if op == "eq":
        return [Bound(dim, True, value, 0), Bound(dim, False, value, 1)]
    lower = op in ("gt", "ge")
    offset = 1 if op in ("gt", "le") else 0
    return [Bound(dim, lower, value, offset)]


def _instance_dim(e: K.Expr, defs: dict[str, K.Expr]) -> int | None:
    if isinstance(e, K.Var) and e.name in defs:
        e = defs[e.name]
    if isinstance(e, K.InstanceId) and e.level == 0:
        return e.dim
    return None


def _invariant(e: K.Expr, defs: dict[str, K.Expr], params: set[str], depth: int = 0) -> bool:
    """Whether e is the same for every instance of the leaf (within one parent instance)."""
    if depth > 16:
        return False
    for sub in K.walk_exprs(e):
        if isinstance(sub, (K.Load, K.Atomic, K.Malloc, K.CallHelper)):
            return False
        if isinstance(sub, K.InstanceId) and sub.level == 0:
            return False
        if isinstance(sub, K.Var) and sub.name not in params:
            if sub.name not in defs or not _invariant(defs[sub.name], defs, params, depth + 1):
                return False
    return True


def _substitute(e: Any, defs: dict[str, K.Expr]) -> Any:
    """e with the locals it reads replaced by their definitions (so it reads no local)."""
    if isinstance(e, K.Var) and e.name in defs:
        return _substitute(defs[e.name], defs)
    if not dataclasses.is_dataclass(e) or isinstance(e, type):
        return e
    changes = {f.name: [_substitute(x, defs) for x in getattr(e, f.name)]
               if isinstance(getattr(e, f.name), list) else _substitute(getattr(e, f.name), defs)
               for f in dataclasses.fields(e) if isinstance(getattr(e, f.name), (K.Expr, list))}
    return dataclasses.replace(e, **changes)


def _pure(e: K.Expr) -> bool:
    return not any(isinstance(sub, (K.Load, K.Atomic, K.Malloc, K.CallHelper))
                   for sub in K.walk_exprs(e))


def _pure_single_definitions(body: K.Block, guard: int) -> dict[str, K.Expr]:
    """Locals assigned exactly once, at the top level before the guard, without memory access:
    name -> value. A value read from a local is its definition only where that came first (a
    local read before its assignment is zero), so a value reading a local assigned later, or
    assigned more than once, is not one."""
    counts = K.assignments(body)
    defs: dict[str, K.Expr] = {}
    for s in body[:guard]:
        if isinstance(s, K.Assign) and counts[s.target] == 1 and _pure(s.value) and all(
                e.name in defs or not counts[e.name] for e in K.walk_exprs(s.value)
                if isinstance(e, K.Var)):
            defs[s.target] = s.value
    return defs


def _conjuncts(e: K.Expr) -> list[K.Expr]:
    if isinstance(e, K.Logical) and e.op == "land":
        return _conjuncts(e.lhs) + _conjuncts(e.rhs)
    return [e]


def _disjuncts(e: K.Expr) -> list[K.Expr]:
    if isinstance(e, K.Logical) and e.op == "lor":
        return _disjuncts(e.lhs) + _disjuncts(e.rhs)
    return [e]


def _negate(e: K.Expr) -> K.Expr:
    if isinstance(e, K.Compare) and not e.lhs.type.is_float:  # NaN makes float negation differ
        return dataclasses.replace(e, op=_NEGATE[e.op])
    return K.UnaryOp(op="not", operand=e, type=i1, loc=e.loc)


def _and(conds: list[K.Expr]) -> K.Expr:
    result = conds[0]
    for c in conds[1:]:
        result = K.Logical(op="land", lhs=result, rhs=c, type=i1, loc=c.loc)
    return result
