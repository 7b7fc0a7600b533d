"""GPU streaming (issue 9 section 4): the demo's edge-detection pipeline (examples/edge_detection.py,
6 stages) over 64 host frames as a stream, against the same frames launched one by one, in one run.
Every frame is a NumPy array: each launch copies it to the GPU and its results back, so the stream
overlaps one stage's copies with another stage's kernels (each stage on its own CUDA stream).

Run: python benchmarks/gpu/bench_stream.py [--targets gpu,nvptx] [--size 512] [--reps 3]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from streaming import edge_detection  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="gpu,nvptx")
    parser.add_argument("--size", type=int, default=512, help="frame width (height: 3/4 of it)")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    for target in args.targets.split(","):
        edge_detection(target, args.reps, frames=args.frames, size=args.size)


if __name__ == "__main__":
    main()
