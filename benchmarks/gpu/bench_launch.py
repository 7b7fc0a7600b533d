"""Host cost of launching a cached graph again on the GPU targets, next to its peers in one run.

The graph (tests/programs/gpu_replay_graphs.py `chain`): three leaves joined by one-to-one edges,
y = x * k + c over 4,096 floats, on torch CUDA tensors, no root output. Measured per launch + wait
(host time; the GPU work is queued, not waited for):
  - full path: each launch with another of 65 output buffers (more than the 64 recordings kept),
    with HPVM_REBIND=0;
  - rebound: the same, as it runs by default (the recorded launches copied, pointed at the buffer);
  - replay, new scalars each launch (prepared launches, Triton's compiled launcher called directly);
  - replay, same scalars (the launch runs as one captured CUDA graph);
  - broadcast (a uniform edge and a root output): launch + wait returns a value, so it waits;
and the peers: one hand-written Triton kernel launched through Triton's dispatch, three of them,
and a torch CUDA-graph replay of those three kernels.

With the gpu target, its two relaunchers of a compiled kernel (HPVM_TRITON_LAUNCHER, in one
process): the hand-written kernel relaunched through Triton's launcher (`CompiledKernel[grid]`)
against the own launcher (backends/triton/launcher.py: cuLaunchKernel on a packed block), and
the chain's prepared relaunches (new scalars) under =triton against =own, alternated, each
checked against torch.

Run: python benchmarks/gpu/bench_launch.py [--targets gpu,nvptx] [--profile] [--no-launchers]
(needs CUDA)
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "tests"))
import hpvm_py as hpvm  # noqa: E402
from hpvm_py.rt import replay  # noqa: E402
from _timing import per_call_us  # noqa: E402
from hpvm_py.backends.triton import launcher as L  # noqa: E402
from programs import gpu_replay_graphs as g  # noqa: E402

N = 4096


@triton.jit
def axpb(x, y, n, k, c, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = i < n
    tl.store(y + i, tl.load(x + i, mask=m) * k + c, mask=m)


def peers(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    grid = (triton.cdiv(N, 1024),)

    def one() -> None:
        axpb[grid](x, y, N, 2.0, 1.0, BLOCK=1024)

    def three() -> None:
        axpb[grid](x, y, N, 2.0, 1.0, BLOCK=1024)
        axpb[grid](y, y, N, 1.0, 0.5, BLOCK=1024)
        axpb[grid](y, y, N, 1.0, 0.25, BLOCK=1024)

    three()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        three()
    results = {"Triton dispatch, 1 kernel": per_call_us(one),
               "Triton dispatch, 3 kernels": per_call_us(three),
               "torch CUDA-graph replay, 3 kernels": per_call_us(graph.replay)}
    torch.cuda.synchronize()
    return results


def relaunchers(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """One compiled kernel relaunched through Triton's launcher and through the own one, after
    checking that the own one computes the same."""
    grid = (triton.cdiv(N, 1024), 1, 1)
    compiled = axpb[grid](x, y, N, 2.0, 1.0, BLOCK=1024)
    args = [x, y, N, 2.0, 1.0, 1024]
    stream = torch.cuda.current_stream().cuda_stream
    theirs = compiled[grid]
    ours = L.own_launcher(compiled, args, grid, torch.cuda.current_device(), "axpb", None)
    y.zero_()
    ours(stream)
    torch.testing.assert_close(y, x * 2.0 + 1.0, rtol=0, atol=0)
    results: dict[str, float] = {}
    for _ in range(2):  # alternated; the better of two rounds
        for name, fn in (("1 kernel, Triton's launcher (CompiledKernel[grid])",
                          lambda: theirs(*args, stream=stream)),
                         ("1 kernel, own launcher (cuLaunchKernel)", lambda: ours(stream))):
            results[name] = min(host_us(fn), results.get(name, float("inf")))
    return results


def host_us(fn) -> float:  # noqa: ANN001
    """Host microseconds per call, the GPU's queue drained before each batch."""
    return per_call_us(fn, calls=256, repeat=21, drain=torch.cuda.synchronize)


def prepared_by_launcher(x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """The gpu target's prepared relaunches of the chain (3 kernels, new scalars each launch, so
    no CUDA graph) under HPVM_TRITON_LAUNCHER=triton and =own, alternated, in this process."""
    results: dict[str, float] = {}
    before = os.environ.get("HPVM_TRITON_LAUNCHER")
    try:
        for mode in ("triton", "own", "triton", "own"):
            os.environ["HPVM_TRITON_LAUNCHER"] = mode
            with hpvm.runtime("gpu"):
                compiled = hpvm.compile(g.chain)
                hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 2.0, 0.0))
                scalars = iter(range(10**9))
                us = per_call_us(lambda: hpvm.wait(hpvm.launch(
                    compiled, x, N * 4, y, N * 4, N, 2.0, float(next(scalars) % 7))))
                torch.cuda.synchronize()
                hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 3.0, 0.25))
                torch.cuda.synchronize()
                torch.testing.assert_close(y, x * 3.0 + 0.25, rtol=0, atol=0)
            name = f"gpu: replay, new scalars, HPVM_TRITON_LAUNCHER={mode}"
            results[name] = min(us, results.get(name, us))
    finally:
        if before is None:
            os.environ.pop("HPVM_TRITON_LAUNCHER", None)
        else:
            os.environ["HPVM_TRITON_LAUNCHER"] = before
    return results


def profile(fn, title: str) -> None:
    """Where the host time of a replayed launch goes (cProfile, 2,000 launches)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(2000):
        fn()
    profiler.disable()
    print(title)
    pstats.Stats(profiler).sort_stats("tottime").print_stats(12)


def measure(target: str, x: torch.Tensor, ys: list[torch.Tensor], profiled: bool) -> dict[str, float]:
    y = ys[0]
    results = {}
    with hpvm.runtime(target):
        compiled = hpvm.compile(g.chain)
        for i, out in enumerate(ys):
            hpvm.wait(hpvm.launch(compiled, x, N * 4, out, N * 4, N, 2.0, float(i)))
        turn = iter(range(10**9))
        os.environ["HPVM_REBIND"] = "0"
        try:
            results["full path (new buffer each launch)"] = per_call_us(
                lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, ys[next(turn) % len(ys)], N * 4, N,
                                              2.0, 1.0)), calls=200)
        finally:
            del os.environ["HPVM_REBIND"]
        results["rebound (new buffer each launch: recorded launches copied)"] = per_call_us(
            lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, ys[next(turn) % len(ys)], N * 4, N,
                                          2.0, 1.0)), calls=200)
        scalars = iter(range(10**9))
        results["replay, new scalars (prepared launches)"] = per_call_us(
            lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 2.0, float(next(scalars) % 7))))
        before = hpvm.stats()["cuda_graph_replays"]
        results["replay, same scalars (CUDA graph)"] = per_call_us(
            lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 3.0, 0.5)))
        graphs = hpvm.stats()["cuda_graph_replays"] - before
        if profiled:
            profile(lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 2.0,
                                                  float(next(scalars) % 7))), f"{target}: replay, new scalars")
            profile(lambda: hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 3.0, 0.5)),
                    f"{target}: replay, same scalars")
        torch.cuda.synchronize()
        x.uniform_()
        hpvm.wait(hpvm.launch(compiled, x, N * 4, y, N * 4, N, 3.0, 0.5))
        torch.testing.assert_close(y, x * 3.0 + 0.5, rtol=0, atol=0)
        z = torch.empty_like(x)
        results["broadcast, uniform edge + root output (waits)"] = per_call_us(
            lambda: hpvm.wait(hpvm.launch(g.broadcast, x, N * 4, z, N * 4, N, 1.5)), calls=500)
        assert torch.equal(z, x + x[0] * 1.5)
    print(f"  ({graphs} of the same-scalar launches ran as a CUDA graph)")
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--targets", default="gpu,nvptx")
    parser.add_argument("--profile", action="store_true", help="also profile the replays")
    parser.add_argument("--no-launchers", action="store_true",
                        help="skip the gpu target's own launcher against Triton's")
    args = parser.parse_args()
    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    x = torch.rand(N, device="cuda")
    ys = [torch.zeros(N, device="cuda") for _ in range(replay._KEPT + 1)]  # more than kept: rebound
    rows = list(peers(x, ys[0]).items())
    if "gpu" in args.targets.split(",") and not args.no_launchers:
        rows += list(relaunchers(x, ys[0]).items())
        rows += list(prepared_by_launcher(x, ys[0]).items())
    for target in args.targets.split(","):
        rows += [(f"{target}: {name}", us) for name, us in measure(target, x, ys, args.profile).items()]
    print("host microseconds per launch (+ wait):")
    for name, us in rows:
        print(f"  {name:60s} {us:8.1f}")


if __name__ == "__main__":
    main()
