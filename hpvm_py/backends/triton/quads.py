"""Neighbouring loads served from a quad of lanes (the `rows` variant of grid tiles, rowguard.py).

A stencil loads `a[at - 1]`, `a[at]` and `a[at + 1]`, where `at` steps by one from lane to lane
along x. Triton makes `a[at]` a 16-byte load of four lanes, but its neighbours' addresses are not
16-byte aligned, so they stay scalar: eight 4-byte loads for every four lanes. In the rows
variant, every load in the guard is masked by the guard's row conjuncts and the grid's extents,
which are the same over a *quad* (four consecutive lanes of a row whose x starts at a multiple
of four) when the launch's x extents are multiples of four. A neighbour's element is then a
quad-mate's centre: the kernel loads the centre once, splits it into the quad's four values in
registers (`_quads`), and loads alone only the elements past the quad's ends.

A group is the loads `p[e + c]` of one buffer and one index expression e whose value steps by
exactly one between a quad's lanes (`x_stride`, in the index type's wrapping arithmetic), with
constant offsets |c| < 4: c is every constant term of the index, through the values of locals
(`centre_and_offset`), so that where x is one past the lane's, as in Parboil's stencil, e is the
aligned index. They must come from the guard's body before its first store ends (a store
between them would change what a later load reads), outside short-circuit operands (whose loads
run under narrower masks). The centre `p[e]`, loaded for every lane, is not always an element the
leaf reads (with offsets c, lane q's centre is lane q - c's load, if that lane is in the quad):
where some group's is not, the quads variant runs only where the row guard's leaf with the
centres loaded too (`with_centres`) is proven in bounds.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ...ir import kernel as K
from ...types import PtrType, ScalarType
from .rowguard import RowGuard, lane_values

QUAD = 4  # lanes per quad: 16 bytes of f32


@dataclass
class QuadLoads:
    groups: list[tuple[K.Var, K.Expr]] = field(default_factory=list)  # (buffer, centre index)
    members: dict[int, tuple[int, int]] = field(default_factory=dict)  # id(load) -> (group, c)
    first: list[int] = field(default_factory=list)  # per group: the guard body's statement of its
    # first member (where the bounds proof reads its centre)
    # every lane's centre is some quad-mate's load in every group: the row guard's proof covers them
    covered: bool = True


def quad_loads(leaf: K.LeafFunc, guard: RowGuard, level_dims: tuple[int, ...],
               input_modes: tuple[str, ...]) -> QuadLoads | None:
    """The guard's loads that may be served from quads, grouped; None where there are none."""
    last = leaf.body[guard.position]
    assert isinstance(last, K.If)
    # a parameter fed per instance (or per parent, where the leaf has no x) steps by no one number
    varying = lane_values(leaf, input_modes)
    strides: dict[str, int | None] = {p.name: None if p.name in varying else 0 for p in leaf.params}
    versions: dict[str, int] = {}
    defs: dict[str, tuple[K.Expr, dict[str, int]]] = {}  # a local's value, with the versions it read

    def assign(target: str, value: K.Expr) -> None:
        strides[target] = x_stride(value, strides, level_dims)
        defs[target] = (value, _versions(value, versions))
        versions[target] = versions.get(target, 0) + 1

    for s in leaf.body[:guard.position]:
        assert isinstance(s, K.Assign)
        assign(s.target, s.value)
    found: list[tuple[K.Var, K.Expr, dict[str, int], int, dict[int, K.Load]]] = []
    for position, s in enumerate(last.then):
        roots = [s.value] if isinstance(s, K.Assign) else [s.index, s.value]  # (rowguard: plain)
        for root in roots:
            for load in _eager_loads(root):
                _note(load, position, strides, versions, defs, level_dims, found)
        if isinstance(s, K.Store):
            break  # later loads could read what it wrote
        assign(s.target, s.value)
    result = QuadLoads()
    for buffer, centre, _, position, by_offset in found:
        if not any(c % QUAD for c in by_offset):
            continue  # every load is a centre: Triton loads those 16 bytes at a time already
        result.groups.append((buffer, centre))
        result.first.append(position)
        # with offsets c, lane q's centre is lane q - c's load
        result.covered &= all(any(q - QUAD < c <= q for c in by_offset) for q in range(QUAD))
        for c, load in by_offset.items():
            result.members[id(load)] = (len(result.groups) - 1, c)
    return result if result.groups else None


def with_centres(leaf: K.LeafFunc, guard: RowGuard, quads: QuadLoads) -> K.LeafFunc:
    """The leaf with each group's centre loaded where its first member is: the loads the quads
    variant adds, for its bounds proof (a centre is not always an element the leaf reads)."""
    last = leaf.body[guard.position]
    assert isinstance(last, K.If)
    then: list[K.Stmt] = []
    for position, s in enumerate(last.then):
        for (buffer, centre), first in zip(quads.groups, quads.first):
            if first == position:
                assert isinstance(buffer.type, PtrType)
                then.append(K.ExprStmt(value=K.Load(ptr=buffer, index=centre, type=buffer.type.elem,
                                                    loc=s.loc), loc=s.loc))
        then.append(s)
    return dataclasses.replace(leaf, body=leaf.body[:guard.position] +
                               [dataclasses.replace(last, then=then)])


def _versions(e: K.Expr, versions: dict[str, int]) -> dict[str, int]:
    return {x.name: versions.get(x.name, 0) for x in K.walk_exprs(e) if isinstance(x, K.Var)}


def _note(load: K.Load, position: int, strides: dict[str, int | None], versions: dict[str, int],
          defs: dict[str, tuple[K.Expr, dict[str, int]]], level_dims: tuple[int, ...],
          found: list) -> None:
    """Add one load to its group (same buffer, same centre index, same versions of its locals)."""
    if load.rank is not None:
        return
    base, offset = centre_and_offset(load.index, defs, versions)
    if base is None or abs(offset) >= QUAD or x_stride(base, strides, level_dims) != 1:
        return
    seen = _versions(base, versions)  # (expressions compare without their locations)
    for buffer, centre, at, _, by_offset in found:
        if buffer.name == load.ptr.name and centre == base and at == seen:
            by_offset.setdefault(offset, load)
            return
    found.append((load.ptr, base, seen, position, {offset: load}))


def centre_and_offset(index: K.Expr, defs: dict[str, tuple[K.Expr, dict[str, int]]],
                      versions: dict[str, int]) -> tuple[K.Expr | None, int]:
    """index as S + c, exactly in its type's wrapping arithmetic, with c the sum of its constant
    terms, found through adds, subtractions and the values of locals (where the locals those
    read still hold what they held then); S is None where index is a constant. Parboil's
    `i = block * n + lane + 1` puts a row's elements one past a multiple of four: S is then the
    16-byte aligned index that quads load."""
    t = index.type
    if not (isinstance(t, ScalarType) and t.is_int):
        return index, 0
    if isinstance(index, K.Const) and type(index.value) is int:
        return None, index.value
    if isinstance(index, K.BinOp) and index.op in ("add", "sub") and \
            index.lhs.type == t == index.rhs.type:
        (lhs, a), (rhs, b) = (centre_and_offset(side, defs, versions)
                              for side in (index.lhs, index.rhs))
        if not a and not b:
            return index, 0
        adds = index.op == "add"
        c = a + b if adds else a - b
        if rhs is None:
            return lhs, c
        if lhs is None:
            return (rhs if adds else K.UnaryOp(op="neg", operand=rhs, type=t, loc=index.loc)), c
        return dataclasses.replace(index, lhs=lhs, rhs=rhs), c
    if isinstance(index, K.Var) and index.name in defs:
        value, read = defs[index.name]
        # (arithmetic only: a centre that loads again would read memory its proof must cover)
        if value.type == t and all(versions.get(name, 0) == v for name, v in read.items()) and \
                not any(isinstance(x, (K.Load, K.Atomic)) for x in K.walk_exprs(value)):
            inner, c = centre_and_offset(value, defs, versions)
            if c:
                return inner, c
    return index, 0


def _eager_loads(e: K.Expr) -> list[K.Load]:
    """The loads e evaluates under its own mask (not those of short-circuit operands)."""
    if isinstance(e, (K.Logical, K.Select)):
        return []
    found = [e] if isinstance(e, K.Load) else []
    for sub in K.child_exprs(e):
        found += _eager_loads(sub)
    return found


def x_stride(e: K.Expr, strides: dict[str, int | None], level_dims: tuple[int, ...]) -> int | None:
    """How much e changes from one lane of a quad to the next (its value's difference, exact in
    the type's wrapping arithmetic), or None where that is not one number. A launch runs quads only
    where the leaf's x extent is a multiple of four, so a leaf id along x steps by one inside a
    quad and its parent's id does not change."""
    if isinstance(e, (K.Const, K.NumInstances, K.NumDims)):
        return 0
    if isinstance(e, K.Var):
        return strides.get(e.name)
    if isinstance(e, K.InstanceId):
        return _id_stride(e, level_dims)
    if isinstance(e, K.Atomic):
        return None
    subs = [x_stride(s, strides, level_dims) for s in K.child_exprs(e)]
    if any(s is None for s in subs):
        return None
    if all(s == 0 for s in subs):
        return 0  # a function of values that are the same over the quad
    t = e.type
    if not (isinstance(t, ScalarType) and t.is_int):
        return None
    if isinstance(e, K.BinOp) and e.op in ("add", "sub"):
        return subs[0] + subs[1] if e.op == "add" else subs[0] - subs[1]
    if isinstance(e, K.BinOp) and e.op == "mul":
        for factor, other in ((e.lhs, subs[1]), (e.rhs, subs[0])):
            if isinstance(factor, K.Const) and isinstance(factor.value, int):
                return int(factor.value) * other
        return None
    if isinstance(e, K.UnaryOp) and e.op == "neg":
        return -subs[0]
    if isinstance(e, K.Cast) and isinstance(e.value.type, ScalarType) and e.value.type.is_int \
            and e.value.type.bits >= t.bits:
        return subs[0]  # a truncation keeps a wrapping difference; a widening does not
    return None


def _id_stride(e: K.InstanceId, level_dims: tuple[int, ...]) -> int:
    if e.dim != 0:
        return 0
    leaf_x = bool(level_dims) and level_dims[0] > 0
    parent_x = len(level_dims) > 1 and level_dims[1] > 0
    if e.level == 0:
        return 1 if leaf_x else 0
    if e.level == 1:
        return 0 if leaf_x else (1 if parent_x else 0)
    return 0


def quads_fit(extents: list[tuple[int, ...]], level_dims: tuple[int, ...]) -> bool:
    """Whether a launch's quads are whole (gridtiles.py then puts each in one row): the x extent
    of the lowest level with an x dimension is a multiple of four, so that a leaf id along x steps
    by one inside a quad, its parent's does not change, and no quad crosses the grid's end."""
    for level, dims in enumerate(level_dims[:2]):
        if dims > 0:
            return extents[level][0] % QUAD == 0
    return False


class QuadAccesses:
    """Mixed into the generator: uses its emit/fresh/index/address, its names and `quads` (the
    QuadLoads of the leaf in the quads variant). A group's centre is loaded and split at its first
    member; each member is then its quad-mates' centres and, past the quad's ends, loads of its
    own lanes, each element past the ends loaded once for the group (the suite's stencil's
    members +1 and +2 both read the next quad's first element). Those loads take their mask from
    their indices (-1 where the guard body's mask is off; a proven launch reads no negative
    index): Triton lays the mask's bits out two to a thread, and split like that they went
    through shared memory, where indices did not."""

    def quad_load(self, e: K.Load, m: str) -> str:
        group, offset = self.quads.members[id(e)]
        centre, lanes = self._quad_centre(group, m)
        if offset == 0:
            return centre
        own: str | None = None
        parts = []
        for q in range(QUAD):
            place = q + offset  # the element's place from its quad's first lane
            if 0 <= place < QUAD:
                parts.append(f"{lanes}_{place}")
                continue
            edge = self.quad_edges.get((group, place))
            if edge is None:
                if own is None:  # this member's indices, split like the centre
                    own = self.fresh("x")
                    index = self.index(e.index, m)
                    self.emit(f"{_split(own)} = _quads(tl.where({m}, {index}, -1), BLOCK // {QUAD})")
                at = f"{own}_{q}"
                edge = (self.fresh("qe"), tuple(self.terms))
                self.emit(f"{edge[0]} = tl.load({self.address(e.ptr, at, None, m)}, mask={at} >= 0, "
                          "other=0)")
                self.quad_edges[(group, place)] = edge
            assert edge[1] == tuple(self.terms), "a quad group's loads run under one mask"
            parts.append(edge[0])
        return f"_unquads({', '.join(parts)}, BLOCK)"

    def _quad_centre(self, group: int, m: str) -> tuple[str, str]:
        """The group's centre (raw memory values) and the name of its four parts. Every member
        runs under the guard body's mask (its terms: each statement names it anew)."""
        found = self.quad_centres.get(group)
        if found is None:
            buffer, base = self.quads.groups[group]
            centre, lanes = self.fresh("qc"), self.fresh("q")
            index = self.index(base, m)
            self.emit(f"{centre} = tl.load({self.address(buffer, index, None, m)}, mask={m}, other=0)")
            self.emit(f"{_split(lanes)} = _quads({centre}, BLOCK // {QUAD})")
            found = self.quad_centres[group] = (centre, lanes, tuple(self.terms))
        assert found[2] == tuple(self.terms), "a quad group's loads run under one mask"
        return found[0], found[1]


def _split(name: str) -> str:
    return ", ".join(f"{name}_{q}" for q in range(QUAD))  # (no fresh() name ends so)
