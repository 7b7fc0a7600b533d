"""The collectives between ranks on one host, over the shared-memory heap.
(docs/architecture.md, "Module notes": distributed/local.py)"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from .reduction_arith import add_rmsnorm, reduce_all, torch_dtype
from .call import Call
from .quantized import emit_fp8, heap_all_reduce
from .moe_host import run_on_heap as _moe
from .sync import Communicator

ALIGN_ELEMS = 64  # two-shot slices start at multiples of this many elements


# element types whose sums NumPy computes exactly as torch does (no widening): the kept one-shot
_NUMPY_SUMS = ("f32", "f64", "i8", "i16", "i32", "i64", "u8")


def run(comm: Communicator, call: Call, algorithm: str, state: dict | None = None,
        staged: list[Any] | None = None) -> None:
    """Run `call` by `algorithm`, after the ranks agreed on it; `state`: what a call shape keeps
    between calls (agreement.py's Agreed.state), or None; `staged`: what stage() returned."""
    if staged is not None:
        _reduce_staged(staged, state["staged"][1])
        return
    if state is not None and _kept_sum(call, algorithm):
        _all_reduce_one_shot_kept(comm, call, state)
        return
    _ALGORITHMS[(call.kind, algorithm)](comm, call)


def _kept_sum(call: Call, algorithm: str) -> bool:
    return algorithm == "one_shot" and call.kind == "all_reduce" and call.op == "sum" and \
        call.dtype.name in _NUMPY_SUMS and call.buffers[0].size > 0


def stage(comm: Communicator, call: Call, algorithm: str, state: dict) -> list[Any] | None:
    """The staged one-shot sum, part 1, before the agreement's barrier: a sum small enough for a
    staging slot (heap.py) copies this rank's input into the slot of this call's parity. Returns
    every rank's slot (None: not staged).

    After the barrier every rank adds the ranks' slots into its own buffer (run()), and no second
    barrier is needed: peers never read the buffer itself, and a slot is written again two
    collectives later, after the next collective's barrier, which no rank passes before every rank
    has finished reading this one's slots."""
    kept = state.get("staged")  # (the state is this call shape's, algorithm included)
    if kept is None:
        if not _kept_sum(call, algorithm) or call.buffers[0].size > comm.heap.stage_slot_bytes:
            return None
        count, dtype, heap = call.count(0), call.dtype.numpy_dtype, comm.heap
        slots = [[heap.array(q, heap.stage_offset(p), count, dtype) for q in comm.ranks] for p in (0, 1)]
        mine = heap.array(comm.rank, call.buffers[0].offset, count, dtype)
        kept = state["staged"] = (slots, mine, comm.ranks.index(comm.rank))
    slots, mine, me = kept
    staged = slots[comm.next_slot]
    np.copyto(staged[me], mine)
    return staged


def _reduce_staged(staged: list[Any], mine: Any) -> None:
    """Part 2: the ranks' inputs added in rank order into this rank's buffer."""
    if len(staged) == 1:
        np.copyto(mine, staged[0])
        return
    np.add(staged[0], staged[1], out=mine)
    for part in staged[2:]:
        np.add(mine, part, out=mine)


def _all_reduce_one_shot_kept(comm: Communicator, call: Call, state: dict) -> None:
    """The one-shot sum on NumPy views of every rank's buffer made once per call shape, into a
    kept accumulator: the same additions in the same (rank) order as reduce_all, without the
    allocations and the torch dispatch that dominate a small all-reduce."""
    kept = state.get("one_shot")
    if kept is None:
        count, offset = call.count(0), call.buffers[0].offset
        views = [comm.heap.array(q, offset, count, call.dtype.numpy_dtype) for q in comm.ranks]
        kept = state["one_shot"] = (views, np.empty(count, dtype=call.dtype.numpy_dtype),
                                    comm.ranks.index(comm.rank))
    views, acc, me = kept
    _reduce_staged(views, acc)
    _barrier(comm, call)
    np.copyto(views[me], acc)


def _views(comm: Communicator, call: Call, i: int, count: int) -> list[Any]:
    """Buffer i of every local rank, `count` elements, by rank."""
    dtype = torch_dtype(call.dtype)
    offset = call.buffers[i].offset
    return [comm.heap.tensor(q, offset, count, dtype) for q in comm.ranks]


def _barrier(comm: Communicator, call: Call) -> None:
    comm.barrier(call.what, call.loc)


def _slice(n: int, parts: int, i: int) -> slice:
    chunk = -(-n // parts)
    chunk = -(-chunk // ALIGN_ELEMS) * ALIGN_ELEMS
    return slice(min(n, i * chunk), min(n, (i + 1) * chunk))


def _all_reduce_one_shot(comm: Communicator, call: Call) -> None:
    views = _views(comm, call, 0, call.count(0))
    total = reduce_all(views, call.op, call.dtype)
    _barrier(comm, call)
    views[comm.ranks.index(comm.rank)].copy_(total)


def _all_reduce_two_shot(comm: Communicator, call: Call) -> None:
    n, world = call.count(0), len(comm.ranks)
    me = comm.ranks.index(comm.rank)
    views = _views(comm, call, 0, n)
    mine = _slice(n, world, me)
    views[me][mine].copy_(reduce_all([v[mine] for v in views], call.op, call.dtype))
    _barrier(comm, call)
    for owner in range(world):
        if owner != me:
            part = _slice(n, world, owner)
            views[me][part].copy_(views[owner][part])
    _barrier(comm, call)


def _all_gather(comm: Communicator, call: Call) -> None:
    n = call.count(0)
    src = _views(comm, call, 0, n)
    dst = _views(comm, call, 1, n * len(comm.ranks))[comm.ranks.index(comm.rank)]
    for i, part in enumerate(src):
        dst[i * n:(i + 1) * n].copy_(part)
    _barrier(comm, call)


def _reduce_scatter(comm: Communicator, call: Call) -> None:
    n = call.count(1)
    me = comm.ranks.index(comm.rank)
    src = _views(comm, call, 0, n * len(comm.ranks))
    dst = _views(comm, call, 1, n)[me]
    dst.copy_(reduce_all([s[me * n:(me + 1) * n] for s in src], call.op, call.dtype))
    _barrier(comm, call)


def _broadcast(comm: Communicator, call: Call) -> None:
    views = _views(comm, call, 0, call.count(0))
    me = comm.ranks.index(comm.rank)
    root = comm.ranks.index(call.root)
    if me != root:
        views[me].copy_(views[root])
    _barrier(comm, call)


def _all_reduce_rmsnorm(comm: Communicator, call: Call) -> None:
    me = comm.ranks.index(comm.rank)
    xs = _views(comm, call, 0, call.count(0))
    total = reduce_all(xs, "sum", call.dtype)
    _barrier(comm, call)
    residual = _views(comm, call, 1, call.count(1))[me]
    weight = _views(comm, call, 2, call.count(2))[me]
    x, r = add_rmsnorm(total, residual, weight, call.hidden, call.eps)
    residual.copy_(r)
    xs[me].copy_(x)
    if call.quantize:  # the fp8 copy of x as stored (quantized.emit_fp8)
        out, scales = (comm.heap.tensor(comm.rank, call.buffers[i].offset, call.count(i),
                                        torch_dtype(call.elem(i))) for i in (3, 4))
        emit_fp8(call, xs[me], out, scales)


_ALGORITHMS: dict[tuple[str, str], Callable[[Communicator, Call], None]] = {
    ("all_reduce", "one_shot"): _all_reduce_one_shot,
    ("all_reduce", "two_shot"): _all_reduce_two_shot,
    ("all_reduce", "quantized"): heap_all_reduce,
    ("all_gather", "direct"): _all_gather,
    ("reduce_scatter", "direct"): _reduce_scatter,
    ("broadcast", "direct"): _broadcast,
    ("all_reduce_rmsnorm", "direct"): _all_reduce_rmsnorm,
    ("moe_dispatch", "direct"): _moe,
    ("moe_combine", "direct"): _moe,
}
