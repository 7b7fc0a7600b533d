"""Streaming throughput and per-item overhead (issue targets: >= 1.7x, < 50 us).

1. A 4-stage pipeline of balanced compute-bound stages (each a small grid doing a dependent chain
   of multiply-adds, below the size where one stage would use several cores by itself) against
   the same graph launched item by item with launch/wait, in one run.
2. push + pop of a trivial single-stage graph: the host's cost per item while items flow (32 pushed,
   then 32 popped), and the round-trip latency of a single item (push, then pop its result).
3. The demo's edge-detection pipeline (6 stages, grids of 256x192 that use several cores each): 32
   frames as a stream against the same frames launched one by one, repeated and interleaved, with
   the median of each.

    python benchmarks/streaming.py [--target cpu] [--items 24] [--work 200000] [--edge-reps 9]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
from _timing import per_call_us  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import InOut, Ptr, f32, i64  # noqa: E402
from hpvm_py.support.cores import default_threads  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))
import edge_detection as ed  # noqa: E402
from programs.stream_graphs import four_stages  # noqa: E402


@hpvm.leaf
def touch(buf: InOut[Ptr[f32]], buf_bytes: i64, v: f32) -> f32:
    buf[0] = v
    return v


@hpvm.graph
def trivial(buf: InOut[Ptr[f32]], buf_bytes: i64, v: f32) -> f32:
    return hpvm.node(touch, buf=hpvm.streaming(buf), buf_bytes=buf_bytes, v=hpvm.streaming(v)).out[0]


def items(count: int, n: int) -> list[list]:
    rng = np.random.default_rng(0)
    out = []
    for _ in range(count):
        bufs = [rng.random(n, dtype=np.float32)] + [np.zeros(n, np.float32) for _ in range(4)]
        args: list = []
        for b in bufs:
            args += [b, b.nbytes]
        out.append(args)
    return out


def edge_detection(target: str, reps: int, frames: int = 32, size: int = 256, graph=ed.pipeline,
                   extra=lambda: [], title: str = "edge detection") -> dict[str, float]:
    """`graph` takes the demo pipeline's arguments, `extra()` buffers (made per frame) added
    before w, h, theta. Returns the median seconds of "one by one" and "stream"."""
    rng = np.random.default_rng(0)
    gauss = ed.gaussian_filter()
    inputs = [ed.frame_buffers(ed.synthetic_frame(rng, size * 3 // 4, size)) for _ in range(frames)]
    extras = [[a for b in extra() for a in (b, b.nbytes)] for _ in inputs]

    def frame(i: int) -> list:
        args = ed.frame_args(inputs[i], gauss, 0.25)
        return args[:-3] + extras[i] + args[-3:]

    def one_by_one() -> None:
        for i in range(frames):
            hpvm.wait(hpvm.launch(graph, *frame(i)))

    def stream() -> None:
        handle = hpvm.launch(graph, stream=True)
        for i in range(frames):
            hpvm.push(handle, *frame(i))
        hpvm.wait(handle)

    def stage_by_stage() -> None:  # the same stream without whole items (rt/stream/items.py)
        kept = os.environ.get("HPVM_STREAM_ITEMS")
        os.environ["HPVM_STREAM_ITEMS"] = "0"
        try:
            stream()
        finally:
            if kept is None:
                del os.environ["HPVM_STREAM_ITEMS"]
            else:
                os.environ["HPVM_STREAM_ITEMS"] = kept

    runs = {"one by one": one_by_one, "stream": stream}
    if target == "gpu":  # streams of Triton leaves run whole items; the stage scheduler, for scale
        runs["stream, stage by stage"] = stage_by_stage
    times: dict[str, list[float]] = {name: [] for name in runs}
    with hpvm.runtime(target):
        for fn in runs.values():
            fn()  # warm-up: compilation
        for _ in range(reps):
            for name, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    for bufs in inputs:
        np.testing.assert_allclose(bufs[5], ed.reference(bufs[0], gauss, 0.25), atol=1e-6)
    base = statistics.median(times["one by one"])
    print(f"{title}, {frames} frames of {size}x{size * 3 // 4} on {target}, {default_threads()} "
          f"cores, median of {reps}:")
    for name, values in times.items():
        ratio = [a / b for a, b in zip(times["one by one"], values)]
        print(f"  {name:<22} {statistics.median(values) * 1e3:7.1f} ms  (speed-up over one by one: "
              f"{base / statistics.median(values):.2f}x, median of per-repetition ratios "
              f"{statistics.median(ratio):.2f}x)")
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--target", default="cpu")
    parser.add_argument("--items", type=int, default=24)
    parser.add_argument("--n", type=int, default=16, help="instances per stage")
    parser.add_argument("--work", type=int, default=200000, help="multiply-adds per instance")
    parser.add_argument("--edge-reps", type=int, default=9, help="repetitions of the edge-detection "
                        "comparison (0 skips it)")
    args = parser.parse_args()
    batch = items(args.items, args.n)
    with hpvm.runtime(args.target):
        compiled = hpvm.compile(four_stages)
        hpvm.wait(hpvm.launch(compiled, *batch[0], args.n, args.work))  # warm-up
        start = time.perf_counter()
        for item in batch:
            hpvm.wait(hpvm.launch(compiled, *item, args.n, args.work))
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        handle = hpvm.launch(compiled, stream=True, depth=4)
        for item in batch:
            hpvm.push(handle, *item, args.n, args.work)
        for _ in batch:
            hpvm.pop(handle)
        hpvm.wait(handle)
        streamed = time.perf_counter() - start

        buf = np.zeros(1, np.float32)
        handle = hpvm.launch(trivial, stream=True, depth=64)

        def round_trip() -> None:  # the latency of one item: push, then wait for its result
            hpvm.push(handle, buf, buf.nbytes, 1.0)
            hpvm.pop(handle)

        def flowing() -> None:  # the host's cost per item while items are in flight
            for _ in range(32):
                hpvm.push(handle, buf, buf.nbytes, 1.0)
            for _ in range(32):
                hpvm.pop(handle)

        latency = per_call_us(round_trip, calls=300)
        per_item = per_call_us(flowing, calls=40) / 32
        hpvm.wait(handle)
    speedup = sequential / streamed
    print(f"4-stage pipeline, {args.items} items on {args.target}: launch/wait {sequential * 1e3:.0f} ms, "
          f"stream {streamed * 1e3:.0f} ms, throughput {speedup:.2f}x (target >= 1.7x: "
          f"{'met' if speedup >= 1.7 else 'NOT met'})")
    print(f"push + pop of a trivial graph: {per_item:.1f} us per item in a flowing stream (target < 50 us: "
          f"{'met' if per_item < 50 else 'NOT met'}); one item's round trip {latency:.1f} us")
    if args.edge_reps > 0:
        edge_detection(args.target, args.edge_reps)


if __name__ == "__main__":
    main()
