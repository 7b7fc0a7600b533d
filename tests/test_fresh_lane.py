"""A launch whose buffers the runtime has never seen runs on the graph's lane (rt/fresh_lane.py):
one copy of a kept recording's launches, pointed at the new buffers; no recording is made for
them. It must compute what the normal path computes, refuse what it refuses, hand buffers seen
once to the normal path (which records them, so loops replay), and never run one launch's kernels
on another's buffers when threads share the lane. Generated sequences try to break that."""
from __future__ import annotations

import random
import threading
import time
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py.api import host
from hpvm_py.errors import LaunchError
from hpvm_py.rt import replay
from programs import rebind_graphs as g

torch = pytest.importorskip("torch")

# the lane serves buffers at home where the kernels run: host arrays on cpu, CUDA tensors on the
# GPU targets (a host array there is copied to the device for each launch: the normal path)
LANE_TARGETS = [t for t in TARGETS if t == "cpu" or (t in ("gpu", "nvptx") and torch.cuda.is_available())]
pytestmark = pytest.mark.skipif(not LANE_TARGETS, reason="no target with buffers at home here")


@pytest.fixture(params=LANE_TARGETS)
def lane_target(request: pytest.FixtureRequest) -> str:
    return request.param


def _fresh(target: str, values: np.ndarray, as_tensor: bool = False) -> Any:
    """A buffer never seen, at home where `target` runs its kernels."""
    if target != "cpu":
        return torch.tensor(values, device="cuda")
    return torch.tensor(values) if as_tensor else values.copy()


def _host(buf: Any) -> np.ndarray:
    return buf if isinstance(buf, np.ndarray) else buf.detach().cpu().numpy()


def _count(name: str) -> int:
    return hpvm.stats()[name]


def _kept(compiled: Any) -> list[Any]:
    """The recordings that can still serve a launch (a compiled graph outlives a runtime, whose
    cleanup drops its recordings)."""
    return [r for r in compiled.replays._recordings if not r.dropped]


def _launch(compiled: Any, x: Any, y: Any, n: int, k: float) -> None:
    hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k))


def test_fresh_buffers_run_on_the_lane_and_make_no_recording(lane_target: str,
                                                             rng: np.random.Generator) -> None:
    n = 40
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        rebound = None
        for step in range(30):
            xv, yv = rng.standard_normal((2, n)).astype(np.float32)
            k = float(rng.uniform(-2, 2))
            x, y = _fresh(lane_target, xv, as_tensor=True), _fresh(lane_target, yv)
            _launch(compiled, x, y, n, k)
            np.testing.assert_allclose(_host(y), yv + xv * np.float32(k), rtol=1e-6, atol=1e-6,
                                       err_msg=f"step {step}")
            if step == 0:
                rebound = _count("rebound_launches")
        assert _count("rebound_launches") - rebound == 29  # every launch after the recorded one
        assert len(_kept(compiled)) == 1
        assert compiled.replays.lane.source is _kept(compiled)[0]


def test_a_buffer_met_on_the_lane_is_recorded_at_its_next_launch(lane_target: str,
                                                                 rng: np.random.Generator) -> None:
    n = 16
    xv = rng.standard_normal(n).astype(np.float32)
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        first = _fresh(lane_target, xv), _fresh(lane_target, xv)  # (kept: their recording too)
        _launch(compiled, *first, n, 1.0)  # recorded
        x, y = _fresh(lane_target, xv), _fresh(lane_target, np.zeros(n, np.float32))
        rebound = _count("rebound_launches")
        _launch(compiled, x, y, n, 1.0)  # the lane
        assert _count("rebound_launches") == rebound + 1 and len(_kept(compiled)) == 1
        _launch(compiled, x, y, n, 1.0)  # tracked now: a recording of its own (a copy)
        assert len(_kept(compiled)) == 2
        replayed, rebound = _count("replayed_launches"), _count("rebound_launches")
        _launch(compiled, x, y, n, 1.0)  # and replayed as a loop's launches are
        assert _count("replayed_launches") == replayed + 1 and _count("rebound_launches") == rebound
        np.testing.assert_allclose(_host(y), 3 * xv, rtol=1e-6)


def test_the_lane_refuses_a_bad_scalar_as_a_cold_runtime_does(lane_target: str,
                                                              rng: np.random.Generator) -> None:
    n = 8
    xv = rng.standard_normal(n).astype(np.float32)
    messages = []
    for warm in (False, True):
        with hpvm.runtime(lane_target):
            compiled = hpvm.compile(g.update)
            if warm:
                _launch(compiled, _fresh(lane_target, xv), _fresh(lane_target, xv), n, 1.0)
            y = _fresh(lane_target, np.zeros(n, np.float32))
            with pytest.raises(LaunchError) as info:
                _launch(compiled, _fresh(lane_target, xv), y, n, "2.0")  # type: ignore[arg-type]
            assert info.value.loc.file == __file__
            messages.append(info.value.message)
            assert not _host(y).any()  # nothing ran
    assert messages[0] == messages[1]


def test_other_sizes_integers_and_aliases_take_the_normal_path(lane_target: str,
                                                               rng: np.random.Generator) -> None:
    """Fresh buffers of sizes the lane was not made for, fewer instances, one buffer passed as
    both arguments: each computes what NumPy computes, whichever path it takes."""
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        for step in range(40):
            n = int(rng.choice([16, 24]))
            count = n - 8 * int(rng.integers(0, 2))
            xv, yv = rng.standard_normal((2, n)).astype(np.float32)
            k = float(rng.uniform(-2, 2))
            x, y = _fresh(lane_target, xv), _fresh(lane_target, yv)
            want = yv.copy()
            if rng.random() < 0.2:  # one buffer for both: y += y * k
                x, xv = y, yv
            want[:count] += xv[:count] * np.float32(k)
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, count, k))
            np.testing.assert_allclose(_host(y), want, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")


def test_threads_on_fresh_buffers_each_get_their_own_result(lane_target: str) -> None:
    """Threads launch on fresh buffers at once: one holds the lane, the others take the normal
    path meanwhile; none of them runs on another's buffers."""
    n = 32
    failures: list[str] = []
    deadline = time.monotonic() + 2.0

    def worker(k: int) -> None:
        r = random.Random(k)
        while time.monotonic() < deadline and not failures:
            a = float(r.randint(1, 9))
            xv = np.full(n, float(k + 1), np.float32)
            x, y = _fresh(lane_target, xv), _fresh(lane_target, np.zeros(n, np.float32))
            _launch(compiled, x, y, n, a)
            if not np.array_equal(_host(y), xv * np.float32(a)):
                failures.append(f"thread {k}: y is {_host(y)[:3]}, not {a * (k + 1)}")

    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert not any(t.is_alive() for t in threads)
        assert _count("rebound_launches") > 0
    assert not failures, failures[:5]


def test_a_recording_pointed_elsewhere_before_its_replay_takes_the_normal_path(
        lane_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replays.rebind points the least recently used recording at a launch's buffers, then
    replays it; another thread may point that recording at its own buffers in between (it is
    the least recently used again once 63 launches passed). The first launch must not then run
    on the second's buffers: staged here with one recording kept and the second launch made
    from inside the first's replay."""
    monkeypatch.setattr(replay, "_KEPT", 1)
    n = 12
    x = _fresh(lane_target, rng.standard_normal(n).astype(np.float32))
    ys = [_fresh(lane_target, np.zeros(n, np.float32)) for _ in range(3)]
    original = host.replay
    interposed = []

    def replay_after_another(func: Any, recording: Any, args: Any, tracker: Any,
                             acquired: bool = False) -> Any:
        if acquired and not interposed:
            interposed.append(True)
            _launch(compiled, x, ys[2], n, 1.0)  # retargets the same recording to ys[2]
        return original(func, recording, args, tracker, acquired)

    monkeypatch.setattr(host, "replay", replay_after_another)
    with hpvm.runtime(lane_target):
        hpvm.track_memory(x)  # (seen: not a launch for the lane)
        compiled = hpvm.compile(g.update)
        _launch(compiled, x, ys[0], n, 1.0)
        _launch(compiled, x, ys[1], n, 1.0)
        assert interposed
        hpvm.request_memory(x)
    for y in ys:
        np.testing.assert_allclose(_host(y), _host(x), rtol=1e-6)


def test_cleanup_lets_go_of_the_lane(lane_target: str, rng: np.random.Generator) -> None:
    n = 8
    xv = rng.standard_normal(n).astype(np.float32)
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        for _ in range(3):
            _launch(compiled, _fresh(lane_target, xv), _fresh(lane_target, xv), n, 1.0)
        lane = compiled.replays.lane
        assert lane.twin is not None and lane.twin.steps
    assert lane.twin.dropped and not lane.twin.steps  # its launches (and device memory) let go
    with hpvm.runtime(lane_target):  # a new runtime: the lane is made again, results right
        for _ in range(3):
            y = _fresh(lane_target, np.zeros(n, np.float32))
            _launch(compiled, _fresh(lane_target, xv), y, n, 2.0)
            np.testing.assert_allclose(_host(y), 2 * xv, rtol=1e-6)
        assert compiled.replays.lane is not lane


def test_rebinding_off_keeps_fresh_launches_on_the_normal_path(
        lane_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_REBIND", "0")
    n = 8
    xv = rng.standard_normal(n).astype(np.float32)
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        lane = compiled.replays.lane  # (an earlier runtime's, dropped, or None)
        for _ in range(4):
            y = _fresh(lane_target, np.zeros(n, np.float32))
            _launch(compiled, _fresh(lane_target, xv), y, n, 1.0)
            np.testing.assert_allclose(_host(y), xv, rtol=1e-6)
        assert _count("rebound_launches") == 0 and compiled.replays.lane is lane


@pytest.mark.parametrize("seed", range(3))
def test_generated_sequences_of_fresh_seen_tracked_and_dropped_buffers(lane_target: str,
                                                                       seed: int) -> None:
    """Random launches over fresh buffers, buffers seen before (kept, tracked, untracked again),
    two sizes, buffers dropped (the tracker's sweeps) and relaunches: every result equals
    NumPy's."""
    rng = np.random.default_rng(4100 + seed)
    pool: list[tuple[Any, np.ndarray]] = []  # (buffer, what it must hold)
    tracked: set[int] = set()
    with hpvm.runtime(lane_target):
        compiled = hpvm.compile(g.update)
        for step in range(150):
            roll = rng.random()
            n = int(rng.choice([16, 16, 16, 24]))

            def pick(size: int) -> int:
                same = [i for i, (_, want) in enumerate(pool) if want.size == size]
                if same and rng.random() < 0.35:
                    return int(rng.choice(same))
                values = rng.standard_normal(size).astype(np.float32)
                pool.append((_fresh(lane_target, values, bool(rng.random() < 0.3)), values.copy()))
                return len(pool) - 1

            xi, yi = pick(n), pick(n)
            if roll < 0.05:
                yi = xi
            k = float(rng.uniform(-1, 1))
            (x, xw), (y, yw) = pool[xi], pool[yi]
            yw += xw * np.float32(k)  # (in place: xw too when both are one buffer)
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k))
            if yi in tracked:
                hpvm.request_memory(y)
            np.testing.assert_allclose(_host(y), yw, rtol=1e-5, atol=1e-5, err_msg=f"step {step}")
            roll = rng.random()
            i = int(rng.integers(len(pool)))
            if roll < 0.08 and i not in tracked:
                hpvm.track_memory(pool[i][0])
                tracked.add(i)
            elif roll < 0.14 and i in tracked:
                hpvm.untrack_memory(pool[i][0])
                tracked.discard(i)
            elif roll < 0.4 and i not in tracked:
                # dropped by the user: only the runtime refers to it now (a sweep forgets it)
                pool[i] = (_fresh(lane_target, pool[i][1]), pool[i][1])
        assert _count("rebound_launches") > 10  # (not vacuous: the lane and rebinds ran)
        for i in tracked:
            hpvm.request_memory(pool[i][0])
    for buf, want in pool:
        np.testing.assert_allclose(_host(buf), want, rtol=1e-5, atol=1e-5)
