"""Leaves whose guarded loads are a row's neighbours at constant offsets, for the gpu target's
quads (backends/triton/quads.py). `window_root` weighs a[at - 3] .. a[at + 3]; its blocks are
`tx` wide (an argument), so one leaf makes launches whose quads fit (tx a multiple of four) and
launches whose quads do not. The guard is `lo <= i < nlim and jlo <= j < mlim`, as in
row_guards.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

TY = 4


@hpvm.leaf
def window_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                lo: i64, nlim: i64, jlo: i64, mlim: i64, wm3: f32, wm2: f32, wm1: f32, w0: f32,
                wp1: f32, wp2: f32, wp3: f32):
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * hpvm.get_num_node_instances_x(me) \
        + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block) * TY + hpvm.get_node_instance_id_y(me)
    at = j * n + i
    if lo <= i and i < nlim and jlo <= j and j < mlim:
        out[at] = (a[at - 3] * wm3 + a[at - 2] * wm2 + a[at - 1] * wm1 + a[at] * w0
                   + a[at + 1] * wp1 + a[at + 2] * wp2 + a[at + 3] * wp3)


@hpvm.graph
def window_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                 lo: i64, nlim: i64, jlo: i64, mlim: i64, wm3: f32, wm2: f32, wm1: f32, w0: f32,
                 wp1: f32, wp2: f32, wp3: f32, tx: i64):
    hpvm.node(window_leaf, grid=(tx, TY), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n,
              lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, wm3=wm3, wm2=wm2, wm1=wm1, w0=w0, wp1=wp1,
              wp2=wp2, wp3=wp3)


@hpvm.graph
def window_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                m: i64, lo: i64, nlim: i64, jlo: i64, mlim: i64, wm3: f32, wm2: f32, wm1: f32,
                w0: f32, wp1: f32, wp2: f32, wp3: f32, tx: i64):
    hpvm.node(window_block, grid=((n + tx - 1) // tx, (m + TY - 1) // TY), a=a, a_bytes=a_bytes,
              out=out, out_bytes=out_bytes, n=n, lo=lo, nlim=nlim, jlo=jlo, mlim=mlim, wm3=wm3,
              wm2=wm2, wm1=wm1, w0=w0, wp1=wp1, wp2=wp2, wp3=wp3, tx=tx)


@hpvm.leaf
def after_store_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                     b: In[Ptr[f32]], b_bytes: i64):
    """Two groups (a and b), a load in a short-circuit operand, and loads after a store."""
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * 8 + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block)
    if 0 < i and i < n - 1 and 0 < j:
        at = j * n + i
        u = a[at - 1] + a[at + 1] + b[at + 1] + b[at - 1]
        v = a[at + 2] if u > 0.0 else a[at - 2]
        out[at] = u + v
        out[at] = out[at] + a[at + 1] + a[at - 1]


@hpvm.graph
def after_store_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                      b: In[Ptr[f32]], b_bytes: i64):
    hpvm.node(after_store_leaf, grid=(8,), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n,
              b=b, b_bytes=b_bytes)


@hpvm.graph
def after_store_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                     m: i64, b: In[Ptr[f32]], b_bytes: i64):
    hpvm.node(after_store_block, grid=((n + 7) // 8, m), a=a, a_bytes=a_bytes, out=out,
              out_bytes=out_bytes, n=n, b=b, b_bytes=b_bytes)


@hpvm.graph
def window_stream_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                       m: i64, lo: i64, nlim: i64, jlo: i64, mlim: i64, wm3: f32, wm2: f32,
                       wm1: f32, w0: f32, wp1: f32, wp2: f32, wp3: f32, tx: i64):
    """window_root for a stream whose items bring their own output and guard's rows."""
    hpvm.node(window_block, grid=((n + tx - 1) // tx, (m + TY - 1) // TY), a=a, a_bytes=a_bytes,
              out=hpvm.streaming(out), out_bytes=out_bytes, n=n, lo=lo, nlim=nlim,
              jlo=hpvm.streaming(jlo), mlim=hpvm.streaming(mlim), wm3=wm3, wm2=wm2, wm1=wm1, w0=w0, wp1=wp1,
              wp2=wp2, wp3=wp3, tx=tx)


@hpvm.leaf
def ahead_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
               off: i64, nlim: i64, mlim: i64):
    """Parboil's `+ 1` on x, less `off`: the loads a[at] and a[at + 1] are one and two past the
    16-byte aligned index quads load, which lies before the buffer's start where off is 1."""
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * hpvm.get_num_node_instances_x(me) \
        + hpvm.get_node_instance_id_x(me) + 1 - off
    j = hpvm.get_node_instance_id_y(block) * TY + hpvm.get_node_instance_id_y(me)
    at = j * n + i
    if 0 <= i and i < nlim and j < mlim:
        out[at] = a[at] + a[at + 1] * 2.0


@hpvm.graph
def ahead_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                off: i64, nlim: i64, mlim: i64):
    hpvm.node(ahead_leaf, grid=(8, TY), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n,
              off=off, nlim=nlim, mlim=mlim)


@hpvm.graph
def ahead_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
               m: i64, off: i64, nlim: i64, mlim: i64):
    hpvm.node(ahead_block, grid=((n + 7) // 8, (m + TY - 1) // TY), a=a, a_bytes=a_bytes, out=out,
              out_bytes=out_bytes, n=n, off=off, nlim=nlim, mlim=mlim)
