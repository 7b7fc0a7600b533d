"""The routing plan of the mixture-of-experts collectives (moe_dispatch, moe_combine): the layout
their buffers must have, the checks of sizes and routing data, and where each token row goes.
NumPy only; every path (CPU heap, engine, the GPU kernels' reference) follows these definitions.
(docs/distributed.md, "Mixture-of-experts dispatch and combine")

Definitions, for a world of W ranks, E experts (L = E / W per rank, expert e on rank e // L),
capacity C rows per expert, T token rows per rank:

- counts[s, e] rows of rank s are routed to expert e (ids -1 are routed nowhere);
- the rows routed to expert e are ordered by (source rank, source row); the row of rank s at
  index k of that order takes position k: sum(counts[:s, e]) + (rows of s before it routed to e);
- a row whose position is below C is kept: it lands in row e % L * C + position of the expert's
  rank's receive buffer, and its slot is e * C + position; other rows are dropped (slot -1).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MOE_KINDS = ("moe_dispatch", "moe_combine")
NOWHERE = -1  # an expert id that routes a row nowhere (padding), and the slot of such a row
SLOT_LIMIT = 1 << 31  # slots (experts x capacity) and rows must fit an i32


@dataclass(frozen=True)
class Layout:
    """The sizes one moe call implies (every rank's are the same: the ranks agreed on them)."""

    tokens: int  # T: rows per rank
    hidden: int
    experts: int
    capacity: int
    world: int

    @property
    def local(self) -> int:
        """L: experts per rank."""
        return self.experts // self.world

    @property
    def rows(self) -> int:
        """Rows of a rank's receive buffer (L x C)."""
        return self.local * self.capacity


def size_error(kind: str, sizes: list[int], esize: int, hidden: int, experts: int, capacity: int,
               world: int) -> str | None:
    """What is wrong with a call's buffer sizes (in bytes, in signature order), or None."""
    if experts % world:
        return (f"experts = {experts} is not a multiple of the world size ({world}): every rank "
                "holds experts / world_size experts")
    row = hidden * esize
    local = experts // world
    data = sizes[0] if kind == "moe_dispatch" else sizes[3]
    name = "tokens" if kind == "moe_dispatch" else "out"
    if data % row:
        return f"{name} holds {data // esize} elements, not a whole number of rows of hidden = {hidden}"
    tokens = data // row
    if tokens >= SLOT_LIMIT:
        return f"{name} holds {tokens} rows; at most {SLOT_LIMIT - 1}"
    block = local * capacity * row
    if kind == "moe_dispatch":
        want = [("expert", sizes[1], 4 * tokens, f"one i32 per row of tokens ({tokens} rows)"),
                ("recv", sizes[2], block, f"experts_per_rank x capacity x hidden = {local} x "
                                          f"{capacity} x {hidden} elements"),
                ("counts", sizes[3], 4 * experts, f"world_size x experts_per_rank = {experts} i32"),
                ("origin", sizes[4], 8 * local * capacity, f"experts_per_rank x capacity x 2 = "
                                                           f"{2 * local * capacity} i32"),
                ("slot", sizes[5], 4 * tokens, f"one i32 per row of tokens ({tokens} rows)")]
    else:
        want = [("expert_out", sizes[0], block, f"experts_per_rank x capacity x hidden = {local} x "
                                                f"{capacity} x {hidden} elements"),
                ("slot", sizes[1], 4 * tokens, f"one i32 per row of out ({tokens} rows)")]
        if sizes[2] not in (0, 4 * tokens):
            return (f"gate has {sizes[2]} bytes; it must hold one f32 per row of out ({4 * tokens} "
                    "bytes), or be empty (0 bytes: no gate)")
    for label, got, expected, what in want:
        if got != expected:
            return f"{label} has {got} bytes; it must hold {what}: {expected} bytes"
    return None


def layout(kind: str, sizes: list[int], esize: int, hidden: int, experts: int, capacity: int,
           world: int) -> Layout:
    """The layout of a call whose sizes passed size_error."""
    data = sizes[0] if kind == "moe_dispatch" else sizes[3]
    return Layout(data // (hidden * esize), hidden, experts, capacity, world)


def route_error(routes: list[np.ndarray], experts: int) -> str | None:
    """The first bad expert id of any rank (every rank reads every rank's ids: they all find the
    same one), or None."""
    for q, route in enumerate(routes):
        bad = np.flatnonzero((route < NOWHERE) | (route >= experts))
        if bad.size:
            return (f"rank {q}'s expert ids hold {int(route[bad[0]])} at row {int(bad[0])} ({bad.size} "
                    f"row(s) outside [-1, {experts}); -1 routes a row nowhere)")
    return None


def slot_error(slots: list[np.ndarray], lay: Layout) -> str | None:
    """The first slot of any rank that moe_dispatch cannot have written, or None."""
    top = lay.experts * lay.capacity
    for q, slot in enumerate(slots):
        bad = np.flatnonzero((slot < NOWHERE) | (slot >= top))
        if bad.size:
            return (f"rank {q}'s slot holds {int(slot[bad[0]])} at row {int(bad[0])}, outside [-1, "
                    f"experts x capacity = {top}): pass the slot array moe_dispatch wrote")
    return None


def counts_matrix(routes: list[np.ndarray], experts: int) -> np.ndarray:
    """counts[s, e]: rows of rank s routed to expert e (int64, world x experts)."""
    out = np.zeros((len(routes), experts), dtype=np.int64)
    for q, route in enumerate(routes):
        routed = route[route >= 0]
        out[q] = np.bincount(routed, minlength=experts)[:experts]
    return out


def positions(route: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Each row's position in its expert's order: before[e] (rows of lower ranks routed to e) plus
    the rows of this rank before it routed to e; -1 for rows routed nowhere."""
    route = route.astype(np.int64)
    order = np.argsort(route, kind="stable")
    ordered = route[order]
    first = np.searchsorted(ordered, ordered, side="left")  # index of the expert's first row
    within = np.empty_like(route)
    within[order] = np.arange(route.size) - first
    routed = route >= 0
    return np.where(routed, before[np.where(routed, route, 0)] + within, NOWHERE)


def slots(route: np.ndarray, pos: np.ndarray, capacity: int) -> np.ndarray:
    """Each row's slot (expert x capacity + position), or -1 when it is dropped or routed nowhere."""
    kept = (pos >= 0) & (pos < capacity)
    return np.where(kept, route.astype(np.int64) * capacity + pos, NOWHERE)
