"""How many threads kernels use: HPVM_NUM_THREADS, else every core."""
from __future__ import annotations

import os


def default_threads() -> int:
    env = os.environ.get("HPVM_NUM_THREADS")
    if env and env.isdigit() and int(env) > 0:
        return int(env)
    return os.cpu_count() or 1
