"""The collectives between ranks on one host, over the shared-memory heap.
(docs/architecture.md, "Module notes": distributed/local.py)"""
from __future__ import annotations

from typing import Any, Callable

from .reduction_arith import add_rmsnorm, reduce_all, torch_dtype
from .call import Call
from .sync import Communicator

ALIGN_ELEMS = 64  # two-shot slices start at multiples of this many elements


def run(comm: Communicator, call: Call, algorithm: str) -> None:
    _ALGORITHMS[(call.kind, algorithm)](comm, call)


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


_ALGORITHMS: dict[tuple[str, str], Callable[[Communicator, Call], None]] = {
    ("all_reduce", "one_shot"): _all_reduce_one_shot,
    ("all_reduce", "two_shot"): _all_reduce_two_shot,
    ("all_gather", "direct"): _all_gather,
    ("reduce_scatter", "direct"): _reduce_scatter,
    ("broadcast", "direct"): _broadcast,
    ("all_reduce_rmsnorm", "direct"): _all_reduce_rmsnorm,
}
