"""A program written with string annotations (PEP 563): named outputs must still work."""
from __future__ import annotations

from typing import NamedTuple

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64


class Summary(NamedTuple):
    total: f32
    count: i64


@hpvm.leaf
def summarise(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> Summary:
    total = 0.0
    for i in range(n):
        total += a[i]
    return Summary(total=total, count=n)


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> Summary:
    s = hpvm.node(summarise, a=a, a_bytes=a_bytes, n=n)
    return s.out.total, s.out.count
