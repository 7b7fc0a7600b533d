"""Host overhead of launching an already compiled 3-node graph (issue target: under 20 us), and of
a one-leaf graph launched with the same buffers and with other buffers each time.

The graph has three single-instance leaves chained by edges; each does almost nothing, so the
time is the runtime's: argument checks, plan walk, value delivery, kernel calls, wait.

    python benchmarks/launch_overhead.py [--target cpu] [--profile] [--cpu-time]

--profile adds a row with `hpvm.profile()` open (events recorded in memory, no file written):
the cost of recording a launch, its kernels and its cache hit (docs/profiling.md). --cpu-time
times by the process's CPU time instead of the wall clock: steadier where other jobs share the
cores (the cpu target's workers spinning count too).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))

import numpy as np  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py.rt import replay  # noqa: E402
from _timing import per_call_us  # noqa: E402
from hpvm_py import InOut, Ptr, f32, i64  # noqa: E402
from programs.rebind_graphs import update  # noqa: E402


@hpvm.leaf
def first(buf: InOut[Ptr[f32]], buf_bytes: i64, k: f32) -> f32:
    buf[0] = buf[0] + k
    return buf[0]


@hpvm.leaf
def middle(v: f32, buf: InOut[Ptr[f32]], buf_bytes: i64) -> f32:
    buf[1] = v
    return v * 2.0


@hpvm.leaf
def last(v: f32, buf: InOut[Ptr[f32]], buf_bytes: i64) -> f32:
    buf[2] = v
    return v + 1.0


def other_buffers(clock) -> dict[str, float]:  # noqa: ANN001
    """A one-leaf graph launched with the same buffers; with a ring of 9 output buffers (each
    buffer's recording kept: replays); and with another of more output buffers than the recordings
    kept each launch: rebound (the recorded launch copied and pointed at it) and with
    HPVM_REBIND=0."""
    x = np.ones(256, np.float32)
    ys = [np.zeros(256, np.float32) for _ in range(replay._KEPT + 1)]
    turn = iter(range(10**9))

    def another(ring: int = len(ys)) -> None:
        hpvm.wait(hpvm.launch(update, x, x.nbytes, ys[next(turn) % ring], 1024, 256, 1.0))

    rows = {"same buffers (replay)": per_call_us(
        lambda: hpvm.wait(hpvm.launch(update, x, x.nbytes, ys[0], 1024, 256, 1.0)), clock=clock),
        "a ring of 9 buffers (each replays)": per_call_us(lambda: another(9), clock=clock),
        "another buffer each launch (rebound)": per_call_us(another, clock=clock)}
    os.environ["HPVM_REBIND"] = "0"
    try:
        rows["another buffer each launch, HPVM_REBIND=0"] = per_call_us(another, clock=clock)
    finally:
        del os.environ["HPVM_REBIND"]
    return rows


@hpvm.graph
def three(buf: InOut[Ptr[f32]], buf_bytes: i64, k: f32) -> f32:
    a = hpvm.node(first, buf=buf, buf_bytes=buf_bytes, k=k)
    b = hpvm.node(middle, v=a.out[0], buf=buf, buf_bytes=buf_bytes)
    c = hpvm.node(last, v=b.out[0], buf=buf, buf_bytes=buf_bytes)
    return c.out[0]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--profile", action="store_true", help="also time it inside hpvm.profile()")
    parser.add_argument("--cpu-time", action="store_true", help="time by CPU time, not wall time")
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    buf = np.zeros(4, np.float32)
    with hpvm.runtime(args.target):
        compiled = hpvm.compile(three)
        expected = hpvm.wait(hpvm.launch(compiled, buf, buf.nbytes, 1.0))
        assert expected == buf[2] + 1.0
        us = per_call_us(lambda: hpvm.wait(hpvm.launch(compiled, buf, buf.nbytes, 1.0)), clock=clock)
        profiled = None
        if args.profile:
            with hpvm.profile():
                profiled = per_call_us(lambda: hpvm.wait(hpvm.launch(compiled, buf, buf.nbytes, 1.0)),
                                       clock=clock)
        rows = other_buffers(clock)
    print(f"launch + wait of a compiled 3-node graph on {args.target}: {us:.1f} us "
          f"(target < 20 us: {'met' if us < 20 else 'NOT met'})")
    for name, value in rows.items():
        print(f"launch + wait of a one-leaf graph on {args.target}, {name}: {value:.1f} us")
    if profiled is not None:
        print(f"the same inside hpvm.profile() on {args.target}: {profiled:.1f} us")


if __name__ == "__main__":
    main()
