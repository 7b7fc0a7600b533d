"""Which algorithm runs a collective: by where the ranks are, the collective and its size.

- Ranks on more than one host (or HPVM_COMM_FORCE_REMOTE=1, which gives every rank a host of its
  own): "remote", the launcher's engine (remote.py).
- all_reduce on one host: "one_shot" up to the threshold (one barrier less, each rank reads
  world x n bytes), "two_shot" above it (each rank reads about 2n bytes). The threshold is
  HPVM_COMM_ONESHOT_BYTES, else the measured default below.
- Everything else on one host: "direct" (local.py has one algorithm for each).

The decision must be the same on every rank: it depends only on the world (the same everywhere)
and on sizes that the ranks have already agreed on.
"""
from __future__ import annotations

import os

from ..errors import DistributedError

# Measured with benchmarks/collectives.py on 2 CPU ranks of the 2-core development machine, f32:
# one-shot was faster up to 512 KiB in every run (docs/performance.md).
ONESHOT_BYTES = 512 << 10


def oneshot_threshold() -> int:
    text = os.environ.get("HPVM_COMM_ONESHOT_BYTES")
    if not text:
        return ONESHOT_BYTES
    if not text.isdigit():
        raise DistributedError(f"HPVM_COMM_ONESHOT_BYTES={text!r} must be a number of bytes")
    return int(text)


def choose(single_host: bool, kind: str, nbytes: int) -> str:
    """"remote", or the heap algorithm; nbytes: the size argument of the collective's first buffer."""
    if not single_host:
        return "remote"
    if kind == "all_reduce":
        return "one_shot" if nbytes <= oneshot_threshold() else "two_shot"
    return "direct"
