"""Races between threads (docs/runtime.md, "Threads"): each case makes
the racy interleaving happen (a release made inside the window, or many rounds with the
interpreter's lock handed over as often as it can be), and compares the results with NumPy's."""
from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import registry
from hpvm_py.rt.tracker import MemoryTracker
from programs import stream_graphs
from programs import thread_graphs as g
from thread_runs import run_in_thread

JOIN_TIMEOUT = 60.0  # seconds a helper thread may take: a hang fails instead of blocking

needs_cpu = pytest.mark.skipif(not registry.available("cpu"), reason="the cpu target (replays)")


@needs_cpu
def test_a_buffer_released_while_the_lane_is_made_from_its_recording() -> None:
    """FreshLane.of registers the lane's copy of a recording with its buffers, then read the
    copy's steps without its lock: another thread's untrack_memory of one of those buffers in
    between dropped the copy and emptied its steps (an internal IndexError in the launch on
    buffers never seen). The release is made while the lane reads its positions."""
    graph = hpvm.from_text(hpvm.to_text(g.scaled))  # a fresh object: no earlier recordings
    rng = np.random.default_rng()
    n = 16
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    released: list[bool] = []

    class ReleasingPositions(tuple):
        """The recording's buffer positions: the first look-up untracks x in another thread."""

        def index(self, *args: Any) -> int:
            if not released:
                released.append(True)
                run_in_thread(hpvm.untrack_memory, x, seconds=JOIN_TIMEOUT, what="the other thread")
            return tuple.index(self, *args)

    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(graph, 2.0, x, x.nbytes, y, y.nbytes, n))  # recorded
        recording = hpvm.compile(graph).replays.newest()
        recording.buffer_positions = ReleasingPositions(recording.buffer_positions)
        a = float(rng.integers(1, 9))
        x2, y2 = rng.random(n, dtype=np.float32), np.zeros(n, np.float32)  # never seen: the lane
        hpvm.wait(hpvm.launch(graph, a, x2, x2.nbytes, y2, y2.nbytes, n))
        np.testing.assert_array_equal(y2, np.float32(a) * x2)
        x3, y3 = rng.random(n, dtype=np.float32), np.zeros(n, np.float32)
        hpvm.wait(hpvm.launch(graph, a, x3, x3.nbytes, y3, y3.nbytes, n))
        np.testing.assert_array_equal(y3, np.float32(a) * x3)
    assert released


@needs_cpu
def test_consumers_iterating_results_of_one_stream_take_each_item_once() -> None:
    """Threads iterating `handle.results()` of one stream (docs/runtime.md: a consumer thread
    iterates it): results() looked for an unpopped item, then popped it, and another consumer
    taking that item in between made its pop raise "nothing pushed is left to pop" (about one
    round in seven below, before the fix)."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # the interleavings the race needs
    rng = np.random.default_rng()
    items, n = 20, 8
    try:
        with hpvm.runtime("cpu"):
            for _ in range(60):
                h = hpvm.launch(stream_graphs.two_stages, stream=True, depth=2)
                got: list[float] = []
                errors: list[str] = []

                def consumer() -> None:
                    try:
                        for (value,) in h.results():
                            got.append(float(value))
                    except Exception as exc:  # noqa: BLE001 - reported by the test
                        errors.append(f"{type(exc).__name__}: {exc}")

                threads = [threading.Thread(target=consumer, daemon=True) for _ in range(3)]
                for t in threads:
                    t.start()
                expected = []
                for _ in range(items):
                    x = rng.random(n, dtype=np.float32)
                    y = np.zeros(n, np.float32)
                    hpvm.push(h, x, x.nbytes, y, y.nbytes, 2.0, n, timeout=JOIN_TIMEOUT)
                    expected.append(float(_sum_f32(x * np.float32(2.0) + np.float32(1.0))))
                hpvm.wait(h, timeout=JOIN_TIMEOUT)
                for t in threads:
                    t.join(JOIN_TIMEOUT)
                assert not any(t.is_alive() for t in threads), "a consumer hung"
                assert not errors, errors[:3]
                assert sorted(got) == sorted(expected)
    finally:
        sys.setswitchinterval(old)


def _sum_f32(values: np.ndarray) -> np.float32:
    """The sum a leaf's f32 loop makes, in its order."""
    total = np.float32(0.0)
    for v in values:
        total = np.float32(total + v)
    return total


@pytest.mark.parametrize("target", [t for t in ("cpu", "python") if registry.available(t)])
def test_a_buffer_untracked_between_pushes_keeps_its_items_in_push_order(target: str) -> None:
    """Items that pass the same buffer run in push order (docs/streaming.md, "Items that share a
    buffer"), but the stream matched a buffer by its tracked object: another thread's
    untrack_memory between two pushes made the next push track it by a new object, so a later
    item's first stage overwrote the buffer before an earlier item's second stage read it (the
    items popped another item's sums; about every item below, before the fix)."""
    rng = np.random.default_rng()
    n, items = 16, 6
    with hpvm.runtime(target):
        for _ in range(10):
            # every item's: scaled in place by the first stage, + 1 by the second
            y = np.zeros(n, np.float32)
            h = hpvm.launch(stream_graphs.two_stages, stream=True, depth=items)
            expected = []
            for _ in range(items):
                x = rng.random(n, dtype=np.float32)
                k = float(rng.integers(1, 9))
                hpvm.push(h, x, x.nbytes, y, y.nbytes, k, n, timeout=JOIN_TIMEOUT)
                last = x * np.float32(k) + np.float32(1.0)
                expected.append(_sum_f32(last))
                run_in_thread(hpvm.untrack_memory, y, seconds=JOIN_TIMEOUT, what="the other thread")
            popped = [hpvm.pop(h, timeout=JOIN_TIMEOUT)[0] for _ in range(items)]
            hpvm.wait(h, timeout=JOIN_TIMEOUT)
            assert popped == expected
            np.testing.assert_array_equal(y, last)


def test_a_launch_tracking_a_buffer_another_thread_tracked_meanwhile_keeps_its_object() -> None:
    """rt/args.py looks a buffer up, finds it untracked and tracks it for the launch: another
    thread's track_memory in between must not be replaced (the user's tracking would silently
    become the launch's implicit one, and the other object would be orphaned)."""
    tracker = MemoryTracker()
    x = np.zeros(16, np.float32)
    mine = tracker.track(x)  # the other thread's, inside the window
    entry = ("param", frozenset(), None, "cpu")
    got = tracker.track_launched(x, "cpu", x.nbytes, x.ctypes.data, entry)
    assert got is mine and not got.implicit and tracker.lookup(x) is mine
    fresh = np.zeros(16, np.float32)
    made = tracker.track_launched(fresh, "cpu", fresh.nbytes, fresh.ctypes.data, entry)
    assert made.implicit and made.checked_for is entry and tracker.lookup(fresh) is made
