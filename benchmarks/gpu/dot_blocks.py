"""tl.dot block shapes for the HPVM suite's sgemm on this GPU: the resident time of its launch
(median of 20, the gpu target's Triton lowering, autotuning off) in each DotConfig, and torch's
fp32 `a @ b` (cuBLAS) on the same operands beside them. Every result is checked with Parboil's
tolerance. `--parboil N`: instead, examples/sgemm.py's scratch-tile leaf (Parboil's CUDA form) on
N x N x N operands through `hpvm.launch`, with the larger shapes a big output can use, then as the
autotuner chooses, checked against float64 (HPVM_DOT_PRECISION applies). Needs a CUDA GPU.

    python benchmarks/gpu/dot_blocks.py [--size standard|small] [--parboil 4096]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]
os.environ.setdefault("HPVM_GPU_LOWERING", "triton")
os.environ["HPVM_AUTOTUNE"] = "0"  # each shape as given, not the tuner's choice

import torch  # noqa: E402

from hpvm_py.backends.triton import kernel as triton_kernel  # noqa: E402
from hpvm_py.backends.triton.kernel import DotConfig  # noqa: E402
from hpvm_suite import sgemm  # noqa: E402
from hpvm_suite._common import Passes  # noqa: E402

SHAPES = [(128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 64, 32, 4, 3), (64, 32, 32, 4, 3),
          (64, 64, 32, 4, 4), (64, 64, 16, 4, 4), (32, 64, 32, 4, 3), (64, 32, 32, 2, 3),
          (32, 32, 32, 2, 3), (64, 64, 64, 4, 3), (128, 64, 16, 4, 4), (64, 128, 32, 4, 3)]
LARGE = [(128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 128, 16, 8, 4),
         (128, 128, 32, 4, 3), (128, 128, 64, 8, 2), (256, 64, 32, 8, 3), (64, 256, 32, 8, 3),
         (128, 64, 32, 4, 3), (64, 64, 32, 4, 3), (128, 128, 32, 16, 3), (64, 128, 32, 4, 4)]


def _cublas_ms(a: "torch.Tensor", b: "torch.Tensor") -> float:
    times = []
    for _ in range(30):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        a @ b
        end.record()
        end.synchronize()
        times.append(begin.elapsed_time(end))
    return statistics.median(times)


def parboil(size: int) -> int:
    """examples/sgemm.py's leaf on size^3 operands in each LARGE shape, against cuBLAS."""
    import hpvm_py as hpvm  # noqa: PLC0415 - after the settings above
    import sgemm as example  # noqa: PLC0415 - examples/sgemm.py

    torch.backends.cuda.matmul.allow_tf32 = False
    a, b = torch.randn(size, size, device="cuda"), torch.randn(size, size, device="cuda")
    c = torch.zeros(size, size, device="cuda")
    ref = (a.double() @ b.double()).float()
    args = (a, a.numel() * 4, b, b.numel() * 4, c, c.numel() * 4, size, size, size, 1.0, 0.0)
    flops = 2 * size ** 3
    print(f"# examples/sgemm.py {size}^3 on {torch.cuda.get_device_name()}")
    failed = False
    chosen = triton_kernel.dot_config

    def timed(label: str) -> None:
        nonlocal failed
        with hpvm.runtime("gpu"):  # (a runtime of its own: no replay of another shape's launch)
            times = []
            for _ in range(12):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                hpvm.wait(hpvm.launch(example.root, *args))
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end))
        err = float((c - ref).norm() / ref.norm())
        failed |= not err < 1e-5
        ms = statistics.median(times[2:])
        print(f"{label}: {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s, error {err:.1e}", flush=True)

    for bm, bn, bk, warps, stages in LARGE:
        config = DotConfig(bm, bn, bk, group=8, warps=warps, stages=stages)
        triton_kernel.dot_config = lambda rows, cols, sms, config=config: config
        timed(f"{bm:4d} x {bn:<4d} bk {bk:3d} warps {warps:2d} stages {stages}")
    triton_kernel.dot_config = chosen
    os.environ["HPVM_AUTOTUNE"] = "1"  # what a user's launch gets: the tuner's choice
    timed("hpvm.launch, autotuned")
    cublas = _cublas_ms(a, b)
    print(f"torch a @ b (cuBLAS, fp32): {cublas:.3f} ms {flops / cublas / 1e9:.1f} TFLOP/s")
    return 1 if failed else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="standard", choices=sorted(sgemm.SIZES))
    parser.add_argument("--parboil", type=int, metavar="N",
                        help="examples/sgemm.py on N x N x N operands instead")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("dot_blocks: needs a CUDA GPU")
        return 2
    if args.parboil:
        return parboil(args.parboil)
    inputs = sgemm.make_inputs(**sgemm.SIZES[args.size])
    expected = sgemm.reference(inputs)
    print(f"# sgemm {args.size} on {torch.cuda.get_device_name()}: m x k x n = "
          f"{inputs['m']} x {inputs['k']} x {inputs['n']}")
    failed = False
    for bm, bn, bk, warps, stages in SHAPES:
        config = DotConfig(bm, bn, bk, group=8, warps=warps, stages=stages)
        triton_kernel.dot_config = lambda rows, cols, sms, config=config: config
        passes = Passes(20, torch.cuda.synchronize)
        problem = sgemm.check(sgemm.run(inputs, "gpu", passes), expected)
        failed |= problem is not None
        print(f"{bm:4d} x {bn:<4d} bk {bk:3d} warps {warps} stages {stages}: "
              f"{passes.median() * 1e3:.3f} ms {'ok' if problem is None else problem}", flush=True)
    a, b = (torch.from_numpy(inputs[name]).cuda() for name in ("a", "b"))
    print(f"torch a @ b (cuBLAS, fp32): {_cublas_ms(a, b):.3f} ms")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
