"""Cross-rank ordering on the heap: arrival counters and descriptor slots, no host barriers.
(docs/architecture.md, "Module notes": distributed/sync.py)"""
from __future__ import annotations

import os
import time
from typing import Callable

import numpy as np

from ..errors import HPVMTimeoutError
from ..support.loc import Loc
from .atomics import native
from .heap import DESC_WORDS
from .ranks import World
from .waiting import RanksMissing, wait_until

_SPIN_ROUNDS = 256  # native polls per round of the spin
SPIN_S = 1e-4  # how long a barrier spins (with sched_yield) before it sleeps between polls (longer
# spins made every process of a loaded machine slower, MPI_Allreduce in the same run included:
# 2 ms put its median at 8 ms at 8 KiB, 0.1-0.2 ms at 10 µs, on 2 cores at load 18)


class Communicator:
    def __init__(self, world: World) -> None:
        assert isinstance(world, World)
        self.world = world
        self.heap = world.control  # the host heap: the data heap itself on CPU ranks
        self.rank = world.rank
        self.ranks = world.local_ranks
        self._flags = np.array([self.heap.flag_address(q) for q in self.ranks], dtype=np.int64)
        self._flags_address = self._flags.ctypes.data
        self._native = native()
        self._my_flag = self.heap.flag_address(self.rank)
        self._me = self.ranks.index(self.rank)
        self.phase = self._native.load(self._my_flag)
        self.calls = 0
        # word 0 of each descriptor slot of every local rank: where the fingerprints go
        self._fingerprints = [[self.heap.descriptor(q, slot)[:1] for q in self.ranks] for slot in (0, 1)]

    def barrier(self, what: Callable[[], str], loc: Loc | None) -> None:
        """Arrive at the next phase and wait for every local rank; `what` names the collective
        for the timeout message."""
        self.phase += 1
        target = self.phase
        self._native.store(self._my_flag, target)
        first_behind, n = self._native.first_behind, len(self.ranks)
        if first_behind(self._flags_address, n, target, _SPIN_ROUNDS) < 0:
            return
        deadline = time.perf_counter() + SPIN_S
        while time.perf_counter() < deadline:
            os.sched_yield()
            if first_behind(self._flags_address, n, target, _SPIN_ROUNDS) < 0:
                return
        load = self._native.load
        timeout = self.world.timeout
        try:
            wait_until(lambda: [q for q, a in zip(self.ranks, self._flags) if load(int(a)) < target],
                       timeout)
        except RanksMissing as exc:
            raise HPVMTimeoutError(
                f"{what()}: rank(s) {exc.ranks} did not arrive within {timeout:g} s (a rank "
                "failed, exited, or skipped this collective; the timeout is HPVM_COMM_TIMEOUT or "
                "hpvm.distributed.init(timeout=...)); the ranks are out of step now: finalize",
                loc, rule="rank-arrival") from None

    @property
    def next_slot(self) -> int:
        """The descriptor slot (and parity) of the next exchange."""
        return self.calls % 2

    def same_fingerprint(self, fingerprint: int, what: Callable[[], str], loc: Loc | None) -> bool:
        """Publish this rank's fingerprint, pass a barrier, and say whether every local rank
        published the same one (every rank gets the same answer)."""
        slot = self.calls % 2
        self.calls += 1
        words = self._fingerprints[slot]
        words[self._me][0] = fingerprint
        self.barrier(what, loc)
        for w in words:
            if w[0] != fingerprint:
                return False
        return True

    def post(self, descriptor: np.ndarray, what: Callable[[], str], loc: Loc | None) -> list[np.ndarray]:
        """Publish this rank's descriptor, pass a barrier, return every local rank's (by rank
        position in `ranks`)."""
        slot = self.calls % 2
        self.calls += 1
        mine = self.heap.descriptor(self.rank, slot)
        mine[:] = 0
        mine[:len(descriptor)] = descriptor
        assert len(descriptor) <= DESC_WORDS
        self.barrier(what, loc)
        return [self.heap.descriptor(q, slot).copy() for q in self.ranks]
