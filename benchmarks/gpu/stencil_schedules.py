"""The 7-point stencil's schedules against a copy of its grid (issue 25, item 3: 0.9 of the copy).

Rows, each as time, effective GB/s (8 bytes a point: one read, one write) and fraction of a torch
copy of the grid timed in the same process:
- the per-point leaf of examples/stencil.py through `hpvm.launch`, on `gpu` and `nvptx`;
- the z-walking leaves of tests/programs/stencil_schedules.py on `nvptx` (2.5-D blocking through a
  shared tile; a walk that loads its in-plane neighbours itself);
- hand-written CUDA schedules (stencil_schedules.cu, built with nvcc when it is on PATH), with
  their own copy: per point, four points a thread with 16-byte loads, and z walks (also of four
  points a thread, x neighbours by warp shuffles: `march4`).
Every result is checked against NumPy (the CUDA ones against their per-point kernel). Each
target runs its own lowering (`HPVM_GPU_LOWERING=off` unless set): under the default `auto`, a
leaf placed on `nvptx` runs Triton's kernel whenever that is the faster one.

Run: python benchmarks/gpu/stencil_schedules.py [--size NX NY NZ]   (needs CUDA)
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from triton.testing import do_bench

HERE = Path(__file__).resolve().parent
os.environ.setdefault("HPVM_GPU_LOWERING", "off")  # each row its target's own kernel
sys.path.insert(0, str(HERE.parents[1] / "examples"))
sys.path.insert(0, str(HERE.parents[1] / "tests"))
import hpvm_py as hpvm  # noqa: E402
import stencil  # noqa: E402
from programs import stencil_schedules  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=3, default=(512, 512, 256), metavar=("NX", "NY", "NZ"))
    nx, ny, nz = parser.parse_args().size
    if not torch.cuda.is_available():
        sys.exit("stencil_schedules: needs a CUDA GPU")
    print(torch.cuda.get_device_name(), f"grid {nx} x {ny} x {nz} f32", flush=True)
    a0 = torch.rand(nz, ny, nx, device="cuda")
    expected = torch.from_numpy(stencil.reference(a0.cpu().numpy(), 1 / 6, 1 / 36)).cuda()
    points = a0.numel()
    copy = torch.empty_like(a0)
    copy_ms = do_bench(lambda: copy.copy_(a0), return_mode="median")
    print(f"{'torch copy of the grid':<44} {copy_ms:.4f} ms {8 * points / copy_ms / 1e6:6.0f} GB/s")
    rows = [("per-point leaf (examples/stencil.py)", stencil.root, "gpu"),
            ("per-point leaf (examples/stencil.py)", stencil.root, "nvptx"),
            ("z walk, shared tile (2.5-D blocking)", stencil_schedules.shared_root, "nvptx"),
            ("z walk, neighbours loaded one plane ahead", stencil_schedules.walk_root, "nvptx")]
    for name, root, target in rows:
        anext = a0.clone()
        args = (a0, points * 4, anext, points * 4, nx, ny, nz, 1 / 6, 1 / 36)
        with hpvm.runtime(target):
            start = time.perf_counter()
            hpvm.wait(hpvm.launch(root, *args))
            first = time.perf_counter() - start
            right = torch.allclose(anext, expected, rtol=1e-5, atol=1e-6)
            ms = do_bench(lambda: hpvm.wait(hpvm.launch(root, *args)), return_mode="median")
        print(f"{name + ', ' + target:<44} {ms:.4f} ms {8 * points / ms / 1e6:6.0f} GB/s  "
              f"{copy_ms / ms:.2f} of the copy  {'correct' if right else 'WRONG'}  "
              f"(first launch {first:.1f} s)", flush=True)
    hand_written(nx, ny, nz)


def hand_written(nx: int, ny: int, nz: int) -> None:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        print("hand-written CUDA schedules: skipped (no nvcc on PATH)")
        return
    major, minor = torch.cuda.get_device_capability()
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "stencil_schedules"
        subprocess.run([nvcc, "-O3", f"-arch=sm_{major}{minor}", "-o", str(exe),
                        str(HERE / "stencil_schedules.cu")], check=True)
        done = subprocess.run([str(exe), str(nx), str(ny), str(nz)], capture_output=True, text=True)
    print("hand-written CUDA (its own copy of the grid in the first line):")
    print(done.stdout + done.stderr, end="")


if __name__ == "__main__":
    main()
