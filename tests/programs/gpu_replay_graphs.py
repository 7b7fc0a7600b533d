"""Graphs for tests/test_gpu_replay.py and benchmarks/gpu/bench_launch.py: three-leaf chains whose
edges carry per-instance values (they stay on the device in a replay) or a uniform value (read
on the host)."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def load_scaled(x: In[Ptr[f32]], x_bytes: i64, k: f32) -> f32:
    i = hpvm.instance_id(0)
    return x[i] * k


@hpvm.leaf
def shift(v: f32, c: f32) -> f32:
    return v + c


@hpvm.leaf
def store(v: f32, y: Out[Ptr[f32]], y_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    y[i] = v
    return hpvm.num_instances(0)


@hpvm.graph
def chain(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32, c: f32):
    """y = x * k + c, over three kernels joined by one-to-one edges (nothing comes back)."""
    a = hpvm.node(load_scaled, grid=n, x=x, x_bytes=x_bytes, k=k)
    b = hpvm.node(shift, grid=n, v=a.out[0], c=c)
    hpvm.node(store, grid=n, v=b.out[0], y=y, y_bytes=y_bytes)


@hpvm.leaf
def first_of(x: In[Ptr[f32]], x_bytes: i64, k: f32) -> f32:
    return x[0] * k


@hpvm.leaf
def add_to_all(v: f32, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    y[i] = x[i] + v
    return v * 2.0


@hpvm.graph
def broadcast(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32) -> f32:
    """y = x + x[0] * k; returns 2 * x[0] * k: a uniform edge and a root output (read on the host)."""
    a = hpvm.node(first_of, x=x, x_bytes=x_bytes, k=k)
    b = hpvm.node(add_to_all, grid=n, v=hpvm.all_to_all(a.out[0]), x=x, x_bytes=x_bytes, y=y,
                  y_bytes=y_bytes)
    return b.out[0]


@hpvm.leaf
def add_into(u: f32, v: f32, y: Out[Ptr[f32]], y_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    y[i] = u + v
    return hpvm.num_instances(0)


@hpvm.graph
def fan_in(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32, c: f32):
    """y = x * k + x * c: two independent siblings (two streams) and the node that joins them."""
    a = hpvm.node(load_scaled, grid=n, x=x, x_bytes=x_bytes, k=k)
    b = hpvm.node(load_scaled, grid=n, x=x, x_bytes=x_bytes, k=c)
    hpvm.node(add_into, grid=n, u=a.out[0], v=b.out[0], y=y, y_bytes=y_bytes)


@hpvm.leaf
def scale_into(x: In[Ptr[f32]], x_bytes: i64, h: Out[Ptr[f32]], h_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    h[i] = x[i] * k
    return 1


@hpvm.leaf
def add_after(ready: i64, h: In[Ptr[f32]], h_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, c: f32):
    i = hpvm.instance_id(0)
    y[i] = h[i] + c


@hpvm.graph
def ordered(x: In[Ptr[f32]], x_bytes: i64, h: InOut[Ptr[f32]], h_bytes: i64, y: Out[Ptr[f32]],
            y_bytes: i64, n: i64, k: f32, c: f32):
    """y = x * k + c through h; the second node reads h after the first wrote it, ordered by an
    edge whose value it never reads (examples/tp_mlp.py's matmuls are joined so)."""
    a = hpvm.node(scale_into, grid=n, x=x, x_bytes=x_bytes, h=h, h_bytes=h_bytes, k=k)
    hpvm.node(add_after, grid=n, ready=hpvm.all_to_all(a.out[0]), h=h, h_bytes=h_bytes, y=y,
              y_bytes=y_bytes, c=c)
