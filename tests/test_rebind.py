"""A launch with other buffers of a recorded launch's sizes runs copies of the recorded launches
pointed at them (rt/recording.py, Recording.rebound), or, with every place taken, the least
recently used recording pointed at them (Recording.retarget): it must compute what a fresh launch computes,
with the same copies, write-backs and errors. Random sequences of launches over pools of buffers
(tracked and not, the same buffer twice, other sizes, other counts) try to break that."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, InternalError, LaunchError
from programs import rebind_graphs as g

REBINDING = [t for t in __import__("conftest").TARGETS if t in ("cpu", "gpu", "nvptx")]
pytestmark = pytest.mark.skipif(not REBINDING, reason="no compiled target here")


@pytest.fixture(params=REBINDING)
def rebind_target(request: pytest.FixtureRequest) -> str:
    return request.param


def _count(name: str) -> int:
    return hpvm.stats()[name]


def test_random_launch_sequences_compute_what_numpy_computes(rebind_target: str,
                                                            rng: np.random.Generator) -> None:
    n, short = 48, 40
    pool = [rng.standard_normal(n).astype(np.float32) for _ in range(5)]
    pool.append(rng.standard_normal(short).astype(np.float32))  # another size: never rebound to
    tracked = set(rng.choice(len(pool), 3, replace=False).tolist())
    mirror = [buf.copy() for buf in pool]
    with hpvm.runtime(rebind_target):
        for i in tracked:
            hpvm.track_memory(pool[i])
        for _ in range(40):
            xi, yi = (int(v) for v in rng.integers(0, len(pool), 2))
            if rng.random() < 0.15:
                yi = xi  # one buffer for both: another aliasing than the recorded launches'
            count = min(pool[xi].size, pool[yi].size) - int(rng.integers(0, 2)) * 8
            k = float(rng.uniform(-2, 2))
            hpvm.wait(hpvm.launch(g.update, pool[xi], pool[xi].nbytes, pool[yi], pool[yi].nbytes,
                                  count, k))
            mirror[yi][:count] += mirror[xi][:count] * np.float32(k)
            if yi not in tracked:  # the user's own buffer holds the result right after wait
                np.testing.assert_allclose(pool[yi], mirror[yi], rtol=1e-5, atol=1e-5)
        # and for certain: three fresh tracked buffers of one size (no recording holds them,
        # whatever the random launches recorded), each pair launched in turn
        base = len(pool)
        pool += [rng.standard_normal(n).astype(np.float32) for _ in range(3)]
        mirror += [buf.copy() for buf in pool[base:]]
        for i in range(base, base + 3):
            hpvm.track_memory(pool[i])
            tracked.add(i)
        before = _count("rebound_launches")
        for xi, yi in ((0, 1), (0, 1), (1, 2), (2, 0), (0, 1)):
            xi, yi = base + xi, base + yi
            hpvm.wait(hpvm.launch(g.update, pool[xi], pool[xi].nbytes, pool[yi], pool[yi].nbytes,
                                  n, 0.5))
            mirror[yi] += mirror[xi] * np.float32(0.5)
        rebound = _count("rebound_launches") - before
        for i in tracked:
            hpvm.request_memory(pool[i])
    for buf, expected in zip(pool, mirror):
        np.testing.assert_allclose(buf, expected, rtol=1e-5, atol=1e-5)
    assert rebound >= 2  # (1, 2) from the recording of (0, 1), (2, 0) from that of (1, 2)


def test_other_aliasing_sizes_or_counts_are_not_rebound(rebind_target: str) -> None:
    a, b, c = (np.full(32, v, np.float32) for v in (1.0, 2.0, 3.0))
    longer = np.zeros(40, np.float32)
    with hpvm.runtime(rebind_target):
        for buf in (a, b, c, longer):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(g.update, a, a.nbytes, b, b.nbytes, 32, 1.0))
        hpvm.wait(hpvm.launch(g.update, c, c.nbytes, c, c.nbytes, 32, 1.0))  # c += c
        hpvm.wait(hpvm.launch(g.update, a, a.nbytes, longer, longer.nbytes, 32, 1.0))
        hpvm.wait(hpvm.launch(g.update, b, b.nbytes, a, a.nbytes, 16, 1.0))
        assert _count("rebound_launches") == 0
        hpvm.wait(hpvm.launch(g.update, b, b.nbytes, a, a.nbytes, 32, 0.5))
        assert _count("rebound_launches") == 1  # the first launch's sizes and count
        for buf in (a, b, c, longer):
            hpvm.request_memory(buf)
    np.testing.assert_array_equal(b, np.full(32, 3.0))
    np.testing.assert_array_equal(c, np.full(32, 6.0))
    np.testing.assert_array_equal(longer, np.r_[np.ones(32), np.zeros(8)].astype(np.float32))
    np.testing.assert_array_equal(a, np.r_[np.full(16, 5.5), np.full(16, 2.5)].astype(np.float32))


def test_a_rebound_launch_counts_and_copies_as_a_fresh_one(rebind_target: str,
                                                          rng: np.random.Generator) -> None:
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(3)]
    ys = [np.zeros(64, np.float32) for _ in range(3)]
    with hpvm.runtime(rebind_target):
        for buf in xs + ys:
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(g.two_kernels, xs[0], xs[0].nbytes, ys[0], ys[0].nbytes, 64, 2.0))
        before = hpvm.stats()
        for x, y in zip(xs[1:], ys[1:]):
            hpvm.wait(hpvm.launch(g.two_kernels, x, x.nbytes, y, y.nbytes, 64, 3.0))
        after = hpvm.stats()
        for y in ys:
            hpvm.request_memory(y)
    for key in ("launches", "kernel_launches", "nodes_run", "h2d_copies", "d2h_copies"):
        fresh = before[key]  # what the first (recorded) launch counted
        assert after[key] - before[key] == 2 * fresh, key
    np.testing.assert_array_equal(ys[0], xs[0] * np.float32(2) + np.float32(1))
    for x, y in zip(xs[1:], ys[1:]):
        np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1))
    # on the cpu target the edge's values are host arrays: two launches must not share them
    rebound = after["rebound_launches"] - before["rebound_launches"]
    assert rebound == (0 if rebind_target == "cpu" else 2)


def test_indices_from_data_are_checked_in_rebound_launches(rebind_target: str,
                                                          rng: np.random.Generator) -> None:
    x = rng.standard_normal(20).astype(np.float32)
    y = np.zeros(16, np.float32)
    with hpvm.runtime(rebind_target):
        good = rng.integers(0, 20, 16)
        hpvm.wait(hpvm.launch(g.gather_scaled, x, x.nbytes, good, good.nbytes, y, y.nbytes, 16, 2.0))
        np.testing.assert_array_equal(y, x[good] * np.float32(2))
        for bad in (20, -1, 2**40):
            at, out = rng.integers(0, 20, 16), np.zeros(16, np.float32)  # never seen before
            at[rng.integers(0, 16)] = bad
            with pytest.raises(ExecutionError, match="out-of-bounds"):
                hpvm.wait(hpvm.launch(g.gather_scaled, x, x.nbytes, at, at.nbytes, out, out.nbytes,
                                      16, 2.0))
        at, out = rng.integers(0, 20, 16), np.zeros(16, np.float32)
        hpvm.wait(hpvm.launch(g.gather_scaled, x, x.nbytes, at, at.nbytes, out, out.nbytes, 16, 1.5))
    np.testing.assert_array_equal(out, x[at] * np.float32(1.5))


def test_a_read_only_buffer_is_refused_though_a_recording_fits(rebind_target: str) -> None:
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    frozen = np.zeros(8, np.float32)
    frozen.flags.writeable = False
    with hpvm.runtime(rebind_target):
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, y, y.nbytes, 8, 1.0))
        with pytest.raises(LaunchError, match="read-only"):
            hpvm.wait(hpvm.launch(g.update, x, x.nbytes, frozen, frozen.nbytes, 8, 1.0))
    assert not frozen.any()


def test_released_buffers_drop_the_recordings_made_for_them(rebind_target: str) -> None:
    x, y, z = np.ones(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    with hpvm.runtime(rebind_target):
        for buf in (x, y, z):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, y, y.nbytes, 8, 1.0))
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, z, z.nbytes, 8, 2.0))  # rebound
        hpvm.untrack_memory(z)  # its data comes home; the recording that uses it is dropped
        np.testing.assert_array_equal(z, np.full(8, 2.0))
        z[:] = 10.0
        replays = _count("replayed_launches")
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, z, z.nbytes, 8, 1.0))  # z untracked now
        np.testing.assert_array_equal(z, np.full(8, 11.0))  # read after the launch, not stale
        if rebind_target == "cpu":  # (on a GPU an untracked host buffer takes the normal path)
            assert _count("replayed_launches") == replays + 1
        hpvm.untrack_memory(y)
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, y, y.nbytes, 8, 1.0))
        np.testing.assert_array_equal(y, np.full(8, 2.0))


def test_threads_launching_with_their_own_buffers(rebind_target: str, rng: np.random.Generator) -> None:
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    ys = [np.zeros(64, np.float32) for _ in range(4)]
    errors: list[BaseException] = []
    launches = 30 if rebind_target == "cpu" else 6
    with hpvm.runtime(rebind_target):
        hpvm.wait(hpvm.launch(g.update, xs[0], xs[0].nbytes, np.zeros(64, np.float32), 256, 64, 1.0))

        def worker(x: np.ndarray, y: np.ndarray) -> None:
            try:
                for _ in range(launches):
                    hpvm.wait(hpvm.launch(g.update, x, x.nbytes, y, y.nbytes, 64, 1.0))
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=pair) for pair in zip(xs, ys)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors[0]
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, x * launches, rtol=1e-5)


def test_threads_taking_turns_with_fewer_recordings_kept_than_threads(
        rebind_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four threads launch on their own buffers in turn with 2 recordings kept: each launch finds
    its recording taken by another thread's buffers and points the least recently used one at its
    own (Recording.retarget), from another thread than the one that made it. Every sum must
    still be its own."""
    from hpvm_py.rt import replay

    monkeypatch.setattr(replay, "_KEPT", 2)
    xs = [rng.standard_normal(64).astype(np.float32) for _ in range(4)]
    ys = [np.zeros(64, np.float32) for _ in range(4)]
    errors: list[BaseException] = []
    launches = 12 if rebind_target == "cpu" else 4
    turn = threading.Condition()
    state = {"next": 0}
    with hpvm.runtime(rebind_target):
        for buf in [*xs, *ys]:  # (on a GPU an untracked buffer goes home after each launch)
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)
        hpvm.wait(hpvm.launch(compiled, xs[0], xs[0].nbytes, np.zeros(64, np.float32), 256, 64, 1.0))

        def worker(me: int) -> None:
            try:
                for _ in range(launches):
                    with turn:
                        if not turn.wait_for(lambda: state["next"] == me, 60):
                            raise TimeoutError(f"thread {me} never got its turn")
                    hpvm.wait(hpvm.launch(compiled, xs[me], xs[me].nbytes, ys[me], ys[me].nbytes, 64, 1.0))
                    with turn:
                        state["next"] = (me + 1) % len(xs)
                        turn.notify_all()
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)
                with turn:
                    state["next"] = (me + 1) % len(xs)
                    turn.notify_all()

        rebound = _count("rebound_launches")
        threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(xs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[0]
        # every launch but each thread's first rebinds (not vacuous: the recordings turned over)
        assert _count("rebound_launches") - rebound >= len(xs) * (launches - 1)
        for y in ys:
            hpvm.request_memory(y)
    for x, y in zip(xs, ys):
        np.testing.assert_allclose(y, x * launches, rtol=1e-5)


def test_hpvm_rebind_0_takes_the_normal_path(rebind_target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    x, y, z = np.ones(8, np.float32), np.zeros(8, np.float32), np.zeros(8, np.float32)
    monkeypatch.setenv("HPVM_REBIND", "0")
    with hpvm.runtime(rebind_target):
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, y, y.nbytes, 8, 1.0))
        hpvm.wait(hpvm.launch(g.update, x, x.nbytes, z, z.nbytes, 8, 2.0))
        assert _count("rebound_launches") == 0 and _count("replayed_launches") == 0
    np.testing.assert_array_equal(z, np.full(8, 2.0))


def test_a_replay_writes_every_scalar_that_differs_from_its_last_run(rebind_target: str) -> None:
    """A replay leaves the scalars that equal its last run's as they are packed: -0.0 after 0.0,
    a NaN after a NaN, an int after an equal float must still reach the kernel with their bits."""
    y = np.zeros(8, np.float32)
    sequence = [1.0, 1.0, 0.0, -0.0, -0.0, 0.0, float("nan"), float("nan"), 2, 2.0, 2.5, 1.0]
    with hpvm.runtime(rebind_target):
        hpvm.track_memory(y)
        for k in sequence:
            hpvm.wait(hpvm.launch(g.fill, y, y.nbytes, 8, k))
            hpvm.request_memory(y)
            want = np.full(8, k, np.float32)
            np.testing.assert_array_equal(y.view(np.uint32), want.view(np.uint32), err_msg=str(k))
        assert _count("replayed_launches") >= len(sequence) - 2


GPU_TARGETS = [t for t in REBINDING if t != "cpu"]


@pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here (gpu needs triton)")
def test_a_rebound_launch_of_independent_siblings_runs_them_on_its_own_streams(rng) -> None:
    """A recording that spreads independent kernels over CUDA streams: its copy for other buffers
    gets streams and events of its own (replays of the two may interleave), and computes what a
    fresh launch computes; on the fake device its operations are logged."""
    from hpvm_py.device import gpu_device
    from hpvm_py.device.streams import FAKE_LOG
    from programs import gpu_replay_graphs as replay_graphs

    n = 64
    xs = [rng.random(n, dtype=np.float32) for _ in range(3)]
    ys = [np.zeros(n, np.float32) for _ in range(3)]
    with hpvm.runtime(GPU_TARGETS[0]):
        fake = gpu_device().startswith("fake")
        for buf in xs + ys:
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(replay_graphs.fan_in, xs[0], xs[0].nbytes, ys[0], ys[0].nbytes, n,
                              2.0, 3.0))
        FAKE_LOG.clear()
        for x, y in zip(xs[1:], ys[1:]):
            hpvm.wait(hpvm.launch(replay_graphs.fan_in, x, x.nbytes, y, y.nbytes, n, 1.5, -1.0))
        rebound = _count("rebound_launches")
        for y in ys:
            hpvm.request_memory(y)
    np.testing.assert_array_equal(ys[0], xs[0] * np.float32(2) + xs[0] * np.float32(3))
    for x, y in zip(xs[1:], ys[1:]):
        np.testing.assert_array_equal(y, x * np.float32(1.5) + x * np.float32(-1.0))
    assert rebound == 2
    if fake:  # each copy forked its side stream and joined it back
        assert sum(op[0] == "launch" and op[2] == 1 for op in FAKE_LOG) == 2
        assert FAKE_LOG.count(("wait", 0, ("join", 1))) == 2


def test_a_ring_of_buffer_sets_replays_each_and_only_the_oldest_is_let_go(
        rebind_target: str, rng: np.random.Generator) -> None:
    """A host loop turning over a ring of output buffers: with as many sets as recordings kept,
    every launch after the first round replays its set's recording (none is rebound or run
    afresh); one set more, and each launch finds its recording evicted (rebound instead). Every
    result equals NumPy's, and the index by buffers holds exactly the recordings kept."""
    from hpvm_py.rt import replay

    n = 32
    x = rng.standard_normal(n).astype(np.float32)
    ring = [np.zeros(n, np.float32) for _ in range(replay._KEPT + 1)]
    with hpvm.runtime(rebind_target):
        for buf in [x, *ring]:  # (on a GPU an untracked buffer goes home after each launch)
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)

        def turn(sets: int, rounds: int) -> None:
            for r in range(rounds):
                for y in ring[:sets]:
                    hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, 1.0))

        turn(replay._KEPT, 1)
        replayed, rebound = _count("replayed_launches"), _count("rebound_launches")
        turn(replay._KEPT, 2)
        assert _count("replayed_launches") - replayed == 2 * replay._KEPT
        assert _count("rebound_launches") == rebound
        turn(replay._KEPT + 1, 1)  # the one more set evicts the least recently used
        rebound = _count("rebound_launches")
        turn(replay._KEPT + 1, 1)  # and now each set evicts, in turn, the one needed next
        assert _count("rebound_launches") - rebound == replay._KEPT + 1
        kept = compiled.replays._recordings
        assert len(kept) == replay._KEPT
        assert sorted(map(id, kept)) == sorted(
            id(r) for same in compiled.replays._by_buffers.values() for r in same)
        for y in ring:
            hpvm.request_memory(y)
    for k, y in enumerate(ring):
        launches = 1 + 2 + 2 if k < replay._KEPT else 2
        np.testing.assert_allclose(y, x * launches, rtol=1e-6)


@pytest.mark.parametrize("seed", range(3))
def test_generated_loops_over_more_buffer_sets_than_kept(rebind_target: str, seed: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """With only 3 recordings kept, random launches over a pool of 7 buffers (tracked, untracked
    and tracked again, untracked ones replaced by arrays of another size, one buffer passed
    twice) evict and
    replay recordings in every order: every result equals NumPy's, and the index by buffers holds
    exactly the recordings kept."""
    from hpvm_py.rt import replay

    monkeypatch.setattr(replay, "_KEPT", 3)
    rng = np.random.default_rng(900 + seed)
    n = 24
    pool = [rng.standard_normal(n).astype(np.float32) for _ in range(7)]
    mirror = [buf.copy() for buf in pool]
    tracked: set[int] = set(range(len(pool)))  # (on a GPU only tracked buffers replay)
    with hpvm.runtime(rebind_target):
        for buf in pool:
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)
        replayed, rebound = _count("replayed_launches"), _count("rebound_launches")
        for _ in range(60):
            roll = rng.random()
            i = int(rng.integers(0, len(pool)))
            if roll < 0.1 and i not in tracked:
                hpvm.track_memory(pool[i])
                tracked.add(i)
            elif roll < 0.2 and i in tracked:
                hpvm.untrack_memory(pool[i])  # its data comes home
                tracked.discard(i)
            elif roll < 0.25 and i not in tracked:  # a new array in its place, of another size
                size = n + 8 * int(rng.integers(-1, 2))
                pool[i] = rng.standard_normal(size).astype(np.float32)
                mirror[i] = pool[i].copy()
            xi, yi = (int(v) for v in rng.integers(0, len(pool), 2))
            if rng.random() < 0.1:
                yi = xi
            count = min(pool[xi].size, pool[yi].size)
            k = float(rng.uniform(-1, 1))
            hpvm.wait(hpvm.launch(compiled, pool[xi], pool[xi].nbytes, pool[yi], pool[yi].nbytes,
                                  count, k))
            mirror[yi][:count] += mirror[xi][:count] * np.float32(k)
        # (not vacuous: recordings were evicted and replayed, rebound ones included)
        assert _count("replayed_launches") - replayed >= 10
        assert _count("rebound_launches") - rebound >= 5
        kept = compiled.replays._recordings
        assert len(kept) <= replay._KEPT
        assert sorted(map(id, kept)) == sorted(
            id(r) for same in compiled.replays._by_buffers.values() for r in same)
        for i in tracked:
            hpvm.request_memory(pool[i])
    for got, want in zip(pool, mirror):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_full_set_points_its_least_recently_used_recording_at_new_buffers(
        rebind_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every place taken, a launch on buffers no recording has takes the least recently
    used recording itself (Recording.retarget, no copy): it is kept first, indexed by the new
    buffers only, and the old buffers no longer hold it; the old buffers' next launch is served
    afresh. While another thread holds that recording, a copy is made instead. Every result
    equals NumPy's."""
    from hpvm_py.rt import replay

    monkeypatch.setattr(replay, "_KEPT", 3)
    n = 16
    x = rng.standard_normal(n).astype(np.float32)
    ys = [np.zeros(n, np.float32) for _ in range(6)]
    done = [0] * len(ys)
    with hpvm.runtime(rebind_target):
        from hpvm_py.api.host import _active

        tracker = _active().tracker
        for buf in [x, *ys]:
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)
        kept = compiled.replays._recordings

        def launch(i: int) -> None:
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, ys[i], ys[i].nbytes, n, 1.0))
            done[i] += 1

        for i in range(3):
            launch(i)
        oldest = kept[-1]
        old_obj = tracker.lookup(ys[0])
        assert old_obj.used_by(oldest)
        launch(3)
        assert kept[0] is oldest and len(kept) == 3  # the same object, now for ys[3]
        assert not old_obj.used_by(oldest) and tracker.lookup(ys[3]).used_by(oldest)
        assert oldest.buffer_ids == tuple(id(a) for a in (x, ys[3]))
        assert [oldest] == compiled.replays._by_buffers[oldest.buffer_ids]
        assert all(r.buffer_ids != (id(x), id(ys[0])) for r in kept)
        launch(0)  # its recording went to ys[3]: served anew
        held = kept[-1]
        with held.lock:  # another thread is replaying it: a copy for ys[4]
            launch(4)
        assert held not in kept and kept[0] is not held
        assert sorted(map(id, kept)) == sorted(
            id(r) for same in compiled.replays._by_buffers.values() for r in same)
        for i in (5, 3, 1, 4):
            launch(i)
        for y in ys:
            hpvm.request_memory(y)
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y, x * done[i], rtol=1e-6)


def test_a_recording_that_fails_halfway_through_a_retarget_serves_no_one(
        rebind_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """A retarget that fails while pointing the recording's launches at the new buffers (a device
    copy that cannot be made, say) leaves a recording pointed in part at each set: it is dropped,
    the failing launch raises, and the launches on the old buffers and on the new ones after it
    compute what NumPy computes."""
    from hpvm_py.rt import recording, replay

    monkeypatch.setattr(replay, "_KEPT", 3)
    n = 16
    x = rng.standard_normal(n).astype(np.float32)
    ys = [np.zeros(n, np.float32) for _ in range(4)]
    done = [0] * len(ys)
    real_point_at = recording.Recording._point_at
    failing = [True]

    def point_at(self, env, executor, in_place):  # noqa: ANN001
        if in_place and failing[0]:
            failing[0] = False
            self.acquires[0].obj = lambda: None  # (what a first repointed acquire changes)
            raise RuntimeError("no device memory for the copy")
        return real_point_at(self, env, executor, in_place)

    monkeypatch.setattr(recording.Recording, "_point_at", point_at)
    with hpvm.runtime(rebind_target):
        for buf in [x, *ys]:
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)

        def launch(i: int) -> None:
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, ys[i], ys[i].nbytes, n, 1.0))
            done[i] += 1

        for i in range(3):
            launch(i)
        oldest = compiled.replays._recordings[-1]
        with pytest.raises(InternalError, match="no device memory"):
            launch(3)
        assert oldest.dropped
        for i in (0, 3, 1, 2, 0):
            launch(i)
        for y in ys:
            hpvm.request_memory(y)
    for i, y in enumerate(ys):
        np.testing.assert_allclose(y, x * done[i], rtol=1e-6)


def test_a_fresh_output_each_step_reuses_the_last_steps_recording(rng: np.random.Generator) -> None:
    """cpu target: a loop that writes a fresh output each step and drops the last one. The last
    step's recording, whose output only the runtime still holds, is pointed at the new output
    (Recording.retarget) rather than copied, every step but those after the tracker forgot the
    dropped buffers; the recording of a buffer the user still holds is never taken. Every output
    equals NumPy's. (On a GPU target an untracked host buffer takes the normal path.)"""
    n = 32
    x = rng.standard_normal(n).astype(np.float32)
    kept_y = np.zeros(n, np.float32)
    outputs = []
    with hpvm.runtime("cpu"):
        compiled = hpvm.compile(g.update)
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, kept_y, kept_y.nbytes, n, 1.0))
        held = compiled.replays._recordings[0]
        reused = 0
        for step in range(40):
            y = np.zeros(n, np.float32)
            before = compiled.replays._recordings[0]
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, float(step % 3)))
            reused += compiled.replays._recordings[0] is before and before is not held
            outputs.append((step % 3, y.copy()))
            del y
        assert not held.dropped and held.buffer_ids == (id(x), id(kept_y))
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, kept_y, kept_y.nbytes, n, 1.0))
        assert reused >= 30, reused
    for k, y in outputs:
        np.testing.assert_allclose(y, x * np.float32(k), rtol=1e-6)
    np.testing.assert_allclose(kept_y, x * 2, rtol=1e-6)


def test_a_recording_released_while_copied_still_gives_a_copy_pointed_at_the_new_buffers(
        rebind_target: str, rng: np.random.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recording.rebound copies a recording's launches under its lock, then points the copies at
    the new buffers. A release of the recorded buffers in between (another thread's
    untrack_memory) empties the recording's lists: the copy must still be pointed at the new
    buffers, never run on the released ones (it wrote into them, or into freed memory)."""
    from hpvm_py.rt.recording import Recording

    n = 16
    x = rng.standard_normal(n).astype(np.float32)
    y0, y1 = np.zeros(n, np.float32), np.zeros(n, np.float32)
    original = Recording.twin

    def twin_then_release(self: Recording) -> Recording | None:
        twin = original(self)
        hpvm.untrack_memory(y0)  # the recording's buffer: it is dropped and let go
        return twin

    with hpvm.runtime(rebind_target):
        for buf in (x, y0, y1):
            hpvm.track_memory(buf)
        compiled = hpvm.compile(g.update)
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y0, y0.nbytes, n, 1.0))
        hpvm.request_memory(y0)
        monkeypatch.setattr(Recording, "twin", twin_then_release)
        rebound = _count("rebound_launches")
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y1, y1.nbytes, n, 2.0))
        assert _count("rebound_launches") == rebound + 1  # (the copy ran)
        hpvm.request_memory(y1)
    np.testing.assert_allclose(y1, 2 * x, rtol=1e-6)
    np.testing.assert_allclose(y0, x, rtol=1e-6)  # as it was when released
