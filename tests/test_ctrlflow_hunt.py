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


LATE_FAILURE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def late(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, first: i64):
    i = hpvm.instance_id(0)
    acc = 0
    for k in range(n + 8):
        if k == n + 4 - i:                # the lower an instance, the later its failure
            if i >= first:
                acc += a[n + i]               # out of bounds
            break
        acc += a[i]
    out[i] = acc


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, first: i64):
    hpvm.node(late, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, first=first)
'''


@pytest.mark.parametrize("target", TARGETS)
def test_the_first_failing_instance_is_reported_though_it_fails_last(target: str) -> None:
    """Instances of one block that leave a loop by break after an out-of-bounds access: the error
    names the lowest failing instance's access, as on python, though higher ones fail in earlier
    trips (the gpu target reported the first failure in time)."""
    module = load(LATE_FAILURE)
    rng = np.random.default_rng()
    n = int(rng.integers(2, 30))  # one block of lanes on gpu
    first = int(rng.integers(0, n - 1))
    a = rng.integers(-9, 9, n).astype(np.int64)
    with hpvm.runtime(target), pytest.raises(hpvm.errors.ExecutionError) as info:
        hpvm.wait(hpvm.launch(module.root, a, np.zeros(n, np.int64), n, first))
    assert f"load from a[{n + first}]" in str(info.value), str(info.value)
