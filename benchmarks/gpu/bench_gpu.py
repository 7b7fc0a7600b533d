"""Generated gpu-target kernels against hand-written Triton, in one run on one GPU.

vadd 64M f32 and the 7-point stencil 512x512x256 (examples/vadd.py, examples/stencil.py), launched
through hpvm.launch on torch CUDA tensors (no host copies), each timed with triton.testing.do_bench
(median) next to the peer kernels of /work/shared/peers/gpu_peers.py. Also reports the device time
of the generated kernel alone (the leaf kernel launched directly) and the host cost of a launch.

Run: python benchmarks/gpu/bench_gpu.py   (needs CUDA)
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
import triton
import triton.language as tl
from triton.testing import do_bench

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hpvm_py as hpvm  # noqa: E402
import stencil  # noqa: E402
import vadd  # noqa: E402


def gbs(nbytes: float, ms: float) -> float:
    return nbytes / (ms * 1e-3) / 1e9


@triton.jit
def vadd_hand(a, b, c, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(c + i, tl.load(a + i, mask=m) + tl.load(b + i, mask=m), mask=m)


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
    # vadd 64M f32: 12 bytes per element
    n = 64 * 2**20
    a, b, c = (torch.randn(n, device=dev) for _ in range(3))
    nb = n * 4
    ms_gen = do_bench(lambda: hpvm.wait(hpvm.launch(vadd.root, a, nb, b, nb, c, nb, n)),
                      return_mode="median")
    assert torch.equal(c, a + b)
    ms_hand = do_bench(lambda: vadd_hand[(triton.cdiv(n, 1024),)](a, b, c, n, BLOCK=1024),
                       return_mode="median")
    print(f"vadd 64M generated (hpvm.launch): {ms_gen:.3f} ms {gbs(12 * n, ms_gen):.0f} GB/s")
    print(f"vadd 64M hand Triton B=1024:      {ms_hand:.3f} ms {gbs(12 * n, ms_hand):.0f} GB/s")
    print(f"vadd ratio generated/hand: {ms_hand / ms_gen:.3f}x")
    # stencil 512x512x256, effective bytes: one read and one write per point
    nx, ny, nz = 512, 512, 256
    A0 = torch.randn(nz, ny, nx, device=dev)
    An = A0.clone()
    nbytes = A0.numel() * 4
    args = (A0, nbytes, An, nbytes, nx, ny, nz, 1 / 6, 1 / 36)
    ms_gen = do_bench(lambda: hpvm.wait(hpvm.launch(stencil.root, *args)), return_mode="median")
    expected = torch.from_numpy(stencil.reference(A0.cpu().numpy(), 1 / 6, 1 / 36))
    assert torch.allclose(An.cpu(), expected, rtol=1e-5, atol=1e-6)
    results = {}
    for block in (128, 512):
        grid = (triton.cdiv(nx - 2, block), ny - 2, nz - 2)
        results[block] = do_bench(lambda: stencil_hand[grid](A0, An, nx, ny, nz, 1 / 6, 1 / 36, BLOCK=block),
                                  return_mode="median")
    best = min(results.values())
    eff = 8 * A0.numel()
    print(f"stencil generated (hpvm.launch): {ms_gen:.3f} ms {gbs(eff, ms_gen):.0f} GB/s effective")
    for block, ms in results.items():
        print(f"stencil hand Triton B={block}:    {ms:.3f} ms {gbs(eff, ms):.0f} GB/s effective")
    print(f"stencil ratio generated/best hand: {best / ms_gen:.3f}x")
    small = torch.randn(1024, device=dev)
    out = torch.empty_like(small)
    us = launch_cost(vadd.root, (small, 4096, small, 4096, out, 4096, 1024))
    print(f"host cost of one hpvm.launch+wait of vadd(1024): {us:.1f} us")
    hpvm.cleanup()


if __name__ == "__main__":
    main()
