"""Counters reported by hpvm.stats(): transfers, launches, compile-cache activity."""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_times: dict[str, float] = {}  # seconds per category, while a profile is open (support/profile.py)
# Counts not added in yet: bump_all only appends (atomic in CPython, a tenth of a microsecond
# where taking the lock and adding five counters took a microsecond of every replayed launch);
# readers add them in first, and so does a bump_all that finds FOLD_AT of them waiting.
_pending: list[dict[str, int]] = []
FOLD_AT = 4096


def bump(name: str, amount: int = 1) -> None:
    with _lock:
        _counts[name] += amount


def bump_all(counts: dict[str, int]) -> None:
    """Several counters at once (a replayed launch's); `counts` must not change afterwards."""
    _pending.append(counts)
    if len(_pending) >= FOLD_AT:
        with _lock:
            _fold()


_ONES: dict[str, dict[str, int]] = {}  # name -> {name: 1}, made once (bump_all keeps it)


def bump_one(name: str) -> None:
    """One more of `name`, without the lock (a hot path's bump)."""
    counts = _ONES.get(name)
    if counts is None:
        counts = _ONES.setdefault(name, {name: 1})
    bump_all(counts)


def _fold() -> None:
    """Add the pending counts in (the lock held). Hot paths append the same few dicts again and
    again (a replay's counts, made once per recording), so each distinct dict is added once, times
    the number of its appearances (counted in C): adding every appended dict key by key took about
    2 µs of each replayed launch."""
    batch = _pending[:]
    del _pending[:len(batch)]  # (bump_all appends without the lock: later ones stay)
    times = Counter(map(id, batch))
    for key, counts in dict(zip(map(id, batch), batch)).items():
        repeat = times[key]
        for name, amount in counts.items():
            _counts[name] += amount * repeat


def copied(direction: str, nbytes: int) -> None:
    """One copy between memories ("h2d", "d2h" or "d2d") of nbytes."""
    bump_all({f"{direction}_copies": 1, f"{direction}_bytes": nbytes})


def count(name: str) -> int:
    """One counter (0 when missing), without copying them all."""
    with _lock:
        _fold()
        return _counts.get(name, 0)


def add_time(category: str, seconds: float) -> None:
    with _lock:
        _times[category] = _times.get(category, 0.0) + seconds


def times() -> dict[str, float]:
    """Seconds per category (support/profile.py's CATEGORIES) recorded by profiles."""
    with _lock:
        return dict(_times)


def snapshot() -> dict[str, Any]:
    """A copy of every counter (missing ones read as 0)."""
    with _lock:
        _fold()
        return dict(_counts)


def take() -> tuple[dict[str, int], dict[str, float]]:
    """Every counter and every category's seconds, set back to zero in the same step (under the
    lock): what `stats(reset=True)` reads. A snapshot() then a reset() would lose the counts other
    threads made between the two, which neither call reports. Counts appended while this runs
    stay pending for the next reader."""
    with _lock:
        _fold()
        counts, spent = dict(_counts), dict(_times)
        _counts.clear()
        _times.clear()
    return counts, spent


def reset() -> None:
    with _lock:
        _pending.clear()
        _counts.clear()
        _times.clear()
