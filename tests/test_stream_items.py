"""Streams of GPU leaves run item by item (rt/stream/items.py): every stage of an item queued at
once on one of the stream's slots, scalars between stages read on the device.

On CI the `gpu` target runs on the fake device through Triton's interpreter (its streams log what
CUDA's would do); on a GPU the same tests check the results and the copies, on `gpu` and
`nvptx`. Every result is
compared with NumPy on fresh random inputs."""
from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.device import gpu_device
from hpvm_py.device import streams as S
from hpvm_py.errors import ExecutionError
from hpvm_py.rt import tracker as tracker_module
from hpvm_py.rt.stream import item_slots
from hpvm_py.rt.stream import items as I
from programs import stream_graphs as g

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
import edge_detection as ed  # noqa: E402

pytestmark = pytest.mark.skipif("gpu" not in __import__("conftest").TARGETS,
                                reason="the gpu target needs triton")


@pytest.fixture(params=[t for t in ("gpu", "nvptx") if t in __import__("conftest").TARGETS])
def item_target(request) -> str:
    """The targets whose streams run whole items: `gpu` (on the fake device on CI) and, on a
    machine with a GPU, `nvptx`."""
    return request.param


def _whole(before: dict, after: dict) -> int:
    return after.get("stream_whole_items", 0) - before.get("stream_whole_items", 0)


def _delta(before: dict, after: dict, key: str) -> int:
    return after.get(key, 0) - before.get(key, 0)


def _events_pass_after(queries: int, monkeypatch) -> None:
    """Every item's event says 'not yet' to its first `queries` questions, so that items pile
    up in flight before any completes."""
    real_done = S.ItemEvent.done

    def done(self: S.ItemEvent) -> bool:
        self.queries = getattr(self, "queries", 0) + 1
        return self.queries > queries and real_done(self)

    monkeypatch.setattr(S.ItemEvent, "done", done)


def test_the_demo_runs_whole_items_with_its_scalars_on_the_device(rng,
                                                                  item_target: str) -> None:
    """The edge-detection pipeline: every frame runs whole, its maximum gradient (a float one
    stage returns to the next's uniform input) never leaves the device, and only the frame and
    the filter go in, only the five written buffers come out."""
    frames, h, w = 5, 12, 16
    gauss = ed.gaussian_filter()
    bufs = [ed.frame_buffers(ed.synthetic_frame(rng, h, w)) for _ in range(frames)]
    S.FAKE_LOG.clear()
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(ed.pipeline, stream=True)
        for frame in bufs:
            hpvm.push(handle, *ed.frame_args(frame, gauss, 0.25), timeout=60)
        hpvm.wait(handle, timeout=600)
        after = hpvm.stats()
    assert _whole(before, after) == frames
    assert _delta(before, after, "h2d_copies") == 2 * frames
    assert _delta(before, after, "d2h_copies") == 5 * frames
    for frame in bufs:
        np.testing.assert_allclose(frame[-1], ed.reference(frame[0], gauss, 0.25), rtol=1e-5,
                                   atol=1e-6)
    if gpu_device().startswith("fake"):
        log = list(S.FAKE_LOG)
        assert not [e for e in log if e[0] == "wait"]  # no stage waits for another's event
        streams = [who for kind, _, who in (e for e in log if e[0] == "launch")]
        assert streams == [f"items-{i % I.SLOTS}" for i in range(frames) for _ in range(6)]


def test_a_float_result_feeds_the_next_stage_and_pop_returns_the_items_in_order(
        rng, item_target: str) -> None:
    """`largest` returns the maximum of the item's data; the next stage divides by it (read on
    the device) and returns it times k, which pop() hands back item by item; k and n change
    between items, so the slots point their launches at new scalars and are rebuilt."""
    cases = [(rng.random(n, dtype=np.float32) * 10 + 1, np.float32(rng.random() + 0.5), n)
             for n in (40, 40, 40, 23, 23, 40, 40)]
    outs = [np.zeros(n, np.float32) for _, _, n in cases]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=2)
        for (x, k, n), y in zip(cases, outs):
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, k, n, timeout=60)
        popped = [hpvm.pop(handle, timeout=300) for _ in cases]
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    assert _whole(before, after) == len(cases)
    for (x, k, n), y, (result,) in zip(cases, outs, popped):
        top = x.max()
        np.testing.assert_allclose(y, x / top * k, rtol=1e-6)
        assert result == pytest.approx(float(top * k), rel=1e-6)


def test_items_that_share_a_written_buffer_wait_for_each_other(rng, monkeypatch,
                                                                item_target: str) -> None:
    """Every item adds its x into the same `total`: while events say 'not yet', items that share
    nothing fill the three slots, but each of these must wait for the one before (it reads what
    that one writes), or the sum would miss items."""
    _events_pass_after(3, monkeypatch)
    n, count = 32, 6
    xs = [rng.random(n, dtype=np.float32) for _ in range(count)]
    total = np.zeros(n, np.float32)
    outs = [np.zeros(n, np.float32) for _ in range(count)]
    with hpvm.runtime(item_target):
        handle = hpvm.launch(g.running_total, stream=True)
        for x, out in zip(xs, outs):
            hpvm.push(handle, x, x.nbytes, total, total.nbytes, out, out.nbytes, n, timeout=60)
        hpvm.wait(handle, timeout=600)
    running = np.zeros(n, np.float32)
    for x, out in zip(xs, outs):
        running = running + x
        np.testing.assert_allclose(out, running * 2, rtol=1e-6)
    np.testing.assert_allclose(total, running, rtol=1e-6)


@pytest.mark.parametrize("room", [None, 2])
def test_items_in_flight_fill_the_slots_before_any_completes(room: int | None, rng, monkeypatch,
                                                             item_target: str) -> None:
    """While no event has passed, exactly SLOTS items are queued, each on its own slot (or two,
    when the slots may hold only two items' buffers); the next starts only once the oldest has
    completed."""
    released = threading.Event()
    real_done = S.ItemEvent.done
    monkeypatch.setattr(S.ItemEvent, "done", lambda self: released.is_set() and real_done(self))
    n, count = 16, 5
    if room is not None:
        monkeypatch.setattr(I, "SLOT_BYTES", room * 2 * n * 4)  # an item: x and y, n floats each
    in_flight = room or I.SLOTS
    cases = [(rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)) for _ in range(count)]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=8)
        for x, y in cases:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 1.0, n, timeout=60)
        for _ in range(3000):  # (the runner's thread starts them; at most 30 s)
            if _whole(before, hpvm.stats()) >= in_flight:
                break
            released.wait(0.01)
        released.wait(0.2)  # time for a wrong further start
        assert _whole(before, hpvm.stats()) == in_flight
        released.set()
        assert len([hpvm.pop(handle, timeout=300) for _ in cases]) == count
        hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == count
    for x, y in cases:
        np.testing.assert_allclose(y, x / x.max(), rtol=1e-6)


def test_an_item_with_a_tracked_buffer_runs_whole_on_the_trackers_copy(rng,
                                                                       item_target: str) -> None:
    """The third item's output is tracked by the user: that item runs whole too, writing the
    tracker's device copy in place (request_memory() brings it back), results in push order."""
    assert _normalised_with_one_tracked(item_target, rng, tracked=2, k=2.0) == 5


def _normalised_with_one_tracked(item_target: str, rng, tracked: int, k: float, n: int = 24,
                                 count: int = 5) -> int:
    """Stream `count` items through `normalised`, the output of item `tracked` tracked by the
    user; checks every result and returns the number of items run whole."""
    cases = [(rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)) for _ in range(count)]
    with hpvm.runtime(item_target):
        hpvm.track_memory(cases[tracked][1])
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True)
        for x, y in cases:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, k, n, timeout=60)
        popped = [hpvm.pop(handle, timeout=300) for _ in cases]
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
        hpvm.request_memory(cases[tracked][1])
    for (x, y), (result,) in zip(cases, popped):
        np.testing.assert_allclose(y, x / x.max() * np.float32(k), rtol=1e-6)
        assert result == pytest.approx(float(x.max() * np.float32(k)), rel=1e-6)
    return _whole(before, after)


def test_an_out_of_bounds_item_runs_checked_alone_and_fails_its_stage(rng,
                                                                      item_target: str) -> None:
    """`bad` comes from the host: items whose reads are proven in bounds run whole; the one that
    reads past x runs alone on the checked kernel, whose error names the stage and the line."""
    x = np.arange(16, dtype=np.int32)
    ys = [np.zeros(16, np.int32) for _ in range(3)]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.may_fail, stream=True, depth=3)
        for y in ys[:2]:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 0, 16, timeout=60)
        assert [hpvm.pop(handle, timeout=300) for _ in range(2)] == [(0,), (0,)]
        assert _whole(before, hpvm.stats()) == 2
        hpvm.push(handle, x, x.nbytes, ys[2], ys[2].nbytes, 40, 16, timeout=60)
        with pytest.raises(ExecutionError, match="stage .*checked_divide.*out-of-bounds") as info:
            hpvm.pop(handle, timeout=300)
        assert info.value.loc.line > 0
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)
    for y in ys[:2]:
        np.testing.assert_array_equal(y, x)


def test_a_failure_met_while_the_host_thread_helps_surfaces_at_its_items_pop(
        rng, item_target: str) -> None:
    """The host thread starts and completes items itself (each pushed, then popped): an
    out-of-bounds item among them fails in the host thread's help at its own pop, which raises
    the error with its stage and line (through the runner thread, as every failure), the items
    before it pop their results, and the stream then refuses more."""
    x = np.arange(16, dtype=np.int32)
    offsets = [0, 0, 0, 40, 0]
    ys = [np.zeros(16, np.int32) for _ in offsets]
    with hpvm.runtime(item_target):
        handle = hpvm.launch(g.may_fail, stream=True, depth=4)
        hpvm.push(handle, x, x.nbytes, ys[0], ys[0].nbytes, 0, 16, timeout=60)
        assert hpvm.pop(handle, timeout=300) == (0,)  # (the runner thread's first item)
        before = hpvm.stats()
        for offset, y in zip(offsets[1:3], ys[1:3]):
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, offset, 16, timeout=60)
            assert hpvm.pop(handle, timeout=300) == (0,)
        hpvm.push(handle, x, x.nbytes, ys[3], ys[3].nbytes, offsets[3], 16, timeout=60)
        with pytest.raises(ExecutionError, match="stage .*checked_divide.*out-of-bounds") as info:
            hpvm.pop(handle, timeout=300)
        assert info.value.loc.line > 0
        with pytest.raises(ExecutionError):
            hpvm.push(handle, x, x.nbytes, ys[4], ys[4].nbytes, 0, 16, timeout=60)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)
        assert _delta(before, hpvm.stats(), "stream_items_host_started") >= 1
    for y in ys[:3]:
        np.testing.assert_array_equal(y, x)


@pytest.mark.parametrize("seed", range(6))
def test_generated_pushes_and_pops_lose_no_item_whoever_drives_the_stream(seed: int,
                                                                          item_target: str) -> None:
    """Generated sequences of pushes, pops and pauses (long enough for the runner thread to take
    the stream back from the host thread, or not), with an out-of-bounds item now and then:
    every item before the bad one pops its own result in push order (y holds x from its offset),
    even after a push was refused for the failure; the bad item's pop raises its stage's error,
    and so do later pops and wait()."""
    rng = np.random.default_rng(seed)
    n = 12
    x = np.arange(16, dtype=np.int32)
    offsets = [int(v) for v in rng.integers(0, 16 - n + 1, 100)]
    if seed % 3:  # (seeds 0 and 3 have no bad item)
        offsets[int(rng.integers(10, 90))] = 16 - n + 1 + int(rng.integers(0, 8))
    bad_at = next((k for k, off in enumerate(offsets) if off > 16 - n), None)
    ys = [np.full(16, -1, np.int32) for _ in offsets]
    popped: list[int] = []
    pushed, refused, failed = 0, False, False
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.may_fail, stream=True, depth=3)
        while not failed and len(popped) < len(offsets):
            roll = rng.random()
            if not refused and pushed < len(offsets) and (roll < 0.45 or pushed == len(popped)):
                try:
                    hpvm.push(handle, x, x.nbytes, ys[pushed], ys[pushed].nbytes, offsets[pushed],
                              n, timeout=60)
                    pushed += 1
                except ExecutionError as exc:  # the bad item, pushed before, has failed
                    assert bad_at is not None and pushed > bad_at and "checked_divide" in str(exc)
                    refused = True
            elif roll < 0.9 and len(popped) < pushed:
                if len(popped) == bad_at:
                    with pytest.raises(ExecutionError, match="checked_divide.*out-of-bounds"):
                        hpvm.pop(handle, timeout=30)
                    failed = True
                else:
                    popped.append(int(hpvm.pop(handle, timeout=30)[0]))
            else:
                time.sleep(float(rng.choice([0.0005, 0.003])))
        if failed:
            with pytest.raises(ExecutionError):
                hpvm.pop(handle, timeout=60)
            with pytest.raises(ExecutionError):
                hpvm.wait(handle, timeout=60)
        else:
            assert bad_at is None
            hpvm.wait(handle, timeout=60)
        by_host = _delta(before, hpvm.stats(), "stream_items_host_started")
    assert popped == offsets[:len(popped)] and len(popped) == (len(offsets) if bad_at is None
                                                               else bad_at)
    assert by_host > 0  # (the host thread started some items itself, the runner thread the first)
    for k in range(len(popped)):
        np.testing.assert_array_equal(ys[k][:n], x[offsets[k]:offsets[k] + n])


@pytest.mark.parametrize("seed", range(4))
def test_an_offset_from_the_data_on_an_edge_is_never_trusted(seed: int, item_target: str) -> None:
    """Generated items whose index offset is read from their data and passed over an edge (read
    on the device, unknown to the proof): the stream leaves whole items to the stage scheduler's
    checked kernels, so an offset past the buffer is reported, never read."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 40))
    offsets = [int(rng.integers(0, 4)) for _ in range(3)] + [int(rng.integers(n, 4 * n))]
    xs = []
    for offset in offsets:
        x = rng.integers(-100, 100, n + 4, dtype=np.int32)
        x[0] = offset
        xs.append(x)
    ys = [np.zeros(n, np.int32) for _ in xs]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.offset_from_data, stream=True, depth=4)
        for x, y in zip(xs, ys):
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, n, timeout=60)
        for x, y in zip(xs[:3], ys[:3]):
            assert hpvm.pop(handle, timeout=300) == (1,)
            np.testing.assert_array_equal(y, x[x[0]:x[0] + n])
        with pytest.raises(ExecutionError, match="stage .*read_at_offset.*out-of-bounds"):
            hpvm.pop(handle, timeout=300)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == 0


def test_the_switch_turns_whole_items_off(rng, monkeypatch, item_target: str) -> None:
    monkeypatch.setenv("HPVM_STREAM_ITEMS", "0")
    n = 16
    x, y = rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True)
        hpvm.push(handle, x, x.nbytes, y, y.nbytes, 1.0, n, timeout=60)
        hpvm.wait(handle, timeout=300)
        assert _whole(before, hpvm.stats()) == 0
    np.testing.assert_allclose(y, x / x.max(), rtol=1e-6)


def _stream_normalised(item_target: str, cases: list, k: float) -> tuple[list, int]:
    """Stream (x, y, n) items through `normalised`: what pop() returned, items run whole."""
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True)
        for x, y, n in cases:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, k, n, timeout=60)
        popped = [hpvm.pop(handle, timeout=300) for _ in cases]
        hpvm.wait(handle, timeout=60)
        return popped, _whole(before, hpvm.stats())


def test_a_first_item_that_cannot_run_whole_sends_the_stream_to_the_stage_scheduler(
        rng, item_target: str) -> None:
    """The first item has an empty grid (n = 0): the whole stream runs stage by stage, every
    later item too, and the results are the same."""
    sizes = [0, 12, 7]  # (x_bytes binds without streaming: the first item's size serves all)
    cases = [(rng.random(12, dtype=np.float32) + 1, np.zeros(12, np.float32), n) for n in sizes]
    popped, whole = _stream_normalised(item_target, cases, 3.0)
    assert whole == 0
    for (x, y, n), (result,) in zip(cases[1:], popped[1:]):
        np.testing.assert_allclose(y[:n], x[:n] / x[:n].max() * np.float32(3.0), rtol=1e-6)
        assert not y[n:].any()
        assert result == pytest.approx(float(x[:n].max() * np.float32(3.0)), rel=1e-6)
    assert popped[0] == (0,) and not cases[0][1].any()


def test_an_item_with_an_empty_grid_runs_alone_between_whole_items(rng,
                                                                   item_target: str) -> None:
    """n = 0 for the third item: its divide stage has no instance (nothing to hold the maximum on
    the device), so it runs alone; pop() still returns its (zero) result in its place."""
    sizes = [12, 12, 0, 12, 9]
    cases = [(rng.random(max(n, 1), dtype=np.float32) + 1, np.zeros(max(n, 1), np.float32), n)
             for n in sizes]
    popped, whole = _stream_normalised(item_target, cases, 1.0)
    assert whole == len(sizes) - 1
    for (x, y, n), (result,) in zip(cases, popped):
        if n:
            np.testing.assert_allclose(y, x / x.max(), rtol=1e-6)
            assert result == pytest.approx(float(x.max()), rel=1e-6)
        else:
            assert result == 0 and not y.any()


@pytest.mark.parametrize("tracked", [False, True])
@pytest.mark.parametrize("seed", range(6))
def test_generated_items_over_a_pool_of_buffers_match_running_them_in_order(
        seed: int, tracked: bool, monkeypatch, item_target: str) -> None:
    """Generated pushes whose buffers come from a pool of three arrays (tracked by the user, so
    used in place on the device, or not), two read-only views of one base and fresh arrays (so
    items share what they write, an item may pass one array as two of its buffers, and the next
    push may pass others of the same sizes), with k from two values (so a push often repeats the
    last one's scalars: its item is the last one's on other buffers) and every event saying 'not
    yet' at first so items pile up in flight: the popped values and the pool's final contents
    equal running the items one after another in NumPy."""
    _events_pass_after(2, monkeypatch)
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(8, 40))
    pool = [rng.random(n, dtype=np.float32) for _ in range(3)]
    base = rng.random(2 * n, dtype=np.float32)
    views = [base[:n], base[n // 2:n // 2 + n]]
    for view in views:
        view.flags.writeable = False
    pushes = []
    for _ in range(10):
        pick = int(rng.integers(0, 6))
        a = rng.random(n, dtype=np.float32) if pick == 5 else (pool + views)[pick]
        b, c = pool[int(rng.integers(0, 3))], pool[int(rng.integers(0, 3))]
        pushes.append((a, b, c, np.float32((0.5, -0.25)[int(rng.integers(0, 2))])))
    expected_pool = [p.copy() for p in pool]
    expected = []
    for a, b, c, k in pushes:  # the same steps in NumPy, on copies with the same aliasing
        copies = {id(p): e for p, e in zip(pool, expected_pool)}
        a_, b_, c_ = (copies.get(id(x), x) for x in (a, b, c))
        b_ += a_ * k
        c_ += b_ * (k + np.float32(1))
        expected.append(c_[0])
    with hpvm.runtime(item_target):
        if tracked:
            for p in pool:
                hpvm.track_memory(p)
        before = hpvm.stats()
        handle = hpvm.launch(g.chained_updates, stream=True, depth=8)
        for a, b, c, k in pushes:
            hpvm.push(handle, a, a.nbytes, b, b.nbytes, c, c.nbytes, k, n, timeout=60)
        popped = [hpvm.pop(handle, timeout=300)[0] for _ in pushes]
        hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == len(pushes)
        if tracked:
            for p in pool:
                hpvm.request_memory(p)
    np.testing.assert_allclose(popped, expected, rtol=1e-6)
    for got, want in zip(pool, expected_pool):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_items_that_cannot_get_slot_memory_run_alone(rng, monkeypatch,
                                                     item_target: str) -> None:
    """Every allocation of slot memory fails for want of memory: each item runs alone, stage by
    stage, with the same results (the stream does not fail)."""
    def no_memory(nbytes: int, device: str):
        raise MemoryError("out of memory (a stand-in for CUDA's)")

    monkeypatch.setattr(item_slots, "allocate", no_memory)
    n, count = 16, 3
    cases = [(rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)) for _ in range(count)]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True)
        for x, y in cases:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 1.0, n, timeout=60)
        hpvm.wait(handle, timeout=300)
        assert _whole(before, hpvm.stats()) == 0
    for x, y in cases:
        np.testing.assert_allclose(y, x / x.max(), rtol=1e-6)


def test_an_error_outside_the_stages_work_fails_the_stream_instead_of_hanging(
        rng, monkeypatch, item_target: str) -> None:
    """A copy into a slot fails (a stand-in for a broken device): pop() and wait() raise it with
    the first stage's name, within their timeouts."""
    def broken(self, j, obj) -> None:
        raise RuntimeError("the copy failed (stand-in)")

    monkeypatch.setattr(I.ItemSlot, "_copy_in", broken)
    n = 16
    x, y = rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)
    with hpvm.runtime(item_target):
        handle = hpvm.launch(g.normalised, stream=True)
        hpvm.push(handle, x, x.nbytes, y, y.nbytes, 1.0, n, timeout=60)
        with pytest.raises(ExecutionError, match="stage largest.*the copy failed"):
            hpvm.pop(handle, timeout=120)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)


def test_an_error_while_completing_an_item_fails_its_pop_instead_of_hanging(
        rng, monkeypatch, item_target: str) -> None:
    """Handing a completed item's results to pop() fails (a stand-in for a runtime bug), with
    several items in flight: the first pop() raises that error with the last stage's name, and
    so do the next pop() and wait(), each within its timeout (the runner's thread must not die
    with the items' results never coming)."""
    def broken(*args, **kwargs):
        raise RuntimeError("handing the results over failed (stand-in)")

    monkeypatch.setattr(I.ItemRunner, "_host_slots", staticmethod(broken))
    n = 16
    cases = [(rng.random(n, dtype=np.float32) + 1, np.zeros(n, np.float32)) for _ in range(5)]
    with hpvm.runtime(item_target):
        handle = hpvm.launch(g.normalised, stream=True, depth=8)
        for x, y in cases:
            try:
                hpvm.push(handle, x, x.nbytes, y, y.nbytes, 1.0, n, timeout=60)
            except ExecutionError as exc:  # the first item failed before the last push (a
                assert "handing the results over" in str(exc)  # fast GPU): every push after says so
                break
        for _ in range(2):
            with pytest.raises(ExecutionError, match="stage divide_by.*handing the results over"):
                hpvm.pop(handle, timeout=120)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)


def test_a_launch_with_scratch_sized_by_a_scalar_is_rebuilt_when_it_changes(
        rng, item_target: str) -> None:
    """Items of the same buffers whose m grows: the slot's kept launch holds scratch for the m it
    was built with, so it is rebuilt (not patched) for a larger one; every item reversed right."""
    size = 40
    ms = [5, 5, 40, 12, 40]
    cases = [(rng.random(size, dtype=np.float32), np.zeros(size, np.float32), m) for m in ms]
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.scratch_sized_by_m, stream=True, depth=1)
        for x, y, m in cases:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, m, timeout=60)
        popped = [hpvm.pop(handle, timeout=300) for _ in cases]
        hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == len(ms)
    for (x, y, m), result in zip(cases, popped):
        assert result == (m,)
        np.testing.assert_array_equal(y[:m], x[:m][::-1])
        assert not y[m:].any()


def test_views_the_host_drops_right_after_push_still_run_whole(rng, monkeypatch,
                                                               item_target: str) -> None:
    """Every push passes fresh views (rows of two arrays) that the host drops at once, while the
    tracker forgets dropped buffers every few launches and no event has passed yet: an item's
    buffers stay its own until it completes, so every item runs whole and writes its row."""
    monkeypatch.setattr(tracker_module, "SWEEP_AT_LEAST", 2)
    _events_pass_after(3, monkeypatch)
    n, count = 24, 12
    xs = rng.random((count, n), dtype=np.float32) + 1
    ys = np.zeros((count, n), np.float32)
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=8)
        for k in range(count):
            hpvm.push(handle, xs[k], 4 * n, ys[k], 4 * n, 2.0, n, timeout=60)
        popped = [hpvm.pop(handle, timeout=300)[0] for _ in range(count)]
        hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == count
    np.testing.assert_allclose(ys, xs / xs.max(axis=1, keepdims=True) * 2, rtol=1e-6)
    np.testing.assert_allclose(popped, xs.max(axis=1) * 2, rtol=1e-6)


def test_items_over_tracked_buffers_wait_on_the_device_and_repoint_their_slots(
        rng, monkeypatch, item_target: str) -> None:
    """Every item adds its x into the same tracked `total` and writes a tracked output of its
    own, while no event has passed yet: each item's slot stream waits for the items before it on
    the device (no item is completed on the host first: the slots fill), and a slot that ran an
    item of the same sizes takes the next one's output by pointing its launches at it. The
    running sums are those of the items in push order."""
    _events_pass_after(3, monkeypatch)
    n, count = 20, 9
    xs = [rng.random(n, dtype=np.float32) for _ in range(count)]
    total = np.zeros(n, np.float32)
    outs = [np.zeros(n, np.float32) for _ in range(count)]
    S.FAKE_LOG.clear()
    with hpvm.runtime(item_target):
        for buf in [total, *outs]:
            hpvm.track_memory(buf)
        before = hpvm.stats()
        handle = hpvm.launch(g.running_total, stream=True, depth=8)
        for x, out in zip(xs, outs):
            hpvm.push(handle, x, x.nbytes, total, total.nbytes, out, out.nbytes, n, timeout=60)
        hpvm.wait(handle, timeout=600)
        after = hpvm.stats()
        for buf in [total, *outs]:
            hpvm.request_memory(buf)
    running = np.zeros(n, np.float32)
    for x, out in zip(xs, outs):
        running = running + x
        np.testing.assert_allclose(out, running * 2, rtol=1e-6)
    np.testing.assert_allclose(total, running, rtol=1e-6)
    assert _whole(before, after) == count
    assert _delta(before, after, "stream_slot_repoints") >= count - I.SLOTS
    if gpu_device().startswith("fake"):
        waits = [e for e in S.FAKE_LOG if e[0] == "wait"]
        assert len(waits) >= count - 1  # each item after the first waits for those in flight


def test_the_suite_pipeline_with_frames_in_flight_runs_every_frame_whole(monkeypatch,
                                                                       item_target: str) -> None:
    """examples/hpvm_suite/pipeline.py's run_in_flight: several frames pushed before the oldest
    is popped, each with its own frame and edge plane and all sharing the tracked intermediate
    images: every frame runs whole and the edges match NumPy's."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
    from hpvm_suite import pipeline as P

    started = []
    real_launch = I.ItemRunner._launch  # (both threads start items through it)
    monkeypatch.setattr(I.ItemRunner, "_launch", lambda self, *args: started.append(
        real_launch(self, *args)) or started[-1])  # (the port opens its own runtime: count here)
    inputs = P.make_inputs(24, 32, 5)
    outputs = P.run_in_flight(inputs, item_target, depth=3)
    assert P.check(outputs, P.reference(inputs)) is None
    assert started == [True] * 5


def test_a_first_push_buffer_untracked_between_items_is_still_the_one_every_item_reads(
        rng, item_target: str) -> None:
    """x is bound without streaming (every item reads the first push's x), tracked, and
    untracked after the second item: the items after it do not reuse the last item's plan on the
    object the tracker let go; the push after the untracking tracks x afresh, as a launch does
    (streaming.py, _keep_moved), so they run whole on it, and every item's y is the first x
    times k."""
    n, count = 24, 5
    x0 = rng.random(n, dtype=np.float32)
    ks = [np.float32(2.5)] * count  # (the same k: each push is the last one's on a new y)
    ys = [np.zeros(n, np.float32) for _ in range(count)]
    with hpvm.runtime(item_target):
        hpvm.track_memory(x0)
        before = hpvm.stats()
        handle = hpvm.launch(g.scaled_first_source, stream=True, depth=4)
        for i, (k, y) in enumerate(zip(ks, ys)):
            if i == 2:
                hpvm.pop(handle, timeout=300)
                hpvm.pop(handle, timeout=300)
                hpvm.untrack_memory(x0)
            hpvm.push(handle, x0, x0.nbytes, y, y.nbytes, k, n, timeout=60)
        for _ in range(count - 2):
            hpvm.pop(handle, timeout=300)
        hpvm.wait(handle, timeout=60)
        assert _whole(before, hpvm.stats()) == count
    for k, y in zip(ks, ys):
        np.testing.assert_array_equal(y, x0 * k)


def test_the_host_thread_starts_and_completes_items_itself(rng, item_target: str) -> None:
    """push() and pop() do the runner thread's work on the host thread where they can (help():
    start the items pushed while a slot is free, complete those the GPU finished), so the two
    threads hand each other nothing in a steady stream; results as NumPy's, in push order. (Each
    item is popped before the next push, after a pause, as a program that works between frames:
    on the fake device a kernel runs while it is queued, so a runner thread busy with one item
    would take the next as soon as it is pushed.)"""
    n, count = 64, 24
    xs = rng.random((count, n), dtype=np.float32) + 1
    scales = rng.random(count, dtype=np.float32) * 4 - 2
    ys = np.zeros((count, n), np.float32)
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=3)
        popped = []
        for k in range(count):
            time.sleep(0.01)
            hpvm.push(handle, xs[k], 4 * n, ys[k], 4 * n, float(scales[k]), n, timeout=60)
            popped.append(hpvm.pop(handle, timeout=300)[0])
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    tops = xs.max(axis=1)
    np.testing.assert_allclose(ys, xs / tops[:, None] * scales[:, None], rtol=1e-6)
    np.testing.assert_allclose(popped, tops * scales, rtol=1e-6)
    assert _whole(before, after) == count
    # the first item is the runner thread's (it decides the stream's way); most others the host's
    assert _delta(before, after, "stream_items_host_started") >= count // 2


@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="a user's CUDA stream needs a GPU")
def test_the_host_thread_keeps_its_own_cuda_stream_while_it_helps(rng, item_target: str) -> None:
    """The items the host thread starts run on their slots' streams, which it makes current only
    while it starts them: the user's current stream is the user's again after every push and
    pop."""
    import torch

    n, count = 256, 12
    xs = torch.rand((count, n), device="cuda") + 1
    ys = torch.zeros((count, n), device="cuda")
    mine = torch.cuda.Stream()
    with hpvm.runtime(item_target), torch.cuda.stream(mine):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=3)
        for k in range(count):
            hpvm.push(handle, xs[k], 4 * n, ys[k], 4 * n, 2.0, n, timeout=60)
            assert torch.cuda.current_stream().cuda_stream == mine.cuda_stream
            if k >= 2:
                hpvm.pop(handle, timeout=300)
                assert torch.cuda.current_stream().cuda_stream == mine.cuda_stream
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    assert _delta(before, after, "stream_items_host_started") >= 1
    expected = xs / xs.max(dim=1, keepdim=True).values * 2
    torch.testing.assert_close(ys, expected, rtol=1e-6, atol=0)


@pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                    reason="CUDA graphs need a GPU (the fake device launches kernel by kernel)")
@pytest.mark.parametrize("graphs", ["1", "0"])
def test_slots_launch_each_item_as_one_cuda_graph_with_new_buffers_and_scalars(
        rng, monkeypatch, item_target: str, graphs: str) -> None:
    """On a GPU, a slot launches the kernels of its second and later items as one CUDA graph
    (HPVM_STREAM_GRAPHS, on by default): every item here pushes rows of device tensors no item
    had (the graph's nodes are pointed at them) and a scale of its own (set in the nodes too);
    each row is the one NumPy computes, with graphs and without. (The fake device has no graphs:
    it launches one by one; tests/test_stream_items.py's other tests check its order.)"""
    import torch

    monkeypatch.setenv("HPVM_STREAM_GRAPHS", graphs)
    n, count = 300, 24
    host_xs = rng.random((count, n), dtype=np.float32) + 1
    scales = rng.random(count, dtype=np.float32) * 4 - 2
    xs = torch.from_numpy(host_xs).cuda()
    ys = torch.zeros((count, n), dtype=torch.float32, device="cuda")
    with hpvm.runtime(item_target):
        before = hpvm.stats()
        handle = hpvm.launch(g.normalised, stream=True, depth=6)
        popped = []
        for k in range(count):
            if k >= 5:
                popped.append(hpvm.pop(handle, timeout=300)[0])
            hpvm.push(handle, xs[k], 4 * n, ys[k], 4 * n, float(scales[k]), n, timeout=60)
        popped += [hpvm.pop(handle, timeout=300)[0] for _ in range(count - len(popped))]
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    tops = host_xs.max(axis=1)
    np.testing.assert_allclose(ys.cpu().numpy(), host_xs / tops[:, None] * scales[:, None], rtol=1e-6)
    np.testing.assert_allclose(popped, tops * scales, rtol=1e-6)
    assert _whole(before, after) == count
    assert _delta(before, after, "stream_slot_repoints") >= count - 2 * I.SLOTS
    if graphs == "1":
        assert _delta(before, after, "stream_item_graphs") >= 1
    else:
        assert _delta(before, after, "stream_item_graphs") == 0
