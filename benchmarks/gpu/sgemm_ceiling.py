"""sgemm 4096^3 fp32: cuBLAS, the generated Parboil leaf and hand-written register-blocked CUDA,
alternated in one process (issue 25, item 4: 0.9x cuBLAS from the Parboil leaf).

The hand-written kernels (sgemm_hand.cu, built with nvcc when it is on PATH) are what an nvptx
lowering of the leaf's tile loop with register blocking would emit at best: 128 x 128 tiles, 8 x 8
outputs a thread, double-buffered shared slices of A and B. Rows: milliseconds (the best of the
rounds' medians of triton.testing.do_bench), TFLOP/s and the ratio to cuBLAS of the same round.
Every kernel's result is checked against a float64 product first. TF32 stays off.

Run: python benchmarks/gpu/sgemm_ceiling.py [--size N] [--rounds R]   (needs CUDA)
"""
from __future__ import annotations

import argparse
import contextlib
import ctypes
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable

import torch
from triton.testing import do_bench

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "examples"))
import hpvm_py as hpvm  # noqa: E402
import sgemm  # noqa: E402

HAND = {0: "hand CUDA, 128x128 tiles, k slices of 8", 1: "hand CUDA, 128x128 tiles, k slices of 16",
        2: "hand CUDA, k slices of 16, one block an SM"}


def hand_kernels(tmp: Path) -> Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None] | None:
    """sgemm_hand.cu as a library: launch(variant, A, B, C), or None without nvcc."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("hand-written CUDA: skipped (no nvcc on PATH)")
        return None
    major, minor = torch.cuda.get_device_capability()
    lib_path = tmp / "sgemm_hand.so"
    subprocess.run([nvcc, "-O3", f"-arch=sm_{major}{minor}", "-shared", "-Xcompiler", "-fPIC",
                    "-o", str(lib_path), str(HERE / "sgemm_hand.cu")], check=True)
    lib = ctypes.CDLL(str(lib_path))
    lib.sgemm_hand.restype = ctypes.c_int
    lib.sgemm_hand.argtypes = [ctypes.c_int] + [ctypes.c_void_p] * 3 + [ctypes.c_int] * 3

    def launch(variant: int, A: torch.Tensor, B: torch.Tensor, C: torch.Tensor) -> None:
        (m, k), n = A.shape, B.shape[1]
        code = lib.sgemm_hand(variant, A.data_ptr(), B.data_ptr(), C.data_ptr(), m, n, k)
        if code:
            raise RuntimeError(f"sgemm_hand variant {variant}: error {code}")
    return launch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("sgemm_ceiling: needs a CUDA GPU")
    torch.backends.cuda.matmul.allow_tf32 = False
    n = opts.size
    A, B = torch.randn(n, n, device="cuda"), torch.randn(n, n, device="cuda")
    C = torch.zeros(n, n, device="cuda")
    ref = (A.double() @ B.double()).float()
    args = (A, A.numel() * 4, B, B.numel() * 4, C, C.numel() * 4, n, n, n, 1.0, 0.0)
    # (name, the runtime's target or None, one call)
    rows: list[tuple[str, str | None, Callable[[], object]]] = [
        ("cuBLAS fp32", None, lambda: torch.matmul(A, B, out=C))]
    rows += [(f"generated Parboil leaf, {target} (hpvm.launch)", target,
              lambda: hpvm.wait(hpvm.launch(sgemm.root, *args))) for target in ("gpu", "nvptx")]
    print(torch.cuda.get_device_name(), f"sgemm {n}^3 fp32, torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        launch = hand_kernels(Path(tmp))
        if launch is not None:
            rows += [(name, None, lambda v=variant: launch(v, A, B, C)) for variant, name in HAND.items()]
        for name, target, run in rows:
            C.zero_()
            with hpvm.runtime(target) if target else contextlib.nullcontext():
                run()
                torch.cuda.synchronize()
            err = float((C - ref).norm() / ref.norm())
            print(f"  {name}: relative error {err:.1e} against float64", flush=True)
            assert err < 1e-5, (name, err)
        timed: dict[str, list[float]] = {name: [] for name, _, _ in rows}
        for _ in range(opts.rounds):
            for name, target, run in rows:
                with hpvm.runtime(target) if target else contextlib.nullcontext():
                    timed[name].append(do_bench(run, return_mode="median"))
    flops = 2 * n ** 3
    cublas = timed["cuBLAS fp32"]
    for name, times in timed.items():
        ratios = [c / t for c, t in zip(cublas, times)]
        print(f"{name:<48} {min(times):8.3f} ms {flops / min(times) / 1e9:6.1f} TFLOP/s  "
              f"{min(ratios):.3f}-{max(ratios):.3f}x cuBLAS by round", flush=True)


if __name__ == "__main__":
    main()
