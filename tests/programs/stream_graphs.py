"""Small streaming graphs for tests/test_streaming.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return hpvm.num_instances(0)


@hpvm.leaf
def add_one(count: i64, y: InOut[Ptr[f32]], y_bytes: i64) -> f32:
    total = 0.0
    for i in range(count):
        y[i] = y[i] + 1.0
        total += y[i]
    return total


@hpvm.graph
def two_stages(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32, n: i64) -> f32:
    st = hpvm.streaming
    s = hpvm.node(scale, grid=n, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes), k=st(k))
    a = hpvm.node(add_one, count=st(hpvm.all_to_all(s.out[0])), y=st(y), y_bytes=st(y_bytes))
    return a.out[0]


@hpvm.graph
def kept_factor(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32, n: i64) -> f32:
    """k is bound without streaming: the first push's value is used for every item."""
    s = hpvm.node(scale, grid=n, x=hpvm.streaming(x), x_bytes=x_bytes, y=hpvm.streaming(y),
                  y_bytes=y_bytes, k=k)
    a = hpvm.node(add_one, count=hpvm.streaming(hpvm.all_to_all(s.out[0])), y=hpvm.streaming(y),
                  y_bytes=y_bytes)
    return a.out[0]


@hpvm.leaf
def checked_divide(x: In[Ptr[i32]], x_bytes: i64, y: Out[Ptr[i32]], y_bytes: i64, bad: i32) -> i32:
    i = hpvm.instance_id(0)
    y[i] = x[i + bad]  # out of bounds when bad is large: the stage fails
    return 1


@hpvm.leaf
def passthrough(token: i32, y: InOut[Ptr[i32]], y_bytes: i64) -> i32:
    return y[0]


@hpvm.graph
def may_fail(x: In[Ptr[i32]], x_bytes: i64, y: InOut[Ptr[i32]], y_bytes: i64, bad: i32, n: i64) -> i32:
    c = hpvm.node(checked_divide, grid=n, x=hpvm.streaming(x), x_bytes=x_bytes, y=hpvm.streaming(y),
                  y_bytes=y_bytes, bad=hpvm.streaming(bad))
    p = hpvm.node(passthrough, token=hpvm.streaming(hpvm.all_to_all(c.out[0])), y=hpvm.streaming(y),
                  y_bytes=y_bytes)
    return p.out[0]


@hpvm.leaf
def spin(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, work: i64) -> i32:
    """A compute-bound stage: `work` dependent multiply-adds per instance."""
    i = hpvm.instance_id(0)
    v = x[i]
    for _ in range(work):
        v = v * 0.999 + 0.001
    y[i] = v
    return 1


@hpvm.leaf
def spin_next(ready: i32, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, work: i64) -> i32:
    i = hpvm.instance_id(0)
    v = x[i]
    for _ in range(work):
        v = v * 0.999 + 0.001
    y[i] = v
    return ready


@hpvm.graph
def four_stages(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64,
                c: InOut[Ptr[f32]], c_bytes: i64, d: InOut[Ptr[f32]], d_bytes: i64,
                e: Out[Ptr[f32]], e_bytes: i64, n: i64, work: i64) -> i32:
    s = hpvm.streaming
    s1 = hpvm.node(spin, grid=n, x=s(a), x_bytes=a_bytes, y=s(b), y_bytes=b_bytes, work=work)
    s2 = hpvm.node(spin_next, grid=n, ready=s(hpvm.all_to_all(s1.out[0])), x=s(b), x_bytes=b_bytes,
                   y=s(c), y_bytes=c_bytes, work=work)
    s3 = hpvm.node(spin_next, grid=n, ready=s(hpvm.all_to_all(s2.out[0])), x=s(c), x_bytes=c_bytes,
                   y=s(d), y_bytes=d_bytes, work=work)
    s4 = hpvm.node(spin_next, grid=n, ready=s(hpvm.all_to_all(s3.out[0])), x=s(d), x_bytes=d_bytes,
                   y=s(e), y_bytes=e_bytes, work=work)
    return s4.out[0]


@hpvm.graph
def mixed_stages(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64,
                 c: InOut[Ptr[f32]], c_bytes: i64, d: Out[Ptr[f32]], d_bytes: i64, n: i64,
                 work: i64) -> i32:
    """The middle stage on the host (hint "cpu"), the others on the runtime's target."""
    s = hpvm.streaming
    s1 = hpvm.node(spin, grid=n, x=s(a), x_bytes=a_bytes, y=s(b), y_bytes=b_bytes, work=work)
    s2 = hpvm.node(spin_next, grid=n, ready=s(hpvm.all_to_all(s1.out[0])), x=s(b), x_bytes=b_bytes,
                   y=s(c), y_bytes=c_bytes, work=work, hint="cpu")
    s3 = hpvm.node(spin_next, grid=n, ready=s(hpvm.all_to_all(s2.out[0])), x=s(c), x_bytes=c_bytes,
                   y=s(d), y_bytes=d_bytes, work=work)
    return s3.out[0]


@hpvm.graph
def scaled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32, n: i64) -> i64:
    st = hpvm.streaming
    return hpvm.node(scale, grid=n, x=st(x), x_bytes=x_bytes, y=st(y), y_bytes=y_bytes, k=st(k)).out[0]


@hpvm.graph
def scaled_first_source(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32,
                        n: i64) -> i64:
    """x is bound without streaming: every item scales the first push's x."""
    st = hpvm.streaming
    return hpvm.node(scale, grid=n, x=x, x_bytes=x_bytes, y=st(y), y_bytes=y_bytes, k=st(k)).out[0]


@hpvm.leaf
def square(x: In[Ptr[f32]], x_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    return x[i] * x[i]


@hpvm.leaf
def store_plus_one(v: f32, y: Out[Ptr[f32]], y_bytes: i64):
    y[hpvm.instance_id(0)] = v + 1.0


@hpvm.graph
def per_instance_edge(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    """A value per instance on the edge: its consumer cannot be started from a kept launch."""
    s = hpvm.streaming
    sq = hpvm.node(square, grid=n, x=s(x), x_bytes=x_bytes)
    hpvm.node(store_plus_one, grid=n, v=s(sq.out[0]), y=s(y), y_bytes=y_bytes)


# -- whole items (tests/test_stream_items.py) ---------------------------------------------------


@hpvm.leaf
def largest(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    best = x[0]
    for i in range(n):
        best = max(best, x[i])
    return best


@hpvm.leaf
def divide_by(top: f32, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64,
              k: f32) -> f32:
    i = hpvm.instance_id(0)
    y[i] = x[i] / top * k
    return top * k


@hpvm.graph
def normalised(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32,
               n: i64) -> f32:
    """A float result on an edge into a uniform input: read on the device in a whole item."""
    s = hpvm.streaming
    top = hpvm.node(largest, x=s(x), x_bytes=x_bytes, n=s(n))
    d = hpvm.node(divide_by, grid=n, top=s(hpvm.all_to_all(top.out[0])), x=s(x), x_bytes=x_bytes,
                  y=s(y), y_bytes=y_bytes, k=s(k))
    return d.out[0]


@hpvm.leaf
def accumulate(x: In[Ptr[f32]], x_bytes: i64, total: InOut[Ptr[f32]], total_bytes: i64) -> i32:
    i = hpvm.instance_id(0)
    total[i] = total[i] + x[i]
    return 1


@hpvm.leaf
def double_into(ready: i32, total: In[Ptr[f32]], total_bytes: i64, out: Out[Ptr[f32]],
                out_bytes: i64) -> i32:
    i = hpvm.instance_id(0)
    out[i] = total[i] * 2.0
    return ready


@hpvm.graph
def running_total(x: In[Ptr[f32]], x_bytes: i64, total: InOut[Ptr[f32]], total_bytes: i64,
                  out: Out[Ptr[f32]], out_bytes: i64, n: i64) -> i32:
    """Pushing the same `total` with every item: each item reads what the one before wrote."""
    s = hpvm.streaming
    a = hpvm.node(accumulate, grid=n, x=s(x), x_bytes=x_bytes, total=s(total),
                  total_bytes=total_bytes)
    d = hpvm.node(double_into, grid=n, ready=s(hpvm.all_to_all(a.out[0])), total=s(total),
                  total_bytes=total_bytes, out=s(out), out_bytes=out_bytes)
    return d.out[0]


@hpvm.leaf
def first_as_offset(x: In[Ptr[i32]], x_bytes: i64) -> i32:
    return x[0]


@hpvm.leaf
def read_at_offset(offset: i32, x: In[Ptr[i32]], x_bytes: i64, y: Out[Ptr[i32]], y_bytes: i64) -> i32:
    i = hpvm.instance_id(0)
    y[i] = x[i + offset]
    return 1


@hpvm.graph
def offset_from_data(x: In[Ptr[i32]], x_bytes: i64, y: Out[Ptr[i32]], y_bytes: i64, n: i64) -> i32:
    """An index offset read from the data and passed over an edge: never proven in bounds."""
    s = hpvm.streaming
    o = hpvm.node(first_as_offset, x=s(x), x_bytes=x_bytes)
    r = hpvm.node(read_at_offset, grid=n, offset=s(hpvm.all_to_all(o.out[0])), x=s(x),
                  x_bytes=x_bytes, y=s(y), y_bytes=y_bytes)
    return r.out[0]


@hpvm.leaf
def add_scaled(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64, k: f32) -> f32:
    i = hpvm.instance_id(0)
    b[i] = b[i] + a[i] * k
    return k + 1.0


@hpvm.leaf
def fold_into(s: f32, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    c[i] = b[i] * s + c[i]
    return c[i]


@hpvm.graph
def chained_updates(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64,
                    c: InOut[Ptr[f32]], c_bytes: i64, k: f32, n: i64) -> f32:
    """b += a * k, then c += b * (k + 1) (a float read on the device): pushed with buffers drawn
    from a small pool, items alias each other and their own buffers."""
    s = hpvm.streaming
    u = hpvm.node(add_scaled, grid=n, a=s(a), a_bytes=a_bytes, b=s(b), b_bytes=b_bytes, k=s(k))
    f = hpvm.node(fold_into, grid=n, s=s(hpvm.all_to_all(u.out[0])), b=s(b), b_bytes=b_bytes,
                  c=s(c), c_bytes=c_bytes)
    return f.out[0]


# -- failing items and shared accumulators (tests/test_stream_failures.py) -------------------------


@hpvm.leaf
def scale_by(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32) -> f32:
    i = hpvm.instance_id(0)
    y[i] = x[i] * k
    return k


@hpvm.leaf
def shifted_copy(k: f32, y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64,
                 shift: i64) -> f32:
    i = hpvm.instance_id(0)
    z[i] = y[i + shift]  # out of range for a shift past the end: this stage fails
    return k + 1.0


@hpvm.leaf
def plus_one(v: f32, z: InOut[Ptr[f32]], z_bytes: i64) -> f32:
    i = hpvm.instance_id(0)
    z[i] = z[i] + 1.0
    return v * 2.0


@hpvm.graph
def three_stages(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64,
                 z: InOut[Ptr[f32]], z_bytes: i64, k: f32, shift: i64, n: i64) -> f32:
    """y = x * k; z = y shifted by `shift` (the middle stage fails for a shift out of range);
    z += 1. pop() returns (k + 1) * 2, the scalars carried on the edges (read on the device in a
    whole item)."""
    s = hpvm.streaming
    a = hpvm.node(scale_by, grid=n, x=s(x), x_bytes=x_bytes, y=s(y), y_bytes=y_bytes, k=s(k))
    b = hpvm.node(shifted_copy, grid=n, k=s(hpvm.all_to_all(a.out[0])), y=s(y), y_bytes=y_bytes,
                  z=s(z), z_bytes=z_bytes, shift=s(shift))
    c = hpvm.node(plus_one, grid=n, v=s(hpvm.all_to_all(b.out[0])), z=s(z), z_bytes=z_bytes)
    return c.out[0]


@hpvm.leaf
def add_to(acc: InOut[Ptr[f32]], acc_bytes: i64, v: f32):
    acc[hpvm.instance_id(0)] += v


@hpvm.graph
def accumulated(acc: InOut[Ptr[f32]], acc_bytes: i64, v: f32, n: i64):
    """acc += v: pushed with the same acc every time, the items must apply in push order."""
    s = hpvm.streaming
    hpvm.node(add_to, grid=n, acc=s(acc), acc_bytes=acc_bytes, v=s(v))


@hpvm.leaf
def reversed_through_scratch(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64,
                             m: i64) -> i64:
    """y[:m] = x[:m] reversed, through scratch of m elements (sized by a scalar, not the grid):
    one instance, so the grid stays the same while m changes."""
    tmp = hpvm.malloc(m * 4, f32)
    for i in range(m):
        tmp[i] = x[i]
    for i in range(m):
        y[i] = tmp[m - 1 - i]
    return m


@hpvm.graph
def scratch_sized_by_m(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64,
                       m: i64) -> i64:
    s = hpvm.streaming
    r = hpvm.node(reversed_through_scratch, x=s(x), x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes),
                  m=s(m))
    return r.out[0]
