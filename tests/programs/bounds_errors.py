"""Leaves that access memory out of bounds, for tests/test_bounds_errors.py. Each runs as the one
node of a root with parameters (a, a_bytes, c, c_bytes, n); the marked line holds the access."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64


@hpvm.leaf
def load_past_end(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    c[i] = 2.0 * a[i + 1]  # ERR:load


@hpvm.leaf
def store_past_end(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    c[i + 2] = a[i]  # ERR:store


@hpvm.leaf
def store_before_start(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i > 1:
        c[1 - i] = a[i]  # ERR:negative


@hpvm.leaf
def scratch_past_end(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    scratch = hpvm.malloc(n * 4, f32)
    scratch[i] = a[i]
    hpvm.barrier()
    c[i] = scratch[i] + scratch[i + 1]  # ERR:scratch


@hpvm.leaf
def atomic_past_end(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    hpvm.atomic_add(c, i + 1, a[i])  # ERR:atomic


@hpvm.leaf
def atomic_result_past_end(a: In[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    old = hpvm.atomic_max(c, i * 2, a[i])  # ERR:atomic-result
    if old > 100.0:
        c[0] = old
