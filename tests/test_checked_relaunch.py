"""A bounds-checked GPU kernel launched again and again on the same buffers: each launch reports
its own first out-of-bounds access and never an earlier launch's, though its error word is
zeroed only when it may hold one (DeviceLaunch.clear_error_word)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py.device.outputs import DeviceLaunch
from programs import checked_relaunch as g
from programs.nested_graphs import poke

GPU_TARGETS = [t for t in ("gpu", "nvptx") if t in TARGETS]


def gather_line() -> int:
    lines = Path(g.__file__).read_text().splitlines()
    return next(no for no, text in enumerate(lines, 1) if "# oob:gather" in text)


def _relaunch_with_faults(target: str, rng: np.random.Generator) -> tuple[int, int]:
    """Gathers through indices that a poke on the device makes bad now and then: each faulting
    launch reports its own fault at the gather's line, each clean one gathers right. The replayed
    launches and CUDA-graph replays it counted."""
    n = 16
    src = rng.random(n).astype(np.float32)
    at = rng.integers(0, n, n).astype(np.int64)
    out = np.zeros(n, np.float32)
    indices = at.copy()
    values = [3, 5, 99, 7, 8, -1, 2**40, 16, 9, 1, 1]
    with hpvm.runtime(target):
        for buf in (src, at, out):
            hpvm.track_memory(buf)
        before, graphed = hpvm.stats()["replayed_launches"], hpvm.stats()["cuda_graph_replays"]
        for value in values:
            where = int(rng.integers(0, n))
            hpvm.wait(hpvm.launch(poke, at, at.nbytes, where, value))  # on the device
            indices[where] = value
            args = (src, src.nbytes, at, at.nbytes, out, out.nbytes, n)
            if 0 <= value < n:
                hpvm.wait(hpvm.launch(g.gather_all, *args))
                np.testing.assert_array_equal(hpvm.request_memory(out), src[indices])
                continue
            with pytest.raises(hpvm.errors.ExecutionError, match="out-of-bounds") as info:
                hpvm.wait(hpvm.launch(g.gather_all, *args))  # (launch raises, or wait)
            assert info.value.loc is not None and info.value.loc.line == gather_line()
            hpvm.wait(hpvm.launch(poke, at, at.nbytes, where, 0))  # repaired
            indices[where] = 0
        return (hpvm.stats()["replayed_launches"] - before,
                hpvm.stats()["cuda_graph_replays"] - graphed)


@pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here")
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_each_relaunch_of_a_checked_kernel_reports_its_own_fault(target: str,
                                                                 rng: np.random.Generator) -> None:
    replayed, graphed = _relaunch_with_faults(target, rng)
    assert replayed > 0  # the same kernel, relaunched
    if torch.cuda.is_available():  # its relaunches ran as a CUDA graph, faults and all
        assert graphed > 0


class _GraphOfIssues:
    """Stands for a captured CUDA graph where there is none (the fake device): replay() issues
    again what the capture would have queued, as a graph's launch runs its kernels without the
    host's part of a launch."""

    stream = None

    def __init__(self, queue) -> None:
        self._queue = queue
        self.replays = 0

    def replay(self, stream=None) -> None:
        self.replays += 1
        self._queue(stream)


@pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here")
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_each_graph_replay_of_a_checked_kernel_reports_its_own_fault(target: str, monkeypatch,
                                                                     rng: np.random.Generator) -> None:
    """The graph path of a replay (before_graph, the graph, check behind it), on any machine:
    capture() gives a graph whose replay queues the recorded launches as a capture does."""
    graphs: list[_GraphOfIssues] = []

    def capture(queue, device):
        graphs.append(_GraphOfIssues(queue))
        return graphs[-1]

    monkeypatch.setattr("hpvm_py.rt.replay.capture", capture)
    replayed, graphed = _relaunch_with_faults(target, rng)
    assert replayed > 0 and graphed > 0
    # faulting launches went through the graph too (a replay that raised is not counted)
    assert sum(graph.replays for graph in graphs) > graphed


class _ErrorWord:
    """Stands for a checked kernel's error word in host memory: counts its zeroings."""

    device = torch.device("cpu")

    def __init__(self) -> None:
        self.zeroed = 0

    def is_pinned(self) -> bool:
        return False

    def zero_(self) -> None:
        self.zeroed += 1


def test_an_error_word_read_clean_is_not_zeroed_before_the_next_launch() -> None:
    launch = DeviceLaunch()
    launch.error = _ErrorWord()
    launch.clear_error_word()  # made zeroed
    assert launch.error.zeroed == 0
    launch.clear_error_word()  # launched again before the first was checked: it may have faulted
    assert launch.error.zeroed == 1
    launch.error_clear = True  # check() read it: no fault
    launch.clear_error_word()
    assert launch.error.zeroed == 1
    launch.clear_error_word()
    assert launch.error.zeroed == 2


class _MappedWord(_ErrorWord):
    """Stands for an error word in pinned host memory: its values in a NumPy array."""

    def __init__(self) -> None:
        super().__init__()
        self.values = np.zeros(3, np.int64)

    def is_pinned(self) -> bool:
        return True

    def numpy(self) -> np.ndarray:
        return self.values

    def zero_(self) -> None:
        super().zero_()
        self.values[:] = 0


class _Issuing(DeviceLaunch):
    """A launch whose issue() does what a GPU launch's does to its error word and stream."""

    def __init__(self, waits: list) -> None:
        self.error = _MappedWord()
        self.waits = waits

    def issue(self, stream=None) -> None:
        self.clear_error_word()
        self._issued_on = stream


@pytest.fixture
def waits(monkeypatch) -> list:
    """The streams waited for, in order (device/outputs.py's _synchronize, recorded)."""
    seen: list = []
    monkeypatch.setattr("hpvm_py.device.outputs._synchronize", seen.append)
    return seen


def test_a_mapped_error_word_is_read_after_its_stream_unless_the_kernel_is_known_done(waits) -> None:
    launch = _Issuing(waits)
    launch.issue(11)
    launch.error.values[:] = [4, 17, 16]  # the kernel's first fault
    assert launch.read_error_word(11) == [4, 17, 16] and waits == [11]
    assert launch.read_error_word(11, ran=True) == [4, 17, 16] and waits == [11]  # no wait


def test_a_mapped_error_word_that_may_hold_a_fault_is_zeroed_after_its_kernel(waits) -> None:
    launch = _Issuing(waits)
    launch.issue(11)  # a fresh word: nothing to zero
    assert launch.error.zeroed == 0 and waits == []
    launch.error.values[:] = [2, 9, 8]  # faulted, and was never read clean
    launch.issue(12)  # the kernel issued on stream 11 may still be writing it: waited for first
    assert waits == [11] and launch.error.zeroed == 1 and not launch.error.values.any()
    launch.error_clear = True  # check() read it clean
    launch.issue(12)
    assert waits == [11] and launch.error.zeroed == 1


def test_a_capture_leaves_the_error_word_and_stream_as_they_were(waits) -> None:
    launch = _Issuing(waits)
    launch.issue(11)
    launch.error_clear = True  # read clean, as after the launch a capture follows
    launch.capture_into(99)  # queued on the capturing stream: nothing ran
    assert launch.error_clear and launch._issued_on == 11 and launch.error.zeroed == 0
    launch.before_graph(5)  # a graph run: read clean, so nothing to zero
    assert launch._issued_on == 5 and not launch.error_clear and launch.error.zeroed == 0
    launch.before_graph(5)  # run again before it was checked: zeroed behind stream 5
    assert waits == [5] and launch.error.zeroed == 1


@pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here")
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_a_stream_of_checked_gathers_fails_at_the_item_whose_index_is_out_of_bounds(
        target: str, rng: np.random.Generator) -> None:
    """Each item's checked kernel reports its own fault, whether its slot launched it alone or
    as one CUDA graph (a slot's second and later items, on a GPU); the items before pop with
    their values."""
    n, count, bad = 64, 12, 8
    src = rng.random(n).astype(np.float32)
    ats = [rng.integers(0, n, n).astype(np.int64) for _ in range(count)]
    ats[bad][int(rng.integers(0, n))] = n + int(rng.integers(0, 1000))  # one index past src
    outs = [np.zeros(n, np.float32) for _ in range(count)]
    with hpvm.runtime(target):
        before = hpvm.stats()
        handle = hpvm.launch(g.gather_stream, stream=True, depth=4)
        for k in range(count):
            try:
                hpvm.push(handle, src, src.nbytes, ats[k], ats[k].nbytes, outs[k], outs[k].nbytes,
                          n, timeout=60)
            except hpvm.errors.ExecutionError:
                assert k > bad  # (a push after the failing item may report it)
                break
        for k in range(bad):
            hpvm.pop(handle, timeout=60)
            np.testing.assert_array_equal(outs[k], src[ats[k]])
        with pytest.raises(hpvm.errors.ExecutionError, match="out-of-bounds") as info:
            hpvm.pop(handle, timeout=60)
        assert info.value.loc is not None and info.value.loc.line == gather_line()
        with pytest.raises(hpvm.errors.ExecutionError, match="out-of-bounds"):
            hpvm.wait(handle, timeout=60)
        graphs = hpvm.stats().get("stream_item_graphs", 0) - before.get("stream_item_graphs", 0)
    if torch.cuda.is_available():
        assert graphs >= 1
