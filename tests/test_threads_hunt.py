"""Races between threads found by the threads hunt (docs/runtime.md, "Threads"): each case holds
the racy window open deterministically, and compares the launches' results with NumPy's."""
from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import registry
from programs import thread_graphs as g

JOIN_TIMEOUT = 60.0  # seconds a helper thread may take: a hang fails instead of blocking

needs_cpu = pytest.mark.skipif(not registry.available("cpu"), reason="the cpu target (replays)")


def _in_another_thread(body: Any, *args: Any) -> None:
    """Run body(*args) on a thread of its own and wait for it (its exception is re-raised)."""
    failures: list[BaseException] = []

    def run() -> None:
        try:
            body(*args)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(JOIN_TIMEOUT)
    assert not thread.is_alive(), "the other thread hung"
    if failures:
        raise failures[0]


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
                _in_another_thread(hpvm.untrack_memory, x)
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
