"""Leaves without replication dims whose loops the gpu target spreads over a program's lanes
(backends/triton/spread.py), and near misses it must leave literal
(tests/backends/test_triton_reduce.py)."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i8, i32, i64, u64


@hpvm.leaf
def extremes(x: In[Ptr[f32]], x_bytes: i64, init: f32, start: i64, stop: i64,
             step: i64) -> tuple[f32, f32, f32, f32]:
    a = init
    b = init
    c = init
    d = init
    for i in range(start, stop, step):  # both operand orders: they differ on NaNs and zeros
        a = max(a, x[i])
        b = max(x[i], b)
        c = min(c, x[i])
        d = min(x[i], d)
    return a, b, c, d


@hpvm.graph
def extremes_root(x: In[Ptr[f32]], x_bytes: i64, init: f32, start: i64, stop: i64,
                  step: i64) -> tuple[f32, f32, f32, f32]:
    r = hpvm.node(extremes, x=x, x_bytes=x_bytes, init=init, start=start, stop=stop, step=step)
    return r.out[0], r.out[1], r.out[2], r.out[3]


@hpvm.leaf
def extremes64(x: In[Ptr[f64]], x_bytes: i64, init: f64, n: i64) -> tuple[f64, f64, f64]:
    hi = init
    lo = init
    for i in range(n):
        v = x[i] * 2.0  # a temporary: per lane
        hi = max(hi, v)
        lo = min(v, lo)
    v = hi - lo  # assigned again before it is read: the loop's last value is not needed
    return hi, lo, v


@hpvm.graph
def extremes64_root(x: In[Ptr[f64]], x_bytes: i64, init: f64, n: i64) -> tuple[f64, f64, f64]:
    r = hpvm.node(extremes64, x=x, x_bytes=x_bytes, init=init, n=n)
    return r.out[0], r.out[1], r.out[2]


@hpvm.leaf
def integer_folds(x: In[Ptr[i32]], x_bytes: i64, y: In[Ptr[i64]], y_bytes: i64, z: In[Ptr[u64]],
                  z_bytes: i64, n: i64, start: i32) -> tuple[i32, i64, i32, i32, i32, i64, i64, i8, u64]:
    s32 = start
    s64 = hpvm.i64(0)
    a = hpvm.i32(-1)
    o = hpvm.i32(0)
    e = hpvm.i32(0)
    hi = hpvm.i64(-5)
    lo = hpvm.i64(5)
    small = hpvm.i8(0)
    bits = hpvm.u64(0)
    for i in range(n - 1, -1, -1):
        s32 += x[i]
        s64 = y[i] * 3 + s64
        a = a & x[i]
        o |= x[i]
        e = x[i] ^ e
        hi = max(hi, y[i])
        lo = min(y[i], lo)
        small += hpvm.i8(x[i])
        bits = bits ^ (z[i] >> hpvm.u64(i % 7))
    return s32, s64, a, o, e, hi, lo, small, bits


@hpvm.graph
def integer_root(x: In[Ptr[i32]], x_bytes: i64, y: In[Ptr[i64]], y_bytes: i64, z: In[Ptr[u64]],
                 z_bytes: i64, n: i64, start: i32) -> tuple[i32, i64, i32, i32, i32, i64, i64, i8, u64]:
    r = hpvm.node(integer_folds, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, z=z, z_bytes=z_bytes,
                  n=n, start=start)
    return r.out[0], r.out[1], r.out[2], r.out[3], r.out[4], r.out[5], r.out[6], r.out[7], r.out[8]


@hpvm.leaf
def gather_max(g: In[Ptr[f32]], g_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, n: i64) -> f32:
    best = 0.0
    for i in range(n):
        best = max(best, g[idx[i]])
    return best


@hpvm.graph
def gather_root(g: In[Ptr[f32]], g_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64, n: i64) -> f32:
    return hpvm.node(gather_max, g=g, g_bytes=g_bytes, idx=idx, idx_bytes=idx_bytes, n=n).out[0]


# -- loops that stay literal --------------------------------------------------------------------


@hpvm.leaf
def float_sum(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    total = 0.0
    for i in range(n):  # float + is not reassociable
        total += x[i]
    return total


@hpvm.leaf
def temporary_after(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    best = 0.0
    v = 0.0
    for i in range(n):
        v = x[i]
        best = max(best, v)
    return best + v  # the last iteration's temporary


@hpvm.leaf
def store_in_body(x: In[Ptr[f32]], x_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, n: i64) -> f32:
    best = 0.0
    for i in range(n):
        out[i] = x[i] * 2.0
        best = max(best, x[i])
    return best


@hpvm.leaf
def with_break(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    best = 0.0
    for i in range(n):
        if x[i] < 0.0:
            break
        best = max(best, x[i])
    return best


@hpvm.leaf
def loop_variable_after(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    best = 0.0
    i = 0
    for i in range(n):
        best = max(best, x[i])
    return best + f32(i)  # the last iteration's value


@hpvm.graph
def literal_root(x: In[Ptr[f32]], x_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
                 n: i64) -> tuple[f32, f32, f32, f32, f32]:
    a = hpvm.node(float_sum, x=x, x_bytes=x_bytes, n=n)
    b = hpvm.node(temporary_after, x=x, x_bytes=x_bytes, n=n)
    c = hpvm.node(store_in_body, x=x, x_bytes=x_bytes, out=out, out_bytes=out_bytes, n=n)
    d = hpvm.node(with_break, x=x, x_bytes=x_bytes, n=n)
    e = hpvm.node(loop_variable_after, x=x, x_bytes=x_bytes, n=n)
    return a.out[0], b.out[0], c.out[0], d.out[0], e.out[0]


# -- one instance per parent instance: the parents are many, the loops short or long -----------

@hpvm.leaf
def row_max(x: In[Ptr[f32]], x_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, w: i64):
    row = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    best = -1e30
    for j in range(w):
        best = max(best, x[row * w + j])
    out[row] = best


@hpvm.graph
def row_block(x: In[Ptr[f32]], x_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, w: i64):
    hpvm.node(row_max, x=x, x_bytes=x_bytes, out=out, out_bytes=out_bytes, w=w)


@hpvm.graph
def rows_root(x: In[Ptr[f32]], x_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, rows: i64, w: i64):
    hpvm.node(row_block, grid=rows, x=x, x_bytes=x_bytes, out=out, out_bytes=out_bytes, w=w)


# -- spread loops that must not be split over several programs per parent instance ------------

@hpvm.leaf
def count_before(x: In[Ptr[f32]], x_bytes: i64, count: InOut[Ptr[i32]], count_bytes: i64, n: i64) -> f32:
    hpvm.atomic_add(count, 0, hpvm.i32(n))  # every program would add again (not a constant:
    # constant counts are privatised, and such leaves are not spread)
    best = -1e30
    for i in range(n):
        best = max(best, x[i])
    return best


@hpvm.leaf
def two_loops(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> tuple[f32, f32]:
    hi = -1e30
    for i in range(n):
        hi = max(hi, x[i])
    lo = 1e30
    for j in range(n):
        lo = min(lo, x[j])
    return hi, lo


@hpvm.graph
def unsplit_root(x: In[Ptr[f32]], x_bytes: i64, count: InOut[Ptr[i32]], count_bytes: i64,
                 n: i64) -> tuple[f32, f32, f32]:
    a = hpvm.node(count_before, x=x, x_bytes=x_bytes, count=count, count_bytes=count_bytes, n=n)
    b = hpvm.node(two_loops, x=x, x_bytes=x_bytes, n=n)
    return a.out[0], b.out[0], b.out[1]
