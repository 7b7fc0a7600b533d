"""Graphs for tests/test_tracker_adversarial.py: launches and streams over the same host buffers,
which the host reads and writes between them."""
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

from .rebind_graphs import update  # noqa: F401 - y[:n] += x[:n] * k, launched here too


@hpvm.leaf
def times(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = x[i] * k


@hpvm.graph
def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y[:n] = x[:n] * k."""
    hpvm.node(times, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


@hpvm.leaf
def times_forwarded(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return y_bytes


@hpvm.leaf
def plus_one(y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64):
    i = hpvm.instance_id(0)
    z[i] = y[i] + 1.0


@hpvm.graph
def scale_stream(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """One stage: y[:n] = x[:n] * k per item."""
    st = hpvm.streaming
    hpvm.node(times_forwarded, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes),
              k=st(k))


@hpvm.graph
def mixed_stream(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64,
                 z: Out[Ptr[f32]], z_bytes: i64, n: i64, k: f32):
    """y[:n] = x[:n] * k on the runtime's target, then z[:n] = y[:n] + 1 on the cpu: a stream that
    runs stage by stage on a GPU target (its stages are on two devices)."""
    st = hpvm.streaming
    a = hpvm.node(times_forwarded, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y),
                  y_bytes=st(y_bytes), k=st(k))
    hpvm.node(plus_one, grid=n, y=st(y), y_bytes=st(hpvm.all_to_all(a.out[0])), z=st(z),
              z_bytes=st(z_bytes), hint="cpu")
