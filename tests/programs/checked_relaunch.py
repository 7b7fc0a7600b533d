"""Graphs of tests/test_checked_relaunch.py: one writes an index on the device, the other gathers
through the indices (its kernel is the bounds-checked one: the indices come from data)."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def put_index(at: InOut[Ptr[i64]], at_bytes: i64, where: i64, value: i64):
    at[where] = value


@hpvm.graph
def set_index(at: InOut[Ptr[i64]], at_bytes: i64, where: i64, value: i64):
    hpvm.node(put_index, at=at, at_bytes=at_bytes, where=where, value=value)


@hpvm.leaf
def gather(src: In[Ptr[f32]], src_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
           out: Out[Ptr[f32]], out_bytes: i64):
    i = hpvm.instance_id(0)
    out[i] = src[at[i]]  # oob:gather


@hpvm.graph
def gather_all(src: In[Ptr[f32]], src_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
               out: Out[Ptr[f32]], out_bytes: i64, n: i64):
    hpvm.node(gather, grid=n, src=src, src_bytes=src_bytes, at=at, at_bytes=at_bytes, out=out,
              out_bytes=out_bytes)
