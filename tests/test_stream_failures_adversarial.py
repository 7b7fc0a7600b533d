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
    rounds = {"python": 2000, "cpu": 3_000_000, "gpu": 2000, "nvptx": 3_000_000}[target]
    code = EXIT_CHILD.format(tests=str(ROOT / "tests"), target=target, rounds=rounds)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["exiting with items in flight", "stages left: []"], \
        done.stdout + done.stderr[-3000:]
