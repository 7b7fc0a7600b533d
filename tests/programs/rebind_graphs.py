"""Graphs for tests/test_rebind.py: launched with ever other buffers of the same sizes, a recorded
launch is copied and pointed at them (rt/recording.py, Recording.rebound)."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i] * k


@hpvm.graph
def update(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y += x * k over n instances: the buffers are the launch's only state."""
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


@hpvm.leaf
def gather(x: In[Ptr[f32]], x_bytes: i64, at: In[Ptr[i64]], at_bytes: i64, y: Out[Ptr[f32]],
           y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = x[at[i]] * k


@hpvm.graph
def gather_scaled(x: In[Ptr[f32]], x_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
                  y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y = x[at] * k: the index comes from data, so the kernel is the checked one."""
    hpvm.node(gather, grid=n, x=x, x_bytes=x_bytes, at=at, at_bytes=at_bytes, y=y, y_bytes=y_bytes,
              k=k)


@hpvm.leaf
def scaled(x: In[Ptr[f32]], x_bytes: i64, k: f32) -> f32:
    return x[hpvm.instance_id(0)] * k


@hpvm.leaf
def put(v: f32, y: Out[Ptr[f32]], y_bytes: i64):
    y[hpvm.instance_id(0)] = v + 1.0


@hpvm.graph
def two_kernels(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y = x * k + 1 over two kernels joined by a one-to-one edge (on a GPU the values stay there)."""
    a = hpvm.node(scaled, grid=n, x=x, x_bytes=x_bytes, k=k)
    hpvm.node(put, grid=n, v=a.out[0], y=y, y_bytes=y_bytes)


@hpvm.leaf
def put_scalar(y: Out[Ptr[f32]], y_bytes: i64, k: f32):
    y[hpvm.instance_id(0)] = k


@hpvm.graph
def fill(y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    """y[:n] = k: the scalar's own bits reach memory (-0.0 and NaN included)."""
    hpvm.node(put_scalar, grid=n, y=y, y_bytes=y_bytes, k=k)
