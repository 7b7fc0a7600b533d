"""Graphs that feed node inputs integer expressions of their parameters (`size=rows * cols`),
for tests/test_expr_inputs.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def scale_rows(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, size: i64,
               cols: i32, last: i64):
    """y[i] = x[i] * (i // cols) for i < size, and y[last] marks the last element."""
    i = hpvm.instance_id(0)
    if i < size:
        y[i] = x[i] * f32(i // i64(cols)) + f32(last == i)


@hpvm.graph
def expr_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64, cols: i64):
    # a grid of rows*cols + 3 instances, guarded by `size`; `cols` narrowed to the leaf's i32 at
    # launch (it fits); `last` uses a constant and //, `cols` a %
    hpvm.node(scale_rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, size=rows * cols,
              cols=cols % (cols + 1), last=(rows * cols - 1) // 1, grid=rows * cols + 3)


@hpvm.graph
def expr_ref_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64,
                  cols: i64):
    """The reference-form builders: bind_input takes the expression as the parent port."""
    n = hpvm.create_node_1d(scale_rows, rows * cols)
    hpvm.bind_input(n, x, "x")
    hpvm.bind_input(n, x_bytes, "x_bytes")
    hpvm.bind_input(n, y, "y")
    hpvm.bind_input(n, y_bytes, "y_bytes")
    hpvm.bind_input(n, rows * cols, "size")
    hpvm.bind_input(n, cols + 0, "cols")
    hpvm.bind_input(n, rows * cols - 1, "last")


@hpvm.graph
def inner(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64, cols: i64):
    hpvm.node(scale_rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, size=rows * cols, cols=cols + 0,
              last=rows * cols - 1, grid=rows * cols)


@hpvm.graph
def nested_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64, cols: i64):
    """Expressions on both levels: the inner graph gets rows - 1 + 1 and cols * 1."""
    hpvm.node(inner, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, rows=rows - 1 + 1, cols=cols * 1)


@hpvm.graph
def streaming_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, rows: i64,
                   cols: i64):
    st = hpvm.streaming
    hpvm.node(scale_rows, st(x), st(x_bytes), st(y), st(y_bytes), size=rows * cols,
              cols=cols + 0, last=rows * cols - 1, grid=rows * cols)


@hpvm.leaf
def count(acc: InOut[Ptr[i64]], acc_bytes: i64, k: i64):
    hpvm.atomic_add(acc, 0, k)


@hpvm.graph
def per_parent_inner(acc: InOut[Ptr[i64]], acc_bytes: i64, k: i64):
    hpvm.node(count, acc=acc, acc_bytes=acc_bytes, k=k * 2 + 1)


@hpvm.leaf
def make_k() -> i64:
    return hpvm.instance_id(0) * 0 + 5


@hpvm.graph
def per_parent_root(acc: InOut[Ptr[i64]], acc_bytes: i64, n: i64):
    """k comes over a one-to-one edge from a replicated sibling: one value per parent instance of
    the inner graph, and the expression is evaluated for each."""
    src = hpvm.node(make_k, grid=n)
    hpvm.node(per_parent_inner, acc=acc, acc_bytes=acc_bytes, k=src.out[0], grid=n)


@hpvm.leaf
def fill_pair(y: Out[Ptr[i64]], y_bytes: i64, a: i64, b: i64):
    i = hpvm.instance_id(0)
    if i == 0:
        y[0] = a
    else:
        y[1] = b


@hpvm.graph
def expr_unbound(y: Out[Ptr[i64]], y_bytes: i64, m: i64):
    """m is bound to the node only through expressions: each item's own m."""
    st = hpvm.streaming
    hpvm.node(fill_pair, grid=2, y=st(y), y_bytes=st(y_bytes), a=m + 0, b=m * 2)


@hpvm.graph
def expr_bound_plain(y: Out[Ptr[i64]], y_bytes: i64, m: i64):
    """m is also bound without streaming: the expression reads the first item's m, as that bind."""
    st = hpvm.streaming
    hpvm.node(fill_pair, grid=2, y=st(y), y_bytes=st(y_bytes), a=m, b=m * 2)


@hpvm.graph
def expr_bound_streaming(y: Out[Ptr[i64]], y_bytes: i64, m: i64):
    """m is also bound streaming: each item's own m."""
    st = hpvm.streaming
    hpvm.node(fill_pair, grid=2, y=st(y), y_bytes=st(y_bytes), a=st(m), b=m * 2)
