"""Where a streaming GPU item's host time goes: the inclusive wall time per call of the parts of
rt/stream/items.py's whole items and of rt/stream/stage_launch.py's stage items (each wrapped with a timer, no
cProfile), for the demo pipeline and its parallel-max variant (bench_stream.py), streamed and
launched one by one, twice each. (`gpu` streams run whole items; HPVM_STREAM_ITEMS=0 times the
stage items.)

Run: python benchmarks/gpu/stream_parts.py [--size 512] [--frames 64] [--target gpu]
"""
from __future__ import annotations

import argparse
import collections
import functools
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_stream  # noqa: E402
from streaming import ed  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py.device import outputs, staging, streams  # noqa: E402
from hpvm_py.backends.triton import prepared  # noqa: E402
from hpvm_py.rt import executor, tracker  # noqa: E402
from hpvm_py.rt.stream import items, stage_launch, stages  # noqa: E402

TOTALS: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()
PARTS = [(stage_launch.StageLauncher, "start"), (stage_launch.StageLauncher, "_packed_for"),
         (stage_launch.DeviceStageRun, "finish"), (executor.Executor, "leaf_call"),
         (executor.Executor, "buffer_arg"), (tracker.MemoryTracker, "acquire"),
         (tracker.MemoryTracker, "finish_launch"), (prepared.TritonLaunch, "issue"),
         (prepared.TritonLaunch, "set_buffer"), (outputs.DeviceOutputs, "fetch"),
         (staging.StagedCopies, "to_device"), (staging.StagedCopies, "to_host"),
         (staging.StagedCopies, "complete"), (streams.StageStream, "record"),
         (streams.StageStream, "use"), (streams.StageStream, "wait"), (streams.ItemEvent, "done"),
         (stages.Stage, "arguments"), (stages.Stage, "publish"), (stages.SchedulerThread, "_poll"),
         (items.ItemRunner, "_item"), (items.ItemRunner, "_start"),
         (items.ItemRunner, "_complete_oldest"), (items.ItemSlot, "build"),
         (items.ItemSlot, "issue"), (items.ItemSlot, "_copy_in"), (items.ItemSlot, "complete")]


def timed(owner: type, name: str) -> None:
    fn = owner.__dict__[name]
    static = isinstance(fn, staticmethod)
    inner: Callable[..., Any] = fn.__func__ if static else fn
    label = f"{owner.__name__}.{name}"

    @functools.wraps(inner)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            TOTALS[label] += time.perf_counter() - start
            CALLS[label] += 1

    setattr(owner, name, staticmethod(wrapper) if static else wrapper)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=512, help="frame width (height: 3/4 of it)")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--target", default="gpu")
    args = parser.parse_args()
    for owner, name in PARTS + [(executor.Executor, "extents_of")]:
        timed(owner, name)
    rng = np.random.default_rng(1)
    gauss = ed.gaussian_filter()
    inputs = [ed.frame_buffers(ed.synthetic_frame(rng, args.size * 3 // 4, args.size))
              for _ in range(args.frames)]
    for graph, extra in ((ed.pipeline, lambda: []),
                         (bench_stream.parallel_max, lambda: [np.zeros(1, np.float32)])):
        extras = [[a for b in extra() for a in (b, b.nbytes)] for _ in inputs]

        def frame(i: int, extras: list = extras) -> list:
            values = ed.frame_args(inputs[i], gauss, 0.25)
            return values[:-3] + extras[i] + values[-3:]

        def stream(graph: Any = graph, frame: Callable = frame) -> None:
            handle = hpvm.launch(graph, stream=True)
            for i in range(args.frames):
                hpvm.push(handle, *frame(i))
            hpvm.wait(handle)

        def one_by_one(graph: Any = graph, frame: Callable = frame) -> None:
            for i in range(args.frames):
                hpvm.wait(hpvm.launch(graph, *frame(i)))

        with hpvm.runtime(args.target):
            stream()
            one_by_one()  # warm-up: compilation, autotuning
            for label, run in (("stream", stream), ("one by one", one_by_one)) * 2:
                TOTALS.clear()
                CALLS.clear()
                start = time.perf_counter()
                run()
                total = time.perf_counter() - start
                print(f"== {graph.__name__}, {label}: {total * 1e3:.1f} ms "
                      f"({total / args.frames * 1e3:.2f} ms per frame)")
                for part in sorted(TOTALS, key=lambda k: -TOTALS[k]):
                    print(f"   {part:<34} {CALLS[part]:6d} calls {TOTALS[part] * 1e3:8.1f} ms "
                          f"{TOTALS[part] / CALLS[part] * 1e6:8.1f} us per call")


if __name__ == "__main__":
    main()
