"""The tensor-parallel MLP step of examples/tp_mlp.py as one HPVM graph on GPU ranks, against the
same step in torch + NCCL, in the same processes (issue 22's target: the graph >= 1.2x).

    torchrun --nproc-per-node 2 benchmarks/gpu/tp_mlp_step.py [--rows 256] [--d-model 1024] [--d-ff 4096]
        [--profile TRACE.json]

Both steps are f32: h = relu(x @ w1[:, shard]); p = h @ w2[shard, :]; residual += all_reduce(p);
out = rmsnorm(residual) * gamma. hpvm-py runs `mlp_fused` (two matmul leaves and the fused
all-reduce + RMSNorm node) with `hpvm.launch` + `wait`; torch runs cuBLAS matmuls,
`torch.distributed.all_reduce` on an NCCL group and the RMSNorm in eager ops. Each step is timed
on the host clock and synchronised (as a training or serving loop sees it), interleaved, the
ranks lined up before every step; rank 0 prints the medians. The first step of each is checked
against the other. --profile then records 10 graph steps with hpvm.profile() and prints where
their time went, per event (kernels by their CUDA-event times).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path[:0] = [ROOT, os.path.join(ROOT, "examples")]
os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from tp_mlp import EPS, mlp_fused  # noqa: E402


def main(rows: int, d_model: int, d_ff: int, steps: int, trace: str | None = None) -> None:
    hpvm.distributed.init(device="cuda")
    rank, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    nccl = dist.new_group(backend="nccl")
    shard = d_ff // world
    dev = torch.device("cuda", torch.cuda.current_device())
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(rows, d_model, generator=gen)
    w1 = torch.randn(d_model, d_ff, generator=gen) / d_model ** 0.5
    w2 = torch.randn(d_ff, d_model, generator=gen) / d_ff ** 0.5
    gamma = torch.rand(d_model, generator=gen) + 0.5
    mine = {"x": x, "w1": w1[:, rank * shard:(rank + 1) * shard].contiguous(),
            "w2": w2[rank * shard:(rank + 1) * shard].contiguous(), "gamma": gamma}

    def heap(t: torch.Tensor) -> torch.Tensor:
        out = hpvm.symmetric.empty(tuple(t.shape), torch.float32)
        out.copy_(t)
        return out

    ours = {k: heap(v) for k, v in mine.items()}
    h, p = hpvm.symmetric.empty((rows, shard), torch.float32), hpvm.symmetric.empty((rows, d_model), torch.float32)
    residual = heap(x)
    theirs = {k: v.to(dev) for k, v in mine.items()}
    t_residual = x.to(dev)
    flat = [ours["x"], ours["w1"], h, ours["w2"], p, residual, ours["gamma"]]
    args = [v for t in flat for v in (t, t.nbytes)] + [rows, d_model, shard]

    def hpvm_step() -> torch.Tensor:
        hpvm.wait(hpvm.launch(mlp_fused, *args))
        return p

    def torch_step() -> torch.Tensor:
        partial = torch.relu(theirs["x"] @ theirs["w1"]) @ theirs["w2"]
        dist.all_reduce(partial, group=nccl)
        t_residual.add_(partial)
        scale = torch.rsqrt(t_residual.pow(2).mean(dim=1, keepdim=True) + EPS)
        return t_residual * scale * theirs["gamma"]

    with hpvm.runtime("gpu"):
        ours_out, theirs_out = hpvm_step().clone(), torch_step()
        torch.cuda.synchronize()
        error = float((ours_out - theirs_out).abs().max())
        scale = float(theirs_out.abs().max())
        if not error <= 1e-3 * max(scale, 1.0):
            raise SystemExit(f"rank {rank}: the graph's step differs from torch's by {error}")
        times: dict[str, list[float]] = {"hpvm-py graph": [], "torch + NCCL": []}
        calls = {"hpvm-py graph": hpvm_step, "torch + NCCL": torch_step}
        for _ in range(steps):
            for name, step in calls.items():
                torch.cuda.synchronize()
                dist.barrier(group=nccl)
                torch.cuda.synchronize()
                start = time.perf_counter()
                step()
                torch.cuda.synchronize()
                times[name].append((time.perf_counter() - start) * 1e6)
        if trace:
            with hpvm.profile(trace):
                for _ in range(10):
                    hpvm_step()
                torch.cuda.synchronize()
    if rank == 0 and trace:
        _print_profile(trace)
    if rank == 0:
        medians = {k: statistics.median(v[steps // 5:]) for k, v in times.items()}
        print(f"tensor-parallel MLP step, f32, {world} GPUs, rows {rows}, d_model {d_model}, d_ff {d_ff} "
              f"(checked: max difference {error:.1e})")
        for name, value in medians.items():
            print(f"  {name:>14}: {value:8.1f} us per step")
        print(f"  torch / hpvm-py: {medians['torch + NCCL'] / medians['hpvm-py graph']:.2f}x")
    hpvm.distributed.finalize()


def _print_profile(trace: str) -> None:
    """Total and count per (category, name) of the trace's complete events, largest first."""
    totals: dict[tuple[str, str], list[float]] = {}
    for event in json.loads(open(trace).read())["traceEvents"]:
        if event.get("ph") == "X":
            entry = totals.setdefault((event.get("cat", ""), event.get("name", "")), [0.0, 0])
            entry[0] += float(event.get("dur", 0))
            entry[1] += 1
    print("profile of 10 graph steps (rank 0): category, name, total us, events")
    for (cat, name), (total, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:16]:
        print(f"  {cat:>12} {name[:48]:<48} {total:10.1f} {count:5d}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--d-model", type=int, default=1024)
    parser.add_argument("--d-ff", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--profile", metavar="TRACE", help="also profile 10 graph steps into TRACE")
    options = parser.parse_args()
    main(options.rows, options.d_model, options.d_ff, options.steps, options.profile)
