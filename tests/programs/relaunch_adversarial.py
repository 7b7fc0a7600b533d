"""Graphs for tests/test_relaunch_adversarial.py: relaunched many times while the host changes
scalars, buffers and tracking between launches; every result is compared with NumPy."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i1, i32, i64


@hpvm.leaf
def affine(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32, c: f64,
           flip: i1):
    i = hpvm.instance_id(0)
    v = y[i] * k + x[i] + hpvm.f32(c)
    if flip:
        v = -v
    y[i] = v


@hpvm.graph
def affine_root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32,
                c: f64, flip: i1):
    """y[:n] = +-(y * k + x + f32(c))."""
    hpvm.node(affine, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, c=c, flip=flip)


@hpvm.leaf
def scale_into(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return hpvm.num_instances(0)


@hpvm.leaf
def total(count: i64, y: In[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64) -> f32:
    s = 0.0
    for i in range(count):
        s += y[i]
    z[0] = s
    return s


@hpvm.leaf
def times(v: f32, m: f32) -> f32:
    return v * m


@hpvm.graph
def sum_chain(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64,
              z: InOut[Ptr[f32]], z_bytes: i64, n: i64, k: f32, m: f32) -> f32:
    """y[:n] = x * k; z[0] = sum(y[:n]); returns z[0] * m (three leaves, computed uniforms)."""
    a = hpvm.node(scale_into, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)
    s = hpvm.node(total, count=hpvm.all_to_all(a.out[0]), y=y, y_bytes=y_bytes, z=z,
                  z_bytes=z_bytes)
    return hpvm.node(times, v=s.out[0], m=m).out[0]


@hpvm.leaf
def head(at: In[Ptr[i64]], at_bytes: i64) -> i64:
    return at[0]


@hpvm.leaf
def prefix(count: i64, x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    for i in range(count):
        y[i] = x[i] * k + 1.0


@hpvm.graph
def data_prefix(at: In[Ptr[i64]], at_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    """y[:at[0]] = x * k + 1: the count comes from data (out of bounds when at[0] is too big)."""
    h = hpvm.node(head, at=at, at_bytes=at_bytes)
    hpvm.node(prefix, count=h.out[0], x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


@hpvm.leaf
def block_axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, k: f32):
    this = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(this)) * \
        hpvm.get_num_node_instances_x(this) + hpvm.get_node_instance_id_x(this)
    if i < n:
        y[i] = y[i] + x[i] * k


@hpvm.graph
def blocks_of(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64,
              lanes: i64, k: f32):
    hpvm.node(block_axpy, grid=lanes, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n, k=k)


@hpvm.graph
def blocked(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64,
            lanes: i64, k: f32):
    """y[:n] += x * k over (n + lanes - 1) // lanes blocks of `lanes` (a root internal node)."""
    hpvm.node(blocks_of, grid=(n + lanes - 1) // lanes, x=x, x_bytes=x_bytes, y=y,
              y_bytes=y_bytes, n=n, lanes=lanes, k=k)


@hpvm.leaf
def scaled(x: In[Ptr[f32]], x_bytes: i64, k: f32) -> f32:
    return x[hpvm.instance_id(0)] * k


@hpvm.leaf
def put_plus(v: f32, y: Out[Ptr[f32]], y_bytes: i64, c: f32):
    y[hpvm.instance_id(0)] = v + c


@hpvm.graph
def two_kernels(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, k: f32,
                c: f32):
    """y[:n] = x * k + c over a one-to-one edge."""
    a = hpvm.node(scaled, grid=n, x=x, x_bytes=x_bytes, k=k)
    hpvm.node(put_plus, grid=n, v=a.out[0], y=y, y_bytes=y_bytes, c=c)


@hpvm.leaf
def acc_i32(h: InOut[Ptr[i32]], h_bytes: i64, step: i32):
    i = hpvm.instance_id(0)
    h[i] = h[i] + step * i


@hpvm.graph
def accumulate(h: InOut[Ptr[i32]], h_bytes: i64, n: i64, step: i32):
    """h[i] += step * i for i < n (an InOut accumulator, integer scalar)."""
    hpvm.node(acc_i32, grid=n, h=h, h_bytes=h_bytes, step=step)
