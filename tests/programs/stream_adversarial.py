"""Streaming graphs for tests/test_stream_adversarial.py: three pipelined stages, an index read from
the data (never proven in bounds: checked kernels), a scalar steering control flow, an accumulator
that items may share, scalars on the edges; the same run on a host middle stage, through an
internal node, and with kept (non-streaming) binds; and one checked stage adding into a buffer."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def gather_scale(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                 y: Out[Ptr[f32]], y_bytes: i64, k: f32, mode: i32) -> i32:
    i = hpvm.instance_id(0)
    j = idx[i]
    if mode > 0:
        y[i] = x[j] * k
    else:
        y[i] = x[j] - k
    return mode + 1


@hpvm.leaf
def accumulate_t(t: i32, y: In[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]],
                 acc_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    acc[i] = acc[i] + y[i] * hpvm.f32(t)
    return hpvm.f32(t) + 0.5


@hpvm.leaf
def reduce_out(v: f32, acc: In[Ptr[f32]], acc_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
               n: i64) -> f32:
    s = hpvm.f32(0.0)
    for i in range(n):
        s = s + acc[i]
    out[0] = s
    return s * v


@hpvm.graph
def pipe3(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
          y: InOut[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64,
          out: Out[Ptr[f32]], out_bytes: i64, k: f32, mode: i32, n: i64) -> tuple[f32, i32]:
    s = hpvm.streaming
    a = hpvm.node(gather_scale, grid=n, idx=s(idx), idx_bytes=s(idx_bytes), x=s(x),
                  x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes), k=s(k), mode=s(mode))
    b = hpvm.node(accumulate_t, grid=n, t=s(hpvm.all_to_all(a.out[0])), y=s(y),
                  y_bytes=s(y_bytes), acc=s(acc), acc_bytes=s(acc_bytes))
    c = hpvm.node(reduce_out, v=s(hpvm.all_to_all(b.out[0])), acc=s(acc), acc_bytes=s(acc_bytes),
                  out=s(out), out_bytes=s(out_bytes), n=s(n))
    return c.out[0], a.out[0]


@hpvm.graph
def pipe3_mixed(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                y: InOut[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64,
                out: Out[Ptr[f32]], out_bytes: i64, k: f32, mode: i32, n: i64) -> tuple[f32, i32]:
    """The middle stage on the host."""
    s = hpvm.streaming
    a = hpvm.node(gather_scale, grid=n, idx=s(idx), idx_bytes=s(idx_bytes), x=s(x),
                  x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes), k=s(k), mode=s(mode))
    b = hpvm.node(accumulate_t, grid=n, t=s(hpvm.all_to_all(a.out[0])), y=s(y),
                  y_bytes=s(y_bytes), acc=s(acc), acc_bytes=s(acc_bytes), hint="cpu")
    c = hpvm.node(reduce_out, v=s(hpvm.all_to_all(b.out[0])), acc=s(acc), acc_bytes=s(acc_bytes),
                  out=s(out), out_bytes=s(out_bytes), n=s(n))
    return c.out[0], a.out[0]


@hpvm.graph
def acc_inner(t: i32, y: In[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64,
              n: i64) -> f32:
    b = hpvm.node(accumulate_t, grid=n, t=t, y=y, y_bytes=y_bytes, acc=acc, acc_bytes=acc_bytes)
    return b.out[0]


@hpvm.graph
def pipe3_inner(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                y: InOut[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64,
                out: Out[Ptr[f32]], out_bytes: i64, k: f32, mode: i32, n: i64) -> tuple[f32, i32]:
    """The middle stage an internal node (a chain down to the leaf)."""
    s = hpvm.streaming
    a = hpvm.node(gather_scale, grid=n, idx=s(idx), idx_bytes=s(idx_bytes), x=s(x),
                  x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes), k=s(k), mode=s(mode))
    b = hpvm.node(acc_inner, t=s(hpvm.all_to_all(a.out[0])), y=s(y),
                  y_bytes=s(y_bytes), acc=s(acc), acc_bytes=s(acc_bytes), n=s(n))
    c = hpvm.node(reduce_out, v=s(hpvm.all_to_all(b.out[0])), acc=s(acc), acc_bytes=s(acc_bytes),
                  out=s(out), out_bytes=s(out_bytes), n=s(n))
    return c.out[0], a.out[0]


@hpvm.leaf
def gather_add(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
               acc: InOut[Ptr[f32]], acc_bytes: i64) -> i32:
    i = hpvm.instance_id(0)
    acc[i] = acc[i] + x[idx[i]]
    return 1


@hpvm.graph
def gather_into(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                acc: InOut[Ptr[f32]], acc_bytes: i64, n: i64) -> i32:
    """One checked stage (indices from data) adding into acc."""
    s = hpvm.streaming
    a = hpvm.node(gather_add, grid=n, idx=s(idx), idx_bytes=s(idx_bytes), x=s(x),
                  x_bytes=s(x_bytes), acc=s(acc), acc_bytes=s(acc_bytes))
    return a.out[0]


@hpvm.graph
def pipe3_kept(idx: In[Ptr[i32]], idx_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
               y: InOut[Ptr[f32]], y_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64,
               out: Out[Ptr[f32]], out_bytes: i64, k: f32, mode: i32, n: i64) -> tuple[f32, i32]:
    """x, x_bytes and k bound without streaming: every item uses the first push's."""
    s = hpvm.streaming
    a = hpvm.node(gather_scale, grid=n, idx=s(idx), idx_bytes=s(idx_bytes), x=x,
                  x_bytes=x_bytes, y=s(y), y_bytes=s(y_bytes), k=k, mode=s(mode))
    b = hpvm.node(accumulate_t, grid=n, t=s(hpvm.all_to_all(a.out[0])), y=s(y),
                  y_bytes=s(y_bytes), acc=s(acc), acc_bytes=s(acc_bytes))
    c = hpvm.node(reduce_out, v=s(hpvm.all_to_all(b.out[0])), acc=s(acc), acc_bytes=s(acc_bytes),
                  out=s(out), out_bytes=s(out_bytes), n=s(n))
    return c.out[0], a.out[0]


@hpvm.leaf
def scale_count(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return hpvm.num_instances(0)


@hpvm.leaf
def add_one_upto(count: i64, y: InOut[Ptr[f32]], y_bytes: i64) -> f32:
    total = hpvm.f32(0.0)
    for i in range(count):
        y[i] = y[i] + 1.0
        total = total + y[i]
    return total


@hpvm.graph
def kept_edge(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]],
              z_bytes: i64, k: f32, n: i64) -> f32:
    """The edge does not stream: the second stage keeps the first item's count (and, as the edge
    orders only the first item, touches no buffer the first stage writes)."""
    st = hpvm.streaming
    s = hpvm.node(scale_count, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes),
                  k=st(k))
    a = hpvm.node(add_one_upto, count=hpvm.all_to_all(s.out[0]), y=st(z), y_bytes=st(z_bytes))
    return a.out[0]
