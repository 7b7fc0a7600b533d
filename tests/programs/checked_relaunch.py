"""The graph of tests/test_checked_relaunch.py: a gather through indices (its kernel is the
bounds-checked one: the indices come from data)."""
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


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


@hpvm.graph
def gather_stream(src: In[Ptr[f32]], src_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
                  out: Out[Ptr[f32]], out_bytes: i64, n: i64):
    """The gather as a stream: each item its own indices and output."""
    hpvm.node(gather, grid=n, src=src, src_bytes=src_bytes, at=hpvm.streaming(at),
              at_bytes=at_bytes, out=hpvm.streaming(out), out_bytes=out_bytes)
