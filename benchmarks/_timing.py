"""Timing helpers shared by the benchmarks: warm-up, then the median of repeated runs."""
from __future__ import annotations

import statistics
import time
from typing import Callable


def median_ms(fn: Callable[[], object], repeat: int = 7, warmup: int = 1) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def per_call_us(fn: Callable[[], object], calls: int = 2000, repeat: int = 5,
                clock: Callable[[], float] = time.perf_counter,
                drain: Callable[[], object] | None = None) -> float:
    """Median over `repeat` batches of the mean time of one call, in microseconds (clock:
    time.process_time counts this process's CPU time only, steady on a machine others share).
    drain (torch.cuda.synchronize) runs before each batch and after the last, untimed: a batch of
    tiny kernels then never fills the GPU's queue, and the host never waits for the GPU."""
    fn()
    batches = []
    for _ in range(repeat):
        if drain is not None:
            drain()
        start = clock()
        for _ in range(calls):
            fn()
        batches.append((clock() - start) / calls)
    if drain is not None:
        drain()
    return statistics.median(batches) * 1e6
