"""A program that runs for days (a training loop, a server) must not grow without bound: loops of
launches, graphs, streams, tracking calls, profiles and errors reach a plateau after a warm-up.

Each loop counts the objects the garbage collector tracks (every dict, list and class instance the
runtime could keep) at samples in an early and a late window and fails when the late window's peak
is above the early one's by more than a small amount per iteration between them: a leak of one
object per launch grows by that much, while the runtime's bounded caches (64 recordings a graph,
the sweep of dropped buffers every 64 or so launches) only make the count go up and down. The
caches of compiled things keep fewer entries here (monkeypatched), so that a loop passes their
bound within a few dozen compiles."""
from __future__ import annotations

import gc
import os
import threading
import time
import weakref
from typing import Any, Callable

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py.backends import registry
from hpvm_py.errors import HPVMError
from hpvm_py.rt import args as launch_args
from programs import leak_graphs as P

# (the integer-per-step loop launches on fewer elements than its buffers hold, on purpose)
pytestmark = pytest.mark.filterwarnings("ignore:leaf 'scale' may leave part of its Out")

N = 16
HOST_TARGETS = [t for t in ("cpu", "python") if t in TARGETS]
# objects gained per iteration from the early window's peak to the late one's: the leaks this
# file was written for gained 1 (a launch) to 160 (a graph) per iteration; the bounded caches' ups
# and downs stay well under this over the distances below
PER_ITERATION = 0.25


def _objects() -> int:
    gc.collect()
    return len(gc.get_objects())


def _growth(step: Callable[[int], None], warm: int, window: int, distance: int,
            samples: int = 4) -> float:
    """Objects gained per iteration between the peaks of two windows of `window` iterations,
    `distance` iterations apart, after `warm` iterations."""
    every = max(1, window // samples)
    i = 0

    def peak() -> int:
        nonlocal i
        most = 0
        for _ in range(samples):
            for _ in range(every):
                step(i)
                i += 1
            most = max(most, _objects())
        return most

    for i in range(warm):
        step(i)
    i = warm
    early = peak()
    for _ in range(distance - every * samples):
        step(i)
        i += 1
    late = peak()
    return (late - early) / distance


def _buffers() -> tuple[np.ndarray, np.ndarray]:
    return np.arange(N, dtype=np.float32), np.zeros(N, np.float32)


def _launch(graph: Any, a: np.ndarray, c: np.ndarray, *rest: Any) -> None:
    hpvm.wait(hpvm.launch(graph, a, a.nbytes, c, c.nbytes, *rest))


@pytest.fixture
def small_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The caches of compiled kernels and of checked parameters keep 8 entries (not hundreds), so
    a loop of compiles passes their bound quickly."""
    for target in TARGETS:
        backend = registry.get(target)
        if backend is not None:
            monkeypatch.setattr(type(backend), "MEMORY_KEPT", 8, raising=False)
    monkeypatch.setattr(launch_args, "_CHECKED_KEPT", 8, raising=False)
    monkeypatch.setattr(launch_args, "_KINDS_KEPT", 8)


# -- graphs, and what the runtime keeps of them -------------------------------------------------

@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_graph_dropped_with_its_buffers_is_freed(target: str) -> None:
    """Compiled graphs are kept by their graph object: one the program dropped (a graph made per
    call) goes, with its compiled code and its buffers. The cache of compiled graphs was a table
    keyed weakly by the graph whose entries referred to it, which kept every graph alive."""
    with hpvm.runtime(target):
        graph, (a, c) = P.make_scaled_by(3.0), _buffers()
        _launch(graph, a, c, N)
        assert c[1] == 3.0
        compiled = hpvm.compile(graph)
        graph_refs = [weakref.ref(graph), weakref.ref(compiled)]
        buffer_refs = [weakref.ref(a), weakref.ref(c)]
        del graph, a, c, compiled
        gc.collect()
        assert [r() is None for r in graph_refs] == [True, True]
    gc.collect()  # (a dropped buffer goes at the runtime's next sweep, or at cleanup)
    assert [r() is None for r in buffer_refs] == [True, True]


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_graphs_made_in_a_loop_reach_a_plateau(target: str, small_caches: None) -> None:
    """A graph made, compiled and launched per step on the same tracked buffers: the graphs, their
    compiled code, the checks each parameter passed on the buffers (per buffer and per runtime)
    and the buffers' references to the recordings of the graphs gone (pruned once, then never
    again while one recording lived) do not accumulate."""
    a, c = _buffers()
    with hpvm.runtime(target):
        hpvm.track_memory(a)
        hpvm.track_memory(c)

        def step(i: int) -> None:
            _launch(P.make_scaled_by(float(i)), a, c, N)
            assert c[1] == float(i)

        assert _growth(step, warm=24, window=12, distance=48) < PER_ITERATION


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_global_changed_every_step_reaches_a_plateau(target: str, small_caches: None) -> None:
    """A watched global changed before each launch rebuilds the leaf's IR each time: the compiled
    graphs and kernels of the old values go (the kernel cache keeps its most recently used)."""
    a, c = _buffers()
    try:
        with hpvm.runtime(target):

            def step(i: int) -> None:
                P.FACTOR = float(i)
                _launch(P.scaled_by_factor, a, c, N)
                assert c[1] == float(i)

            assert _growth(step, warm=16, window=8, distance=32) < PER_ITERATION
            backend = registry.get(target)
            assert len(type(backend)._memory) <= 8
    finally:
        P.FACTOR = 1.0


@pytest.mark.skipif(not HOST_TARGETS, reason="runs on the cpu or python target")
def test_the_kernel_cache_keeps_its_most_recently_used(small_caches: None,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel used again is kept over those used longer ago (it is compiled once). The cache's
    own entry is compared, not the kernel a graph holds: a graph whose leaf equals one compiled
    before gets that kernel re-labelled with its own leaf's lines (Backend.for_leaf), so which
    object a graph holds depends on which test of the process compiled the leaf first."""
    target = HOST_TARGETS[0]
    backend = registry.get(target)
    monkeypatch.setattr(type(backend), "_memory", {})
    a, c = _buffers()
    try:
        with hpvm.runtime(target):
            hpvm.compile(P.make_scaled_by(2.0))  # a new graph object: its `scale` leaf compiled
            ((scale_key, scale_kernel),) = type(backend)._memory.items()
            for i in range(12):
                P.FACTOR = float(i)
                _launch(P.scaled_by_factor, a, c, N)
                hpvm.compile(P.make_scaled_by(2.0))  # the same `scale` kernel: a cache hit
            assert type(backend)._memory.get(scale_key) is scale_kernel  # never built again
            assert len(type(backend)._memory) <= 8
    finally:
        P.FACTOR = 1.0


# -- launches ---------------------------------------------------------------------------------

def _fresh(i: int) -> None:
    a, c = _buffers()
    _launch(P.scaled, a, c, 2.0, N)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_launch_loops_reach_a_plateau(target: str) -> None:
    """Fresh buffers each step, a ring of more buffer sets than a graph keeps recordings of, a
    float changed each step, new sizes each step, an integer new at each step on the same
    buffers (each launch a new recording of them, the least recently used evicted), tracking and
    untracking, and launches that raise."""
    ring = [_buffers() for _ in range(80)]
    kept_a, kept_c = _buffers()
    wide = np.ones(4 * N, np.float32)

    def rotate(i: int) -> None:
        a, c = ring[i % len(ring)]
        _launch(P.scaled, a, c, float(i % 5), N)

    def sizes(i: int) -> None:
        n = 1 + i
        a, c = np.ones(n, np.float32), np.empty(n, np.float32)
        _launch(P.scaled, a, c, 2.0, n)

    big_a, big_c = np.ones(4096, np.float32), np.empty(4096, np.float32)

    def counter(i: int) -> None:  # an integer argument new at every step, on the same buffers
        _launch(P.scaled, big_a, big_c, 2.0, 1 + i)

    def track(i: int) -> None:
        a, _ = _buffers()
        hpvm.track_memory(a)
        _launch(P.scaled, a, kept_c, 2.0, N)
        hpvm.request_memory(kept_c)
        hpvm.untrack_memory(a)

    def failing(i: int) -> None:
        with pytest.raises(HPVMError):  # (its traceback must not keep the buffers)
            _launch(P.scaled, kept_a, wide, 2.0, 4 * N)  # reads `a` past its end
        with pytest.raises(HPVMError):
            _launch(P.scaled, kept_a.astype(np.float64), kept_c, 2.0, N)  # not f32

    launches = 400 if target == "python" else 1200
    with hpvm.runtime(target):
        # (fresh buffers fill a graph's 64 recordings over the first 2,000 launches or so on cpu)
        growth = _growth(_fresh, warm=6 * launches // 4, window=launches // 2, distance=launches)
        assert growth < PER_ITERATION, ("fresh", growth)
        for name, step in [("ring", rotate), ("sizes", sizes), ("counter", counter),
                           ("track", track), ("failing", failing)]:
            growth = _growth(step, warm=launches // 4, window=launches // 4, distance=launches)
            assert growth < PER_ITERATION, (name, growth)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_runtime_and_profile_blocks_reach_a_plateau(target: str, tmp_path: Any) -> None:
    a, c = _buffers()
    fds = len(os.listdir("/proc/self/fd"))

    def runtime_block(i: int) -> None:
        with hpvm.runtime(target):
            _launch(P.scaled, a, c, 2.0, N)

    def profile_block(i: int) -> None:
        with hpvm.runtime(target), hpvm.profile(tmp_path / "trace.json"):
            _launch(P.scaled, a, c, 2.0, N)

    for step in (runtime_block, profile_block):
        assert _growth(step, warm=50, window=40, distance=160) < PER_ITERATION
    assert len(os.listdir("/proc/self/fd")) <= fds


# -- streams ----------------------------------------------------------------------------------

def _stage_threads() -> int:
    return sum(t.name.startswith("hpvm-stage-") for t in threading.enumerate())


def _until_no_stage_threads(before: int) -> int:
    deadline = time.monotonic() + 10
    while _stage_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    return _stage_threads()


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_streams_dropped_without_wait_end_their_threads(target: str) -> None:
    """A stream whose handle the program dropped without wait() (an exception between launch and
    wait, a consumer that gave up) can never be pushed to or popped again: its stages stop and
    their threads end, letting go of the pushed buffers. They used to run until cleanup()."""
    before = _stage_threads()
    with hpvm.runtime(target):
        a, b, c = np.ones(N, np.float32), np.empty(N, np.float32), np.empty(N, np.float32)
        refs = []
        for i in range(20):
            stream = hpvm.launch(P.pipeline, stream=True)
            hpvm.push(stream, a * i, b, c, N)  # (a new buffer pushed: `a * i`)
            if i % 2:
                hpvm.pop(stream)
            refs.append(weakref.ref(stream))
            del stream
        gc.collect()
        assert _until_no_stage_threads(before) == before
        gc.collect()
        assert all(r() is None for r in refs)

        def dropped(i: int) -> None:
            stream = hpvm.launch(P.pipeline, stream=True)
            hpvm.push(stream, a, b, c, N)
            del stream
            # (its threads end on their own: waited for, so that a loaded machine's slower
            # threads are not counted as growth)
            _until_no_stage_threads(before)

        def waited(i: int) -> None:
            stream = hpvm.launch(P.pipeline, stream=True)
            for _ in range(3):
                hpvm.push(stream, a, b, c, N)
            hpvm.pop(stream)
            hpvm.wait(stream)

        for step in (dropped, waited):
            assert _growth(step, warm=30, window=20, distance=80) < PER_ITERATION
        assert _until_no_stage_threads(before) == before


@pytest.mark.skipif(not HOST_TARGETS, reason="runs on the cpu or python target")
def test_a_dropped_stream_still_running_is_stopped_by_cleanup_as_before() -> None:
    """Handles kept by the program behave as they did: results pop, wait() closes, a stream left
    open is stopped by cleanup()."""
    target = HOST_TARGETS[0]
    a, b, c = np.ones(N, np.float32), np.empty(N, np.float32), np.empty(N, np.float32)
    before = _stage_threads()
    with hpvm.runtime(target):
        stream = hpvm.launch(P.pipeline, stream=True)
        hpvm.push(stream, a, b, c, N)
        hpvm.push(stream, a, b, c, N)
        assert len(list(hpvm.pop(stream))) == 0
        hpvm.wait(stream)
        assert len(list(stream.results())) == 1
        open_stream = hpvm.launch(P.pipeline, stream=True)
        hpvm.push(open_stream, a, b, c, N)
    assert _until_no_stage_threads(before) == before
    del open_stream


# -- torch ------------------------------------------------------------------------------------

@pytest.mark.parametrize("target", HOST_TARGETS)
def test_torch_op_calls_reach_a_plateau(target: str) -> None:
    torch = pytest.importorskip("torch")
    op = hpvm.torch.op(P.scaled, shapes={"c": "a"}, scalars={"n": lambda a: a.numel()}, target=target)
    x = torch.ones(N)
    launches = 300 if target == "python" else 900

    def same_input(i: int) -> None:
        assert float(op(x, 2.0)[1]) == 2.0

    def fresh_input(i: int) -> None:
        op(torch.full((N + i % 7,), float(i)), 1.0)

    for step in (same_input, fresh_input):
        assert _growth(step, warm=launches // 4, window=launches // 4, distance=launches) < PER_ITERATION
