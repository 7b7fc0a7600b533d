"""Streaming stages that are chains of internal nodes down to one leaf (rt/stream/stage_launch.py):
HPVM-C nests every leaf as root -> wrapper -> grid of thread blocks -> leaf, and such a stage
launches its leaf as a leaf stage does (a prepared launch pointed at each item's buffers, started
without waiting), with the levels' instance counts as the leaf's ancestors'. Items of random
sizes (so extents, grids and packed launches change between items) are checked against NumPy, and
against the same graph launched item by item without streaming."""
from __future__ import annotations

import threading

import numpy as np

import hpvm_py as hpvm
from programs import stream_chains as C


def _item(rng):
    width, height = int(rng.integers(1, 40)), int(rng.integers(1, 30))
    bx, by = int(rng.integers(1, 9)), int(rng.integers(1, 6))
    x = rng.standard_normal(width * height).astype(np.float32)
    y = np.zeros_like(x)
    z = np.zeros_like(x)
    k = float(rng.integers(-4, 5)) / 2
    return (x, x.nbytes, y, y.nbytes, z, z.nbytes, k, width, height, bx, by)


def _expected(item) -> tuple[np.ndarray, np.ndarray, int]:
    x, _, _, _, _, _, k, width, height, bx, by = item
    rows = np.arange(height).repeat(width)
    y = x * np.float32(k) + (rows // by).astype(np.float32)
    token = C.BASE  # the first instance of every level: column 0, row 0
    return y, y + np.float32(token), token + 1


def test_chain_stages_compute_every_item_as_numpy_and_a_plain_launch(target: str, rng) -> None:
    items = [_item(rng) for _ in range(12)]
    plain = [tuple(a.copy() if isinstance(a, np.ndarray) else a for a in item) for item in items]
    with hpvm.runtime(target):
        h = hpvm.launch(C.chains, stream=True, depth=3)
        names = [t.name for t in threading.enumerate() if t.name.startswith("hpvm-stage-")]
        for item in items[:3]:
            hpvm.push(h, *item)
        popped = []
        for item in items[3:]:  # three items in flight, popped as more arrive
            popped.append(hpvm.pop(h, timeout=120))
            hpvm.push(h, *item)
        popped += [hpvm.pop(h, timeout=120) for _ in range(3)]
        hpvm.wait(h, timeout=120)
        launched = [hpvm.wait(hpvm.launch(C.chains, *item), timeout=120) for item in plain]
    # both chains take the scheduler thread, as leaf stages do (python leaves: a thread each)
    assert len(names) == (2 if target == "python" else 1)
    for item, again, (result,), plain_result in zip(items, plain, popped, launched):
        y, z, token = _expected(item)
        np.testing.assert_array_equal(item[2], y)
        np.testing.assert_array_equal(item[4], z)
        assert result == token
        np.testing.assert_array_equal(again[2], y)
        np.testing.assert_array_equal(again[4], z)
        assert plain_result == (token,)


def test_a_chain_holding_values_per_instance_runs_the_normal_way(target: str, rng) -> None:
    """A replicated stage feeding one value per instance into a chain: no prepared launch takes
    it (its levels' inputs differ between instances); the stream still runs, thread per stage."""
    n = 5
    x = np.zeros(4, np.float32)
    with hpvm.runtime(target):
        h = hpvm.launch(C.replicated_stages, stream=True)
        names = [t.name for t in threading.enumerate() if t.name.startswith("hpvm-stage-")]
        zs = [np.full(n * n, -1, np.float32) for _ in range(3)]
        for z in zs:
            hpvm.push(h, x, x.nbytes, z, z.nbytes, n)
        results = [hpvm.pop(h, timeout=120) for _ in zs]
        hpvm.wait(h, timeout=120)
    assert len(names) == 2
    expected = (n + 10 * np.arange(n))[:, None] + np.arange(n)[None, :]
    for z, (token,) in zip(zs, results):
        np.testing.assert_array_equal(z, expected.reshape(-1).astype(np.float32))
        assert token == n  # the root output: instance 0's
