"""SAXPY: y = alpha * x + y, with a grid rounded up to whole blocks and a bounds guard."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

BLOCK = 256


@hpvm.leaf
def saxpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    i = hpvm.instance_id(0)
    if i < n:
        y[i] = alpha * x[i] + y[i]


@hpvm.graph
def root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    # a grid of whole blocks, as a GPU launch would round it; the leaf guards the tail
    hpvm.node(saxpy, grid=(n + BLOCK - 1) // BLOCK * BLOCK, x=x, x_bytes=x_bytes, y=y,
              y_bytes=y_bytes, alpha=alpha, n=n)


def main(target: str | None = None, n: int = 1_000_003) -> None:
    rng = np.random.default_rng()
    x = rng.random(n, dtype=np.float32)
    y = rng.random(n, dtype=np.float32)
    expected = np.float32(2.5) * x + y
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, x, x.nbytes, y, y.nbytes, 2.5, n))
        hpvm.request_memory(y)
    np.testing.assert_array_equal(y, expected)
    print(f"saxpy: {n} elements OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 1_000_003)
    main(args.target, args.size)
