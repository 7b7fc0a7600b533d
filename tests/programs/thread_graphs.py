"""Small graphs that tests/test_threads_adversarial.py launches from several threads at once."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def scale(a: f32, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64) -> None:
    i = hpvm.instance_id(0)
    y[i] = a * x[i]


@hpvm.graph
def scaled(a: f32, x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64) -> None:
    """y = a * x: no outputs, so a launch that ran nothing would only show in y."""
    hpvm.node(scale, grid=n, a=a, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


@hpvm.leaf
def total(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    s = hpvm.f32(0.0)
    for i in range(n):
        s = s + x[i]
    return s


@hpvm.graph
def summed(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
    """One output: wait() returns the sum of x."""
    return hpvm.node(total, x=x, x_bytes=x_bytes, n=n).out[0]
