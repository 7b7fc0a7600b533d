"""The end-to-end demo (`make demo`): every example on the default target, checked against NumPy,
then the edge-detection pipeline as a stream, timed against the same frames run one by one."""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import edge_detection  # noqa: E402
import histogram  # noqa: E402
import reduction  # noqa: E402
import saxpy  # noqa: E402
import sgemm  # noqa: E402
import stencil  # noqa: E402
import vadd  # noqa: E402
import hpvm_py as hpvm  # noqa: E402
from hpvm_py.rt.compiler import default_target  # noqa: E402


def timed(label: str, fn) -> None:
    start = time.perf_counter()
    fn()
    print(f"    ({label}: {time.perf_counter() - start:.2f} s including compilation)")


def stream_vs_sequential(target: str, frames: int = 32, size: int = 256) -> None:
    rng = np.random.default_rng(0)
    gauss = edge_detection.gaussian_filter()
    h, w = size * 3 // 4, size
    inputs = [edge_detection.frame_buffers(edge_detection.synthetic_frame(rng, h, w)) for _ in range(frames)]

    def one_by_one(frames: list) -> None:
        for bufs in frames:
            hpvm.wait(hpvm.launch(edge_detection.pipeline, *edge_detection.frame_args(bufs, gauss, 0.25)))

    def as_a_stream(frames: list) -> None:
        handle = hpvm.launch(edge_detection.pipeline, stream=True)
        for bufs in frames:
            hpvm.push(handle, *edge_detection.frame_args(bufs, gauss, 0.25))
        hpvm.wait(handle)

    with hpvm.runtime(target):
        one_by_one(inputs[:2])  # warm-up: compilation and first-use costs are not what is compared
        as_a_stream(inputs[:2])
        start = time.perf_counter()
        one_by_one(inputs)
        sequential = time.perf_counter() - start
        start = time.perf_counter()
        as_a_stream(inputs)
        streamed = time.perf_counter() - start
    for bufs in inputs:
        np.testing.assert_allclose(bufs[5], edge_detection.reference(bufs[0], gauss, 0.25), atol=1e-6)
    print(f"edge detection, {frames} frames of {w}x{h}: one by one {sequential * 1e3:.0f} ms, "
          f"as a stream {streamed * 1e3:.0f} ms ({sequential / streamed:.2f}x); all frames match NumPy")


def main() -> None:
    target = os.environ.get("HPVM_TARGET") or default_target()
    print(f"hpvm-py demo on target {target!r}")
    timed("vadd", lambda: vadd.main(target, 1 << 22))
    timed("saxpy", lambda: saxpy.main(target, 1 << 22))
    timed("stencil", lambda: stencil.main(target, 256, 256, 64))
    timed("sgemm", lambda: sgemm.main(target, 512, 512, 512))
    timed("histogram", lambda: histogram.main(target, 1 << 22))
    timed("reduction", lambda: reduction.main(target, 1 << 20))
    stream_vs_sequential(target)


if __name__ == "__main__":
    main()
