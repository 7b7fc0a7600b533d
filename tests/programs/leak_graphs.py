"""Graphs for tests/test_leaks.py: a leaf scaled by a scalar, graphs made per call with their
constant in them (closures), a leaf reading a module global (watched: changing it rebuilds the IR),
and a two-stage pipeline for streams."""
from __future__ import annotations

from typing import Any

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

FACTOR = 1.0  # read by `by_factor`: tests change it between launches


@hpvm.leaf
def scale(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] * k


@hpvm.graph
def scaled(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32, n: i64):
    hpvm.node(scale, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, k=k)


def make_scaled_by(k: float) -> Any:
    """A new graph object per call, its factor a constant of its IR (a closure variable)."""

    @hpvm.graph
    def scaled_by(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
        hpvm.node(scale, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, k=k)

    return scaled_by


@hpvm.leaf
def by_factor(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] * FACTOR


@hpvm.graph
def scaled_by_factor(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(by_factor, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@hpvm.leaf
def add_one(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + 1.0


@hpvm.graph
def pipeline(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
             c_bytes: i64, n: i64):
    hpvm.node(scale, grid=n, a=a, a_bytes=a_bytes, c=b, c_bytes=b_bytes, k=2.0)
    hpvm.node(add_one, grid=n, a=b, a_bytes=b_bytes, c=c, c_bytes=c_bytes)
