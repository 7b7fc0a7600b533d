"""Choosing normal or non-temporal stores for a kernel's large launches by timing both.

Whether non-temporal stores pay depends on what the last-level cache keeps for this process, which
the cache's size does not tell on a shared or virtual machine (an H100 host VM reports 300 MiB of
L3, yet a 64 MiB output is written 1.3x faster without it). So the first launches of each size class
run the two drivers in turn, timed, and the class keeps the faster. Both drivers give the same bits,
so only the time of a launch depends on the choice. The choice is kept in the disk cache, keyed
by the kernel, the size class, the CPU model and the thread count: a later process on the same
machine starts with it instead of timing again (three of its first launches would take the slower
stores).
"""
from __future__ import annotations

import threading

from ...support import cache, log, stats

_log = log.logger("cpu")

TRIAL_RUNS = 3  # timed launches of each driver before a size class decides
SUFFIX = ".stores.json"  # the disk cache's entries


class StoreTrial:
    """The timed launches of one size class of one kernel, and the choice they made."""

    def __init__(self, kernel_name: str, size_class: int, key: str | None = None):
        self._name = kernel_name
        self._size_class = size_class
        self._key = key  # of the disk cache's entry (None: not kept on disk)
        self._times: dict[bool, list[float]] = {True: [], False: []}
        self._lock = threading.Lock()
        self.choice: bool | None = None  # True: non-temporal stores; None: still timing
        if key is not None:
            self.choice = _stored(key)

    @classmethod
    def decided(cls, nontemporal: bool) -> "StoreTrial":
        """A choice made without timing (HPVM_CPU_NONTEMPORAL=on)."""
        trial = cls("", 0)
        trial.choice = nontemporal
        return trial

    def next_variant(self) -> bool:
        """The driver the next launch of this class should time (non-temporal first)."""
        if self.choice is not None:
            return self.choice
        return len(self._times[True]) <= len(self._times[False])

    def record(self, nontemporal: bool, seconds: float) -> None:
        with self._lock:
            if self.choice is not None:
                return
            self._times[nontemporal].append(seconds)
            if min(len(t) for t in self._times.values()) >= TRIAL_RUNS:
                best = {variant: min(times) for variant, times in self._times.items()}
                self.choice = best[True] < best[False]
                if self._key is not None:
                    cache.store_json(self._key, SUFFIX, {"nontemporal": self.choice})
                _log.info("%s: launches writing about 2**%d bytes use %s stores (%.3f ms "
                            "non-temporal, %.3f ms normal)", self._name, self._size_class,
                            "non-temporal" if self.choice else "normal", best[True] * 1e3,
                            best[False] * 1e3)


def _stored(key: str) -> bool | None:
    """The choice an earlier process kept on disk, or None."""
    found = cache.load_json(key, SUFFIX)
    choice = None if found is None else found.get("nontemporal")
    if not isinstance(choice, bool):
        return None
    stats.bump("store_choice_disk_hits")
    return choice
