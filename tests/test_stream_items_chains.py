"""Whole items of streams whose stages are chains (rt/stream/items.py): HPVM-C's shape, each stage a
wrapper (and a grid of blocks) around its leaf, returning a size it was given over an edge into
the next stage's size port. The forwarded size is known on the host, so every item runs whole on
the GPU targets; the gather's index comes from the data, so its checked kernel runs inside the
item; `t` is tracked by the user and stays on the device. Every target runs the same stream and
is checked against NumPy on fresh random inputs."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError
from hpvm_py.ir.targets import is_gpu
from programs import stream_chains as C


def _items(rng, count: int, size: int):
    items = []
    for _ in range(count):
        n = int(rng.integers(1, size + 1))  # the item's own length: extents change between items
        x = rng.standard_normal(size + 3).astype(np.float32)
        idx = rng.integers(0, size + 3, size).astype(np.int64)
        items.append((x, idx, np.zeros(size, np.float32), np.float32(rng.integers(-3, 4)), n))
    return items


def _expected(x, idx, k, n) -> tuple[np.ndarray, np.ndarray]:
    t = x[idx[:n]] * k
    z = t + np.append(t[1:], np.float32(0))
    return t, z


def _push(handle, t: np.ndarray, item) -> None:
    x, idx, z, k, n = item
    hpvm.push(handle, x, x.nbytes, idx, idx.nbytes, t, t.nbytes, z, z.nbytes, k, n, timeout=60)


def test_chain_stages_with_forwarded_sizes_run_whole_items(target: str, rng) -> None:
    size = 24
    items = _items(rng, 6, size)
    t = np.zeros(size, np.float32)
    with hpvm.runtime(target):
        hpvm.track_memory(t)
        before = hpvm.stats()
        handle = hpvm.launch(C.sized_chains, stream=True, depth=3)
        popped = []
        for item in items:
            _push(handle, t, item)
            popped.append(hpvm.pop(handle, timeout=300))
            hpvm.request_memory(t)  # the tracked buffer: what this item wrote
            x, idx, z, k, n = item
            np.testing.assert_array_equal(t[:n], _expected(x, idx, k, n)[0])
        hpvm.wait(handle, timeout=300)
        whole = hpvm.stats().get("stream_whole_items", 0) - before.get("stream_whole_items", 0)
        hpvm.untrack_memory(t)
    assert whole == (len(items) if is_gpu(target) else 0)
    for (x, idx, z, k, n), result in zip(items, popped):
        assert result == (z.nbytes,)  # the forwarded size, as the last stage returns it
        np.testing.assert_array_equal(z[:n], _expected(x, idx, k, n)[1])
        assert not z[n:].any()


def test_an_index_out_of_bounds_inside_a_whole_item_fails_its_stage_at_its_line(target: str,
                                                                               rng) -> None:
    """The third item's index points past x: the checked kernel reports it, for that item, at the
    gather's line; the items before it keep their results."""
    size = 16
    items = _items(rng, 3, size)
    items[2][1][int(rng.integers(0, items[2][4]))] = size + 3 + int(rng.integers(0, 50))
    t = np.zeros(size, np.float32)
    with hpvm.runtime(target):
        hpvm.track_memory(t)
        handle = hpvm.launch(C.sized_chains, stream=True, depth=3)
        for item in items:
            _push(handle, t, item)
        assert [hpvm.pop(handle, timeout=300) for _ in range(2)] == [(size * 4,)] * 2
        with pytest.raises(ExecutionError, match="gather_scaled.*out-of-bounds") as info:
            hpvm.pop(handle, timeout=300)
        assert info.value.loc.line > 0
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=300)
        hpvm.untrack_memory(t)
    for x, idx, z, k, n in items[:2]:
        np.testing.assert_array_equal(z[:n], _expected(x, idx, k, n)[1])


def test_a_host_loop_refilling_the_same_buffers_runs_each_item_afresh(target: str, rng) -> None:
    """As the suite's pipeline does: every push passes the same buffers, refilled by the host in
    between (the runner makes the item once and reuses it), and a changed scalar is a new item."""
    size = 20
    x = np.zeros(size + 3, np.float32)
    idx = np.zeros(size, np.int64)
    t, z = np.zeros(size, np.float32), np.zeros(size, np.float32)
    ks = [np.float32(2), np.float32(2), np.float32(-1), np.float32(-1), np.float32(2)]
    with hpvm.runtime(target):
        hpvm.track_memory(t)
        before = hpvm.stats()
        handle = hpvm.launch(C.sized_chains, stream=True)
        for k in ks:
            x[...] = rng.standard_normal(size + 3).astype(np.float32)
            idx[...] = rng.integers(0, size + 3, size)
            hpvm.push(handle, x, x.nbytes, idx, idx.nbytes, t, t.nbytes, z, z.nbytes, k, size,
                      timeout=60)
            assert hpvm.pop(handle, timeout=300) == (z.nbytes,)
            np.testing.assert_array_equal(z, _expected(x, idx, k, size)[1])
        hpvm.wait(handle, timeout=300)
        whole = hpvm.stats().get("stream_whole_items", 0) - before.get("stream_whole_items", 0)
        hpvm.untrack_memory(t)
    assert whole == (len(ks) if is_gpu(target) else 0)
