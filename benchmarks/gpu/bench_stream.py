"""GPU streaming (issue 9 section 4): the demo's edge-detection pipeline (examples/edge_detection.py,
6 stages) over 64 host frames as a stream, against the same frames launched one by one, in one run.
Every frame is a NumPy array: each launch copies it to the GPU and its results back, so the stream
overlaps one stage's copies with another stage's kernels (each stage on its own CUDA stream).

The demo's max-gradient stage is one instance looping over the whole frame: on `nvptx` it is one
GPU thread and takes most of a frame's time, which bounds any pipeline; the `gpu` target spreads
the loop over one program's lanes. Its time alone (a graph of that one node on a frame already on
the GPU, launched again and again) gives the bound: a stream of N frames takes at least N times
it. The same pipeline with that stage written as a grid of atomic maxima (and a single-instance
stage that reads the result) is measured too.

Run: python benchmarks/gpu/bench_stream.py [--targets gpu,nvptx] [--size 512] [--reps 3]
         [--profile FILE]  (then one more stream of the demo per target, its scheduler thread
                            under cProfile: the top functions go to FILE)
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming import ed, edge_detection  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64  # noqa: E402


@hpvm.leaf
def gradient_max(ready: i32, grad: In[Ptr[f32]], grad_bytes: i64, best: InOut[Ptr[f32]],
                 best_bytes: i64, w: i64) -> i32:
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    hpvm.atomic_max(best, 0, grad[y * w + x])
    return ready


@hpvm.leaf
def read_best(ready: i32, best: In[Ptr[f32]], best_bytes: i64) -> f32:
    return best[0]


@hpvm.graph
def parallel_max(img: In[Ptr[f32]], img_bytes: i64, gauss: In[Ptr[f32]], gauss_bytes: i64,
                 smooth: Out[Ptr[f32]], smooth_bytes: i64, lap: Out[Ptr[f32]], lap_bytes: i64,
                 zc: Out[Ptr[f32]], zc_bytes: i64, grad: Out[Ptr[f32]], grad_bytes: i64,
                 edges: Out[Ptr[f32]], edges_bytes: i64, best: InOut[Ptr[f32]], best_bytes: i64,
                 w: i64, h: i64, theta: f32):
    s = hpvm.streaming
    grid = (w, h)
    gs = hpvm.node(ed.gaussian_smoothing, grid=grid, img=s(img), img_bytes=img_bytes, gauss=gauss,
                   gauss_bytes=gauss_bytes, smooth=s(smooth), smooth_bytes=smooth_bytes, w=w, h=h)
    le = hpvm.node(ed.laplacian, grid=grid, ready=s(hpvm.all_to_all(gs.out[0])), smooth=s(smooth),
                   smooth_bytes=smooth_bytes, lap=s(lap), lap_bytes=lap_bytes, w=w, h=h)
    cz = hpvm.node(ed.zero_crossings, grid=grid, ready=s(hpvm.all_to_all(le.out[0])), lap=s(lap),
                   lap_bytes=lap_bytes, zc=s(zc), zc_bytes=zc_bytes, w=w, h=h)
    cg = hpvm.node(ed.gradient, grid=grid, ready=s(hpvm.all_to_all(gs.out[1])), smooth=s(smooth),
                   smooth_bytes=smooth_bytes, grad=s(grad), grad_bytes=grad_bytes, w=w, h=h)
    gm = hpvm.node(gradient_max, grid=grid, ready=s(hpvm.all_to_all(cg.out[0])), grad=s(grad),
                   grad_bytes=grad_bytes, best=s(best), best_bytes=best_bytes, w=w)
    mg = hpvm.node(read_best, ready=s(hpvm.all_to_all(gm.out[0])), best=s(best), best_bytes=best_bytes)
    hpvm.node(ed.reject_zero_crossings, grid=grid, ready=s(hpvm.all_to_all(cz.out[0])),
              max_grad=s(hpvm.all_to_all(mg.out[0])), zc=s(zc), zc_bytes=zc_bytes, grad=s(grad),
              grad_bytes=grad_bytes, edges=s(edges), edges_bytes=edges_bytes, w=w, theta=theta)


@hpvm.graph
def max_gradient_alone(ready: i32, grad: In[Ptr[f32]], grad_bytes: i64, w: i64, h: i64) -> f32:
    return hpvm.node(ed.max_gradient, ready=ready, grad=grad, grad_bytes=grad_bytes, w=w, h=h).out[0]


def max_gradient_seconds(target: str, size: int, reps: int = 15) -> float:
    """The demo's max-gradient stage alone on one frame: median seconds of a launch that waits
    for its result (the frame stays on the GPU: a tracked CUDA tensor)."""
    import torch

    h, w = size * 3 // 4, size
    grad = torch.rand(w * h, device="cuda")
    with hpvm.runtime(target):
        hpvm.track_memory(grad)
        times = []
        for _ in range(reps + 2):
            torch.cuda.synchronize()
            start = time.perf_counter()
            best = hpvm.wait(hpvm.launch(max_gradient_alone, 1, grad, w * h * 4, w, h))
            times.append(time.perf_counter() - start)
        assert best == grad.max().item()
        hpvm.untrack_memory(grad)
    return statistics.median(times[2:])


def profile_stream(target: str, frames: int, size: int, out: io.TextIOBase, graph=ed.pipeline,
                   extra=lambda: []) -> None:
    """One stream of `graph` (the demo's arguments, `extra()` buffers before w, h, theta) with its
    scheduler thread under cProfile (after a warm-up)."""
    from hpvm_py.rt.stream import stages

    rng = np.random.default_rng(1)
    gauss = ed.gaussian_filter()
    inputs = [ed.frame_buffers(ed.synthetic_frame(rng, size * 3 // 4, size)) for _ in range(frames)]
    profile = cProfile.Profile()
    run = stages.SchedulerThread.__call__

    def profiled(self: stages.SchedulerThread) -> None:
        profile.enable()
        try:
            run(self)
        finally:
            profile.disable()

    extras = [[a for b in extra() for a in (b, b.nbytes)] for _ in inputs]

    def stream() -> None:
        handle = hpvm.launch(graph, stream=True)
        for bufs, more in zip(inputs, extras):
            args = ed.frame_args(bufs, gauss, 0.25)
            hpvm.push(handle, *args[:-3], *more, *args[-3:])
        hpvm.wait(handle)

    with hpvm.runtime(target):
        stream()
        stages.SchedulerThread.__call__ = profiled
        try:
            stream()
        finally:
            stages.SchedulerThread.__call__ = run
    print(f"== {target}, {graph.__name__}: one stream of {frames} frames, profiled while its "
          "scheduler thread runs (Python 3.12's cProfile sees every thread)", file=out)
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("cumulative").print_stats("hpvm_py", 40)
    stats.sort_stats("tottime").print_stats(30)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="gpu,nvptx")
    parser.add_argument("--size", type=int, default=512, help="frame width (height: 3/4 of it)")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--profile", help="write a profile of one demo stream per target here")
    args = parser.parse_args()
    for target in args.targets.split(","):
        times = edge_detection(target, args.reps, frames=args.frames, size=args.size)
        alone = max_gradient_seconds(target, args.size)
        print(f"  the max-gradient stage alone: {alone * 1e3:.2f} ms per frame; a stream of "
              f"{args.frames} frames takes at least {args.frames * alone * 1e3:.0f} ms: at most "
              f"{times['one by one'] / (args.frames * alone):.2f}x over one by one")
        edge_detection(target, args.reps, frames=args.frames, size=args.size, graph=parallel_max,
                       extra=lambda: [np.zeros(1, np.float32)], title="edge detection, parallel max")
    if args.profile:
        with open(args.profile, "w") as out:
            for target in args.targets.split(","):
                profile_stream(target, args.frames, args.size, out)
                profile_stream(target, args.frames, args.size, out, graph=parallel_max,
                               extra=lambda: [np.zeros(1, np.float32)])


if __name__ == "__main__":
    main()
