"""Block reduction with barriers, then a final sum ordered by an all-to-all edge.

Stage 1 (internal node, one instance per block) holds a leaf of BLOCK instances that load a block
into scratch memory and halve it with barriers in between: a tree reduction, wrong without the
barriers. Each block writes its partial sum. Stage 2 (one instance) adds the partials; the
all-to-all edge from stage 1 orders it after every block.
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64

BLOCK = 128


@hpvm.leaf
def block_sum(x: In[Ptr[f32]], x_bytes: i64, partial: Out[Ptr[f32]], partial_bytes: i64,
              n: i64) -> i64:
    scratch = hpvm.malloc(BLOCK * 4, f32)
    me = hpvm.get_node()
    lid = hpvm.get_node_instance_id_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    i = blk * BLOCK + lid
    scratch[lid] = x[i] if i < n else 0.0
    hpvm.barrier()
    stride = BLOCK // 2
    while stride > 0:
        if lid < stride:
            scratch[lid] += scratch[lid + stride]
        hpvm.barrier()
        stride //= 2
    if lid == 0:
        partial[blk] = scratch[0]
    return hpvm.get_num_node_instances_x(hpvm.get_parent_node(me))


@hpvm.graph
def blocks(x: In[Ptr[f32]], x_bytes: i64, partial: Out[Ptr[f32]], partial_bytes: i64,
           n: i64) -> i64:
    leaf = hpvm.node(block_sum, grid=BLOCK, x=x, x_bytes=x_bytes, partial=partial,
                     partial_bytes=partial_bytes, n=n)
    return leaf.out[0]


@hpvm.leaf
def finish(nblocks: i64, partial: InOut[Ptr[f32]], partial_bytes: i64) -> f32:
    total = 0.0
    for b in range(nblocks):
        total += partial[b]
    return total


@hpvm.graph
def root(x: In[Ptr[f32]], x_bytes: i64, partial: InOut[Ptr[f32]], partial_bytes: i64,
         n: i64) -> f32:
    stage1 = hpvm.node(blocks, grid=(n + BLOCK - 1) // BLOCK, x=x, x_bytes=x_bytes,
                       partial=partial, partial_bytes=partial_bytes, n=n)
    stage2 = hpvm.node(finish, nblocks=hpvm.all_to_all(stage1.out[0]), partial=partial,
                       partial_bytes=partial_bytes)
    return stage2.out[0]


def main(target: str | None = None, n: int = 100_000) -> None:
    rng = np.random.default_rng()
    x = rng.random(n, dtype=np.float32)
    nblocks = (n + BLOCK - 1) // BLOCK
    partial = np.zeros(nblocks, dtype=np.float32)
    with hpvm.runtime(target):
        total = hpvm.wait(hpvm.launch(root, x, x.nbytes, partial, partial.nbytes, n))
        hpvm.request_memory(partial)
    padded = np.zeros(nblocks * BLOCK, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(partial, padded.reshape(nblocks, BLOCK).sum(axis=1, dtype=np.float64),
                               rtol=1e-5)
    np.testing.assert_allclose(total, x.sum(dtype=np.float64), rtol=1e-4)
    print(f"reduction: {n} values in {nblocks} blocks, sum {float(total):.3f} OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 100_000)
    main(args.target, args.size)
