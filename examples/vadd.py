"""Vector addition: one leaf replicated n times, c[i] = a[i] + b[i]."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
         c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + b[i]


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
         c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes)


def main(target: str | None = None, n: int = 1 << 20) -> None:
    rng = np.random.default_rng()
    a = rng.random(n, dtype=np.float32)
    b = rng.random(n, dtype=np.float32)
    c = np.empty(n, dtype=np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
    np.testing.assert_array_equal(c, a + b)
    print(f"vadd: {n} elements OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 1 << 20)
    main(args.target, args.size)
