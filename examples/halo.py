"""Heat diffusion along a ring-shaped rod split over the ranks: each rank keeps its cells on the
symmetric heap and reads its neighbours' edge cells with `hpvm.remote_load` (the leaf device API).
An all-reduce of the total heat ends every step, so no rank reads a cell its neighbour has not
written yet; the total is conserved. Each rank checks its cells against a NumPy run of the whole
rod.

    mpiexec -n 2 python examples/halo.py [--target cpu|python] [--cells N] [--steps S]
    python examples/halo.py                 (one rank: the whole ring)
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import argparse

import numpy as np
import torch

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64

ALPHA = 0.25
TOTAL = hpvm.comm.all_reduce(f32)


@hpvm.leaf
def diffuse(u: In[Ptr[f32]], u_bytes: i64, v: Out[Ptr[f32]], v_bytes: i64, heat: InOut[Ptr[f32]],
            heat_bytes: i64, n: i64, me: i32, world: i32):
    i = hpvm.instance_id(0)
    left = u[i - 1] if i > 0 else hpvm.remote_load(u, n - 1, (me + world - 1) % world)
    right = u[i + 1] if i < n - 1 else hpvm.remote_load(u, 0, (me + 1) % world)
    cell = u[i] + ALPHA * (left - 2.0 * u[i] + right)
    v[i] = cell
    hpvm.atomic_add(heat, 0, cell)


@hpvm.graph
def step(u: In[Ptr[f32]], u_bytes: i64, v: Out[Ptr[f32]], v_bytes: i64, heat: InOut[Ptr[f32]],
         heat_bytes: i64, n: i64, me: i32, world: i32):
    hpvm.node(diffuse, grid=n, u=u, u_bytes=u_bytes, v=v, v_bytes=v_bytes, heat=heat,
              heat_bytes=heat_bytes, n=n, me=me, world=world)
    hpvm.node(TOTAL, buf=heat, buf_bytes=heat_bytes)  # after diffuse: siblings fire in creation order


def reference(rod: np.ndarray, steps: int) -> np.ndarray:
    u = rod.astype(np.float64)
    for _ in range(steps):
        u = u + ALPHA * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1))
    return u


def main(target: str | None = None, cells: int = 1000, steps: int = 20) -> None:
    hpvm.distributed.init(device=target)  # the heap where the target's nodes run
    me, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    rod = np.random.default_rng(1).random(cells * world).astype(np.float32)  # the same on every rank
    u = hpvm.symmetric.empty(cells, torch.float32)
    v = hpvm.symmetric.empty(cells, torch.float32)
    heat = hpvm.symmetric.zeros(1, torch.float32)
    u.copy_(torch.from_numpy(rod[me * cells:(me + 1) * cells]))
    with hpvm.runtime(target):
        # no instances, just the all-reduce: every rank's cells are in place before anyone reads
        hpvm.wait(hpvm.launch(step, u, u.nbytes, v, v.nbytes, heat, heat.nbytes, 0, me, world))
        for _ in range(steps):
            heat.zero_()
            hpvm.wait(hpvm.launch(step, u, u.nbytes, v, v.nbytes, heat, heat.nbytes, cells, me, world))
            u, v = v, u
    want = reference(rod, steps)
    assert np.allclose(u.numpy(), want[me * cells:(me + 1) * cells], rtol=1e-4, atol=1e-5), \
        f"rank {me}: the rod differs from the NumPy reference"
    assert abs(float(heat[0]) - rod.astype(np.float64).sum()) < 1e-3 * cells * world, \
        f"rank {me}: heat not conserved: {float(heat[0])} != {rod.sum()}"
    print(f"rank {me} of {world}: {cells} cells x {steps} steps match NumPy; total heat {float(heat[0]):.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "python"), default=None)
    parser.add_argument("--cells", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=20)
    options = parser.parse_args()
    main(options.target, options.cells, options.steps)
