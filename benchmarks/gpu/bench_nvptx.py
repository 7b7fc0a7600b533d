"""nvptx kernels against numba-cuda on one GPU, in the same process: vadd 64M f32, the 7-point
stencil 512x512x256, Parboil sgemm 4096 (16x16 shared tiles), a 64M -> 256 histogram with
per-block shared atomics, host cost of a tiny launch.

Each leaf is the one the examples and the CPU benchmarks use; the peers are per-thread numba-cuda
kernels written the same way (as /work/shared/peers/numba_cuda_peers.py measured them). Times are
medians of triton.testing.do_bench. Run on a GPU machine:
    python benchmarks/gpu/bench_nvptx.py
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "cpu"))  # the CPU benchmarks' leaves

if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still names it; NumPy 2.5 removed it
    np.row_stack = np.vstack
from numba import cuda, float32, int32  # noqa: E402
from numba_peers import numba_sgemm  # noqa: E402
from triton.testing import do_bench  # noqa: E402

from hpvm_py.backends.base import BufferArg, NodeContext  # noqa: E402
from hpvm_py.backends.nvptx import NvptxBackend, launch  # noqa: E402
from hpvm_py.types import PtrType  # noqa: E402
from bench_stencil import stencil  # noqa: E402
from bench_vadd import vadd  # noqa: E402
from nvptx_histogram import nvptx_histogram  # noqa: E402


def buf(t: torch.Tensor) -> BufferArg:
    return BufferArg(obj=t, address=t.data_ptr(), nbytes=t.numel() * t.element_size(), array=None)


def kernel_launch(leaf, levels: list[tuple[int, ...]], *args):
    ir = leaf.ir if hasattr(leaf, "ir") else leaf
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in ir.params)
    ctx = NodeContext(level_dims=tuple(len(e) for e in levels), input_modes=modes, output_modes=())
    kernel = NvptxBackend().compile_leaf(ir, ctx)
    values = [buf(a) if isinstance(a, torch.Tensor) else a for a in args]
    return lambda: kernel.launch(values, [], levels)


def block_shape(threads: int, width: int = 128, height: int = 1024) -> None:
    """Use blocks of `threads` threads (x `width` wide, at most `height` high for 2-D/3-D
    leaves) from now on."""
    launch.BLOCK_THREADS, launch.BLOCK_X_2D, launch.BLOCK_Y_MAX = threads, width, height
    for kernel in NvptxBackend._memory.values():
        kernel._shapes.clear()  # launch shapes are remembered per extents


def gbs(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def bench(fn) -> float:
    return do_bench(fn, return_mode="median")


print(torch.cuda.get_device_name(), "| numba-cuda", __import__("numba_cuda").__version__)

# -- vadd -----------------------------------------------------------------------------------------
n = 64 * 2**20
a, b, c = (torch.randn(n, device="cuda") for _ in range(3))
nb = 4 * n
run = kernel_launch(vadd, [(n,)], a, nb, b, nb, c, nb)
run()
torch.cuda.synchronize()
assert torch.equal(c, a + b)
ms = bench(run)
print(f"vadd 64M nvptx: {ms:.3f} ms {gbs(12 * n, ms):.0f} GB/s")
for threads in (128, 512, 1024):
    block_shape(threads)
    ms = bench(run)
    print(f"vadd 64M nvptx block {threads}: {ms:.3f} ms {gbs(12 * n, ms):.0f} GB/s")
block_shape(256)


@cuda.jit
def vadd_numba(x, y, z):
    i = cuda.grid(1)
    if i < z.size:
        z[i] = x[i] + y[i]


da, db, dc = cuda.as_cuda_array(a), cuda.as_cuda_array(b), cuda.as_cuda_array(c)
ms = bench(lambda: vadd_numba[(n + 255) // 256, 256](da, db, dc))
print(f"vadd 64M numba-cuda tpb=256: {ms:.3f} ms {gbs(12 * n, ms):.0f} GB/s")
ms = bench(lambda: c.copy_(a))
print(f"device copy 256 MiB: {ms:.3f} ms {gbs(8 * n, ms):.0f} GB/s")

# -- stencil --------------------------------------------------------------------------------------
nx, ny, nz = 512, 512, 256
A0 = torch.randn(nz, ny, nx, device="cuda")
An = torch.zeros_like(A0)
sb = A0.numel() * 4
c0, c1 = np.float32(1 / 6), np.float32(1 / 36)
run = kernel_launch(stencil, [(nx, ny, nz)], A0, sb, An, sb, c0, c1)
run()
torch.cuda.synchronize()
ref = (A0[1:-1, 1:-1, 2:] + A0[1:-1, 1:-1, :-2] + A0[1:-1, 2:, 1:-1] + A0[1:-1, :-2, 1:-1]
       + A0[2:, 1:-1, 1:-1] + A0[:-2, 1:-1, 1:-1]) * c1 - A0[1:-1, 1:-1, 1:-1] * c0
assert torch.allclose(An[1:-1, 1:-1, 1:-1], ref, atol=1e-5)
for threads, width, height in ((256, 128, 1024), (256, 32, 1024), (512, 128, 1024), (128, 128, 1),
                               (256, 256, 1), (512, 128, 2), (256, 64, 2), (256, 32, 4),
                               (1024, 256, 2)):
    block_shape(threads, width, height)
    ms = bench(run)
    print(f"stencil 512x512x256 nvptx block {launch.flat_block(3, (nx, ny, nz), 1)}: {ms:.3f} ms "
          f"{gbs(8 * A0.numel(), ms):.0f} GB/s effective")
block_shape(256, 128)


@cuda.jit
def stencil_numba(a0, an, nx, ny, nz, c0, c1):
    i, j, k = cuda.grid(3)
    if 0 < i < nx - 1 and 0 < j < ny - 1 and 0 < k < nz - 1:
        an[k, j, i] = (a0[k, j, i + 1] + a0[k, j, i - 1] + a0[k, j + 1, i] + a0[k, j - 1, i]
                       + a0[k + 1, j, i] + a0[k - 1, j, i]) * c1 - a0[k, j, i] * c0


dA0, dAn = cuda.as_cuda_array(A0), cuda.as_cuda_array(An)
tpb = (128, 2, 2)
blocks = tuple((s + t - 1) // t for s, t in zip((nx, ny, nz), tpb))
ms = bench(lambda: stencil_numba[blocks, tpb](dA0, dAn, nx, ny, nz, float32(c0), float32(c1)))
print(f"stencil 512x512x256 numba-cuda tpb {tpb}: {ms:.3f} ms {gbs(8 * A0.numel(), ms):.0f} GB/s effective")

# -- sgemm (the example's leaf: 16x16 shared tiles, barrier) --------------------------------------
import sgemm as sgemm_example  # noqa: E402

M = N = K = 4096
TILE = sgemm_example.TILE
A = torch.randn(M, K, device="cuda")
B = torch.randn(K, N, device="cuda")
C = torch.zeros(M, N, device="cuda")
leaf = sgemm_example.sgemm_tile.ir
modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
ctx = NodeContext(level_dims=(2, 2), input_modes=modes, output_modes=())
kernel = NvptxBackend().compile_leaf(leaf, ctx)
values = [buf(A), np.int64(A.numel() * 4), buf(B), np.int64(B.numel() * 4), buf(C),
          np.int64(C.numel() * 4), np.int64(M), np.int64(N), np.int64(K), np.float32(1), np.float32(0)]
extents = [(TILE, TILE), (N // TILE, M // TILE)]
kernel.launch(values, [], extents)
torch.cuda.synchronize()
ref = A @ B
print("  sgemm max rel err", float((C - ref).abs().max() / ref.abs().max()))
flops = 2 * M * N * K
ms = bench(lambda: kernel.launch(values, [], extents))
print(f"sgemm 4096 nvptx (example leaf, 16x16 tiles): {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s")


peer_sgemm = numba_sgemm()
assert peer_sgemm is not None  # numba-cuda is imported above
ms = bench(lambda: peer_sgemm(A, B, C, K))
print(f"sgemm 4096 numba-cuda 16x16 shared tiles: {ms:.3f} ms {flops / ms / 1e9:.1f} TFLOP/s")

# -- histogram with per-block shared atomics -------------------------------------------------------
xs = torch.randint(0, 256, (64 * 2**20,), device="cuda", dtype=torch.int32)
bins = torch.zeros(256, device="cuda", dtype=torch.int32)
blocks = 132 * 8
hist_run = nvptx_histogram(xs, bins, blocks)
hist_run()
torch.cuda.synchronize()
assert torch.equal(bins, torch.bincount(xs, minlength=256).to(torch.int32))
ms = bench(lambda: (bins.zero_(), hist_run()))
print(f"histogram 64M->256 nvptx (shared scratch atomics, {blocks} groups of 256): {ms:.3f} ms")


@cuda.jit
def hist_shared(x, out):
    h = cuda.shared.array(256, int32)
    t = cuda.threadIdx.x
    h[t] = 0
    cuda.syncthreads()
    i = cuda.grid(1)
    stride = cuda.gridsize(1)
    while i < x.size:
        cuda.atomic.add(h, x[i], 1)
        i += stride
    cuda.syncthreads()
    cuda.atomic.add(out, t, h[t])


dx, dbins = cuda.as_cuda_array(xs), cuda.as_cuda_array(bins)
ms = bench(lambda: (bins.zero_(), hist_shared[blocks, 256](dx, dbins)))
print(f"histogram 64M->256 numba-cuda shared atomics: {ms:.3f} ms")

# -- host cost of a tiny launch -------------------------------------------------------------------
small = torch.zeros(1024, device="cuda")
run = kernel_launch(vadd, [(1024,)], small, 4096, small, 4096, small, 4096)
for _ in range(100):
    run()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(2000):
    run()
torch.cuda.synchronize()
print(f"tiny nvptx launch, host: {(time.perf_counter() - t) / 2000 * 1e6:.1f} us")
ir = vadd.ir
ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 3, output_modes=())
prepared = NvptxBackend().compile_leaf(ir, ctx).prepare([buf(small), 4096] * 3, [], [(1024,)])
for _ in range(100):
    prepared.run()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(2000):
    prepared.run()
torch.cuda.synchronize()
print(f"tiny nvptx prepared launch (run() of a packed launch), host: "
      f"{(time.perf_counter() - t) / 2000 * 1e6:.1f} us")
ds = cuda.as_cuda_array(small)
for _ in range(100):
    vadd_numba[1, 1024](ds, ds, ds)
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(2000):
    vadd_numba[1, 1024](ds, ds, ds)
torch.cuda.synchronize()
print(f"tiny numba-cuda launch, host: {(time.perf_counter() - t) / 2000 * 1e6:.1f} us")
