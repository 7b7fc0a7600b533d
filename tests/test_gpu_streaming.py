"""Streaming on the GPU targets: GPU stages run by the one scheduler thread (rt/stream/stages.py), each
item queued on its stage's CUDA stream up to an event (rt/stream/stage_launch.py).

On CI the gpu target runs on the fake device through Triton's interpreter: the fake streams log
what the CUDA streams would do (which stream waits for which item's event, where each kernel is
queued), so the ordering is checked without a GPU; on a GPU the same tests check the results, the
threads and the copies. Streams of Triton leaves alone run item by item by default (rt/stream/items.py,
tests/test_stream_items.py): here they run through the stage scheduler (HPVM_STREAM_ITEMS=0)."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.base import BufferArg
from hpvm_py.device import gpu_device
from hpvm_py.device import streams as S
from hpvm_py.errors import ExecutionError
from programs import stream_graphs as g

GPU_TARGETS = [t for t in __import__("conftest").TARGETS if t in ("gpu", "nvptx")]
pytestmark = pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here (gpu needs triton)")


@pytest.fixture(params=GPU_TARGETS)
def gpu_target(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(autouse=True)
def stage_by_stage(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_STREAM_ITEMS", "0")


def _spun(x: np.ndarray, stages: int, work: int) -> np.ndarray:
    """What `stages` spin stages of `work` multiply-adds each make of x."""
    v = x.copy()
    for _ in range(stages * work):
        v = v * np.float32(0.999) + np.float32(0.001)
    return v


def _stage_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("hpvm-stage-")]


def _items(rng, count: int, n: int, buffers: int) -> list[list[np.ndarray]]:
    return [[rng.random(n, dtype=np.float32)] + [np.zeros(n, np.float32) for _ in range(buffers - 1)]
            for _ in range(count)]


def _push_all(handle, items: list[list[np.ndarray]], n: int, work: int) -> None:
    for bufs in items:
        hpvm.push(handle, *[a for b in bufs for a in (b, b.nbytes)], n, work, timeout=60)


def test_gpu_stages_share_one_scheduler_thread_and_wait_for_producers_on_the_device(
        gpu_target: str, rng) -> None:
    """Four GPU stages in a chain: one scheduler thread starts them all; each item's kernel is
    queued on its stage's stream after a wait for the producer's event of the same item (on the
    fake device, the log shows it)."""
    n, work, count = 32, 3, 5
    items = _items(rng, count, n, 5)
    S.FAKE_LOG.clear()
    with hpvm.runtime(gpu_target):
        compiled = hpvm.compile(g.four_stages)
        handle = hpvm.launch(compiled, stream=True, depth=2)
        threads = _stage_threads()
        _push_all(handle, items, n, work)
        assert [hpvm.pop(handle, timeout=120) for _ in items] == [(1,)] * count
        hpvm.wait(handle, timeout=60)
    assert len(threads) == 1
    for a, *outs in items:
        for k, out in enumerate(outs, 1):
            np.testing.assert_array_equal(out, _spun(a, k, work))
    if not gpu_device().startswith("fake"):
        return
    log = list(S.FAKE_LOG)
    stages = [node.name for node in compiled.plan.nodes]
    recorded = {name: [e for kind, who, e in log if kind == "record" and who == name] for name in stages}
    assert all(len(events) == count for events in recorded.values())
    for producer, consumer in zip(stages, stages[1:]):
        waits = [e for kind, who, e in log if kind == "wait" and who == consumer]
        assert waits == recorded[producer]  # item i waits for item i of its producer, in order
        launches = [i for i, (kind, *rest) in enumerate(log) if kind == "launch" and rest[1] == consumer]
        for item, event in enumerate(waits):
            at = next(i for i, entry in enumerate(log) if entry[0] == "wait" and entry[2] is event)
            made = next(i for i, entry in enumerate(log) if entry[0] == "record" and entry[2] is event)
            assert made < at < launches[item]  # recorded, then waited for, then the kernel queued
    assert not [e for kind, who, e in log if kind == "wait" and who == stages[0]]  # no producer


def test_the_scheduler_polls_gpu_items_and_never_waits_for_an_unfinished_one(
        gpu_target: str, rng, monkeypatch) -> None:
    """Every item's event says 'not yet' for its first three queries: the scheduler keeps polling
    (and starting other stages) instead of blocking on the item; waiting for an event that has
    not passed fails the stage, so the results prove that it never did."""
    real_done, real_wait = S.ItemEvent.done, S.ItemEvent.wait

    def done(self: S.ItemEvent) -> bool:
        self.queries = getattr(self, "queries", 0) + 1
        return self.queries > 3 and real_done(self)

    def wait(self: S.ItemEvent) -> None:
        assert getattr(self, "queries", 0) > 3, "the host waited for a GPU item still in flight"
        real_wait(self)

    monkeypatch.setattr(S.ItemEvent, "done", done)
    monkeypatch.setattr(S.ItemEvent, "wait", wait)
    n, work, count = 24, 2, 6
    items = _items(rng, count, n, 5)
    with hpvm.runtime(gpu_target):
        handle = hpvm.launch(g.four_stages, stream=True)
        _push_all(handle, items, n, work)
        hpvm.wait(handle, timeout=120)
        assert [r for r in handle.results()] == [(1,)] * count
    for a, *outs in items:
        np.testing.assert_array_equal(outs[-1], _spun(a, 4, work))


def test_a_gpu_stage_queues_its_next_item_behind_the_one_in_flight(gpu_target: str, rng,
                                                                   monkeypatch) -> None:
    """While no event has passed, the first stage has exactly GPU_DEPTH (2) items queued on its
    stream: the second is issued before the first ends (the GPU runs it next without waiting for
    the host), the third only once the first has ended. Results stay item by item."""
    from hpvm_py.rt.stream import stage_launch, stages

    released = threading.Event()
    real_done, real_start = S.ItemEvent.done, stage_launch.StageLauncher.start
    started: list[str] = []

    def done(self: S.ItemEvent) -> bool:
        return released.is_set() and real_done(self)

    def start(self, *args, **kwargs):
        started.append(self.node.name)
        return real_start(self, *args, **kwargs)

    monkeypatch.setattr(S.ItemEvent, "done", done)
    monkeypatch.setattr(stage_launch.StageLauncher, "start", start)
    n, work, count = 16, 2, 5
    items = _items(rng, count, n, 5)
    with hpvm.runtime(gpu_target):
        compiled = hpvm.compile(g.four_stages)
        first = compiled.plan.nodes[0].name
        handle = hpvm.launch(compiled, stream=True, depth=8)
        _push_all(handle, items, n, work)
        for _ in range(500):  # (the scheduler thread starts them; at most 5 s)
            if started.count(first) >= stages.GPU_DEPTH:
                break
            released.wait(0.01)
        released.wait(0.2)  # time for a wrong third start to happen
        assert started == [first] * stages.GPU_DEPTH
        released.set()
        assert [hpvm.pop(handle, timeout=120) for _ in items] == [(1,)] * count
        hpvm.wait(handle, timeout=60)
    for a, *outs in items:
        np.testing.assert_array_equal(outs[-1], _spun(a, 4, work))


def test_cpu_and_gpu_stages_share_the_scheduler_with_one_copy_each_way(gpu_target: str, rng) -> None:
    """GPU, then cpu (hint), then GPU: one scheduler thread; per item the input and the cpu
    stage's result go to the GPU once each, and each GPU result comes back once."""
    n, work, count = 40, 2, 4
    items = _items(rng, count, n, 4)
    with hpvm.runtime(gpu_target):
        handle = hpvm.launch(g.mixed_stages, stream=True)
        threads = _stage_threads()
        before = hpvm.stats()
        _push_all(handle, items, n, work)
        assert [hpvm.pop(handle, timeout=120) for _ in items] == [(1,)] * count
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    assert len(threads) == 1
    assert after["h2d_copies"] - before["h2d_copies"] == 2 * count  # a and c of each item
    assert after["d2h_copies"] - before["d2h_copies"] == 2 * count  # b and d of each item
    for a, *outs in items:
        for k, out in enumerate(outs, 1):
            np.testing.assert_array_equal(out, _spun(a, k, work))


def test_a_stage_with_a_per_instance_input_runs_on_its_own_thread(gpu_target: str, rng) -> None:
    """A value per instance on an edge: the consumer goes through the executor on a thread of its
    own (and so does every stage of that stream), its stream waited for before each hand-off."""
    n, count = 48, 4
    items = [(rng.random(n, dtype=np.float32), np.zeros(n, np.float32)) for _ in range(count)]
    with hpvm.runtime(gpu_target):
        handle = hpvm.launch(g.per_instance_edge, stream=True)
        threads = _stage_threads()
        for x, y in items:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, n, timeout=60)
        hpvm.wait(handle, timeout=120)
    assert len(threads) == 2
    for x, y in items:
        np.testing.assert_array_equal(y, x * x + np.float32(1))


def test_a_failing_gpu_item_stops_the_scheduler_and_names_the_stage(gpu_target: str, rng) -> None:
    """The third item reads out of bounds: its error is raised located and naming the stage, and
    so is every later push (not an internal error), and wait() returns once nothing is in
    flight."""
    x = np.arange(16, dtype=np.int32)
    ys = [np.zeros(16, np.int32) for _ in range(4)]
    with hpvm.runtime(gpu_target):
        handle = hpvm.launch(g.may_fail, stream=True, depth=3)
        for y in ys[:2]:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 0, 16, timeout=60)
        assert [hpvm.pop(handle, timeout=60) for _ in range(2)] == [(0,), (0,)]
        hpvm.push(handle, x, x.nbytes, ys[2], ys[2].nbytes, 40, 16, timeout=60)
        with pytest.raises(ExecutionError, match="stage .*checked_divide.*out-of-bounds") as info:
            hpvm.pop(handle, timeout=60)
        assert info.value.loc.line > 0
        with pytest.raises(ExecutionError, match="checked_divide"):
            hpvm.push(handle, x, x.nbytes, ys[3], ys[3].nbytes, 0, 16, timeout=60)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=60)
    for y in ys[:2]:
        np.testing.assert_array_equal(y, x)


def test_an_error_seen_while_polling_an_item_fails_its_stage(gpu_target: str, rng, monkeypatch) -> None:
    """A kernel fault shows first where the scheduler asks an item's event: that is the stage's
    failure (pop() and wait() raise it with the stage's name), not the end of the scheduler."""
    from hpvm_py.errors import ExecutionError as Fault

    real_done = S.ItemEvent.done
    asked: list[int] = []

    def done(self: S.ItemEvent) -> bool:
        asked.append(1)
        if len(asked) == 5:
            raise Fault("the kernel of leaf spin_next faulted on the GPU (stand-in)")
        return real_done(self)

    monkeypatch.setattr(S.ItemEvent, "done", done)
    items = _items(rng, 4, 16, 5)
    with hpvm.runtime(gpu_target):
        handle = hpvm.launch(g.four_stages, stream=True)
        _push_all(handle, items, 16, 2)
        with pytest.raises(ExecutionError, match="stage spin.*stand-in"):
            for _ in items:
                hpvm.pop(handle, timeout=60)
        with pytest.raises(ExecutionError, match="stand-in"):
            hpvm.wait(handle, timeout=60)


def test_a_kept_triton_launch_is_repointed_and_dispatched_again_for_another_alignment(monkeypatch) -> None:
    """A stream stage points its kept Triton launch at the next item's buffers: the compiled
    launcher is called with the new address, unless the new pointer is not 16-byte aligned where
    the old one was (Triton compiled the kernel for aligned pointers): then it dispatches again.
    Triton is stood in for by objects that record the calls (CI has no compiled kernels)."""
    import torch

    from hpvm_py.device.outputs import DeviceOutputs
    from hpvm_py.backends.triton import prepared as P
    from hpvm_py.support.loc import Loc
    from hpvm_py.types import PtrType, f32

    calls: list[tuple] = []

    class Compiled:
        def __getitem__(self, grid):
            # the compiled launcher takes a pointer as a plain int (no typed view is made)
            return lambda *args, stream: calls.append(("launcher", args[0], stream))

    class Jit:
        arg_names = ["x", "BLOCK"]

        def __getitem__(self, grid):
            def dispatch(*args, **options):
                calls.append(("dispatch", args[0].data_ptr()))
                return Compiled()
            return dispatch

    leaf = type("Leaf", (), {"name": "scale", "loc": Loc("f.py", 1, 1),
                             "params": [type("P", (), {"type": PtrType(f32)})()]})()
    kernel = type("K", (), {"leaf": leaf})()
    monkeypatch.setattr(P, "interpreting", lambda: False)
    monkeypatch.setattr(P, "current_stream", lambda: 7)
    monkeypatch.setattr(P, "current_device", lambda: 0)
    space = np.zeros(64 + 4, np.uint8)
    start = (-space.ctypes.data) % 16
    aligned = [space[start:start + 32], space[start + 32:start + 64]]
    unaligned = space[start + 4:start + 36]
    first = P.typed_tensor(aligned[0], f32)
    launch = P.TritonLaunch(kernel, None, Jit(), [first], {"BLOCK": 32}, (1, 1, 1),
                            DeviceOutputs([], "scale", None), None, [], {}, {}, 1, {0: 0})
    assert launch.repointable
    launch.start()
    for buf in (aligned[1], unaligned, unaligned, aligned[0]):
        launch.set_buffer(0, BufferArg(obj=torch.from_numpy(buf), address=buf.ctypes.data,
                                       nbytes=32, array=None))
        launch.start()
    addresses = [b.ctypes.data for b in (aligned[0], aligned[1], unaligned, aligned[0])]
    assert calls == [("dispatch", addresses[0]), ("launcher", addresses[1], 7),
                     ("dispatch", addresses[2]), ("launcher", addresses[2], 7),
                     ("dispatch", addresses[3])]



def test_a_stages_pinned_buffers_are_reused_only_once_their_item_completed(monkeypatch) -> None:
    """A stage's staged copies take pinned buffers from its pool (device/staging.py) and
    give them back in complete(), when the item's copies are done: an item in flight never
    shares one with the next. Pinned memory needs CUDA: plain CPU tensors stand in for it."""
    import torch

    from hpvm_py.device.staging import PinnedPool, StagedCopies

    made: list = []

    def empty(n: int, dtype, pin_memory: bool):
        assert pin_memory
        made.append(torch.zeros(n, dtype=dtype))
        return made[-1]

    monkeypatch.setattr(torch, "empty", empty)
    pool = PinnedPool(keep=1)
    src = np.arange(100, dtype=np.uint8)
    first, second = StagedCopies(pool), StagedCopies(pool)
    dst = torch.zeros(100, dtype=torch.uint8)
    first.to_device(src, dst)
    assert torch.equal(dst, torch.from_numpy(src))
    second.to_device(src[::-1].copy(), torch.zeros(100, dtype=torch.uint8))
    assert len(made) == 2  # the first item is in flight: a buffer of its own
    assert made[0] is not made[1]
    first.complete()
    second.complete()  # the pool keeps one buffer per size: the first given back
    third = StagedCopies(pool)
    third.to_device(src, torch.zeros(100, dtype=torch.uint8))
    third.to_device(src[:50].copy(), torch.zeros(50, dtype=torch.uint8))
    assert len(made) == 3 and made[2].numel() == 50  # the kept one reused, another size made
