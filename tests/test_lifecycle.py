"""The runtime's lifecycle: wait() timeouts on streams, cleanup() with work in flight, one runtime
shared by nested and per-thread `with` blocks, buffers let go after untrack/cleanup, stats()
counters, and named outputs of graphs read back from text."""
from __future__ import annotations

import gc
import os
import threading
import time
import weakref

import numpy as np
import pytest
import torch

import hpvm_py as hpvm
from hpvm_py.errors import HPVMTimeoutError, LaunchError, StreamError
from hpvm_py.rt.tracker import MemoryObject

from errcheck import check_error
from programs import lifecycle_graphs as g
from programs import pep563_outputs as named

HERE = os.path.abspath(__file__)
# LCG steps per instance that keep a stage busy for a few tenths of a second on each target: the
# `gpu` target runs Triton's interpreter on a fake device without CUDA, and a real GPU where there
# is one (2,000 steps take it microseconds: the item was done before a cleanup meant to find its
# kernel running, and the test saw its result in `z`)
ROUNDS = {"cpu": 20_000_000, "python": 60_000, "nvptx": 20_000_000,
          "gpu": 20_000_000 if torch.cuda.is_available() else 2_000}


def churned(x: np.ndarray, rounds: int) -> np.ndarray:
    """What `churn` computes: the LCG applied `rounds` times, composed in closed form."""
    a, c = 1, 0
    step_a, step_c = g.LCG_A, g.LCG_C
    while rounds:
        if rounds & 1:
            a, c = step_a * a % 2 ** 31, (step_a * c + step_c) % 2 ** 31
        step_a, step_c = step_a * step_a % 2 ** 31, (step_a * step_c + step_c) % 2 ** 31
        rounds >>= 1
    return (x * a + c) & g.LCG_MASK


class Item:
    """One push of slow_pipeline: its own buffers, so every item's result can be checked."""

    def __init__(self, rng: np.random.Generator, n: int, rounds: int, tag: int):
        self.x = rng.integers(0, 2 ** 31, n, dtype=np.int64)
        self.y = np.zeros(n, np.int64)
        self.z = np.zeros(n, np.int64)
        self.rounds, self.tag = rounds, tag

    def args(self) -> tuple:
        n = len(self.x)
        return (self.x, self.x.nbytes, self.y, self.y.nbytes, self.z, self.z.nbytes, n, self.rounds,
                self.tag)

    def expected(self) -> np.ndarray:
        return churned(self.x, self.rounds)


# -- wait() with a timeout on a stream -----------------------------------------------------------


def test_a_timed_out_wait_leaves_the_stream_draining_and_a_second_wait_finishes_it(target, rng):
    items = [Item(rng, 64, ROUNDS[target], tag) for tag in (3, 4)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.slow_pipeline, stream=True)
        for item in items:
            hpvm.push(h, *item.args())
        with pytest.raises(HPVMTimeoutError, match=r"wait\(\) again") as info:
            hpvm.wait(h, timeout=0)  # ERR:wait-timeout
        check_error(info.value, HPVMTimeoutError, HERE, "wait-timeout", None)
        with pytest.raises(StreamError, match="closed"):
            hpvm.push(h, *items[0].args())
        assert hpvm.wait(h, timeout=120) is None
        # once wait() returned every stage has ended: all written, and nothing writes later
        done = [(item.y.copy(), item.z.copy()) for item in items]
        for item in items:
            np.testing.assert_array_equal(item.z, item.expected())
        time.sleep(0.2)
        for item, (y, z) in zip(items, done):
            np.testing.assert_array_equal(item.y, y)
            np.testing.assert_array_equal(item.z, z)
        assert [r[0] for r in h.results()] == [3, 4]


def test_wait_twice_on_a_stream_is_the_same_error_as_on_a_launch(target, rng):
    item = Item(rng, 8, 1, 0)
    with hpvm.runtime(target):
        h = hpvm.launch(g.slow_pipeline, stream=True)
        hpvm.push(h, *item.args())
        hpvm.wait(h, timeout=60)
        with pytest.raises(LaunchError) as info:
            hpvm.wait(h)  # ERR:stream-wait-twice
        check_error(info.value, LaunchError, HERE, "stream-wait-twice", None)
        plain = hpvm.launch(g.slow_pipeline, *item.args())
        hpvm.wait(plain)
        with pytest.raises(LaunchError) as again:
            hpvm.wait(plain)
        assert again.value.message == info.value.message
        assert hpvm.pop(h) == (0,)  # the result waits until popped


def test_a_timed_out_push_gives_the_item_to_no_stage(target, rng):
    """Stages are fed by per-stage FIFOs: a push that times out while the slow stage's FIFO is full
    must not have fed the fast stage, or every later result would pair the wrong items."""
    n, rounds = 16, ROUNDS[target]
    x = rng.integers(0, 2 ** 31, n, dtype=np.int64)
    outs = []
    with hpvm.runtime(target):
        h = hpvm.launch(g.side_by_side, stream=True, depth=1)
        accepted: list[int] = []
        for tag in range(100):  # the slow stage cannot keep up: a push soon finds its FIFO full
            y = np.zeros(n, np.int64)
            try:
                hpvm.push(h, x, x.nbytes, y, y.nbytes, n, rounds, tag, timeout=0.001)
            except HPVMTimeoutError:
                break
            accepted.append(tag)
            outs.append(y)
        else:
            pytest.fail("no push timed out")
        y = np.zeros(n, np.int64)
        hpvm.push(h, x, x.nbytes, y, y.nbytes, n, 1, 1000, timeout=120)
        accepted.append(1000)
        hpvm.wait(h, timeout=120)
        results = list(h.results())
    assert [tuple(r) for r in results] == [(t, t) for t in accepted]
    for out in outs:
        np.testing.assert_array_equal(out, churned(x, rounds))
    np.testing.assert_array_equal(y, churned(x, 1))


# -- cleanup() with a stream in flight -----------------------------------------------------------


def test_cleanup_stops_a_busy_stream_before_its_queued_items_run(target, rng):
    items = [Item(rng, 64, ROUNDS[target], tag) for tag in range(4)]
    hpvm.init(target)
    try:
        h = hpvm.launch(g.slow_pipeline, stream=True, depth=4)
        for item in items:
            hpvm.push(h, *item.args())
    finally:
        hpvm.cleanup(timeout=120)
    # the first stage finished at most the item it was running; the others never started
    started = [bool(item.y.any()) for item in items]
    assert sum(started) <= 1 and not any(started[1:]), started
    written = [(item.y.copy(), item.z.copy()) for item in items]
    time.sleep(0.2)
    for item, (y, z) in zip(items, written):  # nothing runs after cleanup() returned
        np.testing.assert_array_equal(item.y, y)
        np.testing.assert_array_equal(item.z, z)
    with pytest.raises(StreamError, match="cleanup") as info:
        hpvm.pop(h)  # ERR:pop-after-cleanup
    check_error(info.value, StreamError, HERE, "pop-after-cleanup", None)
    assert "4 pushed item(s)" in str(info.value)
    with pytest.raises(StreamError, match="cleanup"):
        hpvm.wait(h, timeout=10)
    with pytest.raises(StreamError, match="cleanup"):
        list(h.results())
    with pytest.raises(StreamError, match="cleanup"):
        hpvm.push(h, *items[0].args())


def _wait_until_taken(h) -> None:
    """Until the first stage has taken the pushed item, and started its kernel (which runs far
    longer than this)."""
    while h.host_fifos[0].qsize():
        time.sleep(0.001)
    time.sleep(0.02)


def test_cleanup_stops_an_internal_node_stage_between_its_children(target, rng):
    item = Item(rng, 64, 2 * ROUNDS[target], 5)
    hpvm.init(target)
    try:
        h = hpvm.launch(g.one_internal_stage, stream=True)
        hpvm.push(h, *item.args())
        _wait_until_taken(h)
    finally:
        hpvm.cleanup(timeout=120)
    np.testing.assert_array_equal(item.y, item.expected())  # the running kernel finished...
    assert not item.z.any()  # ...and its sibling in the same stage never started
    assert hpvm.stats()["nodes_run"] == 0  # the stage's firing did not complete


def test_cleanup_after_a_timed_out_wait_stops_the_stream(target, rng):
    items = [Item(rng, 64, ROUNDS[target], tag) for tag in range(3)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.slow_pipeline, stream=True)
        for item in items:
            hpvm.push(h, *item.args())
        with pytest.raises(HPVMTimeoutError):
            hpvm.wait(h, timeout=0)
    assert not items[-1].z.any()  # stopped before the last item reached the second stage
    with pytest.raises(StreamError, match="cleanup"):
        hpvm.wait(h)


# -- one runtime per process, reference-counted --------------------------------------------------


def _add_index(a: np.ndarray) -> None:
    hpvm.wait(hpvm.launch(g.inner, a, a.nbytes, len(a)))


def test_a_nested_runtime_joins_and_its_exit_keeps_the_outer_one(target, rng):
    x = rng.integers(0, 100, 32, dtype=np.int64)
    a = x.copy()
    with hpvm.runtime(target):
        stream = hpvm.launch(g.slow_pipeline, stream=True)
        with hpvm.runtime(target):
            _add_index(a)
        with hpvm.runtime():  # no target: joins whatever runs
            _add_index(a)
        _add_index(a)  # the inner exits did not stop the runtime
        item = Item(rng, 8, 5, 9)
        hpvm.push(stream, *item.args())  # nor the outer block's stream
        assert hpvm.pop(stream, timeout=60) == (9,)
        hpvm.wait(stream, timeout=60)
        np.testing.assert_array_equal(item.z, item.expected())
    np.testing.assert_array_equal(a, x + 3 * np.arange(32))
    with pytest.raises(LaunchError, match="not initialised"):
        _add_index(a)


def test_a_nested_runtime_with_another_target_is_an_error(target):
    other = "python" if target != "python" else "cpu"
    a = np.zeros(4, np.int64)
    with hpvm.runtime(target):
        with pytest.raises(LaunchError) as info:
            hpvm.init(other)  # ERR:other-target
        check_error(info.value, LaunchError, HERE, "other-target", None)
        assert repr(target) in info.value.message
        _add_index(a)  # the running runtime is untouched
    np.testing.assert_array_equal(a, np.arange(4))
    hpvm.cleanup()  # more cleanups than inits: harmless


def test_threads_with_their_own_runtime_blocks_share_one_runtime(target, rng):
    """Two threads each open `with hpvm.runtime()` and launch concurrently; the first to leave does
    not stop the runtime under the other, which goes on launching."""
    n = 256
    arrays = {name: rng.integers(0, 1000, n, dtype=np.int64) for name in ("early", "late")}
    originals = {name: a.copy() for name, a in arrays.items()}
    launched = {name: 0 for name in arrays}
    both_in = threading.Barrier(2, timeout=60)
    early_left = threading.Event()
    errors: list[BaseException] = []

    def worker(name: str, launches: int) -> None:
        try:
            with hpvm.runtime(target):
                both_in.wait()
                for i in range(launches):
                    _add_index(arrays[name])
                    launched[name] += 1
                    if name == "late" and i == 2:
                        assert early_left.wait(60)  # go on only once the other thread has left
            if name == "early":
                early_left.set()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)
            early_left.set()

    threads = [threading.Thread(target=worker, args=("early", 5)),
               threading.Thread(target=worker, args=("late", 20))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert not any(t.is_alive() for t in threads)
    assert not errors, errors[0]
    for name, a in arrays.items():
        np.testing.assert_array_equal(a, originals[name] + launched[name] * np.arange(n))
    assert launched == {"early": 5, "late": 20}
    with pytest.raises(LaunchError):  # the last exit stopped it
        _add_index(arrays["late"])


# -- buffers are let go ---------------------------------------------------------------------------


def _refs_to_fresh_buffers(launches: int, untrack: bool) -> list[weakref.ref]:
    """Launch a graph with fresh arrays each time (the same ones twice, so the cpu target records
    and replays); returns weak references to every array."""
    refs = []
    for i in range(launches):
        a = np.arange(16, dtype=np.int64)
        hpvm.track_memory(a)
        for _ in range(2):
            _add_index(a)
        np.testing.assert_array_equal(hpvm.request_memory(a), 3 * np.arange(16))
        refs.append(weakref.ref(a))
        if untrack:
            hpvm.untrack_memory(a)
    return refs


def test_untracked_buffers_are_freed(target):
    with hpvm.runtime(target):
        refs = _refs_to_fresh_buffers(12, untrack=True)
        gc.collect()
        alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} untracked arrays are still held"


def test_buffers_are_freed_after_cleanup(target):
    with hpvm.runtime(target):
        refs = _refs_to_fresh_buffers(12, untrack=False)
    gc.collect()
    alive = sum(r() is not None for r in refs)
    assert alive == 0, f"{alive} arrays are still held after cleanup()"


def test_buffers_a_launch_tracked_are_let_go_once_the_user_drops_them(target, rng):
    """A loop that launches on fresh arrays without tracking them (a new output each step) must
    not keep them all alive until cleanup: the tracker forgets the ones only it still holds
    (their data is home after each launch), while a buffer the user keeps stays tracked."""
    kept = np.zeros(16, np.int64)
    with hpvm.runtime(target):
        _add_index(kept)
        refs = []
        for _ in range(300):
            a = np.full(16, int(rng.integers(-9, 9)), np.int64)
            start = a.copy()
            _add_index(a)
            np.testing.assert_array_equal(a, start + np.arange(16))  # home right after wait
            refs.append(weakref.ref(a))
        del a
        gc.collect()
        alive = sum(r() is not None for r in refs)
        _add_index(kept)
    np.testing.assert_array_equal(kept, 2 * np.arange(16))
    assert alive <= 150, f"{alive} of 300 dropped arrays are still held"


def test_pushed_buffers_are_freed_when_the_stream_ends(target, rng):
    with hpvm.runtime(target):
        waited = hpvm.launch(g.slow_pipeline, stream=True)
        stopped = hpvm.launch(g.slow_pipeline, stream=True)
        items = [Item(rng, 8, 2, tag) for tag in range(3)]
        refs = [weakref.ref(buf) for item in items for buf in (item.x, item.y, item.z)]
        for item in items:
            hpvm.push(waited, *item.args())
            hpvm.push(stopped, *item.args())
        hpvm.wait(waited, timeout=60)
        for item in items:
            hpvm.untrack_memory(item.x)  # pushes track their buffers, like launches
            hpvm.untrack_memory(item.y)
            hpvm.untrack_memory(item.z)
    del items, item
    gc.collect()
    assert all(r() is None for r in refs)  # though both handles are still held
    assert waited is not None and stopped is not None


def test_a_buffer_launched_again_after_untrack_is_tracked_again(target):
    a = np.zeros(8, np.int64)
    with hpvm.runtime(target):
        _add_index(a)
        _add_index(a)  # on the cpu target: a replay of the first launch
        hpvm.untrack_memory(a)
        _add_index(a)  # not replayed blindly: the launch tracks `a` again
        np.testing.assert_array_equal(hpvm.request_memory(a), 3 * np.arange(8))


# -- stats() ---------------------------------------------------------------------------------------


def test_nodes_run_counts_every_node_of_every_launch(target):
    a = np.zeros(8, np.int64)
    with hpvm.runtime(target):
        for _ in range(3):
            hpvm.wait(hpvm.launch(g.nested, a, a.nbytes, 8))  # inner, its leaf, echo
        counts = hpvm.stats()
    assert counts["launches"] == 3
    assert counts["nodes_run"] == 9 and counts["kernel_launches"] == 6
    np.testing.assert_array_equal(a, 3 * np.arange(8))


def test_replayed_and_streamed_launches_count_their_nodes(target, rng):
    a = np.zeros(8, np.int64)
    item = Item(rng, 8, 3, 1)
    with hpvm.runtime(target):
        for _ in range(4):
            _add_index(a)  # one leaf under the root: replayed after the first launch on the cpu target
        counts = hpvm.stats()
        assert counts["nodes_run"] == 4 and counts["kernel_launches"] == 4
        if target == "cpu":
            assert counts["replayed_launches"] == 3
        h = hpvm.launch(g.slow_pipeline, stream=True)
        for _ in range(5):
            hpvm.push(h, *item.args())
        hpvm.wait(h, timeout=60)
        assert hpvm.stats()["nodes_run"] == 4 + 5 * 2  # two stages per item


def test_a_fresh_runtime_resets_the_counters_and_a_joining_one_does_not(target):
    a = np.zeros(8, np.int64)
    with hpvm.runtime(target):
        _add_index(a)
        with hpvm.runtime(target):
            assert hpvm.stats()["launches"] == 1
            _add_index(a)
        assert hpvm.stats()["launches"] == 2
    assert hpvm.stats()["launches"] == 2  # readable after cleanup
    with hpvm.runtime(target):
        assert hpvm.stats()["launches"] == 0 and hpvm.stats()["nodes_run"] == 0


# -- named outputs of graphs from text -------------------------------------------------------------


def _launch_summary(root, target: str):
    a = np.arange(6, dtype=np.float32)
    with hpvm.runtime(target):
        return hpvm.wait(hpvm.launch(root, a, a.nbytes, 6))


def test_graphs_from_text_and_load_return_their_named_outputs(target, tmp_path):
    direct = _launch_summary(named.root, target)
    text = hpvm.to_text(named.root)
    (tmp_path / "root.hpvm").write_text(text)
    for graph in (hpvm.from_text(text), hpvm.load(tmp_path)):
        result = _launch_summary(graph, target)
        assert type(result)._fields == ("total", "count")
        assert result.total == direct.total == 15.0 and result.count == direct.count == 6
        assert tuple(result) == tuple(direct)


def test_graphs_from_text_keep_unnamed_outputs_as_before(target):
    a = np.zeros(8, np.int64)
    loaded = hpvm.from_text(hpvm.to_text(g.inner))
    with hpvm.runtime(target):
        assert hpvm.wait(hpvm.launch(loaded, a, a.nbytes, 8)) == 1  # one unnamed output: a value


def test_cleanup_that_times_out_on_a_running_kernel_names_the_stage(target, rng):
    item = Item(rng, 64, 2 * ROUNDS[target], 1)
    hpvm.init(target)
    h = hpvm.launch(g.slow_pipeline, stream=True)
    hpvm.push(h, *item.args())
    _wait_until_taken(h)
    with pytest.raises(HPVMTimeoutError, match="churn") as info:
        hpvm.cleanup(timeout=0)  # ERR:cleanup-timeout
    check_error(info.value, HPVMTimeoutError, HERE, "cleanup-timeout", None)
    with pytest.raises(LaunchError, match="not initialised"):  # the runtime is stopped anyway
        _add_index(np.zeros(4, np.int64))
    for t in threading.enumerate():  # the kernel ends by itself, and its stage with it
        if t.name.startswith("hpvm-stage-"):
            t.join(120)
            assert not t.is_alive()
    if target in ("cpu", "python"):  # the running kernel finished, in the user's buffer
        np.testing.assert_array_equal(item.y, item.expected())
    # (on a device target the runtime let go of y while the kernel ran: its result may stay there)
    assert not item.z.any()  # the next stage never ran


def test_a_buffers_recordings_are_held_weakly_and_do_not_pile_up():
    """A tracked object refers to the recordings that use it weakly (a dict of references), and
    those evicted since are cleared as more are added: a buffer every launch shares (the input of
    a loop over fresh outputs) does not keep a reference per launch ever made."""
    class Recording:  # (anything a weak reference can name)
        pass

    buf = np.zeros(4, np.float32)
    obj = MemoryObject(buf, buf.nbytes, "host")
    live = [Recording() for _ in range(40)]
    for r in live:
        obj.add_recording(r)
    for _ in range(5000):  # one recording at a time, let go of at once
        obj.add_recording(Recording())
    assert all(obj.used_by(r) for r in live)
    assert len(obj.recordings) <= 2 * len(live) + 1
    obj.discard_recording(live[0])
    assert not obj.used_by(live[0]) and obj.used_by(live[1])
    other = Recording()
    assert not obj.used_by(other)
    obj.discard_recording(other)  # one it never had: nothing happens
    assert len([r for r in live if obj.used_by(r)]) == len(live) - 1
