"""How many threads kernels use: HPVM_NUM_THREADS, else every core this process may run on."""
from __future__ import annotations

import os

from . import settings


def default_threads() -> int:
    env = settings.NUM_THREADS.text()
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    try:  # the cores of this process's CPU affinity (taskset, cgroup cpusets), not the machine's
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1
