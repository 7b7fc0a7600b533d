"""Loads masked by the rows of a guard (the gpu target's grid tiles, passes.py's `rowguard`).

A per-point leaf under a replicated parent often ends in a guard on its coordinates, such as the
stencil's `if 0 < i < nx - 1 and 0 < j < ny - 1 and 0 < k < nz - 1:`. In a program over a row of
the combined grid, the conjuncts on x differ between neighbouring lanes, so a load masked by the
whole guard stays scalar: Triton vectorises a load only where its mask is the same over each run
of lanes that one vector covers. Masked by the other conjuncts only, the loads of a row become
16-byte loads; the lanes that fail an x conjunct then load memory they never use, and the store
keeps the whole guard. That is safe only where those extra loads stay in bounds, which the launch
decides by proving the leaf with the x conjuncts dropped (`weakened`, through passes/bounds.py):
where it cannot, the launch runs the kernel with whole-guard masks.

A leaf qualifies when its body is straight-line assignments followed by one `if` without `else`
whose condition is a conjunction of loads-free terms, some of them on the x coordinate, and
whose body only assigns locals and stores (no atomics, no remote accesses, no nested control
flow): nothing runs after the `if`, so locals assigned in it may be computed for every lane.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ...ir import kernel as K
from ...types import i1

_X = 0  # the dimension whose lanes are contiguous in a tile (gridtiles.py)


@dataclass(frozen=True)
class RowGuard:
    position: int  # of the `if` among the body's top-level statements (the last one)
    rows: tuple[K.Expr, ...]  # the conjuncts that do not depend on the x coordinate
    columns: tuple[K.Expr, ...]  # those that do


def find_row_guard(leaf: K.LeafFunc, input_modes: tuple[str, ...]) -> RowGuard | None:
    """The leaf's trailing guard split by the x coordinate, when the leaf qualifies."""
    body = leaf.body
    if not body or not isinstance(body[-1], K.If):
        return None
    guard = body[-1]
    if guard.orelse or not all(isinstance(s, K.Assign) and not isinstance(s.value, K.Malloc)
                               for s in body[:-1]):
        return None
    if not all(_plain(s) for s in guard.then):
        return None
    terms = _conjuncts(guard.cond)
    if any(_touches_memory(t) for t in terms):
        return None
    on_x = _depends_on_x(body[:-1], lane_values(leaf, input_modes))
    columns = tuple(t for t in terms if _reads(t) & on_x or _has_x_id(t))
    if not columns:
        return None
    rows = tuple(t for t in terms if not any(t is c for c in columns))
    return RowGuard(len(body) - 1, rows, columns)


def weakened(leaf: K.LeafFunc, guard: RowGuard) -> K.LeafFunc:
    """The leaf as the row-masked kernel runs it: the trailing guard cut to its row conjuncts,
    each store's index and value evaluated there and the store itself under the x conjuncts as
    well. Its accesses are the kernel's, so a proof of this leaf proves the kernel's loads on the
    lanes that only the x conjuncts stop."""
    last = leaf.body[guard.position]
    assert isinstance(last, K.If)
    columns = conjunction(guard.columns)
    then: list[K.Stmt] = []
    for s in last.then:
        if isinstance(s, K.Store):  # its index and value are evaluated on the row's lanes
            then += [K.ExprStmt(value=s.index, loc=s.loc), K.ExprStmt(value=s.value, loc=s.loc),
                     K.If(cond=columns, then=[s], orelse=[], loc=s.loc)]
        else:
            then.append(s)
    cut = dataclasses.replace(last, cond=conjunction(guard.rows), then=then)
    return dataclasses.replace(leaf, body=leaf.body[:guard.position] + [cut])


def conjunction(terms: tuple[K.Expr, ...]) -> K.Expr:
    """`a and b and ...` of loads-free terms; `True` for none."""
    if not terms:
        return K.Const(value=True, type=i1)
    cond = terms[0]
    for term in terms[1:]:
        cond = K.Logical(op="land", lhs=cond, rhs=term, type=i1, loc=term.loc)
    return cond


def _conjuncts(e: K.Expr) -> list[K.Expr]:
    if isinstance(e, K.Logical) and e.op == "land":
        return _conjuncts(e.lhs) + _conjuncts(e.rhs)
    return [e]


def _plain(s: K.Stmt) -> bool:
    """An assignment or a store of this rank's memory, without atomics."""
    if isinstance(s, K.Assign):
        exprs = [s.value]
    elif isinstance(s, K.Store) and s.rank is None:
        exprs = [s.index, s.value]
    else:
        return False
    return not any(isinstance(x, K.Atomic) or isinstance(x, K.Load) and x.rank is not None
                   for e in exprs for x in K.walk_exprs(e))


def _touches_memory(e: K.Expr) -> bool:
    return any(isinstance(x, (K.Load, K.Atomic)) for x in K.walk_exprs(e))


def _has_x_id(e: K.Expr) -> bool:
    return any(isinstance(x, K.InstanceId) and x.dim == _X for x in K.walk_exprs(e))


def _reads(e: K.Expr) -> set[str]:
    return {x.name for x in K.walk_exprs(e) if isinstance(x, K.Var)}


def lane_values(leaf: K.LeafFunc, input_modes: tuple[str, ...]) -> frozenset[str]:
    """Scalar parameters that may differ from lane to lane of a row (and of a quad, quads.py):
    those fed per instance (a one-to-one edge) or per parent instance (a tile's row spans parents,
    and is all parents where the leaf has no x). A guard term reading one is no row conjunct."""
    return frozenset(p.name for p, mode in zip(leaf.params, input_modes)
                     if mode in ("per_instance", "per_parent"))


def _depends_on_x(prefix: list[K.Stmt], lane_params: frozenset[str]) -> set[str]:
    """Locals whose value the straight-line prefix computes from an x coordinate (any level) or
    from an atomic (each lane gets its own old value, whatever the index), and the parameters
    that differ between lanes anyway."""
    found: set[str] = set(lane_params)
    for s in prefix:
        assert isinstance(s, K.Assign)
        if _has_x_id(s.value) or _has_atomic(s.value) or _reads(s.value) & found:
            found.add(s.target)
    return found


def _has_atomic(e: K.Expr) -> bool:
    return any(isinstance(x, K.Atomic) for x in K.walk_exprs(e))
