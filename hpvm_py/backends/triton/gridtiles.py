"""Programs that cover tiles of the combined grid rather than one parent instance's instances.

The combined grid of a leaf and its replicated parent has, along each dimension d, the coordinate
g_d = id1_d * E0_d + id0_d (a dimension one level lacks has extent 1 there). A leaf whose parent
instances are small (the stencil's 16 x 8 blocks) runs as programs over TX x TY tiles of that grid
at one z: rows of TX contiguous coordinates whatever the parent's block shape, and only shifts
and masks per lane (the leaf's extents are compile-time constants then). Parent ids along x and y
vary between lanes, so they and per-parent values are blocks here (TileUniformity); z stays
uniform. The tl.dot kernels (dottiles.py) derive their lanes' ids the same way.
"""
from __future__ import annotations

import functools

from ...ir import kernel as K
from ...passes.uniform import Uniformity


class TileUniformity(Uniformity):
    """Uniformity over a tile that spans several parent instances along the dimensions `spanned`."""

    def __init__(self, leaf: K.LeafFunc, input_modes: tuple[str, ...], varying: frozenset[str],
                 spanned: frozenset[int]):
        self.spanned = spanned  # before the base class's fixed point, which asks _node
        modes = tuple("per_instance" if m == "per_parent" else m for m in input_modes)
        super().__init__(leaf, modes, frozenset({0, 1, 2}) - spanned, varying)

    def _node(self, e: K.Expr, locals_: set[str] | None = None) -> bool:
        if isinstance(e, K.InstanceId):
            return e.dim not in self.spanned
        return super()._node(e, locals_)


class GridTiles:
    """Mixed into the generator: uses its emit, its context's level dims and _prologue_values."""

    def extent(self, dim: int) -> str:
        """Instances along one dimension of the combined grid (leaf and parent levels), in int64:
        Triton types an extent below 2**31 as i32, and their product may pass it (a 1-D leaf of
        256 under 2**23 + 1 parent instances wrapped to a negative extent: no lane ran)."""
        factors = [f"(E{level}_{dim} + Z64)" for level in (0, 1) if dim < self._level_dims(level)]
        return "(" + " * ".join(factors or ["1"]) + ")"

    def _level_dims(self, level: int) -> int:
        dims = self.ctx.level_dims
        return dims[level] if level < len(dims) else 0

    def coordinate_ids(self, coordinates: dict[int, str]) -> None:
        """Lanes' ids, `lin`, `parent` and `m0` from their coordinates (names of int64 blocks or
        scalars) along every dimension of the combined grid."""
        e = self.emit
        if not self.dot:  # (the tl.dot kernels define it before their extents)
            e("Z64 = tl.zeros([], tl.int64)")
        e("m0 = " + " & ".join(f"({g} < {self.extent(d)})" for d, g in coordinates.items()))
        e("m0 = m0 & (lane >= 0)")  # a block even when every coordinate is uniform
        e("ZERO = lane * 0")
        e("FALSE = lane < 0")
        for d, g in coordinates.items():
            leaf, parent = d < self._level_dims(0), d < self._level_dims(1)
            if leaf and parent:
                e(f"id0_{d} = {g} % E0_{d}")
                e(f"id1_{d} = {g} // E0_{d}")
            elif leaf or parent:
                e(f"id{0 if leaf else 1}_{d} = {g}")
        for level, name in ((0, "lin"), (1, "parent")):
            dims = self._level_dims(level)
            code = f"id{level}_{dims - 1}" if dims else "Z64"
            for d in reversed(range(dims - 1)):
                code = f"id{level}_{d} + E{level}_{d} * ({code})"
            e(f"{name} = {code}")

    def combined_coordinate(self, e: K.BinOp) -> str | None:
        """`parent_id * c + leaf_id` along one dimension, in a tiles kernel whose leaf extents
        are constants: the grid's own coordinate g_d where the leaf is c wide there. The same
        value, but Triton sees that g_d steps by one from lane to lane and `id0_d = g_d % E0_d`
        only over rows as wide as the program: over narrower tiles the loads it indexes lost
        their 16-byte form (benchmarks/RESULTS.md, "Quads"). None for anything else."""
        if not (self.tiles and self.fixed_grid and self.dot is None) or e.op != "add":
            return None
        ids = self._id_locals
        for product, leaf in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            leaf = _through(leaf, ids)
            if not (isinstance(leaf, K.InstanceId) and leaf.level == 0 and isinstance(product, K.BinOp)
                    and product.op == "mul" and leaf.type == e.type and e.type.name == "i64"):
                continue
            d = leaf.dim
            if not (d < self._level_dims(0) and d < self._level_dims(1)):
                continue
            for parent, width in ((product.lhs, product.rhs), (product.rhs, product.lhs)):
                parent, width = _through(parent, ids), _through(width, ids)
                if not (isinstance(parent, K.InstanceId) and parent.level == 1 and parent.dim == d):
                    continue
                if isinstance(width, K.NumInstances) and width.level == 0 and width.dim == d:
                    return f"g{d}"  # (Parboil's `block * get_num_node_instances + id`)
                if isinstance(width, K.Const) and isinstance(width.value, int) and width.type == e.type:
                    c = int(width.value)
                    return f"(g{d} if E0_{d} == {c} else (id1_{d} * {c} + id0_{d}))"
        return None

    @functools.cached_property
    def _id_locals(self) -> dict[str, K.Expr]:
        """Locals that hold an instance id or count wherever they are read: assigned once, at the
        top level, from one, and read by no statement before."""
        body = self.leaf.body
        counts = K.assignments(body)
        found: dict[str, K.Expr] = {}
        read: set[str] = set()
        for s in body:
            if isinstance(s, K.Assign) and counts[s.target] == 1 and s.target not in read and \
                    isinstance(s.value, (K.InstanceId, K.NumInstances)):
                found[s.target] = s.value
            read |= K.names_read([s])
        return found

    def _grid_tile_prologue(self) -> None:
        """Program (x, y, z) of a 3-D launch grid covers coordinates x * TX + [0, TX), y * TY +
        [0, TY) and z: no division anywhere."""
        e = self.emit
        dims = max(self._level_dims(0), self._level_dims(1))
        e("lane = tl.arange(0, BLOCK).to(tl.int64)")
        e("g0 = tl.program_id(0).to(tl.int64) * TX + lane % TX")
        e("g1 = tl.program_id(1).to(tl.int64) * TY + lane // TX")
        e("g2 = tl.program_id(2).to(tl.int64)")
        self.coordinate_ids({d: f"g{d}" for d in range(dims)})
        self._prologue_values()


def _through(e: K.Expr, ids: dict[str, K.Expr]) -> K.Expr:
    return ids.get(e.name, e) if isinstance(e, K.Var) else e
