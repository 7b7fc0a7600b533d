"""A tensor-parallel MLP block as one dataflow graph, on every rank:

    h = relu(x @ w1[:, shard])          sharded matmul (this rank's columns of w1)
    p = h @ w2[shard, :]                sharded matmul (this rank's rows of w2): a partial sum
    residual = x + all_reduce_sum(p)    the all-reduce, fused with
    out = rmsnorm(residual) * gamma     the RMSNorm (hpvm.comm.all_reduce_rmsnorm)

`--unfused` runs the all-reduce node and an RMSNorm leaf instead of the fused node. Each rank checks
the result against a single-process NumPy reference of the whole (unsharded) block.

    mpiexec -n 2 python examples/tp_mlp.py [--target cpu|python|gpu|nvptx] [--rows R] [--unfused]

On the cpu and python targets the ranks are CPU ranks (the heap in shared memory); on gpu and
nvptx each rank runs on its GPU (the heap on the device).
"""
from __future__ import annotations

import argparse
import math

import numpy as np
import torch

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64

EPS = 1e-5


@hpvm.leaf
def up_proj(x: In[Ptr[f32]], x_bytes: i64, w1: In[Ptr[f32]], w1_bytes: i64, h: Out[Ptr[f32]],
            h_bytes: i64, d_model: i64, d_shard: i64) -> i64:
    row = hpvm.instance_id(0)
    col = hpvm.instance_id(1)
    acc = f32(0.0)
    for k in range(d_model):
        acc += x[row * d_model + k] * w1[k * d_shard + col]
    h[row * d_shard + col] = max(acc, f32(0.0))
    return 1


@hpvm.leaf
def down_proj(ready: i64, h: In[Ptr[f32]], h_bytes: i64, w2: In[Ptr[f32]], w2_bytes: i64,
              p: Out[Ptr[f32]], p_bytes: i64, d_model: i64, d_shard: i64) -> i64:
    row = hpvm.instance_id(0)
    col = hpvm.instance_id(1)
    acc = f32(0.0)
    for k in range(d_shard):
        acc += h[row * d_shard + k] * w2[k * d_model + col]
    p[row * d_model + col] = acc
    return 1


@hpvm.leaf
def add_rmsnorm(ready: i64, p: InOut[Ptr[f32]], p_bytes: i64, residual: InOut[Ptr[f32]],
                residual_bytes: i64, gamma: In[Ptr[f32]], gamma_bytes: i64, hidden: i64):
    row = hpvm.instance_id(0)
    squares = f32(0.0)
    for k in range(hidden):
        r = residual[row * hidden + k] + p[row * hidden + k]
        residual[row * hidden + k] = r
        squares += r * r
    scale = f32(1.0) / math.sqrt(squares / f32(hidden) + f32(EPS))
    for k in range(hidden):
        p[row * hidden + k] = residual[row * hidden + k] * scale * gamma[k]


ALL_REDUCE = hpvm.comm.all_reduce(f32)
ALL_REDUCE_RMSNORM = hpvm.comm.all_reduce_rmsnorm(f32, eps=EPS)


@hpvm.graph
def mlp_fused(x: In[Ptr[f32]], x_bytes: i64, w1: In[Ptr[f32]], w1_bytes: i64, h: InOut[Ptr[f32]],
              h_bytes: i64, w2: In[Ptr[f32]], w2_bytes: i64, p: InOut[Ptr[f32]], p_bytes: i64,
              residual: InOut[Ptr[f32]], residual_bytes: i64, gamma: In[Ptr[f32]], gamma_bytes: i64,
              rows: i64, d_model: i64, d_shard: i64):
    up = hpvm.node(up_proj, grid=(rows, d_shard), x=x, x_bytes=x_bytes, w1=w1, w1_bytes=w1_bytes,
                   h=h, h_bytes=h_bytes, d_model=d_model, d_shard=d_shard)
    hpvm.node(down_proj, grid=(rows, d_model), ready=hpvm.all_to_all(up.out[0]), h=h, h_bytes=h_bytes,
              w2=w2, w2_bytes=w2_bytes, p=p, p_bytes=p_bytes, d_model=d_model, d_shard=d_shard)
    # runs after down_proj: unordered siblings fire in creation order (docs/distributed.md)
    hpvm.node(ALL_REDUCE_RMSNORM, x=p, x_bytes=p_bytes, residual=residual,
              residual_bytes=residual_bytes, weight=gamma, weight_bytes=gamma_bytes, hidden=d_model)


@hpvm.graph
def mlp_unfused(x: In[Ptr[f32]], x_bytes: i64, w1: In[Ptr[f32]], w1_bytes: i64, h: InOut[Ptr[f32]],
                h_bytes: i64, w2: In[Ptr[f32]], w2_bytes: i64, p: InOut[Ptr[f32]], p_bytes: i64,
                residual: InOut[Ptr[f32]], residual_bytes: i64, gamma: In[Ptr[f32]], gamma_bytes: i64,
                rows: i64, d_model: i64, d_shard: i64):
    up = hpvm.node(up_proj, grid=(rows, d_shard), x=x, x_bytes=x_bytes, w1=w1, w1_bytes=w1_bytes,
                   h=h, h_bytes=h_bytes, d_model=d_model, d_shard=d_shard)
    down = hpvm.node(down_proj, grid=(rows, d_model), ready=hpvm.all_to_all(up.out[0]), h=h,
                     h_bytes=h_bytes, w2=w2, w2_bytes=w2_bytes, p=p, p_bytes=p_bytes,
                     d_model=d_model, d_shard=d_shard)
    hpvm.node(ALL_REDUCE, buf=p, buf_bytes=p_bytes)
    hpvm.node(add_rmsnorm, grid=rows, ready=hpvm.all_to_all(down.out[0]), p=p, p_bytes=p_bytes,
              residual=residual, residual_bytes=residual_bytes, gamma=gamma,
              gamma_bytes=gamma_bytes, hidden=d_model)


def reference(x: np.ndarray, w1: np.ndarray, w2: np.ndarray, gamma: np.ndarray) -> np.ndarray:
    """The whole block in one process, in float64."""
    y = x + np.maximum(x @ w1, 0.0) @ w2
    return y / np.sqrt((y ** 2).mean(axis=1, keepdims=True) + EPS) * gamma


def main(target: str | None = None, rows: int = 16, d_model: int = 64, d_ff: int = 256,
         fused: bool = True, seed: int = 1234) -> float:
    """Runs on every rank; returns the largest error against the reference."""
    hpvm.distributed.init(device=target)  # the heap where the target's nodes run
    rank, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    if d_ff % world:
        raise SystemExit(f"d_ff={d_ff} must divide among {world} ranks")
    shard = d_ff // world
    rng = np.random.default_rng(seed)  # the same weights and input on every rank
    x = rng.standard_normal((rows, d_model))
    w1 = rng.standard_normal((d_model, d_ff)) / np.sqrt(d_model)
    w2 = rng.standard_normal((d_ff, d_model)) / np.sqrt(d_ff)
    gamma = rng.uniform(0.5, 1.5, d_model)

    def heap(a: np.ndarray) -> torch.Tensor:  # every buffer of the graph lives on the heap
        t = hpvm.symmetric.empty(a.shape, torch.float32)
        t.copy_(torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)))
        return t

    args = [heap(x), heap(w1[:, rank * shard:(rank + 1) * shard]),
            hpvm.symmetric.empty((rows, shard), torch.float32),
            heap(w2[rank * shard:(rank + 1) * shard, :]),
            hpvm.symmetric.empty((rows, d_model), torch.float32), heap(x), heap(gamma)]
    out = args[4]
    with hpvm.runtime(target):
        flat = [v for t in args for v in (t, t.nbytes)]
        hpvm.wait(hpvm.launch(mlp_fused if fused else mlp_unfused, *flat, rows, d_model, shard))
    error = float(np.abs(out.cpu().numpy() - reference(x, w1, w2, gamma)).max())
    if not error < 1e-4:
        raise SystemExit(f"rank {rank}: tp_mlp differs from the reference by {error}")
    print(f"tp_mlp rank {rank}/{world}: {'fused' if fused else 'unfused'} all-reduce + rmsnorm, "
          f"{rows}x{d_model} (d_ff {d_ff}) OK, max error {error:.2e}", flush=True)
    return error


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "python", "gpu", "nvptx"), default=None)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--unfused", action="store_true")
    options = parser.parse_args()
    main(options.target, rows=options.rows, fused=not options.unfused)
