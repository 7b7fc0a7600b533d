"""The gpu target's tl.dot kernels, for leaves with a recognised dot loop (dotmatch.py).

Mapping. A program covers a BM x BN block of (row, column) coordinates of the combined grid (the
coordinate along dimension d is id1_d * E0_d + id0_d), across as many parent instances as the block
spans; programs go through the blocks in groups of GROUP block rows, so that neighbours share B
columns in L2. The block's BM * BN instances are the program's lanes, row-major, so every statement
outside the loop is generated as for any leaf; parent-level ids and per-parent values vary between
lanes here (TileUniformity). The loop becomes a loop over k tiles of BK: the A block [BM, BK] and
the B block [BK, BN] are the leaf's own element expressions evaluated on 2-D index blocks (loads
masked to the grid and to kk < stop, anything masked contributing a zero), and tl.dot in IEEE
fp32 accumulates their product, from -0.0, into acc, reshaped to [BM, BN] and back. A program
whose block is whole (inside the grid, a k range of whole BK steps, every guard true on the
block) runs a copy of the loop without masks: the masks' integer work, every k step, slows a
kernel bound by its FMAs.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator

from ...ir import kernel as K
from ...types import f32, i64
from .dotmatch import KK, DotLoop, combined_id, coordinate_id
from .values import constant

# the sum's start: -0.0 by its bits (values.constant: triton 3.6 made a -0.0 literal +0.0)
NEGATIVE_ZERO_BLOCK = constant(-0.0, f32, "[BM, BN]")


class DotTiles:
    """Mixed into the generator: uses its emit/expr/names, GridTiles' coordinate_ids and
    _prologue_values, and sets its zero."""

    dot: DotLoop
    precision: str  # tl.dot's input_precision (HPVM_DOT_PRECISION)

    def dot_kernel_body(self) -> None:
        """The loop first, then the lanes' ids and the statements before it: the per-lane values
        of those statements (ids, rows, columns: blocks of BM * BN int64s) would otherwise stay
        live through the loop and spill its registers. Legal because the statements before the
        loop touch no memory but by loads (dotmatch.py) and the loop uses none of their values
        but acc's start, which is added after."""
        e = self.emit
        r, c = self.dot.row_dim, self.dot.col_dim
        body = self.leaf.body
        at = next(i for i, s in enumerate(body) if s is self.dot.loop)
        e("pid = tl.program_id(0).to(tl.int64)")
        e("Z64 = tl.zeros([], tl.int64)")
        e(f"R = {self.extent(r)}")
        e(f"C = {self.extent(c)}")
        e("tiles_c = (C + BN - 1) // BN")
        e("in_group = GROUP * tiles_c")
        e("first_r = (pid // in_group) * GROUP")
        e("group_rows = tl.minimum((R + BM - 1) // BM - first_r, GROUP)")
        e("tile_r = first_r + (pid % in_group) % group_rows")
        e("tile_c = (pid % in_group) // group_rows")
        self._uniform_params()
        self._dot_loop()
        e("lane = tl.arange(0, BLOCK).to(tl.int64)")
        e("g_r = tile_r * BM + lane // BN")
        e("g_c = tile_c * BN + lane % BN")
        self.coordinate_ids({r: "g_r", c: "g_c"})
        self._lane_values()
        self.block(body[:at])
        acc = self.names[self.dot.acc]
        e(f"{acc} = {acc} + tl.reshape(acc_t, [BLOCK])")
        self.block(body[at + 1:])

    def _dot_loop(self) -> None:
        d = self.dot
        e = self.emit
        e("rows_a = (tile_r * BM + tl.arange(0, BM).to(tl.int64))[:, None]")
        e("cols_b = (tile_c * BN + tl.arange(0, BN).to(tl.int64))[None, :]")
        # rows and columns past the grid are masked, not clamped: a clamp (tl.where) hides their
        # contiguity from Triton, which then loads 4 bytes at a time instead of 16
        e("row_ok = rows_a < R")
        e("col_ok = cols_b < C")
        for prefix, coordinate, dim, elem in (("a_id", "rows_a", d.row_dim, d.a_elem),
                                              ("b_id", "cols_b", d.col_dim, d.b_elem)):
            used = {x.name for x in K.walk_exprs(elem) if isinstance(x, K.Var)}
            for level in range(d.levels):
                if coordinate_id(level, dim) not in used:
                    continue  # the element uses the combined coordinate (or not this level)
                e(f"{prefix}{level} = {coordinate}" if d.levels == 1 else
                  f"{prefix}{level} = {coordinate} {'%' if level == 0 else '//'} E0_{dim}")
        e(f"k_start = ({self.expr(d.start, 'm0')}).to(tl.int64)")
        stop = f"({self.expr(d.stop, 'm0')}).to(tl.int64)"
        if d.tile is not None:  # whole scratch tiles: their padding is masked by the leaf's guards
            stop = f"k_start + _trip(k_start, {stop}, Z64 + {d.tile}) * {d.tile}"
        parts = [_guarded_load(d.a_elem), _guarded_load(d.b_elem)]
        bound = _shared_k_bound(parts)
        if bound is not None:  # both factors are 0 from kk = bound on: the loop stops there
            stop = f"tl.minimum({stop}, ({self.expr(bound, 'm0')}).to(tl.int64))"
            parts = [(load, [g for g in guards if _k_bound(g) != bound]) for load, guards in parts]
        e(f"k_stop = {stop}")
        e("z_a = tl.zeros([BM, BK], tl.int64)")
        e("z_b = tl.zeros([BK, BN], tl.int64)")
        e("k_lanes = tl.arange(0, BK).to(tl.int64)")
        if not _whole_tiles_possible(parts):
            self._k_loop(parts, masked=True)
            return
        # a block inside the grid, a k range of whole BK steps and every guard true on the block:
        # no load needs its mask, and the masks' compares every k step cost FMA issue slots (the
        # Parboil sgemm: 0.79x -> 0.84x cuBLAS on an H200, benchmarks/RESULTS.md)
        e("whole = ((tile_r + 1) * BM <= R) & ((tile_c + 1) * BN <= C) & "
          "((k_stop - k_start) % BK == 0)")
        for (_, guards), zero, prefix, dim, coordinate in ((parts[0], "z_a", "a_id", d.row_dim, "rows_a"),
                                                           (parts[1], "z_b", "b_id", d.col_dim, "cols_b")):
            for guard in guards:
                holds = self._on_block(guard, zero, prefix, dim, coordinate)
                e(f"whole = whole & (tl.min(tl.where({holds}, 1, 0) + {zero}) > 0)")
        e("if whole:")
        self.indent += 1
        self._k_loop(parts, masked=False)
        self.indent -= 1
        e("else:")
        self.indent += 1
        self._k_loop(parts, masked=True)
        self.indent -= 1

    def _k_loop(self, parts: list[tuple[K.Load | None, list[K.Expr]]], masked: bool) -> None:
        """The loop over k steps of BK; unmasked: every load of a block whose masks all hold.
        Masked: the whole steps, then the partial last one, whose lanes past k_stop multiply
        +0.0 by -0.0: the sum's identity, so a -0.0 start and -0.0 products keep their sign
        as the leaf's own loop does (+0.0 padding, or a +0.0 start, would turn them into +0.0)."""
        e = self.emit
        e(f"acc_t = {NEGATIVE_ZERO_BLOCK}")
        if not masked:
            e("for kb in range(k_start, k_stop, BK):")
            self.indent += 1
            self._k_step(parts, masked=False)
            self.indent -= 1
            return
        e("k_whole = k_start + tl.maximum(k_stop - k_start, 0) // BK * BK")
        e("for kb in range(k_start, k_whole, BK):")
        self.indent += 1
        self._k_step(parts, masked=True)
        self.indent -= 1
        e("if k_whole < k_stop:")
        self.indent += 1
        e("kb = k_whole")
        self._k_step(parts, masked=True, last=True)
        self.indent -= 1

    def _k_step(self, parts: list[tuple[K.Load | None, list[K.Expr]]], masked: bool,
                last: bool = False) -> None:
        """One k step of BK at kb: the operand blocks and their product added to acc_t."""
        d = self.dot
        e = self.emit
        e("kk_a = kb + k_lanes[None, :]")
        e("kk_b = kb + k_lanes[:, None]")
        if masked:
            e("m_a = row_ok & (kk_a < k_stop)")
            e("m_b = (kk_b < k_stop) & col_ok")
        else:
            parts = [(load, []) for load, _ in parts]
        op_a = self._operand(d.a_elem, parts[0], "m_a" if masked else "True", "kk_a", "z_a", "a_id",
                             d.row_dim, "rows_a")
        op_b = self._operand(d.b_elem, parts[1], "m_b" if masked else "True", "kk_b", "z_b", "b_id",
                             d.col_dim, "cols_b")
        if last:
            e(f"{op_b} = tl.where(kk_b < k_stop, {op_b}, {constant(-0.0, f32)})")
        e(f"acc_t = tl.dot({op_a}, {op_b}, acc_t, input_precision=\"{self.precision}\")")

    def _operand(self, elem: K.Expr, guarded: tuple[K.Load | None, list[K.Expr]], mask: str,
                 kk: str, zero: str, prefix: str, dim: int, coordinate: str) -> str:
        """One operand block: the element expression on 2-D blocks of ids, the combined
        coordinate and kk; `guarded`: it as a load under guards (_guarded_load), when it is one."""
        load, guards = guarded
        with self._block_names(zero, prefix, dim, coordinate, kk):
            if load is None:
                code = f"tl.where({mask}, {self.expr(elem, mask)}, 0.0)"
            else:  # no tl.where between the load and tl.dot: Triton then pipelines the load
                for guard in guards:
                    narrowed = self.fresh("m")
                    self.emit(f"{narrowed} = {mask} & {self.expr(guard, mask)}")
                    mask = narrowed
                code = self.expr(load, mask)  # a masked load gives 0 where the mask is off
        name = self.fresh("op")
        self.emit(f"{name} = {code}")
        return name

    def _on_block(self, guard: K.Expr, zero: str, prefix: str, dim: int, coordinate: str) -> str:
        """A guard that reads no kk, evaluated on the operand's block of coordinates."""
        with self._block_names(zero, prefix, dim, coordinate):
            return self.expr(guard, "True")

    @contextlib.contextmanager
    def _block_names(self, zero: str, prefix: str, dim: int, coordinate: str,
                     kk: str | None = None) -> Iterator[None]:
        """Inside: the leaf's ids along `dim` (and kk) name an operand's 2-D blocks."""
        bound = {combined_id(dim): coordinate,
                 **{coordinate_id(level, dim): f"{prefix}{level}" for level in range(self.dot.levels)}}
        if kk is not None:
            bound[KK] = kk
        saved = {name: self.names.get(name) for name in bound}
        self.names.update(bound)
        self.zero = zero
        try:
            yield
        finally:
            self.zero = "ZERO"
            for name, old in saved.items():
                if old is None:
                    del self.names[name]
                else:
                    self.names[name] = old


def _whole_tiles_possible(parts: list[tuple[K.Load | None, list[K.Expr]]]) -> bool:
    """Whether the operands are loads whose guards a block can be checked against before the
    loop: none reads kk or memory."""
    for load, guards in parts:
        if load is None:
            return False
        for guard in guards:
            if any(isinstance(x, (K.Load, K.Atomic)) or (isinstance(x, K.Var) and x.name == KK)
                   for x in K.walk_exprs(guard)):
                return False
    return True


def _guarded_load(elem: K.Expr) -> tuple[K.Load | None, list[K.Expr]]:
    """elem as `load if g1 and ... else +0.0` (nested selects; `and`s of conditions that touch
    no memory split into their terms), or (None, [])."""
    guards: list[K.Expr] = []
    while isinstance(elem, K.Select) and isinstance(elem.if_false, K.Const) and \
            elem.if_false.value == 0 and math.copysign(1.0, elem.if_false.value) > 0:
        guards += _conjuncts(elem.cond)
        elem = elem.if_true
    return (elem, guards) if isinstance(elem, K.Load) else (None, [])


def _conjuncts(cond: K.Expr) -> list[K.Expr]:
    if isinstance(cond, K.Logical) and cond.op == "land" and \
            not any(isinstance(x, (K.Load, K.Atomic)) for x in K.walk_exprs(cond)):
        return _conjuncts(cond.lhs) + _conjuncts(cond.rhs)
    return [cond]


def _k_bound(guard: K.Expr) -> K.Expr | None:
    """S of a guard `kk < S` with S the same for every instance (no memory, ids or kk in it)."""
    if not (isinstance(guard, K.Compare) and guard.op == "lt"
            and guard.lhs == K.Var(name=KK, type=i64)):
        return None
    for x in K.walk_exprs(guard.rhs):
        if isinstance(x, (K.Load, K.Atomic)) or (isinstance(x, K.Var) and x.name.startswith("__")):
            return None
    return guard.rhs


def _shared_k_bound(parts: list[tuple[K.Load | None, list[K.Expr]]]) -> K.Expr | None:
    """A bound S that guards both factors (`kk < S`): past it both are 0, and so is their product."""
    (load_a, guards_a), (load_b, guards_b) = parts
    if load_a is None or load_b is None:
        return None
    bounds_b = [_k_bound(g) for g in guards_b]
    return next((b for b in map(_k_bound, guards_a) if b is not None and b in bounds_b), None)
