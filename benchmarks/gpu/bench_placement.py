"""Placement on two GPUs: a graph whose edge crosses from cuda:0 to cuda:1, in one process.

Two nodes on 64M f32 (256 MiB) torch CUDA tensors: `doubled` on gpu:0 writes t, `squared` on gpu:1
reads it, so each launch moves t device to device once (the memory tracker's peer copy). The same
graph with both nodes on gpu:0 moves nothing; the peer is torch's own cross-device `copy_` of the
same 256 MiB, in the same run. Each figure is the median of 10 launches, both GPUs synchronized
around each (the work spans two devices, so one device's events cannot time it).

Run: python benchmarks/gpu/bench_placement.py   (needs two CUDA GPUs; prints a skip line otherwise)
"""
from __future__ import annotations

import statistics
import sys
import time
from typing import Callable

import torch

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

N = 64 * 2**20
REPS = 10


@hpvm.leaf
def doubled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = 2.0 * x[i]


@hpvm.leaf
def squared(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] * x[i]


def two_stage(first: str, second: str):
    @hpvm.graph
    def root(a: In[Ptr[f32]], a_bytes: i64, t: Out[Ptr[f32]], t_bytes: i64, c: Out[Ptr[f32]],
             c_bytes: i64, n: i64):
        hpvm.node(doubled, grid=n, x=a, x_bytes=a_bytes, y=t, y_bytes=t_bytes, hint=first)
        hpvm.node(squared, grid=n, x=t, x_bytes=t_bytes, y=c, y_bytes=c_bytes, hint=second)

    return root


def synced_ms(fn: Callable[[], object]) -> float:
    fn()  # warm-up: compiles, allocates the tracker's device copies
    times = []
    for _ in range(REPS):
        for d in range(2):
            torch.cuda.synchronize(d)
        start = time.perf_counter()
        fn()
        for d in range(2):
            torch.cuda.synchronize(d)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    if torch.cuda.device_count() < 2:
        print("skipped: needs two CUDA GPUs")
        return
    print(torch.cuda.get_device_name(0), "x", torch.cuda.device_count(), "torch", torch.__version__,
          "peer access:", torch.cuda.can_device_access_peer(0, 1))
    nbytes = N * 4
    a = torch.rand(N, device="cuda:0")
    t = torch.zeros(N, device="cuda:0")
    c1 = torch.zeros(N, device="cuda:1")
    c0 = torch.zeros(N, device="cuda:0")
    across, local = two_stage("gpu:0", "gpu:1"), two_stage("gpu:0", "gpu:0")
    hpvm.init("gpu")
    try:
        before = hpvm.stats()
        ms_across = synced_ms(lambda: hpvm.wait(hpvm.launch(across, a, nbytes, t, nbytes, c1, nbytes, N)))
        after = hpvm.stats()
        launches = REPS + 1
        d2d = after["d2d_copies"] - before["d2d_copies"]
        assert d2d == launches, d2d
        assert after["d2d_bytes"] - before["d2d_bytes"] == launches * nbytes
        assert after["h2d_copies"] == before["h2d_copies"] and after["d2h_copies"] == before["d2h_copies"]
        torch.testing.assert_close(c1, ((2 * a) ** 2).to("cuda:1"))
        ms_local = synced_ms(lambda: hpvm.wait(hpvm.launch(local, a, nbytes, t, nbytes, c0, nbytes, N)))
        torch.testing.assert_close(c0, (2 * a) ** 2)
    finally:
        hpvm.cleanup()
    peer = torch.empty(N, device="cuda:1")
    ms_peer = synced_ms(lambda: peer.copy_(t))
    moved = ms_across - ms_local
    print(f"graph, gpu:0 -> gpu:1 (1 D2D of 256 MiB per launch, counted): {ms_across:.3f} ms")
    print(f"graph, both nodes on gpu:0 (no copy):                          {ms_local:.3f} ms")
    print(f"difference (the edge's move):  {moved:.3f} ms, {nbytes / (moved * 1e-3) / 1e9:.0f} GB/s")
    print(f"torch peer copy_ cuda:0 -> cuda:1, 256 MiB: {ms_peer:.3f} ms, "
          f"{nbytes / (ms_peer * 1e-3) / 1e9:.0f} GB/s")


if __name__ == "__main__":
    sys.exit(main())
