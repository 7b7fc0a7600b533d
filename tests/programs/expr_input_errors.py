"""Expressions on node inputs that break a rule, each marked with its line, for
tests/test_expr_inputs.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def take(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: i64, s: f32):
    i = hpvm.instance_id(0)
    y[i] = x[i] * s + f32(k)


@hpvm.graph
def bad_pointer_expr(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(take, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=n, s=1.0)
    hpvm.node(take, x=n * 2, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=n, s=1.0)  # ERR:ptr-expr


@hpvm.graph
def bad_float_expr(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(take, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=n, s=n + 1)  # ERR:float-expr


@hpvm.graph
def bad_float_param(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64, s: f32):
    hpvm.node(take, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=n, s=s * 2)  # ERR:float-param


@hpvm.graph
def bad_pointer_arith(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(take, x=x + n, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=n, s=1.0)  # ERR:ptr-arith


@hpvm.graph
def bad_streamed_expr(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(take, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=hpvm.streaming(n + 1),  # ERR:stream
              s=1.0)


@hpvm.leaf
def narrow(y: Out[Ptr[f32]], y_bytes: i64, k: hpvm.i8):
    y[0] = f32(k)


@hpvm.graph
def overflow_at_launch(y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(narrow, y=y, y_bytes=y_bytes, k=n * 100)  # ERR:overflow
