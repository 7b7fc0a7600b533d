"""Constants that cannot feed the inputs they are bound to, for tests/test_const_inputs.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

from programs.const_inputs import affine


@hpvm.leaf
def pointer_input(x: In[Ptr[f32]], x_bytes: i64):
    pass


@hpvm.graph
def bad_constant_pointer(x_bytes: i64):
    hpvm.node(pointer_input, x=0, x_bytes=x_bytes)  # ERR:const-pointer


@hpvm.graph
def bad_constant_range(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(affine, x, x_bytes, y, y_bytes, k=1.0, off=0, neg=False, small=300,  # ERR:const-range
              wide=0.0, byte=0, grid=n)


@hpvm.graph
def bad_constant_float_range(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(affine, x, x_bytes, y, y_bytes, k=1e39, off=0, neg=False, small=0,  # ERR:const-f32-range
              wide=0.0, byte=0, grid=n)


@hpvm.graph
def bad_constant_float_for_int(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(affine, x, x_bytes, y, y_bytes, k=1.0, off=2.5, neg=False, small=0,  # ERR:const-float-int
              wide=0.0, byte=0, grid=n)


@hpvm.graph
def bad_constant_bool(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(affine, x, x_bytes, y, y_bytes, k=1.0, off=0, neg=2, small=0,  # ERR:const-bool
              wide=0.0, byte=0, grid=n)


@hpvm.graph
def bad_constant_string(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(affine, x, x_bytes, y, y_bytes, k="2", off=0, neg=False, small=0,  # ERR:const-string
              wide=0.0, byte=0, grid=n)
