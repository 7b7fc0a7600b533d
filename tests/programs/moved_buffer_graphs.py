"""Graphs for tests/test_stream_moved_buffers.py: a buffer bound with streaming into one stage and kept
from the first push by another, and an internal-node stage that keeps its buffers."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def scale_by(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> f32:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return k


@hpvm.leaf
def add_into(k: f32, x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i]


@hpvm.graph
def scaled_plus_first(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32,
                      n: i64):
    """y = x * k, then y += the first push's x: x streams into the first stage only."""
    s = hpvm.streaming
    a = hpvm.node(scale_by, grid=n, x=s(x), x_bytes=x_bytes, y=s(y), y_bytes=y_bytes, k=s(k))
    hpvm.node(add_into, grid=n, k=s(hpvm.all_to_all(a.out[0])), x=x, x_bytes=x_bytes, y=s(y),
              y_bytes=y_bytes)


@hpvm.leaf
def axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i] * k


@hpvm.graph
def inner_update(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


@hpvm.graph
def nested_update(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64,
                  k: f32):
    """y += x * k in an internal-node stage (run by a thread of its own), every bind kept from
    the first push."""
    hpvm.node(inner_update, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n, k=k)
