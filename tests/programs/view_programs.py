"""Pointer offsets and shapes at the edges of i64, for tests/test_views_adversarial.py."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

HUGE = 2**40  # three such extents multiply past i64


@hpvm.leaf
def huge_view(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, i: i64, j: i64,
              k: i64):
    A = hpvm.view(a, (HUGE, HUGE, HUGE))  # the row stride HUGE * HUGE wraps, as i64 does
    b[0] = A[i, j, k]
    b[1] = A[1, 0, k]  # constant indices: folded before the launch


@hpvm.graph
def huge_view_root(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, i: i64, j: i64,
                   k: i64):
    hpvm.node(huge_view, a, a_bytes, b, b_bytes, i, j, k)


@hpvm.leaf
def extent_past_i64(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    A = hpvm.view(a, (2, 2**63))  # ERR:extent-past-i64
    c[0] = A[0, n]


@hpvm.leaf
def offset_rows(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    t = hpvm.malloc(16 * 4, f32, shape=16)
    for q in range(16):
        t[q] = a[q]
    u = t - 4                 # a flat pointer: u[19] is t[15]
    b[0] = u[19]
    A = hpvm.view(a, (4, 4))
    S = A[1] - 1              # S[4] is A[1, 3]
    b[1] = S[4]
    S += 2                    # a flat pointer variable moves: S[1] is A[1, 2]
    b[2] = S[1]


@hpvm.graph
def offset_rows_root(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    hpvm.node(offset_rows, a, a_bytes, b, b_bytes)


@hpvm.func
def first(p: Ptr[f32], n: i64) -> f32:
    return p[n]


@hpvm.leaf
def offset_to_a_helper(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    c[0] = first(a + 2, n)  # ERR:offset-to-helper


@hpvm.leaf
def pointer_times_two(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    c[0] = a[a * 2]  # ERR:pointer-times-two
