"""Polling with a deadline: every cross-rank wait goes through here, so none can hang."""
from __future__ import annotations

import os
import time
from typing import Callable

from ..errors import DistributedError
from ..support import settings


class RanksMissing(Exception):
    """A wait ran out of time; `ranks` are the ranks still missing (empty when unknown)."""

    def __init__(self, ranks: list[int], waited: float):
        super().__init__(f"ranks {ranks} missing after {waited:.1f} s")
        self.ranks = ranks
        self.waited = waited


def timeout_from_env() -> float:
    """HPVM_COMM_TIMEOUT in seconds, else 60."""
    return settings.positive_seconds(settings.COMM_TIMEOUT, DistributedError)


def wait_until(missing: Callable[[], list[int]], timeout: float) -> None:
    """Poll `missing()` (the ranks not there yet) until it is empty; RanksMissing after `timeout`.

    Yields briefly (sched_yield: `time.sleep(0)` costs tens of microseconds on Linux), then sleeps
    with a growing pause (ranks often share cores with each other), capped low: an oversleeping
    waiter adds its whole pause to the collective's latency.
    """
    start = time.monotonic()
    pause = 0.0
    polls = 0
    while True:
        behind = missing()
        if not behind:
            return
        waited = time.monotonic() - start
        if waited > timeout:
            raise RanksMissing(behind, waited)
        polls += 1
        if polls > 20:
            pause = min(2e-4, max(1e-5, pause * 2))
            time.sleep(pause)
        else:
            os.sched_yield()
