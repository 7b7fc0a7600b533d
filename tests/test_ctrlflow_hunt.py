"""Control flow found wrong by the ctrlflow hunt: generated leaves with breaks, continues and
returns at several depths, data-dependent and huge trip counts, run on every target against the
python target and NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm

from conftest import TARGETS
from deadlines import deadline
from differential.data import load

LEFT_EARLY = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def search(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    i = hpvm.instance_id(0)
    trips = 0
    for k in range(0, big):               # uniform bounds, left by a break
        trips += 1
        if k >= a[i]:
            break
    out[i] = trips
    for j in range(i, big + i, 3):        # bounds per lane, left by a return
        if j >= i + 3 * a[i]:
            out[n + i] = j
            return
        out[n + i] = -1


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    hpvm.node(search, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, big=big)
'''


@pytest.mark.parametrize("target", TARGETS)
def test_a_huge_loop_left_early_ends_on_every_target(target: str) -> None:
    """A `for` over range(2**62) that every instance leaves after a few trips (break, return)
    ends: the gpu target's loops ran to their trip count (Triton's `for` cannot exit early)."""
    module = load(LEFT_EARLY)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 40))
    a = rng.integers(0, 6, n).astype(np.int64)
    out = np.zeros(2 * n, np.int64)
    with deadline(60), hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, out, n, 2**62))
    expected = np.concatenate([a + 1, np.arange(n) + 3 * a])
    np.testing.assert_array_equal(out, expected)
