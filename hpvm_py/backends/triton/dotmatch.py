"""Recognising a matrix-product k-loop in a 2-D leaf, for the gpu target's tl.dot kernels.
(docs/architecture.md, "Module notes": backends/triton/dotmatch.py)"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import kernel as K
from ...types import PtrType, ScalarType, f32, i32, i64
from ...ir import polynomial as P

KK = "__kk"  # the k index of the dot, as a variable of the element expressions


def coordinate_id(level: int, dim: int) -> str:
    """The variable standing for instance id (level, dim) in an element expression."""
    return f"__id{level}_{dim}"


def combined_id(dim: int) -> str:
    """The variable standing for the coordinate along `dim` of the combined grid of a leaf and
    its replicated parent: id1 * E0 + id0, which an element expression uses as one value (so
    that Triton sees a tile's rows as contiguous, not as a division and a remainder)."""
    return f"__idc_{dim}"


@dataclass(frozen=True)
class DotLoop:
    """acc += A(row, kk) * B(kk, col) for kk in [start, stop) (rounded up to whole tiles of
    `tile` when tile is set), as the loop statement `loop` of the leaf computes it."""

    loop: K.For
    acc: str
    a_elem: K.Expr  # uses uniform parameters, counts, KK and coordinate_id(level, row_dim)
    b_elem: K.Expr  # the same with col_dim
    start: K.Expr
    stop: K.Expr
    row_dim: int
    col_dim: int
    levels: int  # 1: the leaf alone; 2: the leaf and its replicated parent
    tile: int | None  # Parboil form: the scratch tile side; the leaf's extents must both be it


_ALLOWED = (K.Const, K.Var, K.BinOp, K.UnaryOp, K.Compare, K.Logical, K.Select, K.Cast, K.Load,
            K.InstanceId, K.NumInstances, K.NumDims)


class _Reject(Exception):
    """The leaf does not match exactly: it keeps its literal translation."""


def find_dot_loop(leaf: K.LeafFunc, input_modes: tuple[str, ...], level_dims: tuple[int, ...],
                  only: int | None = None) -> DotLoop | None:
    """The first top-level loop (or the one at position `only`) that matches."""
    level_dims = replicated_levels(level_dims)
    if level_dims[:1] != (2,) or len(level_dims) > 2 or level_dims[1:] not in ((), (2,)):
        return None
    if _has_remote_access(leaf):  # tl.dot tiles read this rank's buffers only
        return None
    for index, stmt in enumerate(leaf.body):
        if isinstance(stmt, K.For) and only in (None, index):
            try:
                return _Matcher(leaf, input_modes, len(level_dims), index).match()
            except _Reject:
                continue
    return None


def replicated_levels(level_dims: tuple[int, ...]) -> tuple[int, ...]:
    """The dims of the leaf's levels without the single-instance ancestors above the last
    replicated one (HPVM-C wraps every grid in one: root -> wrapper -> grid -> leaf): their ids
    are all 0, so a kernel over the lower levels' grid covers the launch."""
    end = len(level_dims)
    while end > 1 and level_dims[end - 1] == 0:
        end -= 1
    return level_dims[:end]


def _has_remote_access(leaf: K.LeafFunc) -> bool:
    stores = (s for s in K.walk_stmts(leaf.body) if isinstance(s, K.Store))
    exprs = (e for e in K.walk_all_exprs(leaf.body) if isinstance(e, (K.Load, K.Atomic)))
    return any(node.rank is not None for node in (*stores, *exprs))


class _Matcher:
    def __init__(self, leaf: K.LeafFunc, input_modes: tuple[str, ...], levels: int, index: int):
        self.leaf = leaf
        self.levels = levels
        self.loop = leaf.body[index]
        assert isinstance(self.loop, K.For)
        self.before = leaf.body[:index]
        self.modes = {p.name: mode for p, mode in zip(leaf.params, input_modes)}
        self._types = {**{p.name: p.type for p in leaf.params}, **leaf.locals}
        self.written = {s.ptr.name for s in K.walk_stmts(leaf.body) if isinstance(s, K.Store)}
        self.written |= {e.ptr.name for e in K.walk_all_exprs(leaf.body) if isinstance(e, K.Atomic)}
        self.lets = self._lets()
        # the Parboil form's tile side: its launches have tile x tile leaf instances (_dot_fits),
        # so there id1 * tile + id0 is the combined coordinate too
        self.tile: int | None = None

    # -- the shapes ---------------------------------------------------------------------------

    def match(self) -> DotLoop:
        loop = self.loop
        # lanes that returned must not load, barriers belong to groups, and the kernel runs the
        # statements before the loop after it (dottiles.py): they may only load and compute
        if any(isinstance(s, (K.Return, K.Barrier, K.Store)) for s in K.walk_stmts(self.before)) or \
                any(isinstance(e, K.Atomic) for e in K.walk_all_exprs(self.before)):
            raise _Reject
        inside = [loop] + list(K.walk_stmts(loop.body))
        if any(isinstance(s, K.Barrier) and not any(s is x for x in inside)
               for s in K.walk_stmts(self.leaf.body)):
            raise _Reject
        if len(loop.body) == 1:
            return self._per_element()
        return self._parboil()

    def _per_element(self) -> DotLoop:
        loop = self.loop
        if not _is_const(loop.step, 1) or self.types(loop.var) not in (i64, i32):
            raise _Reject
        acc, x, y = self._accumulation(loop.body)
        self._private_vars([loop.var])
        kk = {("var", loop.var): {(("var", KK),): 1}}
        ex, ey = self._element(x, kk), self._element(y, kk)
        return self._result(acc, ex, ey, self._uniform(loop.start), self._uniform(loop.stop), None)

    def _parboil(self) -> DotLoop:
        outer = self.loop
        body = outer.body
        if len(body) != 5 or not (isinstance(body[0], K.Store) and isinstance(body[1], K.Store)
                                  and isinstance(body[2], K.Barrier) and isinstance(body[3], K.For)
                                  and isinstance(body[4], K.Barrier)):
            raise _Reject
        inner = body[3]
        assert isinstance(inner, K.For)
        tile = outer.step.value if isinstance(outer.step, K.Const) else None
        if not isinstance(tile, int) or tile < 2 or not _is_const(outer.start, 0):
            raise _Reject
        if not (_is_const(inner.start, 0) and _is_const(inner.stop, tile) and _is_const(inner.step, 1)):
            raise _Reject
        if self.types(outer.var) != i64 or self.types(inner.var) != i64:
            raise _Reject
        acc, x, y = self._accumulation(inner.body)
        stores = {s.ptr.name: s for s in body[:2] if isinstance(s, K.Store)}
        reads = [x, y]
        if not all(isinstance(r, K.Load) for r in reads) or \
                sorted(r.ptr.name for r in reads) != sorted(stores) or len(stores) != 2:
            raise _Reject
        self._private_vars([outer.var, inner.var])
        for name in stores:
            self._scratch(name, tile)
        self.tile = tile
        kk = {("var", inner.var): {(("var", KK),): 1, (("var", outer.var),): -1}}
        elems = []
        for read in reads:
            assert isinstance(read, K.Load)
            store = stores[read.ptr.name]
            writer = self._writer(store.index, read.index, inner.var, tile)
            elems.append(self._element(_replace_ids(self._inline(store.value), writer), kk,
                                       inlined=True))
        return self._result(acc, elems[0], elems[1], K.Const(value=0, type=i64),
                            self._uniform(outer.stop), tile)

    def _accumulation(self, body: K.Block) -> tuple[str, K.Expr, K.Expr]:
        """acc, X, Y of a body that is exactly `acc = acc + X * Y` on f32."""
        if len(body) != 1 or not isinstance(body[0], K.Assign):
            raise _Reject
        stmt = body[0]
        value = stmt.value
        if self.types(stmt.target) != f32 or stmt.target not in self.leaf.locals:
            raise _Reject
        if not (isinstance(value, K.BinOp) and value.op == "add" and value.type == f32
                and value.lhs == K.Var(name=stmt.target, type=f32)):
            raise _Reject
        product = value.rhs
        if not (isinstance(product, K.BinOp) and product.op == "mul" and product.type == f32):
            raise _Reject
        return stmt.target, product.lhs, product.rhs

    def _result(self, acc: str, ex: K.Expr, ey: K.Expr, start: K.Expr, stop: K.Expr,
                tile: int | None) -> DotLoop:
        dims_x, dims_y = _dims(ex), _dims(ey)
        if len(dims_x) != 1 or len(dims_y) != 1 or dims_x == dims_y:
            raise _Reject
        return DotLoop(loop=self.loop, acc=acc, a_elem=ex, b_elem=ey, start=start, stop=stop,
                       row_dim=dims_x.pop(), col_dim=dims_y.pop(), levels=self.levels, tile=tile)

    # -- facts about names --------------------------------------------------------------------

    def types(self, name: str) -> object:
        return self._types.get(name)

    def _lets(self) -> dict[str, K.Expr]:
        """Locals assigned once in the whole body, at the top level before the loop, from values
        that touch no memory and read no local assigned after them (still zero there): their uses
        may be replaced by their definitions."""
        counts = K.assignments(self.leaf.body)
        lets: dict[str, K.Expr] = {}
        for stmt in self.before:
            if isinstance(stmt, K.Assign) and counts[stmt.target] == 1 and \
                    isinstance(self.types(stmt.target), ScalarType) and \
                    all(isinstance(e, _ALLOWED) and not isinstance(e, K.Load) and
                        not (isinstance(e, K.Var) and counts[e.name] and e.name not in lets)
                        for e in K.walk_exprs(stmt.value)):
                lets[stmt.target] = stmt.value
        return lets

    def _private_vars(self, names: list[str]) -> None:
        """The loop's own variables are not used outside it (their final values are not kept)."""
        for stmt in K.walk_stmts(self.leaf.body):
            if stmt is self.loop or any(stmt is s for s in K.walk_stmts(self.loop.body)):
                continue
            used = {e.name for x in K.child_exprs(stmt) for e in K.walk_exprs(x) if isinstance(e, K.Var)}
            defined = {stmt.target} if isinstance(stmt, K.Assign) else \
                {stmt.var} if isinstance(stmt, K.For) else set()
            if (used | defined) & set(names):
                raise _Reject

    def _scratch(self, name: str, tile: int) -> None:
        """A malloc'ed f32 tile of at least tile * tile elements that only this loop's one store
        and one load use."""
        t = self.types(name)
        if not (isinstance(t, PtrType) and t.elem == f32 and name in self.leaf.locals):
            raise _Reject
        mallocs = [s for s in self.leaf.body if isinstance(s, K.Assign) and s.target == name
                   and isinstance(s.value, K.Malloc)]
        if len(mallocs) != 1 or not isinstance(mallocs[0].value.nbytes, K.Const) or \
                int(mallocs[0].value.nbytes.value) < tile * tile * 4:
            raise _Reject
        uses = sum(1 for e in K.walk_all_exprs(self.leaf.body) if isinstance(e, K.Var) and e.name == name)
        if uses != 2:
            raise _Reject

    # -- expressions --------------------------------------------------------------------------

    def _inline(self, e: K.Expr) -> K.Expr:
        """e with let-locals replaced by their definitions; any other local is refused, and so
        are calls, atomics and loads of buffers this leaf writes."""
        if not isinstance(e, _ALLOWED):
            raise _Reject
        if isinstance(e, K.Var):
            if e.name in self.lets:
                return self._inline(self.lets[e.name])
            return e
        if isinstance(e, K.Load):
            if self.modes.get(e.ptr.name) != "buffer" or e.ptr.name in self.written:
                raise _Reject
            return K.rebuild(e, [e.ptr, self._inline(e.index)])
        return K.rebuild(e, [self._inline(c) for c in K.child_exprs(e)])

    def _uniform(self, e: K.Expr) -> K.Expr:
        """A loop bound the same for every instance of the launch."""
        e = self._inline(e)
        for sub in K.walk_exprs(e):
            if isinstance(sub, (K.Load, K.InstanceId)):
                raise _Reject
            if isinstance(sub, K.Var) and self.modes.get(sub.name) != "uniform":
                raise _Reject
        return e

    def _element(self, e: K.Expr, kk: dict, inlined: bool = False) -> K.Expr:
        """An operand as a function of instance ids and KK: a loop variable turns into KK in the
        i64 polynomials it occurs in, and elsewhere into KK's value in its own type (Parboil's
        C `int` k-loop: `a[row + i * lda]` keeps its i32 product, which wraps as the literal
        kernel's does; the value cast is exact, KK being in the loop's range where a load is not
        masked off)."""
        e = e if inlined else self._inline(e)
        loop_vars = {atom[1] for atom in kk} | {self.loop.var}
        loop_atoms = {("var", v) for v in loop_vars}

        def mentions_loop(x: K.Expr) -> bool:
            return any(isinstance(s, K.Var) and s.name in loop_vars for s in K.walk_exprs(x))

        def canon(x: K.Expr) -> K.Expr:
            if not mentions_loop(x):
                return x
            p = P.poly_of(x, lambda name: None) if not isinstance(x, K.Load) else None
            if p is not None:
                p = P.substitute(p, kk)
                if P.atoms(p) & loop_atoms:
                    raise _Reject
                return P.to_expr(p, _atom_expr)
            if isinstance(x, K.Var):
                if ("var", x.name) not in kk or not isinstance(x.type, ScalarType) or \
                        x.type not in (i64, i32):
                    raise _Reject
                value = P.to_expr(kk[("var", x.name)], _atom_expr)
                return value if x.type == i64 else K.Cast(value=value, type=x.type)
            if isinstance(x, K.Load):
                return K.rebuild(x, [x.ptr, canon(x.index)])
            return K.rebuild(x, [canon(c) for c in K.child_exprs(x)])

        e = canon(e)
        for sub in K.walk_exprs(e):
            if isinstance(sub, K.Var) and not isinstance(sub.type, PtrType) and sub.name != KK \
                    and self.modes.get(sub.name) != "uniform":
                raise _Reject
            if isinstance(sub, K.InstanceId) and (sub.type != i64 or sub.level >= self.levels):
                raise _Reject
        return _ids_to_vars(self._combined(e))

    def _combined(self, e: K.Expr) -> K.Expr:
        """e with every i64 polynomial's id1_d * E0_d + id0_d (the same coefficient on both
        terms; in the Parboil form also id1_d * tile + id0_d) written with the combined
        coordinate."""
        if self.levels != 2 or isinstance(e, (K.Const, K.Load)):
            return K.rebuild(e, [self._combined(c) for c in K.child_exprs(e)])
        p = P.poly_of(e, lambda name: None)
        if p is None:
            return K.rebuild(e, [self._combined(c) for c in K.child_exprs(e)])
        merged = dict(p)
        for monomial, coefficient in p.items():
            for atom in monomial:
                if atom[0] != "id" or atom[1] != 0:
                    continue
                rest = list(monomial)
                rest.remove(atom)
                forms = [(tuple(sorted(rest + [("id", 1, atom[2]), ("count", 0, atom[2])])), 1)]
                if self.tile is not None:
                    forms.append((tuple(sorted(rest + [("id", 1, atom[2])])), self.tile))
                for wide, factor in forms:
                    if merged.get(monomial) == coefficient and \
                            merged.get(wide) == coefficient * factor:
                        del merged[monomial], merged[wide]
                        whole = tuple(sorted(rest + [("var", combined_id(atom[2]))]))
                        merged[whole] = coefficient
                        break
        return e if merged == p else P.to_expr(merged, _atom_expr)

    def _writer(self, store_index: K.Expr, read_index: K.Expr, t: str,
                tile: int) -> dict[tuple[int, int], K.Expr]:
        """Which lane stored the element a lane reads: store index id0_p + tile * id0_q (every
        lane of the tile x tile group its own element), read index tile * u + v with u, v among
        the reader's ids and t. Returns the writer's leaf ids."""
        stored = P.poly_of(self._inline(store_index), lambda name: None)
        read = P.poly_of(self._inline(read_index), lambda name: None)
        if stored is None or read is None or len(stored) != 2 or len(read) != 2:
            raise _Reject
        by_coefficient = {c: m for m, c in stored.items()}
        low, high = by_coefficient.get(1), by_coefficient.get(tile)
        ids = {(("id", 0, 0),), (("id", 0, 1),)}
        if low is None or high is None or {low, high} != ids:
            raise _Reject
        reads = {c: m for m, c in read.items()}
        u, v = reads.get(tile), reads.get(1)
        allowed = ids | {(("var", t),)}
        if u is None or v is None or u not in allowed or v not in allowed or \
                (("var", t),) not in (u, v):
            raise _Reject
        return {(0, low[0][2]): _atom_expr(v[0]), (0, high[0][2]): _atom_expr(u[0])}


def _atom_expr(atom: P.Atom) -> K.Expr:
    if atom[0] == "id":
        return K.InstanceId(dim=atom[2], level=atom[1], type=i64)
    if atom[0] == "count":
        return K.NumInstances(dim=atom[2], level=atom[1], type=i64)
    return K.Var(name=atom[1], type=i64)


def _replace_ids(e: K.Expr, writer: dict[tuple[int, int], K.Expr]) -> K.Expr:
    if isinstance(e, K.InstanceId) and (e.level, e.dim) in writer:
        if e.type != i64:
            raise _Reject
        return writer[(e.level, e.dim)]
    return K.rebuild(e, [_replace_ids(c, writer) for c in K.child_exprs(e)])


def _ids_to_vars(e: K.Expr) -> K.Expr:
    if isinstance(e, K.InstanceId):
        return K.Var(name=coordinate_id(e.level, e.dim), type=i64)
    return K.rebuild(e, [_ids_to_vars(c) for c in K.child_exprs(e)])


def _dims(e: K.Expr) -> set[int]:
    return {int(s.name.split("_")[-1]) for s in K.walk_exprs(e)
            if isinstance(s, K.Var) and s.name.startswith("__id")}


def _is_const(e: K.Expr, value: int) -> bool:
    return isinstance(e, K.Const) and not isinstance(e.value, bool) and e.value == value
