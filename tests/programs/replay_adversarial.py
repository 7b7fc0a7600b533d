"""Graphs for tests/test_replay_adversarial.py: launched again and again while the host changes
what it passes in ways a cached check could miss."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i1, i32, i64

from .rebind_graphs import axpy, update  # noqa: F401 - y[:n] += x[:n] * k, launched here too


@hpvm.leaf
def put(y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    y[hpvm.instance_id(0)] = k * 1.0


@hpvm.graph
def fill(y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y[:n] = k."""
    hpvm.node(put, grid=n, y=y, y_bytes=y_bytes, k=k)


@hpvm.leaf
def steer(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, mode: i32, flag: i1,
          k: f32):
    i = hpvm.instance_id(0)
    if mode == 0:
        y[i] = x[i] * k
    elif mode < 0:
        y[i] = x[i] + k
    else:
        y[i] = y[i] - x[i]
    if flag:
        y[i] = y[i] * 2.0


@hpvm.graph
def steered(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, mode: i32,
            flag: i1, k: f32):
    """An integer and a flag choose what the kernel computes (the recording's key)."""
    hpvm.node(steer, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, mode=mode, flag=flag, k=k)


@hpvm.leaf
def add_k(y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = y[i] + k


@hpvm.leaf
def mul_m(z: InOut[Ptr[f32]], z_bytes: i64, m: f32):
    i = hpvm.instance_id(0)
    z[i] = z[i] * m


@hpvm.graph
def two_steps(y: InOut[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, n: i64, k: f32,
              m: f32, unused: f32):
    """Two kernels, each with its own float; `unused` reaches no node."""
    hpvm.node(add_k, grid=n, y=y, y_bytes=y_bytes, k=k)
    hpvm.node(mul_m, grid=n, z=z, z_bytes=z_bytes, m=m)


@hpvm.leaf
def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return hpvm.num_instances(0)


@hpvm.graph
def scale_stream(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    st = hpvm.streaming
    hpvm.node(scale, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes), k=st(k))
