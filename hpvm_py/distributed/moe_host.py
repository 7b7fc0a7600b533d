"""The mixture-of-experts collectives where the host runs them: ranks on one host over the
shared-memory heap (CPU ranks), and ranks on several hosts over the world's engine (CPU or GPU
ranks). The plan is moe_plan.py's; the GPU ranks of one host run gpu/moe_kernels.py instead.
(docs/architecture.md, "Module notes": distributed/moe_host.py)"""
from __future__ import annotations

from typing import Any

import numpy as np

from .call import Call
from .moe_plan import NOWHERE, Layout, counts_matrix, layout, positions, route_error, slot_error, slots
from .reduction_arith import accumulator_dtype, torch_dtype
from .sync import Communicator
from .transport import Transport


def call_layout(call: Call, world: int) -> Layout:
    return layout(call.kind, [b.size for b in call.buffers], call.dtype.nbytes, call.hidden,
                  call.experts, call.capacity, world)


# -- the data movement, on every rank's tensors (views of the heap, or gathered copies) --------


def dispatch(lay: Layout, me: int, routes: list[np.ndarray], tokens: list[Any], recv: Any, counts: Any,
             origin: Any, slot: Any) -> None:
    """This rank's receive buffer, counts, origins and slots, from every rank's expert ids and
    token rows (`routes`: NumPy i32 arrays; the rest flat torch tensors)."""
    import torch

    everyone = counts_matrix(routes, lay.experts)
    mine = slice(me * lay.local, (me + 1) * lay.local)
    counts.copy_(torch.from_numpy(everyone[:, mine].astype(np.int32).reshape(-1)))
    pairs = origin.view(lay.rows, 2)
    pairs.fill_(NOWHERE)
    received = recv.view(lay.rows, lay.hidden)
    for q, route in enumerate(routes):
        where = slots(route, positions(route, everyone[:q].sum(axis=0)), lay.capacity)
        if q == me:
            slot.copy_(torch.from_numpy(where.astype(np.int32)))
        rows = np.flatnonzero((where >= 0) & (where // lay.rows == me))
        if rows.size == 0:
            continue
        at = torch.from_numpy(where[rows] % lay.rows).to(received.device)
        source = torch.from_numpy(rows).to(received.device)
        received[at] = tokens[q].view(lay.tokens, lay.hidden)[source]
        pairs[at, 0] = q
        pairs[at, 1] = source.to(pairs.dtype)


def combine(lay: Layout, dtype: Any, slot: np.ndarray, expert_outs: list[Any], gate: Any | None,
            out: Any) -> None:
    """out[i] = gate[i] x the expert's output row of slot[i] (read from the expert's rank), zero
    where slot[i] is -1 (`expert_outs`: every rank's, by rank; flat torch tensors)."""
    import torch

    rows_out = out.view(lay.tokens, lay.hidden)
    owner = np.where(slot >= 0, slot // lay.rows, NOWHERE)
    for q, expert_out in enumerate(expert_outs):
        rows = np.flatnonzero(owner == q)
        if rows.size == 0:
            continue
        at = torch.from_numpy(rows).to(rows_out.device)
        picked = torch.from_numpy((slot[rows] % lay.rows).astype(np.int64)).to(at.device)
        values = expert_out.view(lay.rows, lay.hidden)[picked]
        if gate is not None:
            wide = accumulator_dtype(dtype)
            values = (values.to(wide) * gate[at].to(wide)[:, None]).to(rows_out.dtype)
        rows_out[at] = values
    nowhere = np.flatnonzero(slot < 0)
    if nowhere.size:
        rows_out[torch.from_numpy(nowhere).to(rows_out.device)] = 0


# -- ranks on one host: the heap ---------------------------------------------------------------


def run_on_heap(comm: Communicator, call: Call) -> None:
    """Pull what this rank needs from its peers' heaps (every rank reads every rank's expert ids
    or slots, so they all find the same bad data and raise together); then a barrier, after
    which no peer reads this rank's buffers."""
    lay = call_layout(call, len(comm.ranks))
    me = comm.ranks.index(comm.rank)
    heap, dtype = comm.heap, torch_dtype(call.dtype)

    def ints(i: int, q: int, count: int) -> np.ndarray:
        return heap.array(q, call.buffers[i].offset, count, np.int32)

    def data(i: int, q: int, count: int) -> Any:
        return heap.tensor(q, call.buffers[i].offset, count, dtype)

    def own_ints(i: int, count: int) -> Any:
        import torch

        return torch.from_numpy(ints(i, comm.rank, count))

    if call.kind == "moe_dispatch":
        routes = [ints(1, q, lay.tokens) for q in comm.ranks]
        _raise_together(comm, call, route_error(routes, lay.experts), "moe-routing")
        dispatch(lay, me, routes, [data(0, q, lay.tokens * lay.hidden) for q in comm.ranks],
                 data(2, comm.rank, lay.rows * lay.hidden), own_ints(3, lay.experts),
                 own_ints(4, 2 * lay.rows), own_ints(5, lay.tokens))
    else:
        everyone = [ints(1, q, lay.tokens) for q in comm.ranks]
        _raise_together(comm, call, slot_error(everyone, lay), "moe-slots")
        gate = None
        if call.buffers[2].size:
            import torch

            gate = torch.from_numpy(heap.array(comm.rank, call.buffers[2].offset, lay.tokens, np.float32))
        combine(lay, call.dtype, everyone[me], [data(0, q, lay.rows * lay.hidden) for q in comm.ranks],
                gate, data(3, comm.rank, lay.tokens * lay.hidden))
    comm.barrier(call.what, call.loc)


def _raise_together(comm: Communicator, call: Call, message: str | None, rule: str) -> None:
    """Every rank found the same `message` (or none): after a barrier (no peer still reads this
    rank's buffers), every rank raises it."""
    if message is not None:
        comm.barrier(call.what, call.loc)
        raise call.fail(message, rule=rule)


# -- ranks on several hosts: the engine --------------------------------------------------------


def run_on_engine(transport: Transport, call: Call, timeout: float) -> None:
    """Gather what every rank holds over the engine (the expert ids and rows for dispatch, the
    slots and expert outputs for combine), then compute this rank's part. Simple, not lean: each
    rank receives world_size times its inputs."""
    lay = call_layout(call, transport.size)
    me = transport.rank
    flat = [b.tensor[:call.count(i)] for i, b in enumerate(call.buffers)]
    if call.kind == "moe_dispatch":
        routes = [r.cpu().numpy() for r in _gather(transport, flat[1], timeout)]
        message = route_error(routes, lay.experts)
        if message is not None:
            raise call.fail(message, rule="moe-routing")
        dispatch(lay, me, routes, _gather(transport, flat[0], timeout), *flat[2:])
    else:
        everyone = [s.cpu().numpy() for s in _gather(transport, flat[1], timeout)]
        message = slot_error(everyone, lay)
        if message is not None:
            raise call.fail(message, rule="moe-slots")
        gate = flat[2] if call.buffers[2].size else None
        combine(lay, call.dtype, everyone[me], _gather(transport, flat[0], timeout), gate, flat[3])


def _gather(transport: Transport, t: Any, timeout: float) -> list[Any]:
    """Every rank's `t` (the same size everywhere), by rank."""
    import torch

    whole = torch.empty(transport.size * t.numel(), dtype=t.dtype, device=t.device)
    if t.numel():
        transport.all_gather(t.contiguous().view(torch.uint8), whole.view(torch.uint8), timeout)
    return list(whole.view(transport.size, t.numel()).unbind(0))
