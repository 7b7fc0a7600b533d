"""Communication nodes on GPU ranks (the heap on the rank's GPU), whatever the graph's target
(the executor hands a collective its buffers where the heap lives).

- GPU ranks on several hosts: NCCL through torch.distributed (the world's engine).
- GPU ranks on one host: nothing crosses the host between ranks while they agree. Each rank makes
  (or finds: agreement.py) its call's descriptor and fingerprint alone and launches the chosen
  kernel on its stream with the fingerprint as an argument; the kernel's arrival publishes it to
  the peers and compares theirs (signals.same_call), so a call seen before replays its one-kernel
  CUDA graph (launch.py) and costs the host no barrier. When the ranks disagree (or this rank's
  own arguments are wrong: it announces the call with one program and moves nothing), every
  kernel of the call moves no data and says so in the status word; `settle` (what `wait` calls)
  then runs the recovery on every rank: the descriptors go through the host control block, so
  every rank raises the same error naming what differs, and every control block is cleared, so
  the ranks are in step afterwards.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

from ...support import stats
from .. import ranks
from ..agreement import Agreed, agreement_of, communicator, kept_path, run_remote
from ..call import Call, agree, check_arguments
from . import launch, moe_launch

_lock = threading.Lock()  # one collective at a time per rank: ranks must agree on the order
PENDING_LIMIT = 64  # unsettled calls remembered (for their errors) between two waits


@dataclass
class Pending:
    """A call launched and not yet settled: what its errors need."""

    world: ranks.World
    call: Call
    entry: Agreed


_pending: list[Pending] = []


def run_on_gpu(world: ranks.World, call: Call, agreed: Agreed | None = None) -> Agreed | None:
    with _lock:
        return _run(world, call, agreed)


def _run(world: ranks.World, call: Call, agreed: Agreed | None) -> Agreed | None:
    heap = world.heap
    if heap.failed():  # an earlier kernel found a disagreement or gave up (seen without waiting)
        if heap.mismatched():
            _settle()
        launch.raise_if_failed(world, heap, call.what(), call.loc)
    if not world.single_host:
        stats.bump("collectives_remote")
        run_remote(world, call, check_arguments(call, world.size))
        return None
    path = kept_path(agreed, world) or launch.choose(call.kind, call.buffers[0].size, world,
                                                     call.quantize, call.dtype.nbytes)
    # queued into a replayed launch's graph being captured, the kernel runs only when the graph
    # does: each replay counts it and leaves it to `settle` then (note_replayed)
    captured = launch.capturing()
    if not captured:
        stats.bump_one(f"collectives_{path}")
    entry = agreement_of(world, call, path, entry=agreed)
    if not captured:
        _remember(world, call, entry)
    start = entry.state.get("start")
    if start is None:
        start = entry.state["start"] = launch.announce(entry.fingerprint, bind=True) \
            if entry.mine is not None else _starter(call, entry)
    start()
    return entry


def _remember(world: ranks.World, call: Call, entry: Agreed) -> None:
    """Keep a launched call for `settle` (its Pending made once per call shape and node)."""
    if len(_pending) < PENDING_LIMIT:
        pending = entry.state.get("pending")
        if pending is None or pending.call is not call or pending.world is not world:
            pending = entry.state["pending"] = Pending(world, call, entry)
        _pending.append(pending)


def note_replayed(world: ranks.World, call: Call, entry: Agreed) -> None:
    """A call whose kernel a replayed launch's CUDA graph ran (rt/replay.py): `settle` checks it
    as it checks one launched here."""
    with _lock:
        stats.bump_one(f"collectives_{entry.path}")
        _remember(world, call, entry)


def _starter(call: Call, entry: Agreed) -> launch.Bound:
    """This call shape's kernel launch, bound once (on views of its buffers: the heap's memory is
    never freed); an empty call only meets its peers."""
    sized = [b.tensor[:call.count(i)] for i, b in enumerate(call.buffers)]
    fp = entry.fingerprint
    if entry.path == "quantized":
        bound = launch.all_reduce_quantized(sized[0], call.quantize, fingerprint=fp, bind=True)
    elif call.kind == "all_reduce":
        bound = launch.all_reduce(sized[0], call.op, entry.path, fingerprint=fp, bind=True)
    elif call.kind == "all_gather":
        bound = launch.all_gather(sized[0], sized[1], fingerprint=fp, bind=True)
    elif call.kind == "reduce_scatter":
        bound = launch.reduce_scatter(sized[0], sized[1], call.op, fingerprint=fp, bind=True)
    elif call.kind == "broadcast":
        bound = launch.broadcast(sized[0], call.root, fingerprint=fp, bind=True)
    elif call.kind == "moe_dispatch":
        bound = moe_launch.moe_dispatch(*sized, call.hidden, call.experts, call.capacity,
                                        fingerprint=fp, bind=True)
    elif call.kind == "moe_combine":
        gate = sized[2] if call.buffers[2].size else None
        bound = moe_launch.moe_combine(sized[0], sized[1], gate, sized[3], call.hidden, call.experts,
                                       call.capacity, fingerprint=fp, bind=True)
    else:
        bound = launch.all_reduce_rmsnorm(sized[0], sized[1], sized[2], call.hidden, call.eps,
                                          *sized[3:5], fingerprint=fp, bind=True)
    assert bound is not None
    return bound


def settle() -> None:
    """Wait for this rank's collectives launched since the last settle, and raise what they
    found: the ranks disagreed (DistributedError naming the difference, on every rank), a rank
    did not arrive (HPVMTimeoutError), or this rank's own arguments were wrong. `hpvm.wait` of a
    launch calls it."""
    if _pending:
        with _lock:
            _settle()


def _settle() -> None:
    pending = _pending[:]
    _pending.clear()
    if not pending or pending[0].world is not ranks.current():
        return  # finalized since: nothing of that world is left to check
    first = pending[0]
    world, heap = first.world, first.world.heap
    launch.synchronize_device(heap)
    if not heap.failed() and all(p.entry.mine is None for p in pending):
        return  # the common case: every kernel met its peers and agreed
    if heap.mismatched():
        _recover(world, first)
    launch.raise_if_failed(world, heap, first.call.what(), first.call.loc)
    for p in pending:
        if p.entry.mine is not None:  # every rank made the same mistake: each raises its own
            raise p.entry.mine


def _recover(world: ranks.World, first: Pending) -> None:
    """Every rank, after its kernels of a call the ranks disagreed on: post the descriptors (the
    first barrier: no kernel runs on any rank after it), clear the control block, pass a second
    barrier (none is cleared while a peer could still write into it), raise naming what differs."""
    call, entry, heap = first.call, first.entry, world.heap
    comm = communicator(world)
    everyone = comm.post(entry.words, call.what, call.loc)
    heap.reset_control()
    heap.clear_failure()
    launch.synchronize_device(heap)
    comm.barrier(call.what, call.loc)
    agree(call, comm.ranks, everyone, entry.mine, compare_offsets=True)
    raise call.fail("the ranks' fingerprints of this call differ, their descriptors do not",
                    rule="rank-agreement")

