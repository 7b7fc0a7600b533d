"""Generated gpu-target kernels against their peers, in one run on one GPU.

vadd and saxpy 64M f32, the 7-point stencil 512x512x256, sgemm 4096^3 fp32 (the Parboil leaf of
examples/sgemm.py and a per-element leaf) and the histogram 64M -> 256 bins, each launched through
hpvm.launch on torch CUDA tensors (no host copies; the time includes a launch's host work) and as
the compiled leaf kernel alone ("kernel": TritonKernel.launch, 5 launches per timing so that the
GPU stays busy), next to hand-written Triton (as /work/shared/peers/gpu_peers.py), cuBLAS fp32
(TF32 off), numba-cuda (as peers/numba_cuda_peers.py), torch.bincount and the nvptx target's
histogram with per-block shared atomics (nvptx_histogram.py). Every time is the median
of triton.testing.do_bench. Also sweeps the tl.dot block shapes and the grid-tile shapes
(kernel.GPU_DOT, kernel.GRID_TILES), and reports the host cost of a tiny launch.

Run: python benchmarks/gpu/bench_gpu.py [streaming stencil sgemm histogram launch]   (needs CUDA;
the parts named, all by default; writes bench_gpu.json into $OUT if set)
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
import hpvm_py as hpvm  # noqa: E402
import histogram  # noqa: E402
import saxpy  # noqa: E402
import sgemm  # noqa: E402
import stencil  # noqa: E402
import vadd  # noqa: E402
from hpvm_py import In, Out, Ptr, f32, i64  # noqa: E402
from hpvm_py.backends.base import BufferArg  # noqa: E402
from hpvm_py.backends.triton import kernel as tk  # noqa: E402
from numba_peers import numba_sgemm  # noqa: E402
from programs.dot_leaves import naive_root  # noqa: E402 - the per-element k-loop leaf
from nvptx_histogram import nvptx_histogram  # noqa: E402

RESULTS: dict[str, float] = {}


def record(name: str, ms: float, note: str = "") -> float:
    RESULTS[name] = ms
    print(f"{name:<52} {ms:8.3f} ms  {note}", flush=True)
    return ms


def gbs(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


def bench(fn, per_call: int = 1) -> float:
    if per_call == 1:
        return do_bench(fn, return_mode="median")
    return do_bench(lambda: [fn() for _ in range(per_call)], return_mode="median") / per_call


def leaf_kernel(graph):
    """The graph's one leaf kernel, launched directly with the extents the launch would use."""
    compiled = hpvm.compile(graph, target="gpu")
    ((leaf, ctx, kernel),) = compiled.leaf_kernels()
    return kernel


def direct_args(*args):
    """A launch's arguments as the executor hands them to a kernel (buffers as BufferArg)."""
    return [BufferArg(obj=a, address=a.data_ptr(), nbytes=a.numel() * a.element_size(), array=None)
            if isinstance(a, torch.Tensor) else a for a in args]


def direct(kernel, extents, *args):
    values = direct_args(*args)
    return lambda: kernel.launch(values, [], extents)


@triton.jit
def vadd_hand(a, b, c, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(c + i, tl.load(a + i, mask=m) + tl.load(b + i, mask=m), mask=m)


@triton.jit
def saxpy_hand(x, y, alpha, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y + i, alpha * tl.load(x + i, mask=m) + tl.load(y + i, mask=m), mask=m)


@triton.jit
def stencil_hand(A0, An, nx, ny, nz, c0, c1, BLOCK: tl.constexpr):
    j = tl.program_id(1) + 1
    k = tl.program_id(2) + 1
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK) + 1
    m = i < nx - 1
    idx = i + nx * (j + ny * k)
    s = (tl.load(A0 + idx + 1, mask=m) + tl.load(A0 + idx - 1, mask=m) + tl.load(A0 + idx + nx, mask=m)
         + tl.load(A0 + idx - nx, mask=m) + tl.load(A0 + idx + nx * ny, mask=m)
         + tl.load(A0 + idx - nx * ny, mask=m))
    tl.store(An + idx, s * c1 - tl.load(A0 + idx, mask=m) * c0, mask=m)


def bench_streaming_kernels(dev: str) -> None:
    n = 64 * 2**20
    a, b, c = (torch.randn(n, device=dev) for _ in range(3))
    nb = n * 4
    gen = record("vadd 64M generated (hpvm.launch)",
                 bench(lambda: hpvm.wait(hpvm.launch(vadd.root, a, nb, b, nb, c, nb, n))))
    assert torch.equal(c, a + b)
    hand = record("vadd 64M hand Triton B=1024", bench(lambda: vadd_hand[(n // 1024,)](a, b, c, n, BLOCK=1024)))
    print(f"  vadd {gbs(12 * n, gen):.0f} GB/s generated, ratio generated/hand {hand / gen:.3f}x")
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    y0 = y.clone()
    hpvm.wait(hpvm.launch(saxpy.root, x, nb, y, nb, 2.5, n))
    assert torch.equal(y, 2.5 * x + y0)
    gen = record("saxpy 64M generated (hpvm.launch)",
                 bench(lambda: hpvm.wait(hpvm.launch(saxpy.root, x, nb, y, nb, 2.5, n))))
    hand = record("saxpy 64M hand Triton B=1024",
                  bench(lambda: saxpy_hand[(n // 1024,)](x, y, 2.5, n, BLOCK=1024)))
    print(f"  saxpy {gbs(12 * n, gen):.0f} GB/s generated, ratio generated/hand {hand / gen:.3f}x")


def bench_stencil(dev: str) -> None:
    nx, ny, nz = 512, 512, 256
    A0 = torch.randn(nz, ny, nx, device=dev)
    An = A0.clone()
    nbytes = A0.numel() * 4
    args = (A0, nbytes, An, nbytes, nx, ny, nz, 1 / 6, 1 / 36)
    hpvm.wait(hpvm.launch(stencil.root, *args))
    expected = torch.from_numpy(stencil.reference(A0.cpu().numpy(), 1 / 6, 1 / 36))
    assert torch.allclose(An.cpu(), expected, rtol=1e-5, atol=1e-6)
    eff = 8 * A0.numel()
    gen = record("stencil generated (hpvm.launch)", bench(lambda: hpvm.wait(hpvm.launch(stencil.root, *args))))
    kernel = leaf_kernel(stencil.root)
    extents = [(stencil.BX, stencil.BY), (nx // stencil.BX, ny // stencil.BY, nz)]
    run = direct(kernel, extents, *args)
    default = tk.GRID_TILES
    kern = record(f"stencil kernel, tiles {default}", bench(run, 5))
    for lanes, warps in ((512, 2), (1024, 4), (1024, 8), (256, 2)):
        tk.GRID_TILES = tk.TileConfig(lanes=lanes, warps=warps)
        record(f"stencil kernel, tiles {tk.GRID_TILES}", bench(run, 5))
    tk.GRID_TILES = tk.TileConfig(lanes=0, warps=4)  # never tiles: the per-parent mapping
    record("stencil kernel, one program per parent (literal)", bench(run, 5))
    tk.GRID_TILES = default
    best = None
    for block in (128, 512):
        grid = (triton.cdiv(nx - 2, block), ny - 2, nz - 2)
        ms = record(f"stencil hand Triton B={block}",
                    bench(lambda: stencil_hand[grid](A0, An, nx, ny, nz, 1 / 6, 1 / 36, BLOCK=block)))
        best = ms if best is None else min(best, ms)
    print(f"  stencil {gbs(eff, gen):.0f} GB/s effective (hpvm.launch), {gbs(eff, kern):.0f} (kernel); "
          f"ratio best hand/generated: launch {best / gen:.3f}x, kernel {best / kern:.3f}x")


def bench_sgemm(dev: str) -> None:
    torch.backends.cuda.matmul.allow_tf32 = False
    M = N = K = 4096
    A, B = torch.randn(M, K, device=dev), torch.randn(K, N, device=dev)
    C = torch.zeros(M, N, device=dev)
    flops = 2 * M * N * K
    ref = (A.double() @ B.double()).float()

    def check(name: str) -> None:
        err = float((C - ref).norm() / ref.norm())
        print(f"  {name}: relative error {err:.1e} against float64")
        assert err < 1e-5, err
        C.zero_()

    cublas = record("sgemm 4096 cuBLAS fp32", bench(lambda: torch.matmul(A, B, out=C)))
    check("cuBLAS")
    args = (A, A.numel() * 4, B, B.numel() * 4, C, C.numel() * 4, M, N, K)
    hpvm.wait(hpvm.launch(sgemm.root, *args, 1.0, 0.0))
    check("generated Parboil leaf")
    gen = record("sgemm 4096 generated Parboil leaf (hpvm.launch)",
                 bench(lambda: hpvm.wait(hpvm.launch(sgemm.root, *args, 1.0, 0.0))))
    kernel = leaf_kernel(sgemm.root)
    extents = [(sgemm.TILE, sgemm.TILE), (N // sgemm.TILE, M // sgemm.TILE)]
    run = direct(kernel, extents, *args, np.float32(1.0), np.float32(0.0))
    # (block shapes are chosen when the kernel is prepared: benchmarks/gpu/dot_blocks.py
    # --parboil 4096 sweeps them)
    best_kernel = record("sgemm kernel (launched directly)", bench(run, 3))
    run()
    torch.cuda.synchronize()
    check("generated kernel, last configuration")
    naive = leaf_kernel(naive_root)
    run_naive = direct(naive, [(N, M)], A, A.numel() * 4, B, B.numel() * 4, C, C.numel() * 4, M, N, K)
    run_naive()
    torch.cuda.synchronize()
    check("generated per-element leaf")
    naive_ms = record("sgemm 4096 generated per-element leaf (kernel)", bench(run_naive, 3))
    peer = numba_sgemm()
    numba_ms = None
    if peer is not None:
        peer(A, B, C, K)
        torch.cuda.synchronize()
        check("numba-cuda Parboil")
        numba_ms = record("sgemm 4096 numba-cuda 16x16 shared tiles", bench(lambda: peer(A, B, C, K)))
    tf = lambda ms: flops / ms / 1e9  # noqa: E731
    print(f"  TFLOP/s: cuBLAS {tf(cublas):.1f}, generated launch {tf(gen):.1f}, best kernel "
          f"{tf(best_kernel):.1f}, per-element {tf(naive_ms):.1f}"
          + (f", numba-cuda {tf(numba_ms):.1f}" if numba_ms else ""))
    print(f"  ratio to cuBLAS: launch {cublas / gen:.3f}x, kernel {cublas / best_kernel:.3f}x, "
          f"per-element {cublas / naive_ms:.3f}x"
          + (f"; to numba-cuda: {numba_ms / gen:.2f}x" if numba_ms else ""))


def bench_histogram(dev: str) -> None:
    n, nbins = 64 * 2**20, 256
    data = torch.randint(0, 10**6, (n,), device=dev, dtype=torch.int32)
    bins = torch.zeros(nbins, device=dev, dtype=torch.int32)
    args = (data, data.numel() * 4, bins, bins.numel() * 4, nbins, n)
    hpvm.wait(hpvm.launch(histogram.root, *args))
    assert torch.equal(bins, torch.bincount(data % nbins, minlength=nbins).to(torch.int32))
    gen = record("histogram 64M->256 generated (hpvm.launch)",
                 bench(lambda: hpvm.wait(hpvm.launch(histogram.root, *args))))
    kernel = leaf_kernel(histogram.root)
    run = direct(kernel, [(n,)], *args[:5])
    default = tk.GPU_PRIVATE
    kern = record(f"histogram kernel {default}", bench(run, 5))
    for cfg in (tk.PrivateConfig(4096, 8, 4224), tk.PrivateConfig(4096, 4, 4224),
                tk.PrivateConfig(2048, 4, 4224), tk.PrivateConfig(2048, 8, 4224),
                tk.PrivateConfig(4096, 8, 2112), tk.PrivateConfig(8192, 8, 2112),
                tk.PrivateConfig(4096, 4, 8448)):
        if cfg != default:
            tk.GPU_PRIVATE = cfg
            kern = min(kern, record(f"histogram kernel {cfg}", bench(run, 5)))
    tk.GPU_PRIVATE = default
    peer = record("histogram torch.bincount(d % 256)",
                  bench(lambda: torch.bincount(data % nbins, minlength=nbins)))
    xs = data % nbins  # the nvptx leaf counts values already in [0, 256)
    nvptx = nvptx_histogram(xs, bins, 132 * 8)
    bins.zero_()
    nvptx()
    assert torch.equal(bins, torch.bincount(xs, minlength=nbins).to(torch.int32))
    simt = record("histogram nvptx shared atomics (1,056 groups of 256)",
                  bench(lambda: (bins.zero_(), nvptx())))
    print(f"  histogram: bincount/generated: launch {peer / gen:.2f}x, kernel {peer / kern:.2f}x; "
          f"nvptx/generated kernel {simt / kern:.2f}x")


@hpvm.leaf
def waves(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    """Compute-bound: 24 rounds of sin and cos per element."""
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    v = x[i]
    for _ in range(24):
        v = hpvm.math.sin(v) * 0.75 + hpvm.math.cos(v) * 0.25
    y[i] = v


@hpvm.graph
def waves_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(waves, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


@hpvm.leaf
def blur5(img: In[Ptr[f32]], img_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, w: i64, h: i64):
    """A 5x5 box blur (clamped at the edges) over a 2-D grid."""
    x = hpvm.get_node_instance_id_x(hpvm.get_node())
    y = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for dy in range(-2, 3):
        for dx in range(-2, 3):
            acc += img[min(max(y + dy, 0), h - 1) * w + min(max(x + dx, 0), w - 1)]
    out[y * w + x] = acc * 0.04


@hpvm.graph
def blur_root(img: In[Ptr[f32]], img_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, w: i64, h: i64):
    hpvm.node(blur5, grid=(w, h), img=img, img_bytes=img_bytes, out=out, out_bytes=out_bytes, w=w, h=h)


def bench_autotune(dev: str) -> None:
    """Default block shape against the autotuned one (backends/triton/autotune.py), same kernel."""
    n = 16 * 2**20
    x = torch.rand(n, device=dev) * 6 - 3
    y = torch.empty_like(x)
    side = 4096
    img = torch.rand(side * side, device=dev)
    out = torch.empty_like(img)
    a, b, c = (torch.rand(64 * 2**20, device=dev) for _ in range(3))
    nb = a.numel() * 4
    cases = [("vadd 64M", vadd.root, [(a.numel(),)], (a, nb, b, nb, c, nb)),
             ("waves 16M (24 sin+cos)", waves_root, [(n,)], (x, n * 4, y, n * 4)),
             ("blur5 4096^2", blur_root, [(side, side)], (img, img.numel() * 4, out, out.numel() * 4, side, side))]
    for name, graph, extents, args in cases:
        kernel = leaf_kernel(graph)
        times = {}
        for mode in ("0", "1"):
            os.environ["HPVM_AUTOTUNE"] = mode
            prepared = kernel.prepare(direct_args(*args), [], extents)  # "1": tunes (first time)
            times[mode] = record(f"{name} kernel, {'tuned' if mode == '1' else 'default'} "
                                 f"(BLOCK {prepared.options['BLOCK']}, {prepared.options['num_warps']} warps)",
                                 bench(prepared.run, 3))
        print(f"  {name}: tuned/default speed-up {times['0'] / times['1']:.2f}x")
    torch.cuda.synchronize()
    expected = x.clone()
    for _ in range(24):
        expected = torch.sin(expected) * 0.75 + torch.cos(expected) * 0.25
    torch.testing.assert_close(y, expected, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(c, a + b, rtol=0, atol=0)
    os.environ.pop("HPVM_AUTOTUNE")


def launch_cost(graph, args) -> float:
    """Host microseconds per hpvm.launch + wait of a tiny graph (GPU work queued, not waited)."""
    for _ in range(50):
        hpvm.wait(hpvm.launch(graph, *args))
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(500):
        hpvm.wait(hpvm.launch(graph, *args))
    elapsed = time.perf_counter() - t0
    torch.cuda.synchronize()
    return elapsed / 500 * 1e6


def main() -> None:
    dev = "cuda"
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    hpvm.init("gpu")
    parts = sys.argv[1:] or ["streaming", "stencil", "sgemm", "histogram", "autotune", "launch"]
    if "streaming" in parts:
        bench_streaming_kernels(dev)
    if "stencil" in parts:
        bench_stencil(dev)
    if "sgemm" in parts:
        bench_sgemm(dev)
    if "histogram" in parts:
        bench_histogram(dev)
    if "autotune" in parts:
        bench_autotune(dev)
    if "launch" in parts:
        small = torch.randn(1024, device=dev)
        out = torch.empty_like(small)
        us = launch_cost(vadd.root, (small, 4096, small, 4096, out, 4096, 1024))
        print(f"host cost of one hpvm.launch+wait of vadd(1024): {us:.1f} us")
        RESULTS["launch_us"] = us
    hpvm.cleanup()
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "bench_gpu.json").write_text(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    main()
