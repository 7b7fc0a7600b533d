"""How many threads kernels use: HPVM_NUM_THREADS, else every core; and how a stream's stages
share them.

A stage of a stream runs its kernels while other stages run theirs. If each launch used every
core, the stages would oversubscribe the machine (and the fork-join pool's waits spin), and the
stream would be slower than launching the items one by one. So while k stages run kernels at
once, a launch from a stage thread gets 1/k of the threads (rounded down to a power of two);
with a share of one thread it runs on the stage's own thread.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from typing import Iterator


def default_threads() -> int:
    env = os.environ.get("HPVM_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1


_busy_stages = 0
_busy_lock = threading.Lock()
_local = threading.local()


@contextmanager
def stage_running() -> Iterator[None]:
    """Marks the calling stream stage as running a node until the block ends."""
    global _busy_stages
    with _busy_lock:
        _busy_stages += 1
    _local.stage = True
    try:
        yield
    finally:
        _local.stage = False
        with _busy_lock:
            _busy_stages -= 1


def thread_share(total: int) -> int:
    """The threads a launch from the calling thread may use, of `total`: all of them outside a
    stream's stages, else a power-of-two share of total / (stages running kernels now)."""
    if not getattr(_local, "stage", False):
        return total
    share = max(1, total // max(1, _busy_stages))
    return 1 << (share.bit_length() - 1)
