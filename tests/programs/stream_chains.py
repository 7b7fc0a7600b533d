"""Streams whose stages are chains of internal nodes down to one leaf, as HPVM-C writes them
(root -> wrapper -> grid of thread blocks -> leaf): tests/test_stream_chains.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64

BASE = 1000  # what the first leaf instance returns, as binds up through the levels carry it


@hpvm.leaf
def shift_rows(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32,
               width: i64, height: i64) -> i64:
    """y = x * k + the row's block id, over 2-D blocks of a 2-D grid. Returns an id of the
    instance: only the first one's reaches the stage's output."""
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    col = hpvm.get_node_instance_id_x(block) * hpvm.get_num_node_instances_x(me) + \
        hpvm.get_node_instance_id_x(me)
    row = hpvm.get_node_instance_id_y(block) * hpvm.get_num_node_instances_y(me) + \
        hpvm.get_node_instance_id_y(me)
    if col < width and row < height:
        y[row * width + col] = x[row * width + col] * k + hpvm.f32(hpvm.get_node_instance_id_y(block))
    return BASE + col + 7 * row


@hpvm.graph
def shift_blocks(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32,
                 width: i64, height: i64, bx: i64, by: i64) -> i64:
    t = hpvm.node(shift_rows, grid=(bx, by), x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k,
                  width=width, height=height)
    return t.out[0]


@hpvm.graph
def shift_wrapper(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32,
                  width: i64, height: i64, bx: i64, by: i64) -> i64:
    g = hpvm.node(shift_blocks, grid=((width + bx - 1) // bx, (height + by - 1) // by), x=x,
                  x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, width=width, height=height,
                  bx=bx, by=by)
    return g.out[0]


@hpvm.leaf
def add_token(token: i64, y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64,
              n: i64) -> i64:
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i < n:
        z[i] = y[i] + hpvm.f32(token)
    return token + 1


@hpvm.graph
def add_wrapper(token: i64, y: In[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64,
                width: i64, height: i64) -> i64:
    """The leaf's size is an expression of the wrapper's inputs."""
    a = hpvm.node(add_token, grid=width * height, token=token, y=y, y_bytes=y_bytes, z=z,
                  z_bytes=z_bytes, n=width * height)
    return a.out[0]


@hpvm.graph
def chains(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
           z_bytes: i64, k: f32, width: i64, height: i64, bx: i64, by: i64) -> i64:
    st = hpvm.streaming
    s = hpvm.node(shift_wrapper, x=st(x), x_bytes=st(x_bytes), y=st(y), y_bytes=st(y_bytes),
                  k=st(k), width=st(width), height=st(height), bx=st(bx), by=st(by))
    a = hpvm.node(add_wrapper, token=st(hpvm.all_to_all(s.out[0])), y=st(y), y_bytes=st(y_bytes),
                  z=st(z), z_bytes=st(z_bytes), width=st(width), height=st(height))
    return a.out[0]


@hpvm.leaf
def count_leaf(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> i64:
    me = hpvm.get_node()
    return n + 10 * hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) + \
        hpvm.get_node_instance_id_x(me)


@hpvm.graph
def count_wrapper(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> i64:
    c = hpvm.node(count_leaf, grid=3, x=x, x_bytes=x_bytes, n=n)
    return c.out[0]


@hpvm.leaf
def spread_token(token: i64, z: Out[Ptr[f32]], z_bytes: i64, n: i64) -> i64:
    me = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(me)
    z[hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * n + i] = hpvm.f32(token + i)
    return token


@hpvm.graph
def per_instance_level(token: i64, z: Out[Ptr[f32]], z_bytes: i64, n: i64) -> i64:
    a = hpvm.node(spread_token, grid=n, token=token, z=z, z_bytes=z_bytes, n=n)
    return a.out[0]


@hpvm.graph
def replicated_stages(x: In[Ptr[f32]], x_bytes: i64, z: Out[Ptr[f32]], z_bytes: i64,
                      n: i64) -> i64:
    """Both stages replicated n times at the root; the first's instance o sends its first leaf's
    value (n + 10 * o) over a one-to-one edge to the second's instance o, whose chain then holds
    a value per instance: it runs the normal way (no prepared launch can take it)."""
    st = hpvm.streaming
    c = hpvm.node(count_wrapper, grid=n, x=st(x), x_bytes=st(x_bytes), n=st(n))
    p = hpvm.node(per_instance_level, grid=n, token=st(c.out[0]), z=st(z),
                  z_bytes=st(z_bytes), n=st(n))
    return p.out[0]


# -- whole items of chain stages (tests/test_stream_items_chains.py) ------------------------------


@hpvm.leaf
def gather_scaled(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                  t: InOut[Ptr[f32]], t_bytes: i64, k: f32, n: i64) -> i64:
    """t[i] = x[idx[i]] * k over blocks of 4: the index comes from the data, so only the
    checked kernel may run it. Returns the size it was given (forwarded to the next stage)."""
    me = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * 4 + hpvm.get_node_instance_id_x(me)
    if i < n:
        t[i] = x[idx[i]] * k
    return t_bytes


@hpvm.graph
def gather_blocks(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                  t: InOut[Ptr[f32]], t_bytes: i64, k: f32, n: i64) -> i64:
    g = hpvm.node(gather_scaled, grid=4, x=x, x_bytes=x_bytes, idx=idx, idx_bytes=idx_bytes, t=t,
                  t_bytes=t_bytes, k=k, n=n)
    return g.out[0]


@hpvm.graph
def gather_wrapper(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                   t: InOut[Ptr[f32]], t_bytes: i64, k: f32, n: i64) -> i64:
    b = hpvm.node(gather_blocks, grid=(n + 3) // 4, x=x, x_bytes=x_bytes, idx=idx,
                  idx_bytes=idx_bytes, t=t, t_bytes=t_bytes, k=k, n=n)
    return b.out[0]


@hpvm.leaf
def neighbours(t: In[Ptr[f32]], t_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, n: i64) -> i64:
    """z[i] = t[i] + t[i + 1] (the last: t[i]); returns z's size."""
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    right: f32 = 0.0
    if i + 1 < n:
        right = t[i + 1]
    z[i] = t[i] + right
    return z_bytes


@hpvm.graph
def neighbours_wrapper(t: In[Ptr[f32]], t_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64,
                       n: i64) -> i64:
    a = hpvm.node(neighbours, grid=n, t=t, t_bytes=t_bytes, z=z, z_bytes=z_bytes, n=n)
    return a.out[0]


@hpvm.graph
def sized_chains(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                 t: InOut[Ptr[f32]], t_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, k: f32,
                 n: i64) -> i64:
    """HPVM-C's shape: each stage returns a size it was given, and the edge carrying it into the
    next stage's size port only orders the two (whole items: known on the host)."""
    st = hpvm.streaming
    g = hpvm.node(gather_wrapper, x=st(x), x_bytes=st(x_bytes), idx=st(idx),
                  idx_bytes=st(idx_bytes), t=st(t), t_bytes=st(t_bytes), k=st(k), n=st(n))
    a = hpvm.node(neighbours_wrapper, t=st(t), t_bytes=st(hpvm.all_to_all(g.out[0])), z=st(z),
                  z_bytes=st(z_bytes), n=st(n))
    return a.out[0]
