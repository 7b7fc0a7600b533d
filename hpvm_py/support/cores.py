"""How many threads kernels use: HPVM_NUM_THREADS, else every core this process may run on; and
which CPU this is (decisions timed on one machine are kept for that machine only)."""
from __future__ import annotations

import functools
import os
import platform

from ..errors import LaunchError
from . import settings

# the most threads HPVM_NUM_THREADS may ask for: more than any machine's cores, and each is a
# native thread with its stack, started at the first launch (100000 took minutes to start and
# 10**11 filled the memory with thread objects before the first started)
MAX_THREADS = 4096


def default_threads() -> int:
    """HPVM_NUM_THREADS, else the cores this process may run on. A value that is not a positive
    number of at most MAX_THREADS is refused (it was ignored, so a typo silently ran on every
    core)."""
    env = settings.NUM_THREADS.text()
    if env is not None:
        if not (settings.is_decimal(env) and 0 < int(env) <= MAX_THREADS):
            raise LaunchError(f"{settings.NUM_THREADS.name}={env!r}: expected a positive number of "
                              f"threads, at most {MAX_THREADS}, or unset for every core this "
                              "process may run on")
        return int(env)
    try:  # the cores of this process's CPU affinity (taskset, cgroup cpusets), not the machine's
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


@functools.cache
def cpu_model() -> str:
    """The CPU's model name (/proc/cpuinfo's on Linux), else what platform knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"
