"""Translation validation of the passes: programs whose result a pass changed, each checked on
every target against NumPy (the passes hunt)."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.func
def positive_or_zero(x: i64) -> i64:
    if x > 0:
        kept = x
    return kept  # 0 where x <= 0: a call's locals start as zero


@hpvm.leaf
def clamp_each(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    for j in range(n):
        a[j] = positive_or_zero(a[j])


@hpvm.graph
def clamp_graph(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(clamp_each, a=a, a_bytes=a_bytes, n=n)


def test_a_helper_called_in_a_loop_starts_with_zero_locals(target, rng):
    # inlined in a loop, the helper's local kept the previous iteration's value
    a = rng.integers(-50, 50, 64)
    a[1::2] = -np.abs(a[1::2])  # some calls after a positive one take the other path
    expected = np.where(a > 0, a, 0)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(clamp_graph, a, a.nbytes, a.size))
    np.testing.assert_array_equal(a, expected)
