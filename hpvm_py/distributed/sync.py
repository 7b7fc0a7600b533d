"""Cross-rank ordering on the heap: arrival counters and descriptor slots, no host barriers.
(docs/architecture.md, "Module notes": distributed/sync.py)"""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import HPVMTimeoutError
from ..support.loc import Loc
from .atomics import native
from .heap import DESC_WORDS
from .ranks import World
from .waiting import RanksMissing, wait_until

_SPIN_ROUNDS = 256  # native polls before the Python loop takes over (with its sleeps)


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
        self.phase = self._native.load(self._my_flag)
        self.calls = 0

    def barrier(self, what: Callable[[], str], loc: Loc | None) -> None:
        """Arrive at the next phase and wait for every local rank; `what` names the collective
        for the timeout message."""
        self.phase += 1
        target = self.phase
        self._native.store(self._my_flag, target)
        behind = self._native.first_behind(self._flags_address, len(self.ranks), target,
                                           _SPIN_ROUNDS)
        if behind < 0:
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
