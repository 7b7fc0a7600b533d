"""Graphs that bind constants to node inputs, for tests/test_const_inputs.py."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, bf16, f32, f64, i1, i8, i64, u8


@hpvm.leaf
def affine(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32, off: i64,
           neg: i1, small: i8, wide: f64, byte: u8) -> f64:
    i = hpvm.instance_id(0)
    v = x[i] * k + f32(off) + f32(small) + f32(byte)
    y[i] = -v if neg else v
    return wide * 2.0


@hpvm.graph
def constants_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64) -> f64:
    node = hpvm.node(affine, x, x_bytes, y, y_bytes, k=2.5, off=-3, neg=True, small=-128,
                     wide=1e300, byte=255, grid=n)
    return node.out[0]


@hpvm.leaf
def rounded(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, b: bf16, k: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] + f32(b) * f32(k)


@hpvm.graph
def bf16_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    # an int constant for a float input; 0.1 is rounded to bf16 once, the same for every target
    hpvm.node(rounded, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, b=0.1, k=True, grid=n)


@hpvm.graph
def streaming_root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64) -> f64:
    st = hpvm.streaming
    node = hpvm.node(affine, st(x), st(x_bytes), st(y), st(y_bytes), k=2.5, off=-3, neg=True,
                     small=-128, wide=1e300, byte=255, grid=n)
    return node.out[0]


@hpvm.leaf
def shift(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, by: f64, twice: i1):
    i = hpvm.instance_id(0)
    v = f64(x[i]) + by
    y[i] = f32(v * 2.0 if twice else v)


@hpvm.graph
def two_shifts(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
               z_bytes: i64, n: i64):
    """One leaf, two nodes, different constants (NumPy scalars and 0/1 for an i1 included)."""
    hpvm.node(shift, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, by=np.float32(0.25), twice=1, grid=n)
    hpvm.node(shift, x=x, x_bytes=x_bytes, y=z, y_bytes=z_bytes, by=np.int16(-4), twice=0, grid=n)
