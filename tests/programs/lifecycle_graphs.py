"""Graphs for tests/test_lifecycle.py: a slow stage with an exact result, independent stages, a
hierarchy of internal nodes, named outputs."""
from __future__ import annotations

from typing import NamedTuple

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i64

LCG_A, LCG_C, LCG_MASK = 1103515245, 12345, 2147483647  # mod 2**31: products stay within i64


@hpvm.leaf
def churn(x: In[Ptr[i64]], x_bytes: i64, y: Out[Ptr[i64]], y_bytes: i64, rounds: i64, tag: i64) -> i64:
    """`rounds` steps of a linear congruential generator per instance: slow, serial per instance,
    and exact (tests compute the same in closed form)."""
    i = hpvm.instance_id(0)
    v = x[i]
    for _ in range(rounds):
        v = (v * 1103515245 + 12345) & 2147483647
    y[i] = v
    return tag


@hpvm.leaf
def copy_back(tag: i64, y: In[Ptr[i64]], y_bytes: i64, z: Out[Ptr[i64]], z_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    z[i] = y[i]
    return tag


@hpvm.graph
def slow_pipeline(x: In[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[i64]], y_bytes: i64,
                  z: Out[Ptr[i64]], z_bytes: i64, n: i64, rounds: i64, tag: i64) -> i64:
    """Stage 1 churns x into y; stage 2 copies y into z. Every connection streams."""
    s = hpvm.streaming
    c = hpvm.node(churn, grid=n, x=s(x), x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes),
                  rounds=s(rounds), tag=s(tag))
    b = hpvm.node(copy_back, grid=n, tag=s(hpvm.all_to_all(c.out[0])), y=s(y), y_bytes=s(y_bytes),
                  z=s(z), z_bytes=s(z_bytes))
    return b.out[0]


@hpvm.leaf
def echo(tag: i64) -> i64:
    return tag


class Tags(NamedTuple):
    fast: i64
    slow: i64


@hpvm.graph
def side_by_side(x: In[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[i64]], y_bytes: i64, n: i64,
                 rounds: i64, tag: i64) -> Tags:
    """Two independent stages: a fast one and a slow one, each returning the item's tag."""
    s = hpvm.streaming
    fast = hpvm.node(echo, tag=s(tag))
    slow = hpvm.node(churn, grid=n, x=s(x), x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes),
                     rounds=s(rounds), tag=s(tag))
    return fast.out[0], slow.out[0]


@hpvm.leaf
def add_index(a: InOut[Ptr[i64]], a_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    a[i] = a[i] + i
    return 1


@hpvm.graph
def inner(a: InOut[Ptr[i64]], a_bytes: i64, n: i64) -> i64:
    return hpvm.node(add_index, grid=n, a=a, a_bytes=a_bytes).out[0]


@hpvm.graph
def nested(a: InOut[Ptr[i64]], a_bytes: i64, n: i64) -> i64:
    """Three nodes run per launch: the internal node `inner`, its leaf, and `echo`."""
    mid = hpvm.node(inner, a=a, a_bytes=a_bytes, n=n)
    return hpvm.node(echo, tag=hpvm.all_to_all(mid.out[0])).out[0]


@hpvm.graph
def churn_then_copy(x: In[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[i64]], y_bytes: i64,
                    z: Out[Ptr[i64]], z_bytes: i64, n: i64, rounds: i64, tag: i64) -> i64:
    c = hpvm.node(churn, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, rounds=rounds, tag=tag)
    b = hpvm.node(copy_back, grid=n, tag=hpvm.all_to_all(c.out[0]), y=y, y_bytes=y_bytes, z=z,
                  z_bytes=z_bytes)
    return b.out[0]


@hpvm.graph
def one_internal_stage(x: In[Ptr[i64]], x_bytes: i64, y: InOut[Ptr[i64]], y_bytes: i64,
                       z: Out[Ptr[i64]], z_bytes: i64, n: i64, rounds: i64, tag: i64) -> i64:
    """A stream of one stage that is an internal node: its two leaves run one after the other."""
    s = hpvm.streaming
    return hpvm.node(churn_then_copy, x=s(x), x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes), z=s(z),
                     z_bytes=s(z_bytes), n=s(n), rounds=s(rounds), tag=s(tag)).out[0]
