"""How the ranks agree on a collective call before running it, so that every rank raises the same
error when they disagree: over the world's engine (ranks on several hosts, which then runs the
call) or through the host control block of the heap (ranks on one host)."""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import DistributedError
from . import engine_collectives, ranks
from .call import BAD_ARGUMENT, NOT_ON_HEAP, OK, Call, agree, descriptor
from .sync import Communicator


def run_remote(world: ranks.World, call: Call, mine: DistributedError | None) -> None:
    """Ranks on several hosts: descriptors and the collective over the world's engine."""
    status = OK if mine is None else BAD_ARGUMENT
    words = [int(w) for w in descriptor(call, status)]
    everyone = engine_collectives.exchange(world.engine, call, words, world.timeout)
    agree(call, list(range(world.size)), [_array(w) for w in everyone], mine, compare_offsets=False)
    engine_collectives.run(world.engine, call, world.timeout)


def agree_on_heap(world: ranks.World, call: Call, mine: DistributedError | None) -> None:
    """Ranks on one host: find every buffer on the heap, exchange descriptors through the host
    control block, and raise on every rank when they disagree."""
    heap = world.heap
    for b in call.buffers:
        b.offset = 0 if b.nbytes == 0 else heap.offset_of(b.address, b.nbytes)  # empty: no memory
        if b.offset is None and mine is None:
            mine = call.fail(f"buffer {b.name} ({b.nbytes} bytes at {b.address:#x}) is not on the "
                             "symmetric heap: allocate it with hpvm.symmetric.empty(shape, dtype) on "
                             "every rank", rule="buffer-on-heap")
    status = OK if mine is None else (NOT_ON_HEAP if mine.rule == "buffer-on-heap" else BAD_ARGUMENT)
    if world.comm is None:
        world.comm = Communicator(world)
    everyone = world.comm.post(descriptor(call, status), call.what, call.loc)
    agree(call, world.comm.ranks, everyone, mine, compare_offsets=True)


def _array(words: list[int]) -> Any:
    return np.array(words, dtype=np.int64)
