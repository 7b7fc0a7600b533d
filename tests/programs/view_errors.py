"""Pointer offsets and shapes that break a rule, each marked with its line, for tests/test_views.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.func
def first(p: Ptr[f32]) -> f32:
    return p[0]


@hpvm.leaf
def rank_too_low(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    A = hpvm.view(a, (n, n))
    b[0] = A[1]  # ERR:rank-low


@hpvm.leaf
def rank_too_high(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    A = hpvm.view(a, (n, n))
    b[0] = A[1, 2, 3]  # ERR:rank-high


@hpvm.leaf
def flat_two_indices(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    b[0] = a[1, 2]  # ERR:flat-two


@hpvm.leaf
def zero_extent(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    A = hpvm.view(a, (0, 4))  # ERR:zero-extent
    b[0] = A[0, 0]


@hpvm.leaf
def four_dims(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    A = hpvm.view(a, (2, 2, 2, 2))  # ERR:four-dims
    b[0] = A[0, 0, 0, 0]


@hpvm.leaf
def float_extent(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    A = hpvm.view(a, (2, 1.5))  # ERR:float-extent
    b[0] = A[0, 0]


@hpvm.leaf
def shape_too_big(b: Out[Ptr[f32]], b_bytes: i64):
    tile = hpvm.malloc(64, f32, shape=(8, 8))  # ERR:shape-big
    b[0] = tile[0, 0]


@hpvm.leaf
def constant_out_of_range(b: Out[Ptr[f32]], b_bytes: i64):
    tile = hpvm.malloc(16 * 16 * 4, f32, shape=(16, 16))
    b[0] = tile[16, 0]  # ERR:const-range


@hpvm.leaf
def negative_constant(b: Out[Ptr[f32]], b_bytes: i64):
    tile = hpvm.malloc(16 * 16 * 4, f32, shape=(16, 16))
    b[0] = tile[0][-1]  # ERR:const-negative


@hpvm.leaf
def two_bases(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, c: In[Ptr[f32]],
              c_bytes: i64, k: i64):
    p = a + k
    if k > 2:
        p = c + k  # ERR:two-bases
    b[0] = p[0]


@hpvm.leaf
def pointer_plus_pointer(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    p = a + a  # ERR:ptr-ptr
    b[0] = p[0]


@hpvm.leaf
def offset_of_a_shape(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    A = hpvm.view(a, (n, n))
    B = A + n  # ERR:offset-shape
    b[0] = B[0, 0]


@hpvm.leaf
def reshape_a_view(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    A = hpvm.view(a, (n, n))
    A = hpvm.view(a, (n, 2))  # ERR:reshape
    b[0] = A[0, 0]


@hpvm.leaf
def pointer_as_value(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    p = a + n
    b[0] = first(p)  # ERR:as-value


@hpvm.leaf
def reassign_parameter(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    a = a + n  # ERR:param
    b[0] = a[0]


@hpvm.leaf
def view_as_value(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
    hpvm.view(a, (n, n))  # ERR:view-value
    b[0] = a[0]


@hpvm.leaf
def atomic_on_a_shape(a: hpvm.InOut[Ptr[f32]], a_bytes: i64, n: i64):
    A = hpvm.view(a, (n, n))
    hpvm.atomic_add(A, 0, 1.0)  # ERR:atomic-shape


@hpvm.leaf
def store_through_in(a: In[Ptr[f32]], a_bytes: i64, n: i64):
    row = a + n
    row[0] = 1.0  # ERR:store-in

