"""Streams lose nothing: the items before a failing one pop with their values, and items that share
a buffer apply in push order, on every target and with every way of running the stages (a thread
per stage, the scheduler thread, whole GPU items: docs/streaming.md)."""
from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError
from hpvm_py.rt.stream import stages, streaming
from hpvm_py.rt.stream.scheduler import StreamScheduler
from programs import stream_graphs as g
from stream_schedulers import pytest_generate_tests, use_scheduler  # noqa: F401 - pytest finds them here

COUNT = 6  # items per stream (the gpu target runs 3 small Triton programs per item)
N = 8  # elements per buffer
TIMEOUT = 120  # seconds for any one push, pop or wait (Triton's interpreter is slow)


def _stage_threads() -> int:
    return len([t for t in threading.enumerate() if t.name.startswith("hpvm-stage-")])


def _failing_line() -> int:
    """The line of shifted_copy's out-of-range read."""
    lines = Path(g.__file__).read_text().splitlines()
    return 1 + next(i for i, line in enumerate(lines) if "z[i] = y[i + shift]" in line)


class Item:
    """One push of three_stages, its NumPy reference and its buffers."""

    def __init__(self, rng: np.random.Generator, shift: int):
        self.x = rng.integers(-50, 50, N).astype(np.float32)
        self.y = np.zeros(N, np.float32)
        self.z = np.zeros(N, np.float32)
        self.k = np.float32(rng.integers(1, 5))
        self.shift = shift

    def args(self) -> tuple:
        return (self.x, self.x.nbytes, self.y, self.y.nbytes, self.z, self.z.nbytes, self.k,
                self.shift, N)

    def check(self, popped: tuple) -> None:
        np.testing.assert_array_equal(self.z, self.x * self.k + np.float32(1))
        assert popped == ((self.k + np.float32(1)) * np.float32(2),)


def _push_all(handle: object, items: list[Item], failing: int) -> None:
    """Push every item; a push after the failing item may raise its error (and push nothing)."""
    for index, item in enumerate(items):
        try:
            hpvm.push(handle, *item.args(), timeout=TIMEOUT)
        except ExecutionError:
            assert index > failing
            return


@pytest.mark.parametrize("depth", [1, 4])
@pytest.mark.parametrize("failing", [0, COUNT // 2, COUNT - 1], ids=["first", "middle", "last"])
def test_items_before_a_failing_item_pop_with_their_values(target: str, scheduler: str,
                                                           failing: int, depth: int, rng) -> None:
    items = [Item(rng, 10 * N if index == failing else 0) for index in range(COUNT)]
    with hpvm.runtime(target):
        before = hpvm.stats()
        handle = hpvm.launch(g.three_stages, stream=True, depth=depth)
        assert _stage_threads() == (3 if scheduler == "threads" else 1)
        _push_all(handle, items, failing)
        for item in items[:failing]:
            item.check(hpvm.pop(handle, timeout=TIMEOUT))
        with pytest.raises(ExecutionError, match="stage shifted_copy") as info:
            hpvm.pop(handle, timeout=TIMEOUT)
        assert info.value.loc.line == _failing_line()
        assert f"stream_graphs.py:{_failing_line()}:" in str(info.value)
        with pytest.raises(ExecutionError, match="stage shifted_copy"):
            hpvm.pop(handle, timeout=TIMEOUT)
        with pytest.raises(ExecutionError, match="stage shifted_copy"):
            hpvm.push(handle, *Item(rng, 0).args(), timeout=TIMEOUT)
        with pytest.raises(ExecutionError, match="stage shifted_copy"):
            hpvm.wait(handle, timeout=TIMEOUT)
        if scheduler == "items":  # every item up to the failing one ran whole (its checked
            # kernel reported the read inside the item; on a GPU, later items may have been
            # queued before that report: their results are dropped)
            assert hpvm.stats().get("stream_whole_items", 0) - \
                before.get("stream_whole_items", 0) >= failing + 1
        # the runtime goes on: a new stream of good items
        again = [Item(rng, 0) for _ in range(2)]
        handle = hpvm.launch(g.three_stages, stream=True, depth=depth)
        for item in again:
            hpvm.push(handle, *item.args(), timeout=TIMEOUT)
        for item in again:
            item.check(hpvm.pop(handle, timeout=TIMEOUT))
        hpvm.wait(handle, timeout=TIMEOUT)


def test_a_failure_reported_late_still_leaves_the_earlier_items(target: str, rng) -> None:
    """Every item pushed before the first pop: whatever the stages have done by then, the items
    before the failing one pop (and their buffers hold their results)."""
    items = [Item(rng, -4 * N if index == 2 else 0) for index in range(4)]
    with hpvm.runtime(target):
        handle = hpvm.launch(g.three_stages, stream=True, depth=4)
        _push_all(handle, items, 2)
        with pytest.raises(ExecutionError, match="stage shifted_copy"):
            hpvm.wait(handle, timeout=TIMEOUT)
        for item in items[:2]:
            item.check(hpvm.pop(handle, timeout=TIMEOUT))
        with pytest.raises(ExecutionError, match="stage shifted_copy"):
            hpvm.pop(handle, timeout=TIMEOUT)


@pytest.mark.parametrize("depth", [1, 4])
def test_pushes_of_one_accumulator_sum_exactly(target: str, scheduler: str, depth: int,
                                               rng) -> None:
    """acc += v for 8 items that all push the same acc: no update is lost (on a GPU, each item
    must read the device copy the one before wrote, not a host copy still on its way back)."""
    values = [float(v) for v in rng.integers(1, 100, 8)]
    acc = np.zeros(4, np.float32)
    with hpvm.runtime(target):
        handle = hpvm.launch(g.accumulated, stream=True, depth=depth)
        for v in values:
            hpvm.push(handle, acc, acc.nbytes, v, acc.size, timeout=TIMEOUT)
        hpvm.wait(handle, timeout=TIMEOUT)
    np.testing.assert_array_equal(acc, np.full(4, sum(values), np.float32))


def test_stages_sharing_an_accumulator_see_the_items_in_push_order(target: str, scheduler: str,
                                                                   rng) -> None:
    """running_total: stage 1 adds x into total, stage 2 doubles total into the item's out. Stage
    1 of item i+1 must wait for stage 2 of item i (which reads total), so each out holds twice
    the running sum up to its item."""
    n, count = 4, 5
    xs = [rng.integers(1, 10, n).astype(np.float32) for _ in range(count)]
    outs = [np.zeros(n, np.float32) for _ in xs]
    total = np.zeros(n, np.float32)
    with hpvm.runtime(target):
        handle = hpvm.launch(g.running_total, stream=True, depth=4)
        for x, out in zip(xs, outs):
            hpvm.push(handle, x, x.nbytes, total, total.nbytes, out, out.nbytes, n,
                      timeout=TIMEOUT)
        hpvm.wait(handle, timeout=TIMEOUT)
    running = np.cumsum(xs, axis=0)
    for out, want in zip(outs, running):
        np.testing.assert_array_equal(out, want * 2)
    np.testing.assert_array_equal(total, running[-1])


def test_every_way_of_running_stages_is_one_scheduler_interface() -> None:
    """streaming.SCHEDULERS, chosen in order, each implement scheduler.StreamScheduler; the last
    takes any stream."""
    assert streaming.SCHEDULERS[-1] is stages.StageThreads
    for kind in streaming.SCHEDULERS:
        assert issubclass(kind, StreamScheduler) and not getattr(kind, "__abstractmethods__", None)
    assert StreamScheduler.__abstractmethods__ == {"fit", "threads", "busy"}
