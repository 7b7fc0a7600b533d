"""A leaf whose lazy `and` guards a load, with a data-dependent index that no bounds proof can
see, so compiled targets run their checked variant (tests/backends/test_triton.py)."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def guarded(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, out: Out[Ptr[f32]],
            out_bytes: i64, n: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    j = idx[i % 4]
    if i < n and a[i] > 0.5:
        out[i] = a[j]
    elif i < n:
        out[i] = -1.0


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, out: Out[Ptr[f32]],
         out_bytes: i64, n: i64, grid: i64):
    hpvm.node(guarded, grid=grid, a=a, a_bytes=a_bytes, idx=idx, idx_bytes=idx_bytes, out=out,
              out_bytes=out_bytes, n=n)
