"""Leaves whose Out buffers are written whole, or in part, for tests/test_out_coverage.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i8, i64


@hpvm.leaf
def copy_1d(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i]


@hpvm.leaf
def guarded_tail(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i < n:  # a grid rounded up past the buffer: covered when n is its length
        c[i] = a[i] * 2.0


@hpvm.leaf
def row_major(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, ny: i64):
    me = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(me)
    idx = i * ny + j
    c[idx] = a[idx] + 1.0


@hpvm.leaf
def reversed_2d(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, nx: i64):
    i = hpvm.instance_id(0)
    j = hpvm.instance_id(1)
    c[(hpvm.num_instances(1) - 1 - j) * nx + (nx - 1 - i)] = a[j * nx + i]


@hpvm.leaf
def chunked(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, chunk: i64):
    i = hpvm.instance_id(0)
    for k in range(i * chunk, i * chunk + chunk):
        c[k] = a[k] - 1.0


@hpvm.leaf
def interior(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i > 0 and i < n - 1:
        c[i] = a[i - 1] + a[i + 1]


@hpvm.leaf
def strided(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[2 * i] = a[i]


@hpvm.leaf
def early_return(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    if a[i] < 0.0:
        return
    c[i] = a[i]


@hpvm.leaf
def left_by_break(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, chunk: i64):
    i = hpvm.instance_id(0)
    for k in range(chunk):
        if a[i * chunk + k] < 0.0:
            break
        c[i * chunk + k] = 1.0


@hpvm.leaf
def from_data(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
              c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[idx[i]] = a[i]


@hpvm.leaf
def wrapping(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    small = i8(i)  # wraps past 127: indices repeat, others stay unwritten
    c[i64(small) + 128] = a[i]


@hpvm.graph
def copy_graph(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(copy_1d, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@hpvm.graph
def interior_graph(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(interior, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, n=n)


@hpvm.leaf
def stencil(c0: f32, c1: f32, A0: In[Ptr[f32]], A0_bytes: i64, Anext: Out[Ptr[f32]],
            Anext_bytes: i64, nx: i64, ny: i64, nz: i64):
    me = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(me)
    k = hpvm.get_node_instance_id_z(me)
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1 and k > 0 and k < nz - 1:
        idx = i + nx * (j + ny * k)
        Anext[idx] = (A0[idx + 1] + A0[idx - 1] + A0[idx + nx] + A0[idx - nx]
                      + A0[idx + nx * ny] + A0[idx - nx * ny]) * c1 - A0[idx] * c0


@hpvm.graph
def stencil_graph(c0: f32, c1: f32, A0: In[Ptr[f32]], A0_bytes: i64, Anext: Out[Ptr[f32]],
                  Anext_bytes: i64, nx: i64, ny: i64, nz: i64):
    """Parboil's stencil as a CUDA porter writes it: Anext declared Out, its boundary unwritten."""
    hpvm.node(stencil, grid=(nx, ny, nz), c0=c0, c1=c1, A0=A0, A0_bytes=A0_bytes, Anext=Anext,
              Anext_bytes=Anext_bytes, nx=nx, ny=ny, nz=nz)


@hpvm.leaf
def by_operation(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, op: i64):
    i = hpvm.instance_id(0)
    if op == 0:
        c[i] = a[i] + 1.0
    elif op == 1:
        c[i] = a[i] * 2.0
    else:
        c[i] = a[i]


@hpvm.leaf
def pairs(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[2 * i] = a[i]  # interleaved (re, im): the two stores together cover c
    c[2 * i + 1] = -a[i]


@hpvm.leaf
def two_elements(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    c[1] = a[0]
    c[0] = a[1]


@hpvm.leaf
def thirds(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    c[3 * i] = a[i]
    c[3 * i + 1] = a[i]
    if n > 2:  # the third of each triple, only when n says so
        c[3 * i + 2] = a[i]


@hpvm.leaf
def halves(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i < n:
        c[i] = a[i]
    else:
        c[i + n] = a[i]  # with the grid of n + m instances: [0, n) and [2n, n + m + n)


@hpvm.leaf
def first_apart(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, skip: i64):
    i = hpvm.instance_id(0)
    if i != skip:  # an interval when skip is an end of the grid: covered with the else branch
        c[i] = a[i]
    else:
        c[skip] = -a[i]
