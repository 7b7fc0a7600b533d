"""The cpu target's split dimension and row kind, hunted (round 10).

Bug found: a checked kernel whose uniform loops the plan interchanged with the instance loop (the
row kind, or a group of the group kind) ran trip t of every instance of a group before trip t + 1
of any, so a later instance failing in an earlier trip failed first: the error named it, not the
first failing instance in sequential order that python names (docs/language.md, "python and cpu
name the first failing instance in sequential order"). Checked plans keep each instance's loops
whole (loop_plan.make_plan's `interchange`).
"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.errors import ExecutionError

pytestmark = pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target cannot run here")


@hpvm.leaf
def row_sum(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
            o: Out[Ptr[f32]], o_bytes: i64, K: i64):
    g = hpvm.instance_id(0) + hpvm.num_instances(0) * hpvm.instance_id(1)
    acc = 0.0
    for t in range(K):
        acc += a[idx[g] + t]
    o[g] = acc


@hpvm.graph
def row_root(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
             o: Out[Ptr[f32]], o_bytes: i64, K: i64, nx: i64, ny: i64):
    hpvm.node(row_sum, grid=(nx, ny), a=a, a_bytes=a_bytes, idx=idx, idx_bytes=idx_bytes, o=o,
              o_bytes=o_bytes, K=K)


@hpvm.leaf
def scratch_sum(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                o: Out[Ptr[f32]], o_bytes: i64, K: i64):
    s = hpvm.malloc(4 * hpvm.num_instances(0) * hpvm.num_instances(1), f32)
    g = hpvm.instance_id(0) + hpvm.num_instances(0) * hpvm.instance_id(1)
    acc = 0.0
    for t in range(K):
        acc += a[idx[g] + t]
    s[g] = acc
    o[g] = s[g]


@hpvm.graph
def scratch_root(a: In[Ptr[f32]], a_bytes: i64, idx: In[Ptr[i64]], idx_bytes: i64,
                 o: Out[Ptr[f32]], o_bytes: i64, K: i64, nx: i64, ny: i64):
    hpvm.node(scratch_sum, grid=(nx, ny), a=a, a_bytes=a_bytes, idx=idx, idx_bytes=idx_bytes,
              o=o, o_bytes=o_bytes, K=K)


def _message(root, target: str, a: np.ndarray, idx: np.ndarray, K: int, nx: int, ny: int) -> str:
    o = np.zeros(nx * ny, np.float32)
    with pytest.raises(ExecutionError) as failure:
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(root, a, a.nbytes, idx, idx.nbytes, o, o.nbytes, K, nx, ny))
    return str(failure.value)


@pytest.mark.parametrize("root", [row_root, scratch_root], ids=["row", "group"])
def test_an_interchanged_loop_reports_the_first_failing_instance_in_order(root, rng) -> None:
    """Instance `first` fails in trip `trip` (> 0), a later one `second` in trip 0: python, one
    instance after another, names `first`'s access. Both are in one group (a row-kind group is
    up to 512 x instances of 4 rows)."""
    nx, ny = int(rng.integers(8, 513)), int(rng.integers(1, 5))
    n = nx * ny
    K = int(rng.integers(3, 12))
    first, second = sorted(int(v) for v in rng.choice(n, 2, replace=False))
    trip = int(rng.integers(1, K))
    a = rng.standard_normal(n).astype(np.float32)
    idx = rng.integers(0, n - K, n).astype(np.int64)
    idx[first] = n - trip  # in bounds until trip `trip`, which loads a[n]
    idx[second] = n + int(rng.integers(1, 1000))
    python = _message(root, "python", a, idx, K, nx, ny)
    assert f"a[{n}]" in python, python
    assert _message(root, "cpu", a, idx, K, nx, ny) == python
