"""Streams when things go wrong (a hunt's findings): each test failed before its fix."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import child_pythonpath
from hpvm_py.errors import StreamError
from hpvm_py.rt.stream import streaming
from programs import stream_graphs as g

ROOT = Path(__file__).resolve().parent.parent
N = 8


def test_timeouts_of_numpy_floats_and_huge_integers_are_seconds(target: str, rng) -> None:
    """A timeout is any real number of seconds (docs/streaming.md): a NumPy float32 or float16
    reached Lock.acquire as a float32 deadline (an internal TypeError), and a negative int beyond
    a float's range failed in the deadline's sum (an internal OverflowError)."""
    hpvm.init(target)
    try:
        h = hpvm.launch(g.scaled, stream=True, depth=2)
        with pytest.raises(StreamError, match="nothing pushed is left"):
            hpvm.pop(h, timeout=-10**400)
        items = [(rng.standard_normal(N).astype(np.float32), np.zeros(N, np.float32),
                  np.float32(rng.integers(1, 9))) for _ in range(3)]
        for x, y, k in items:
            hpvm.push(h, x, y, k, N, timeout=np.float32(120))
        assert hpvm.pop(h, timeout=np.float16(60)) == (N,)
        for _ in items[1:]:
            assert hpvm.pop(h, timeout=np.float32(60)) == (N,)
        hpvm.wait(h, timeout=np.float32(60))
        for x, y, k in items:
            np.testing.assert_array_equal(y, x * k)
        h = hpvm.launch(g.scaled, stream=True)
        x, y, k = items[0]
        hpvm.push(h, x, y, k, N, timeout=10**400)
    finally:
        hpvm.cleanup(timeout=np.float32(60))  # stops h


EXIT_CHILD = """\
import atexit, sys, threading
def stages_left():  # registered before hpvm_py's handler, so it runs after it
    print("stages left:", sorted(t.name for t in threading.enumerate() if t.name.startswith("hpvm-stage")))
    sys.stdout.flush()
atexit.register(stages_left)
import numpy as np
sys.path.insert(0, {tests!r})
import hpvm_py as hpvm
from programs import lifecycle_graphs as g
hpvm.init({target!r})
n = 64
h = hpvm.launch(g.slow_pipeline, stream=True, depth=4)
for tag in range(6):
    x = np.arange(n, dtype=np.int64)
    hpvm.push(h, x, x.nbytes, np.zeros(n, np.int64), 8 * n, np.zeros(n, np.int64), 8 * n, n, {rounds}, tag)
print("exiting with items in flight")
"""


def test_exit_with_a_stream_in_flight_stops_its_stages_first(target: str) -> None:
    """A program may end with streams open (docs/runtime.md, "Exit"), but their daemon stage
    threads went on running items while the interpreter finalized: on gpu a stage inside torch
    (a view, a copy) was then ended by pthread_exit through pybind11's noexcept destructor and the
    process aborted ("terminate called without an active exception", 1 run in 5 here). The exit
    now stops the streams and waits for their stages (a second at most)."""
    # (an item's node must end within the exit's second: Triton's interpreter runs ~20x slower)
    rounds = {"python": 2000, "cpu": 3_000_000, "gpu": 100, "nvptx": 3_000_000}[target]
    code = EXIT_CHILD.format(tests=str(ROOT / "tests"), target=target, rounds=rounds)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["exiting with items in flight", "stages left: []"], \
        done.stdout + done.stderr[-3000:]


# -- an exception raised inside push() or pop() past their waits --------------------------------
# A KeyboardInterrupt (or any signal handler's exception) can land between two bytecodes of push()
# or pop() where they hand an item over: between the puts into the stages' FIFOs, or between
# taking a stage's result and keeping it. Simulated here at exactly those points: the stream must
# then refuse every later call with a StreamError (no hang, no result paired with another item's),
# and the items before the torn one keep their results.

def _two_stage_items(rng, count: int) -> list[tuple[np.ndarray, np.ndarray, np.float32]]:
    return [(rng.standard_normal(N).astype(np.float32), np.zeros(N, np.float32),
             np.float32(rng.integers(1, 9))) for _ in range(count)]


def _expect_torn(h: object, what: str) -> None:
    for call in (lambda: hpvm.pop(h, timeout=30), lambda: hpvm.push(h, *_two_stage_items(
            np.random.default_rng(), 1)[0][:2], np.float32(1), N, timeout=30),
                 lambda: hpvm.wait(h, timeout=30)):
        with pytest.raises(StreamError, match=f"interrupted inside {what}"):
            call()


@pytest.mark.parametrize("torn_at", [0, 2])
def test_an_interrupt_between_a_pushs_puts_stops_the_stream_at_that_item(
        target: str, rng, monkeypatch: pytest.MonkeyPatch, torn_at: int) -> None:
    real_put_all = streaming.StreamHandle._put_all
    pushed = {"items": 0}

    def put_one_then_interrupt(self: streaming.StreamHandle, item: object) -> None:
        if pushed["items"] != torn_at:
            return real_put_all(self, item)
        streaming.put_now(self.feeds[-1], item)  # the first FIFO filled took it, the others not
        raise KeyboardInterrupt
    hpvm.init(target)
    try:
        h = hpvm.launch(g.two_stages, stream=True, depth=4)
        monkeypatch.setattr(streaming.StreamHandle, "_put_all", put_one_then_interrupt)
        items = _two_stage_items(rng, torn_at + 1)
        for x, y, k in items[:-1]:
            hpvm.push(h, x, y, k, N, timeout=30)
            pushed["items"] += 1
        x, y, k = items[-1]
        with pytest.raises(KeyboardInterrupt):
            hpvm.push(h, x, y, k, N, timeout=30)
        monkeypatch.setattr(streaming.StreamHandle, "_put_all", real_put_all)
        for x, y, k in items[:-1]:  # the items before it are whole
            total = hpvm.pop(h, timeout=30)[0]
            # (an f32 sum in another order: its terms' size bounds the rounding, not the total's)
            np.testing.assert_allclose(total, (x * k + 1).sum(), rtol=0,
                                       atol=1e-5 * np.abs(x * k + 1).sum())
            np.testing.assert_array_equal(y, x * k + 1)
        _expect_torn(h, "push")
    finally:
        hpvm.cleanup(timeout=30)


def test_a_result_an_interrupted_pop_threw_away_stops_the_stream(
        target: str, rng, monkeypatch: pytest.MonkeyPatch) -> None:
    real_get = streaming.StreamHandle.get
    calls = {"n": 0}

    def get_then_interrupt(self: streaming.StreamHandle, fifo: object, *args: object, **kwargs: object) -> object:
        value = real_get(self, fifo, *args, **kwargs)
        if not any(fifo is done for done in self.done):
            return value  # (a stage's own reads)
        calls["n"] += 1
        if calls["n"] == 3:  # the second item's first result: taken from its FIFO, then dropped
            raise KeyboardInterrupt
        return value
    hpvm.init(target)
    try:
        h = hpvm.launch(g.two_stages, stream=True, depth=4)
        items = _two_stage_items(rng, 3)
        for x, y, k in items:
            hpvm.push(h, x, y, k, N, timeout=30)
        monkeypatch.setattr(streaming.StreamHandle, "get", get_then_interrupt)
        first = hpvm.pop(h, timeout=30)[0]
        x, y, k = items[0]
        np.testing.assert_allclose(first, (x * k + 1).sum(), rtol=0,
                                   atol=1e-5 * np.abs(x * k + 1).sum())
        with pytest.raises(KeyboardInterrupt):
            hpvm.pop(h, timeout=30)
        monkeypatch.setattr(streaming.StreamHandle, "get", real_get)
        _expect_torn(h, "pop")
    finally:
        hpvm.cleanup(timeout=30)
