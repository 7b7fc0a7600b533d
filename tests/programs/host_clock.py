"""The device clock of the GPU collectives' waits (signals.now_ns: inline assembly, which Triton's
interpreter cannot run), replaced by the host's for kernels interpreted on CPU ranks:
`signals.now_ns = host_clock.now_ns` before a kernel runs (interpreted kernels look it up then)."""
import os
import time

import triton
import triton.language as tl


def _yield_then_now() -> int:
    os.sched_yield()  # a wait polls the clock: let the other ranks' processes run (2 cores, 4 ranks)
    return time.monotonic_ns()


@triton.jit
def now_ns(dummy):
    return tl.full([], _yield_then_now(), tl.int64)
