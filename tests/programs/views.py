"""Pointer offsets (`row = data + k`) and shapes (`hpvm.view`, `malloc(..., shape=)`), for
tests/test_views.py: CUDA-style code that indexes rows and tiles instead of flat arrays."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64

TILE = 8


@hpvm.leaf
def row_sums(data: In[Ptr[f32]], data_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, cols: i64):
    r = hpvm.instance_id(0)
    row = data + r * cols                 # a pointer to row r
    s = f32(0)
    for j in range(cols):
        s += row[j]
    p = data + 0                          # moved along the column by +=, in a loop
    for k in range(r):
        p += cols
    last = p + (cols - 1)                 # an offset of an offset
    if r % 2 == 1:                        # a pointer assigned under divergent control flow
        q = data + r * cols
    else:
        q = row - 0
    out[r] = s + last[0] * 2 + q[0] * 3


@hpvm.graph
def row_sums_root(data: In[Ptr[f32]], data_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, rows: i64,
                  cols: i64):
    hpvm.node(row_sums, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes, cols=cols,
              grid=rows)


@hpvm.leaf
def matmul(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
           c_bytes: i64, n: i64, k: i64, m: i64):
    i = hpvm.instance_id(0)
    j = hpvm.instance_id(1)
    A = hpvm.view(a, (n, k))
    B = hpvm.view(b, (k, m))
    C = hpvm.view(c, (n, m))
    s = f32(0)
    for t in range(k):
        s += A[i, t] * B[t][j]
    C[i, j] = s


@hpvm.graph
def matmul_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
                c_bytes: i64, n: i64, k: i64, m: i64):
    hpvm.node(matmul, a, a_bytes, b, b_bytes, c, c_bytes, n, k, m, grid=(n, m))


@hpvm.leaf
def tile_transpose(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    """The CUDA shared-memory transpose: a TILE x TILE block through a shaped scratch tile."""
    tile = hpvm.malloc(TILE * TILE * 4, f32, shape=(TILE, TILE))
    tx = hpvm.instance_id(0)
    ty = hpvm.instance_id(1)
    parent = hpvm.get_parent_node(hpvm.get_node())
    bx = hpvm.get_node_instance_id_x(parent)
    by = hpvm.get_node_instance_id_y(parent)
    A = hpvm.view(a, (n, n))
    B = hpvm.view(b, (n, n))
    tile[ty, tx] = A[by * TILE + ty, bx * TILE + tx]
    hpvm.barrier()
    B[bx * TILE + ty][by * TILE + tx] = tile[tx][ty]


@hpvm.graph
def tile_graph(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    hpvm.node(tile_transpose, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, n=n, grid=(TILE, TILE))


@hpvm.graph
def tile_root(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    hpvm.node(tile_graph, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, n=n,
              grid=(n // TILE, n // TILE))


@hpvm.leaf
def planes(v: In[Ptr[f32]], v_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, nz: i64, ny: i64,
           nx: i64, skip: i64):
    """A 3-D view of an offset pointer (the first `skip` elements are a header), read through a
    2-D plane `V[z]` and a row `V[z][y]`; out[z, y] = sum over x of V[z, y, x] + V[z][y][0]."""
    z = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    V = hpvm.view(v + skip, (nz, ny, nx))
    plane = V[z]
    row = plane[y]
    s = f32(0)
    for x in range(nx):
        s += V[z, y, x]
    O = hpvm.view(out, (nz, ny))
    O[z, y] = s + row[0] + V[z][y][0] * 0


@hpvm.graph
def planes_root(v: In[Ptr[f32]], v_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, nz: i64, ny: i64,
                nx: i64, skip: i64):
    hpvm.node(planes, v, v_bytes, out, out_bytes, nz, ny, nx, skip, grid=(nz, ny))


@hpvm.leaf
def histogram_rows(data: In[Ptr[i32]], data_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
                   cols: i64, bins: i64):
    """One histogram per row: hist + r * bins is the row's, and atomics go through it."""
    r = hpvm.instance_id(0)
    mine = hist + r * bins
    row = data + r * cols
    for j in range(cols):
        hpvm.atomic_add(mine, row[j] % bins, 1)


@hpvm.graph
def histogram_root(data: In[Ptr[i32]], data_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
                   rows: i64, cols: i64, bins: i64):
    hpvm.node(histogram_rows, data, data_bytes, hist, hist_bytes, cols, bins, grid=rows)


@hpvm.leaf
def scratch_halves(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    """An offset into scratch: the second half of a shared buffer (reversed through it)."""
    buf = hpvm.malloc(2 * TILE * 4, f32)
    i = hpvm.instance_id(0)
    upper = buf + TILE
    buf[i] = x[i]
    upper[i] = x[i] * 2
    hpvm.barrier()
    y[i] = buf[TILE - 1 - i] + upper[TILE - 1 - i]


@hpvm.graph
def scratch_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    hpvm.node(scratch_halves, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, grid=TILE)


@hpvm.leaf
def shifted_read(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, shift: i64):
    i = hpvm.instance_id(0)
    src = x + shift
    y[i] = src[i]  # ERR:view-oob


@hpvm.graph
def shifted_root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64, shift: i64):
    hpvm.node(shifted_read, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, shift=shift, grid=n)


@hpvm.leaf
def row_scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, cols: i64):
    """y's row r is x's row r times r, through two row pointers (the bounds proof proves it)."""
    r = hpvm.instance_id(0)
    j = hpvm.instance_id(1)
    src = x + r * cols
    dst = y + r * cols
    dst[j] = src[j] * f32(r)


@hpvm.graph
def row_scale_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64, cols: i64):
    hpvm.node(row_scale, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, cols=cols, grid=(rows, cols))
