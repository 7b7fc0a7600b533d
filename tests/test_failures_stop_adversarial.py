"""Launches that fail must end, and report what python reports (docs/debugging.md: the first
failing access in sequential order, as the cpu target does).

- The cpu target's checked kernel skipped a failing access and went on: a grid of 2**63 - 1
  instances whose store is out of bounds, or one instance whose loop runs 2**62 times, ran for
  ever (python stops at the first failure). Its loops now leave once a failure is recorded at or
  before the instances they run (backends/cpu/memory.py, `leave_when_stopped`).
- Its partitions ran at once and shared one error word, so the failure recorded first in time won:
  a late failure of the first partition lost to an early one of the second. Each partition now
  records its own, and the first in instance order is reported (error_slots.py, `ErrorSlots`).
"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64
from hpvm_py.backends.cpu.kernel import PARTS_PER_THREAD
from hpvm_py.backends.cpu.threads import native_pool
from hpvm_py.errors import ExecutionError

from deadlines import deadline

HUGE = (1 << 63) - 1


@hpvm.leaf
def store_all(o: InOut[Ptr[f32]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = 1.0


@hpvm.graph
def store_all_root(o: InOut[Ptr[f32]], o_bytes: i64, n: i64):
    hpvm.node(store_all, grid=n, o=o, o_bytes=o_bytes)


@hpvm.leaf
def nested_loops(o: InOut[Ptr[f32]], o_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    t = 0
    while t < n:
        for s in range(n):
            o[i + t + s] = 1.0
        t += 1


@hpvm.graph
def nested_loops_root(o: InOut[Ptr[f32]], o_bytes: i64, n: i64, g: i64):
    hpvm.node(nested_loops, grid=g, o=o, o_bytes=o_bytes, n=n)


@hpvm.leaf
def two_late_failures(o: InOut[Ptr[f32]], o_bytes: i64, k: i64, first: i64, second: i64):
    i = hpvm.instance_id(0)
    j = i % 8
    if i == k:
        j = first
    if i > k:
        j = second
    o[j] = 1.0


@hpvm.graph
def two_late_failures_root(o: InOut[Ptr[f32]], o_bytes: i64, n: i64, k: i64, first: i64,
                           second: i64):
    hpvm.node(two_late_failures, grid=n, o=o, o_bytes=o_bytes, k=k, first=first, second=second)


def _message(target: str, root, *scalars: int) -> str:
    o = np.zeros(8, np.float32)
    with pytest.raises(ExecutionError) as info:
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(root, o, o.nbytes, *scalars))
    return str(info.value)


def test_a_huge_grid_whose_store_fails_ends_at_its_first_failure() -> None:
    with deadline(60):
        message = _message("cpu", store_all_root, HUGE)
    assert "store to o[8]" in message
    assert message == _message("python", store_all_root, 100)


@pytest.mark.parametrize("grid", [1, 3, 100_000])
def test_a_loop_of_2_62_trips_whose_store_fails_ends_at_its_first_failure(grid: int) -> None:
    with deadline(60):
        message = _message("cpu", nested_loops_root, 1 << 62, grid)
    assert "store to o[8]" in message
    assert message == _message("python", nested_loops_root, 1 << 62, grid)


def test_the_first_failure_in_instance_order_wins_over_an_earlier_one_in_time(rng) -> None:
    """Every instance after k fails, so every partition but the first fails at once; k, the last
    of the first, fails only after millions of instances: python reports k's. (With one worker
    thread the launch is one partition: k's failure is then first in time too, and the same
    report must come.)"""
    n = 16_000_000
    k = n // (native_pool().threads * PARTS_PER_THREAD) - 1
    for _ in range(3):
        first, second = (int(v) for v in rng.integers(8, 1000, size=2))
        with deadline(60):
            message = _message("cpu", two_late_failures_root, n, k, first, second)
        assert f"store to o[{first}]" in message, message
        assert message == _message("python", two_late_failures_root, k + 2, k, first, second)


# -- python: the instance-by-instance run after a vector run's failure -----------------------------
# It made every instance id of a parent at once: a grid of 10**11 instances failed with NumPy's
# "Unable to allocate 745. GiB", one of 2**63 - 1 with "index 0 is out of bounds for axis 0 with
# size 0", instead of the store's own error. It now runs a chunk of instances at a time.

@pytest.mark.parametrize("grid", [10**11, HUGE])
def test_python_reports_a_huge_grids_first_failure_as_cpu_does(grid: int, rng) -> None:
    with deadline(60):
        message = _message("python", store_all_root, grid)
    assert "store to o[8]" in message
    assert message == _message("cpu", store_all_root, grid)
    k = int(rng.integers(1 << 20, 3 << 20))  # past the first chunk of instances
    first, second = (int(v) for v in rng.integers(8, 1000, size=2))
    with deadline(120):
        message = _message("python", two_late_failures_root, grid, k, first, second)
    assert message == _message("cpu", two_late_failures_root, k + 2, k, first, second)
    assert f"store to o[{first}]" in message


# -- malloc scratch that no group can get ----------------------------------------------------------
# Its unchecked kernel skipped a group whose scratch failed and went on to the next: a negative
# size under 2**62 parent instances ran for ever (python stops at the first group).

@hpvm.leaf
def scratch_user(o: InOut[Ptr[f32]], o_bytes: i64, n: i64):
    s = hpvm.malloc(n, hpvm.f32)
    i = hpvm.instance_id(0)
    if i < 0:
        o[0] = s[0]


@hpvm.graph
def scratch_parent(o: InOut[Ptr[f32]], o_bytes: i64, n: i64):
    hpvm.node(scratch_user, grid=1, o=o, o_bytes=o_bytes, n=n)


@hpvm.graph
def scratch_root(o: InOut[Ptr[f32]], o_bytes: i64, n: i64, g: i64):
    hpvm.node(scratch_parent, grid=g, o=o, o_bytes=o_bytes, n=n)


def test_scratch_no_group_can_get_ends_the_launch_at_the_first_group(rng) -> None:
    n = -int(rng.integers(1, 1000))
    with deadline(60):
        message = _message("cpu", scratch_root, n, 1 << 62)
    assert "could not allocate the malloc scratch" in message
    assert "could not allocate the malloc scratch" in _message("python", scratch_root, n, 1 << 62)
