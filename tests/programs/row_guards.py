"""Leaves under a replicated parent that end in a guard on their coordinates, for the gpu target's
row guards (backends/triton/rowguard.py): the guard's bounds and the load's offset are arguments,
so one leaf makes launches whose loads stay in bounds without the x conjuncts and launches whose
loads would not. The guard is `lo <= i < nlim and jlo <= j < mlim` (limits the bounds proof reads
as they are)."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

TX, TY = 16, 4


@hpvm.leaf
def shift_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64, m: i64,
               lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * TX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block) * TY + hpvm.get_node_instance_id_y(me)
    at = j * n + i
    if lo <= i and i < nlim and jlo <= j and j < mlim:
        out[at] = a[at + dx] * 2.0


@hpvm.leaf
def shift_then_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                    m: i64, lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    """The same with a local assigned under the guard and a second store."""
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * TX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block) * TY + hpvm.get_node_instance_id_y(me)
    if i < nlim and j < mlim and lo <= i and jlo <= j:
        at = j * n + i
        v = a[at + dx] + a[at]
        out[at] = v


@hpvm.graph
def shift_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64, m: i64,
                lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    hpvm.node(shift_leaf, grid=(TX, TY), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n,
              m=m, lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, dx=dx)


@hpvm.graph
def shift_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64, m: i64,
               lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    hpvm.node(shift_block, grid=((n + TX - 1) // TX, (m + TY - 1) // TY), a=a, a_bytes=a_bytes,
              out=out, out_bytes=out_bytes, n=n, m=m, lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, dx=dx)


@hpvm.graph
def shift_then_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                     m: i64, lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    hpvm.node(shift_then_leaf, grid=(TX, TY), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes,
              n=n, m=m, lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, dx=dx)


@hpvm.graph
def shift_then_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                    m: i64, lo: i64, nlim: i64, jlo: i64, mlim: i64, dx: i64):
    hpvm.node(shift_then_block, grid=((n + TX - 1) // TX, (m + TY - 1) // TY), a=a, a_bytes=a_bytes,
              out=out, out_bytes=out_bytes, n=n, m=m, lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, dx=dx)
