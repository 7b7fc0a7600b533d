"""The runtime's lifecycle under adversarial use (docs/runtime.md): os.fork() after the cpu pool
and streams started, Ctrl-C during cleanup(), interpreter exit with a launch in flight, thread
counts past the limit, and timeouts and depths of the wrong type. Whatever could hang runs in a
child process with a time limit, so a hang fails the test instead of blocking it."""
from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import child_pythonpath
from hpvm_py.backends import registry
from hpvm_py.errors import HPVMError, LaunchError, StreamError
from hpvm_py.support import cores
from programs import lifecycle_graphs as g
from test_lifecycle import churned

ROOT = Path(__file__).resolve().parent.parent
HOST_TARGETS = [t for t in ("python", "cpu") if registry.available(t)]
needs_cpu = pytest.mark.skipif(not registry.available("cpu"), reason="the cpu target's pool")
needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
CHILD_LIMIT = 120  # seconds a child program may take: past it, it hung

PRELUDE = f"""\
import os, signal, sys, threading, time
import numpy as np
sys.path.insert(0, {str(ROOT / 'tests')!r})
import hpvm_py as hpvm
from hpvm_py.api import host
from hpvm_py.backends.cpu import threads
from hpvm_py.errors import HPVMError, StreamError
from programs import lifecycle_graphs as g

def reap(pid, seconds=30):
    '''The child's exit status, or HUNG once it has run `seconds` (then it is killed).'''
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    return "HUNG"
"""


def run_program(body: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    program = PRELUDE + textwrap.dedent(body)
    environment = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=CHILD_LIMIT, cwd=ROOT, env=environment)


# -- os.fork() ---------------------------------------------------------------------------------


@needs_cpu
@needs_fork
def test_a_forked_child_launches_on_a_pool_of_its_own_even_if_its_lock_was_held() -> None:
    """The child of os.fork() kept the parent's pool: no workers (every task ran on the
    launching thread), and a pool lock another thread held at the fork stayed held, so the
    child's first launch of several partitions waited for ever."""
    done = run_program("""
        hpvm.init("cpu")
        n = 100_000
        a = np.zeros(n, np.int64)
        hpvm.wait(hpvm.launch(g.nested, a, a.nbytes, n))
        pool = threads.native_pool()
        held, release = threading.Event(), threading.Event()
        def holder():  # a thread publishing a job at the moment of the fork
            with pool._lock:
                held.set()
                release.wait()
        t = threading.Thread(target=holder)
        t.start()
        held.wait()
        pid = os.fork()
        if pid == 0:
            b = np.zeros(n, np.int64)
            hpvm.wait(hpvm.launch(g.nested, b, b.nbytes, n))
            fresh = threads.native_pool()
            ok = np.array_equal(b, np.arange(n)) and fresh is not pool and \\
                all(w.is_alive() for w in fresh._workers)
            os._exit(0 if ok else 3)
        release.set()
        t.join()
        print("child:", reap(pid))
        hpvm.cleanup()
    """, env={"HPVM_NUM_THREADS": "3"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "child: 0" in done.stdout, done.stdout + done.stderr[-3000:]


@needs_fork
@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_stream_started_before_fork_refuses_its_calls_in_the_child(target: str) -> None:
    """A stream's stage threads stay in the parent: in the child, push() without a timeout
    filled the FIFOs and then waited for ever, and wait() for an end mark no stage would take.
    Now every call says why; the parent's stream is untouched."""
    done = run_program(f"""
        hpvm.init({target!r})
        n = 8
        def item(tag):
            x = np.arange(n, dtype=np.int64)
            z = np.zeros(n, np.int64)
            return (x, x.nbytes, z.copy(), z.nbytes, z, z.nbytes, n, 10, tag)
        h = hpvm.launch(g.slow_pipeline, stream=True, depth=1)
        hpvm.push(h, *item(1))
        print("parent pop", hpvm.pop(h)[0])
        pid = os.fork()
        if pid == 0:
            said = []
            for call in (lambda: [hpvm.push(h, *item(2)) for _ in range(3)], lambda: hpvm.pop(h),
                         lambda: hpvm.wait(h)):
                try:
                    call()
                except StreamError as exc:
                    said.append("os.fork()" in str(exc))
            hpvm.cleanup()
            os._exit(0 if said == [True, True, True] else 3)
        print("child:", reap(pid))
        hpvm.push(h, *item(4))
        print("parent pop", hpvm.pop(h)[0])
        hpvm.wait(h, timeout=30)
        hpvm.cleanup()
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["parent", "pop", "1", "child:", "0", "parent", "pop", "4"], \
        done.stdout + done.stderr[-3000:]


# -- Ctrl-C and exit ---------------------------------------------------------------------------


@pytest.mark.parametrize("target", [t for t in ("cpu", "gpu") if registry.available(t)])
def test_an_interrupted_cleanup_still_brings_tracked_memory_home(target: str) -> None:
    """Ctrl-C while cleanup() waits for a busy stream stage: the runtime was already gone, so no
    later cleanup() could bring tracked buffers home; on gpu their newest data was lost."""
    # (seconds of work for the stage: a GPU runs the loop thousands of times faster than Triton's
    # interpreter)
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    rounds = {"cpu": 2_000_000_000, "gpu": 300_000 if interpreted else 200_000_000}[target]
    done = run_program(f"""
        hpvm.init({target!r})
        n = 64
        a = np.zeros(n, np.int64)
        hpvm.track_memory(a)
        hpvm.wait(hpvm.launch(g.nested, a, a.nbytes, n))  # on gpu, a's new data stays there
        rt = host._runtime
        x = np.arange(n, dtype=np.int64)
        h = hpvm.launch(g.slow_pipeline, stream=True, depth=1)
        hpvm.push(h, x, x.nbytes, np.zeros(n, np.int64), 8 * n, np.zeros(n, np.int64), 8 * n, n,
                  {rounds}, 1)
        time.sleep(0.3)  # the first stage is busy with the item
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
        try:
            hpvm.cleanup()
            print("not interrupted")
        except KeyboardInterrupt:
            print("interrupted")
        print("home", np.array_equal(a, np.arange(n)), "released", not rt.tracker._objects)
        sys.stdout.flush()
        os._exit(0)  # (the stage may still be running its kernel)
    """)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == ["interrupted", "home", "True", "released", "True"], \
        done.stdout + done.stderr[-3000:]


@needs_cpu
def test_exit_with_a_launch_in_flight_waits_for_the_workers_once_not_per_worker() -> None:
    """At exit the pool's shutdown waited a second for each worker busy with a long launch (a
    daemon thread's), so a 16-thread pool held the exit 15 s and a 128-core machine's two
    minutes; now it waits one second for all of them."""
    done = run_program("""
        hpvm.init("cpu")
        n = 4096
        x = np.arange(n, dtype=np.int64)
        y = np.zeros(n, np.int64)
        hpvm.wait(hpvm.launch(g.churn_then_copy, x, x.nbytes, y, y.nbytes, y.copy(), y.nbytes, n,
                              10, 0))
        def forever():
            z = np.zeros(n, np.int64)
            hpvm.wait(hpvm.launch(g.churn_then_copy, x, x.nbytes, z, z.nbytes, z.copy(), z.nbytes,
                                  n, 10**12, 0))
        threading.Thread(target=forever, daemon=True).start()
        time.sleep(0.5)  # every worker is in a task now
        print(time.monotonic())
    """, env={"HPVM_NUM_THREADS": "16"})
    # the child printed its clock before exiting; the parent's clock is the same monotonic one
    ended = time.monotonic()
    assert done.returncode == 0, done.stderr[-3000:]
    exiting = float(done.stdout.split()[-1])
    assert ended - exiting < 10.0, f"the exit took {ended - exiting:.1f} s"


# -- bad values --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["4097", "100000", "99999999999", "1" + "0" * 30])
def test_a_thread_count_past_the_limit_is_refused_by_name(monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    """HPVM_NUM_THREADS=100000 spent minutes starting threads at the first launch, and
    99999999999 filled the memory with thread objects before starting one."""
    monkeypatch.setenv("HPVM_NUM_THREADS", value)
    with pytest.raises(LaunchError, match="HPVM_NUM_THREADS.*4096"):
        cores.default_threads()
    monkeypatch.setenv("HPVM_NUM_THREADS", str(cores.MAX_THREADS))
    assert cores.default_threads() == cores.MAX_THREADS


BAD_TIMEOUTS = ["1", b"1", [1], {}, object(), 1j]
BAD_DEPTHS = [1.5, "2", None, 2.0, [2], float("nan")]


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("seed", range(2))
def test_timeouts_and_depths_of_the_wrong_type_are_located_errors(target: str, seed: int) -> None:
    """A timeout that is not a number (push, pop, wait, cleanup) or a depth that is not a whole
    number failed inside a comparison as an internal error (or, for a float depth, was taken).
    Seeded: calls in random order on one stream, which must still run correctly after them."""
    rng = random.Random(seed)
    n = 16
    hpvm.init(target)
    try:
        h = hpvm.launch(g.slow_pipeline, stream=True, depth=2)
        x = np.arange(n, dtype=np.int64)
        items = []
        for _ in range(12):
            timeout = rng.choice(BAD_TIMEOUTS)
            call = rng.choice(["push", "pop", "wait", "cleanup", "depth"])
            with pytest.raises(HPVMError) as caught:
                if call == "push":
                    hpvm.push(h, x, x.nbytes, np.zeros(n, np.int64), 8 * n, np.zeros(n, np.int64),
                              8 * n, n, 3, 0, timeout=timeout)
                elif call == "pop":
                    hpvm.pop(h, timeout=timeout)
                elif call == "wait":
                    hpvm.wait(h, timeout=timeout)
                elif call == "cleanup":
                    hpvm.cleanup(timeout=timeout)
                else:
                    hpvm.launch(g.slow_pipeline, stream=True, depth=rng.choice(BAD_DEPTHS))
            wanted = StreamError if call == "depth" else LaunchError
            assert isinstance(caught.value, wanted), caught.value
            assert caught.value.loc is not None and caught.value.loc.file == __file__
            if rng.random() < 0.5:  # the stream still works between the refused calls
                z = np.zeros(n, np.int64)
                hpvm.push(h, x, x.nbytes, np.zeros(n, np.int64), 8 * n, z, 8 * n, n, 3, len(items),
                          timeout=30)
                items.append(z)
        assert [hpvm.pop(h, timeout=30)[0] for _ in items] == list(range(len(items)))
        hpvm.wait(h, timeout=30)
        for z in items:
            assert np.array_equal(z, churned(x, 3))
    finally:
        hpvm.cleanup()
