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


@pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here")
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_each_relaunch_of_a_checked_kernel_reports_its_own_fault(target: str,
                                                                 rng: np.random.Generator) -> None:
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
        assert hpvm.stats()["replayed_launches"] > before  # the same kernel, relaunched
        if torch.cuda.is_available():  # its relaunches ran as a CUDA graph, faults and all
            assert hpvm.stats()["cuda_graph_replays"] > graphed


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
