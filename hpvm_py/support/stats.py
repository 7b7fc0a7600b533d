"""Counters reported by hpvm.stats(): transfers, launches, compile-cache activity."""
from __future__ import annotations

import threading
from collections import Counter
from typing import Any

_lock = threading.Lock()
_counts: Counter[str] = Counter()
_times: dict[str, float] = {}  # seconds per category, while a profile is open (support/profile.py)


def bump(name: str, amount: int = 1) -> None:
    with _lock:
        _counts[name] += amount


def bump_all(counts: dict[str, int]) -> None:
    """Several counters under one lock (a replayed launch's)."""
    with _lock:
        for name, amount in counts.items():
            _counts[name] += amount


def copied(direction: str, nbytes: int) -> None:
    """One copy between memories ("h2d", "d2h" or "d2d") of nbytes."""
    bump_all({f"{direction}_copies": 1, f"{direction}_bytes": nbytes})


def count(name: str) -> int:
    """One counter (0 when missing), without copying them all."""
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
        return dict(_counts)


def reset() -> None:
    with _lock:
        _counts.clear()
        _times.clear()
