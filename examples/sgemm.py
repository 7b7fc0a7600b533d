"""Parboil-style SGEMM: C = alpha * A @ B + beta * C (row-major, m x k times k x n).

The root creates a 2-D grid of tile nodes; each tile is an internal node whose child graph is one
16 x 16 leaf. A tile's instances stage 16 x 16 blocks of A and B in scratch memory (malloc) and
synchronise with barrier(), as the CUDA version does with shared memory.
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

TILE = 16


@hpvm.leaf
def sgemm_tile(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
               c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64, alpha: f32, beta: f32):
    tile_a = hpvm.malloc(TILE * TILE * 4, f32)
    tile_b = hpvm.malloc(TILE * TILE * 4, f32)
    me = hpvm.get_node()
    tile = hpvm.get_parent_node(me)
    tx = hpvm.get_node_instance_id_x(me)
    ty = hpvm.get_node_instance_id_y(me)
    col = hpvm.get_node_instance_id_x(tile) * TILE + tx
    row = hpvm.get_node_instance_id_y(tile) * TILE + ty
    acc = 0.0
    for k0 in range(0, k, TILE):
        # every instance reaches the barriers: the guards only choose what is loaded
        tile_a[ty * TILE + tx] = a[row * k + k0 + tx] if row < m and k0 + tx < k else 0.0
        tile_b[ty * TILE + tx] = b[(k0 + ty) * n + col] if k0 + ty < k and col < n else 0.0
        hpvm.barrier()
        for t in range(TILE):
            acc += tile_a[ty * TILE + t] * tile_b[t * TILE + tx]
        hpvm.barrier()
    if row < m and col < n:
        c[row * n + col] = alpha * acc + beta * c[row * n + col]


@hpvm.graph
def tile_graph(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
               c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64, alpha: f32, beta: f32):
    hpvm.node(sgemm_tile, grid=(TILE, TILE), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k, alpha=alpha, beta=beta)


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
         c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64, alpha: f32, beta: f32):
    hpvm.node(tile_graph, grid=((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), a=a,
              a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes, m=m, n=n, k=k,
              alpha=alpha, beta=beta)


def main(target: str | None = None, m: int = 256, n: int = 192, k: int = 160) -> None:
    rng = np.random.default_rng()
    a = rng.random((m, k), dtype=np.float32)
    b = rng.random((k, n), dtype=np.float32)
    c = rng.random((m, n), dtype=np.float32)
    expected = np.float32(1.5) * (a @ b) + np.float32(0.5) * c
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k, 1.5, 0.5))
        hpvm.request_memory(c)
    np.testing.assert_allclose(c, expected, rtol=1e-4, atol=1e-4)
    print(f"sgemm: {m}x{k} @ {k}x{n} OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 256)
    main(args.target, args.size, args.size * 3 // 4, args.size * 5 // 8)
