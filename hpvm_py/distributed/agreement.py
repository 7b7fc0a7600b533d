"""How the ranks agree on a collective call, so that every rank raises the same error when they
disagree: over the world's engine (ranks on several hosts, which then runs the call) or through
the heap (ranks on one host).

On one host the agreement is made once per call shape and kept (`Agreed`): the buffers' heap
offsets, this rank's checks of its arguments, the descriptor (collective, element type, op, root,
hidden, eps, algorithm, every buffer's size and heap offset) and its 64-bit fingerprint. The shape
is keyed by everything the descriptor depends on (the collective and its options, the algorithm,
every buffer's address, length and size argument), and a prepared communication node (nodes.py,
which a replayed graph launch runs) keeps its entry, so a relaunch does not even look it up. Every
call, cached or not, then compares only fingerprints: CPU ranks through the host control block
(`check`: one word and one barrier, no host transport), GPU ranks inside the kernel itself
(gpu/runner.py). When the fingerprints differ (or a rank's arguments are wrong), every rank sees
it, and every rank then posts its whole descriptor, so every rank raises the same error naming
what differs, and the ranks are still in step afterwards.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import DistributedError
from ..support import stats
from . import engine_collectives, quantize, ranks
from .call import BAD_ARGUMENT, NOT_ON_HEAP, OK, Call, agree, check_arguments, descriptor, fingerprint
from .sync import Communicator

CACHE_LIMIT = 256  # call shapes kept per process (least recently used go first)


@dataclass
class Agreed:
    """One call shape, as this rank checked it: what every later call with that shape reuses."""

    world: Any  # the World it was made in (a new world after finalize/init agrees again)
    path: str  # the algorithm (chooser.py)
    offsets: list[int]  # every buffer's heap offset
    words: np.ndarray  # the descriptor
    fingerprint: int
    mine: DistributedError | None = None  # this rank's own mistake (such an entry is not kept)
    state: dict = field(default_factory=dict)  # what the runner keeps for the data phase


_cache: OrderedDict[tuple, Agreed] = OrderedDict()


def shape_key(call: Call, path: str) -> tuple:
    """Everything an agreement depends on (the world aside)."""
    return (call.kind, call.dtype.name, call.op, call.root, call.hidden, call.eps, path, call.quantize,
            tuple((b.address, b.nbytes, b.size) for b in call.buffers), call.experts, call.capacity)


def kept_path(entry: Agreed | None, world: ranks.World) -> str | None:
    """The algorithm a prepared node's ranks agreed on in this world, which its relaunches keep
    (the chooser is not asked again); None when there is none yet."""
    return entry.path if entry is not None and entry.world is world else None


def agreement_of(world: ranks.World, call: Call, path: str, mine: DistributedError | None = None,
                 entry: Agreed | None = None) -> Agreed:
    """The call shape's agreement as this rank sees it, made or found (nothing is exchanged); the
    heap offsets are set on `call`'s buffers."""
    if entry is None or entry.world is not world or entry.path != path or mine is not None:
        entry = _entry(world, call, path, mine)
    for b, offset in zip(call.buffers, entry.offsets):
        b.offset = offset
    return entry


def communicator(world: ranks.World) -> Communicator:
    comm = world.comm
    if comm is None:
        comm = world.comm = Communicator(world)
    return comm


def check(comm: Communicator, call: Call, entry: Agreed) -> None:
    """Exchange the fingerprints (one barrier); when they differ, or a rank failed, every rank
    raises, naming what differs."""
    if comm.same_fingerprint(entry.fingerprint, call.what, call.loc):
        if entry.mine is not None:  # every rank made the same mistake: each raises its own
            raise entry.mine
        return
    # a difference, or a failure on some rank: every rank sees it and says what it is
    everyone = comm.post(entry.words, call.what, call.loc)
    agree(call, comm.ranks, everyone, entry.mine, compare_offsets=True)
    raise call.fail("the ranks' fingerprints of this call differ, their descriptors do not",
                    rule="rank-agreement")


def _entry(world: ranks.World, call: Call, path: str, mine: DistributedError | None) -> Agreed:
    key = shape_key(call, path)
    if mine is None:
        found = _cache.get(key)
        if found is not None and found.world is world:
            _cache.move_to_end(key)
            return found
        mine = check_arguments(call, world.size)
    heap = world.heap
    for b in call.buffers:
        b.offset = 0 if b.nbytes == 0 else heap.offset_of(b.address, b.nbytes)  # empty: no memory
        if b.offset is None and mine is None:
            mine = call.fail(f"buffer {b.name} ({b.nbytes} bytes at {b.address:#x}) is not on the "
                             "symmetric heap: allocate it with hpvm.symmetric.empty(shape, dtype) on "
                             "every rank", rule="buffer-on-heap")
    if mine is None and path == "quantized":
        mine = _reserve_workspace(heap, call)
    status = OK if mine is None else (NOT_ON_HEAP if mine.rule == "buffer-on-heap" else BAD_ARGUMENT)
    words = descriptor(call, status, path)
    entry = Agreed(world, path, [-1 if b.offset is None else b.offset for b in call.buffers], words,
                   fingerprint(words), mine)
    if mine is None:
        stats.bump("collective_agreements")  # hpvm.stats(): shapes agreed (relaunches agree none)
        _cache[key] = entry
        if len(_cache) > CACHE_LIMIT:
            _cache.popitem(last=False)
    return entry


def workspace_bytes(call: Call) -> int:
    """The heap workspace of a quantized all-reduce: one payload (quantize.Layout), at the same
    offset of every rank's heap."""
    return quantize.Layout(call.count(0), call.quantize).total


def _reserve_workspace(heap: Any, call: Call) -> DistributedError | None:
    """Whether the quantized all-reduce's workspace fits at the end of the heap (allocator.py);
    the error when user allocations leave no room for it (every rank then raises). Nothing is
    reserved here: the data phase reserves it once the ranks agreed on the call, so that a call
    the ranks disagree on (another size or format on one rank) leaves every heap as it was, and
    the heaps' free bytes stay the same on every rank."""
    need = workspace_bytes(call)
    if heap.workspace_fits(need):
        return None
    return call.fail(f"the quantized all-reduce needs {need} bytes of workspace at the end of the "
                     f"symmetric heap, and {heap.free_bytes} bytes are free (set HPVM_HEAP_BYTES "
                     "larger)", rule="heap-capacity")


def run_remote(world: ranks.World, call: Call, mine: DistributedError | None) -> None:
    """Ranks on several hosts: descriptors and the collective over the world's engine."""
    status = OK if mine is None else BAD_ARGUMENT
    words = [int(w) for w in descriptor(call, status)]
    everyone = engine_collectives.exchange(world.engine, call, words, world.timeout)
    agree(call, list(range(world.size)), [_array(w) for w in everyone], mine, compare_offsets=False)
    engine_collectives.run(world.engine, call, world.timeout)


def _array(words: list[int]) -> Any:
    return np.array(words, dtype=np.int64)
