"""The host API called from several threads at once (docs/runtime.md, "Threads"): launches of one
compiled graph sharing its recordings, tracking calls racing launches on the same buffers, streams
popped from several threads, runtime blocks and profiles in several threads. Every schedule is
seeded, every thread joined with a timeout, every result compared with NumPy's."""
from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import child_pythonpath
from hpvm_py.backends import registry
from hpvm_py.errors import HPVMTimeoutError, LaunchError, MemoryTrackingError, StreamError
from hpvm_py.rt.tracker import MemoryTracker
from programs import stream_graphs
from programs import thread_graphs as g

JOIN_TIMEOUT = 60.0  # seconds a test waits for its threads: a hang fails instead of blocking
ROOT = Path(__file__).resolve().parent.parent

needs_cpu = pytest.mark.skipif(not registry.available("cpu"), reason="the cpu target (replays)")


@pytest.fixture(autouse=True)
def fast_switching() -> Iterator[None]:
    """Hand the interpreter's lock between threads as often as it can: the races below need
    interleavings that the default 5 ms interval almost never gives."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


def _run_threads(bodies: list[Callable[[], None]], failures: list[str]) -> None:
    """Run each body on a thread of its own; a body's exception is a failure, a thread still
    running after JOIN_TIMEOUT a hang."""

    def guarded(body: Callable[[], None]) -> Callable[[], None]:
        def run() -> None:
            try:
                body()
            except Exception as exc:  # noqa: BLE001 - reported by the test, with the others
                failures.append(f"{type(exc).__name__}: {exc}")
        return run

    threads = [threading.Thread(target=guarded(body), daemon=True) for body in bodies]
    for t in threads:
        t.start()
    deadline = time.monotonic() + JOIN_TIMEOUT
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    hung = [t.name for t in threads if t.is_alive()]
    assert not hung, f"threads still running after {JOIN_TIMEOUT} s: {hung}"


@needs_cpu
@pytest.mark.parametrize("seed", [1, 2])
def test_untrack_racing_replays_never_skips_a_launch(seed: int) -> None:
    """A launch that found its recording while another thread untracked one of its buffers ran
    nothing: a graph with an output ended in an internal IndexError at wait(), one without left
    its Out buffer as it was (about 2,000 of 200,000 launches in 5 s before the fix)."""
    n = 64
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    failures: list[str] = []
    stop = threading.Event()
    launched = [0]

    def launcher() -> None:
        try:
            for it in range(1_000_000):
                if stop.is_set():
                    return
                a = float(1 + it % 5)  # never the last launch's: a launch that ran nothing shows
                hpvm.wait(hpvm.launch(g.scaled, a, x, x.nbytes, y, y.nbytes, n))
                if not np.array_equal(y, a * x):
                    failures.append(f"launch {it}: y is not {a} * x")
                total = hpvm.wait(hpvm.launch(g.summed, x, x.nbytes, n))
                if total != np.float32(x.sum()):
                    failures.append(f"launch {it}: sum {total}")
                launched[0] = it
                if failures:
                    return
        finally:
            stop.set()

    def tracker() -> None:
        r = random.Random(seed)
        while not stop.is_set():
            call = r.choice([hpvm.untrack_memory, hpvm.untrack_memory, hpvm.track_memory,
                             hpvm.request_memory])
            try:
                call(r.choice([x, y]))
            except MemoryTrackingError:
                pass  # not tracked (just untracked, and not launched since)
            if r.random() < 0.3:
                time.sleep(1e-5)

    with hpvm.runtime("cpu"):
        timer = threading.Timer(2.0, stop.set)
        timer.start()
        try:
            _run_threads([launcher, tracker], failures)
        finally:
            timer.cancel()
        replayed = hpvm.stats()["replayed_launches"]
    assert not failures, failures[:5]
    assert launched[0] > 100 and replayed > 0  # the race was run, replays included


@pytest.mark.parametrize("target", [t for t in ("cpu", "python") if registry.available(t)])
def test_pops_from_several_threads_take_each_item_once(target: str) -> None:
    """pop() from several threads at once took parts of one item in two of them: an item popped
    twice and another lost (most rounds of 40 items with two poppers, before the fix)."""
    items = 30
    failures: list[str] = []
    with hpvm.runtime(target):
        for seed in range(3):
            h = hpvm.launch(stream_graphs.two_stages, stream=True, depth=items)
            buffers = []
            for i in range(items):
                x = np.full(8, float(i), np.float32)
                y = np.zeros(8, np.float32)
                buffers.append((x, y))
                hpvm.push(h, x, x.nbytes, y, y.nbytes, 2.0, 8, timeout=30)
            popped: list[float] = []
            lock = threading.Lock()

            def popper(k: int, seed: int = seed) -> None:
                r = random.Random(seed * 10 + k)
                while True:
                    with lock:
                        if len(popped) >= items:
                            return
                    try:
                        (value,) = hpvm.pop(h, timeout=r.choice([0.0, 1e-3, 0.05]))
                    except HPVMTimeoutError:
                        continue
                    except StreamError:
                        return  # every item popped by the others since the check
                    with lock:
                        popped.append(float(value))

            _run_threads([lambda k=k: popper(k) for k in range(3)], failures)
            hpvm.wait(h, timeout=30)
            expected = [float((2 * i + 1) * 8) for i in range(items)]
            assert sorted(popped) == expected, f"seed {seed}: popped {sorted(popped)}"
            for x, y in buffers:
                np.testing.assert_array_equal(y, 2 * x + 1)
    assert not failures, failures[:5]


@needs_cpu
def test_threads_recording_one_shared_buffer() -> None:
    """Threads launching on one shared input with fresh outputs record, rebind and retarget
    recordings that all name the shared buffer's tracked object: its list of recordings was
    pruned while another thread added to it (a RuntimeError inside a retarget, which then left
    the graph's index of recordings inconsistent: KeyError/ValueError in later launches)."""
    n = 32
    x = np.arange(n, dtype=np.float32)
    failures: list[str] = []
    deadline = time.monotonic() + 3.0

    def worker(k: int) -> None:
        r = random.Random(k)
        while time.monotonic() < deadline and not failures:
            a = float(r.randint(1, 9))
            y = np.zeros(n, np.float32)  # dropped after the check: its recording is abandoned
            hpvm.wait(hpvm.launch(g.scaled, a, x, x.nbytes, y, y.nbytes, n))
            if not np.array_equal(y, a * x):
                failures.append(f"thread {k}: y is not {a} * x")

    with hpvm.runtime("cpu"):
        _run_threads([lambda k=k: worker(k) for k in range(6)], failures)
        assert hpvm.stats()["rebound_launches"] > 0  # the recordings were pointed at new outputs
    assert not failures, failures[:5]


class _Recording:
    """A stand-in for a recording: MemoryObject keeps weak references to them by identity."""


def test_recordings_of_one_buffer_noted_from_many_threads() -> None:
    """The tracked object of a buffer that several threads launch on notes each recording that
    uses it, from each of those threads: every live one stays noted (so that untracking the
    buffer drops it), dead ones are pruned, and no note breaks another thread's prune."""
    obj = MemoryTracker().track(np.zeros(4, np.float32))
    kept: list[_Recording] = []
    failures: list[str] = []

    def noter() -> None:
        for i in range(3000):
            recording = _Recording()
            if i % 3 == 0:
                kept.append(recording)  # the others die at once: pruned later
            obj.add_recording(recording)

    _run_threads([noter] * 6, failures)
    assert not failures, failures[:5]
    assert all(obj.used_by(recording) for recording in kept)
    assert len(obj.recordings or {}) < 3 * len(kept)  # dead ones were pruned as it went


@needs_cpu
def test_first_compile_from_many_threads_compiles_once() -> None:
    """Threads that launch a graph nobody compiled yet, all at once: one compile, every result
    right (a graph from from_text is a fresh object: no earlier test compiled it)."""
    graph = hpvm.from_text(hpvm.to_text(g.summed))
    x = np.arange(50, dtype=np.float32)
    start = threading.Barrier(6)
    failures: list[str] = []

    def worker() -> None:
        start.wait(JOIN_TIMEOUT)
        total = hpvm.wait(hpvm.launch(graph, x, x.nbytes, 50))
        if total != np.float32(x.sum()):
            failures.append(f"sum {total}")

    with hpvm.runtime("cpu"):
        before = hpvm.stats()["graph_compiles"]
        _run_threads([worker] * 6, failures)
        assert hpvm.stats()["graph_compiles"] == before + 1
    assert not failures, failures[:5]


@pytest.mark.parametrize("target", [t for t in ("cpu", "python") if registry.available(t)])
def test_runtime_blocks_in_several_threads(target: str) -> None:
    """Each thread's `with hpvm.runtime()` joins the one runtime; the last block to end stops it,
    and a later block starts a new one. Launches inside a block always run."""
    n = 16
    x = np.arange(n, dtype=np.float32)
    failures: list[str] = []

    def worker(k: int) -> None:
        r = random.Random(k)
        y = np.zeros(n, np.float32)
        for it in range(25):
            with hpvm.runtime(target):
                a = float(r.randint(1, 9))
                if r.random() < 0.3:
                    hpvm.track_memory(y)
                hpvm.wait(hpvm.launch(g.scaled, a, x, x.nbytes, y, y.nbytes, n))
                hpvm.request_memory(y)
                if not np.array_equal(y, a * x):
                    failures.append(f"thread {k}, block {it}: y is not {a} * x")
                if r.random() < 0.3:
                    hpvm.untrack_memory(y)

    _run_threads([lambda k=k: worker(k) for k in range(4)], failures)
    assert not failures, failures[:5]


@needs_cpu
@pytest.mark.parametrize("buffers", ["the same", "fresh"])
def test_a_runtime_started_while_the_last_one_stops_never_uses_its_recordings(buffers: str) -> None:
    """The last block's cleanup lets go of the runtime before it releases its buffers; another
    thread's block may start the next runtime in between. Its launches must not replay (or copy,
    or run on the lane of) a recording of the stopping runtime, whose objects are that runtime's:
    the buffer would be tracked by neither, and `request_memory` after the launch refused it.
    The window is held open by pausing the stopping runtime's release."""
    n = 16
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    hpvm.init("cpu")
    for _ in range(3):  # recorded, then replayed
        hpvm.wait(hpvm.launch(g.scaled, 2.0, x, x.nbytes, y, y.nbytes, n))
    stopping = hpvm.api.host._active()
    releasing, go_on = threading.Event(), threading.Event()
    release = stopping.tracker.release_all

    def paused_release() -> None:
        releasing.set()
        go_on.wait(JOIN_TIMEOUT)
        release()

    stopping.tracker.release_all = paused_release  # type: ignore[method-assign]
    stopper = threading.Thread(target=hpvm.cleanup, daemon=True)
    stopper.start()
    try:
        assert releasing.wait(JOIN_TIMEOUT)
        with hpvm.runtime("cpu"):
            assert hpvm.api.host._active() is not stopping
            out = y if buffers == "the same" else np.zeros(n, np.float32)
            before = hpvm.stats()
            hpvm.wait(hpvm.launch(g.scaled, 3.0, x, x.nbytes, out, out.nbytes, n))
            assert hpvm.request_memory(out) is out  # tracked by the running runtime
            np.testing.assert_array_equal(out, 3.0 * x)
            after = hpvm.stats()
            for counter in ("replayed_launches", "rebound_launches"):
                assert after[counter] == before[counter], counter
    finally:
        go_on.set()
        stopper.join(JOIN_TIMEOUT)
    assert not stopper.is_alive()


@needs_cpu
def test_stats_and_profiles_while_other_threads_launch(tmp_path: Path) -> None:
    """Profiles opened and closed, stats() read, while short-lived threads launch: every launch is
    counted once, every trace is valid JSON."""
    n = 16
    x = np.arange(n, dtype=np.float32)
    failures: list[str] = []
    done = [0]
    lock = threading.Lock()
    stop = threading.Event()

    def launches(k: int) -> None:
        y = np.zeros(n, np.float32)
        for it in range(3):
            a = float(1 + (k + it) % 7)
            hpvm.wait(hpvm.launch(g.scaled, a, x, x.nbytes, y, y.nbytes, n))
            if not np.array_equal(y, a * x):
                failures.append(f"thread {k}: y is not {a} * x")
            with lock:
                done[0] += 1

    def spawner() -> None:
        k = 0
        while not stop.is_set():
            _run_threads([lambda k=k + j: launches(k) for j in range(4)], failures)
            k += 4

    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(g.scaled, 1.0, x, x.nbytes, np.zeros(n, np.float32), n * 4, n))
        start = hpvm.stats()["launches"]
        runner = threading.Thread(target=spawner, daemon=True)
        runner.start()
        try:
            for i in range(60):
                path = tmp_path / f"trace{i}.json"
                with hpvm.profile(path if i % 2 else None):
                    hpvm.stats()
                    time.sleep(0.002)
                if i % 2:
                    assert "traceEvents" in json.loads(path.read_text())
        finally:
            stop.set()
            runner.join(JOIN_TIMEOUT)
        assert not runner.is_alive()
        assert hpvm.stats()["launches"] - start == done[0]
    assert not failures, failures[:5]


def test_interpreter_exit_with_streams_open_in_threads() -> None:
    """A program that ends with the runtime running and streams open (one fed by a daemon thread
    that is still pushing) exits: the stream threads never keep the interpreter alive."""
    program = (
        "import sys, threading, time\n"
        "import numpy as np\n"
        f"sys.path.insert(0, {str(ROOT / 'tests')!r})\n"
        "import hpvm_py as hpvm\n"
        "from programs import stream_graphs as g\n"
        "hpvm.init('python')\n"
        "x = np.ones(8, np.float32); y = np.zeros(8, np.float32)\n"
        "h = hpvm.launch(g.two_stages, stream=True, depth=2)\n"
        "hpvm.push(h, x, x.nbytes, y, y.nbytes, 2.0, 8)\n"
        "def feed():\n"
        "    h2 = hpvm.launch(g.two_stages, stream=True, depth=1)\n"
        "    while True:\n"
        "        hpvm.push(h2, x, x.nbytes, y, y.nbytes, 2.0, 8)\n"
        "threading.Thread(target=feed, daemon=True).start()\n"
        "time.sleep(0.3)\n"
        "print('exiting')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert "exiting" in done.stdout


@pytest.mark.parametrize("target", [t for t in ("cpu", "python") if registry.available(t)])
def test_one_handle_waited_from_several_threads_gives_its_outputs_once(target: str) -> None:
    """wait() returns a launch's outputs once: of threads that wait on one handle at the same
    time, one gets them and the others the "waited twice" LaunchError. (The check and the mark
    are one step now, dict.pop; as two, CPython's switch points made the race unlikely, not
    impossible: a build without the GIL runs them at once.)"""
    x = np.arange(64, dtype=np.float32)
    with hpvm.runtime(target):
        for round_ in range(40):
            handle = hpvm.launch(g.summed, x, x.nbytes, 64)
            got: list[float] = []
            refused: list[str] = []
            start = threading.Barrier(4)

            def waiter() -> None:
                start.wait(JOIN_TIMEOUT)
                try:
                    got.append(float(hpvm.wait(handle)))
                except LaunchError as exc:
                    refused.append(str(exc))
            failures: list[str] = []
            _run_threads([waiter] * 4, failures)
            assert not failures, failures
            assert got == [float(x.sum())] and len(refused) == 3, (round_, got, refused)
