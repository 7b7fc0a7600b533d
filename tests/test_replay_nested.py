"""Replays of leaves nested in chains of internal nodes (root -> wrapper -> grid of blocks -> leaf,
HPVM-C's usual nesting, and the HPVM suite's): the leaf is recorded through every level, and a
replay (or a rebound copy) must compute what a fresh launch computes, with the same errors, while
indices come from data and the grid's counts change between launches."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError
from programs import nested_graphs as g

# (conftest's compiled_target: cpu, gpu, nvptx where available; python stands in for none)
pytestmark = pytest.mark.skipif(
    not {"cpu", "gpu", "nvptx"} & set(__import__("conftest").TARGETS), reason="no compiled target")


def _count(name: str) -> int:
    return hpvm.stats()[name]


def gather(x, at, y, n, k, lanes, blocks):
    return hpvm.wait(hpvm.launch(g.gather_nested, x, x.nbytes, at, at.nbytes, y, y.nbytes, n, k,
                                 lanes, blocks))


def poke(at, j, v):
    """at[j] = v where the kernels run (a tracked buffer's device copy on a GPU)."""
    hpvm.wait(hpvm.launch(g.poke, at, at.nbytes, j, v))


def test_random_sequences_over_nested_levels_match_numpy(compiled_target: str,
                                                        rng: np.random.Generator) -> None:
    size = 64
    xs = [rng.standard_normal(size).astype(np.float32) for _ in range(3)]
    ys = [np.zeros(size, np.float32) for _ in range(3)]
    mirror = [y.copy() for y in ys]
    at = rng.integers(0, size, size)
    at_now = at.copy()  # what the kernels see
    shapes = [(8, 8), (4, 16), (16, 3)]  # (lanes, blocks): the grids of two levels
    kinds = []  # (x, y, lanes, blocks, n): six kinds of launch, drawn at random 36 times
    for yi in (0, 1, 1, 0, 2, 0):  # ys[2] stays the user's: written back after each launch
        lanes, blocks = shapes[int(rng.integers(0, len(shapes)))]
        kinds.append((int(rng.integers(0, 3)), yi, lanes, blocks,
                      min(size, lanes * blocks) - int(rng.integers(0, 2)) * 5))
    with hpvm.runtime(compiled_target):
        for buf in (*xs, ys[0], ys[1], at):
            hpvm.track_memory(buf)
        for step in range(36):
            xi, yi, lanes, blocks, n = kinds[int(rng.integers(0, len(kinds)))]
            k = float(rng.uniform(-2, 2))
            if step % 5 == 4:  # the data the indices come from: never stale
                j, v = (int(w) for w in rng.integers(0, size, 2))
                poke(at, j, v)
                at_now[j] = v
            gather(xs[xi], at, ys[yi], n, k, lanes, blocks)
            mirror[yi][:n] += xs[xi][at_now[:n]] * np.float32(k)
            if yi == 2:
                np.testing.assert_allclose(ys[2], mirror[2], rtol=1e-5, atol=1e-5)
        replays = _count("replayed_launches")
        rebound = _count("rebound_launches")
        for buf in ys[:2]:
            hpvm.request_memory(buf)
    for y, expected in zip(ys, mirror):
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
    assert replays >= 12  # 36 launches of six kinds: most repeat a recording
    assert rebound <= replays


def test_a_replay_counts_every_level_as_a_fresh_launch_does(compiled_target: str,
                                                            rng: np.random.Generator) -> None:
    x = rng.standard_normal(32).astype(np.float32)
    at = rng.integers(0, 32, 32)
    y = np.zeros(32, np.float32)
    with hpvm.runtime(compiled_target):
        for buf in (x, at, y):
            hpvm.track_memory(buf)
        gather(x, at, y, 32, 1.0, 8, 4)
        fresh = hpvm.stats()
        gather(x, at, y, 32, 2.0, 8, 4)
        again = hpvm.stats()
        hpvm.request_memory(y)
    assert again["replayed_launches"] - fresh["replayed_launches"] == 1
    assert again["kernel_launches"] - fresh["kernel_launches"] == 1
    assert again["nodes_run"] - fresh["nodes_run"] == 3  # the wrapper, the blocks, the leaf
    np.testing.assert_allclose(y, x[at] * np.float32(3.0), rtol=1e-6)


def test_indices_from_data_are_checked_in_every_nested_replay(compiled_target: str,
                                                              rng: np.random.Generator) -> None:
    """Indices written where the kernels run, after the launch was recorded: every replay runs
    the checked kernel and reports the bad one."""
    x = rng.standard_normal(24).astype(np.float32)
    at = rng.integers(0, 24, 24)
    good = at.copy()
    y = np.zeros(24, np.float32)
    with hpvm.runtime(compiled_target):
        for buf in (x, at, y):
            hpvm.track_memory(buf)
        gather(x, at, y, 24, 1.0, 6, 4)
        for bad in (24, -1, 2**40):
            j = int(rng.integers(0, 24))
            poke(at, j, bad)
            with pytest.raises(ExecutionError, match="out-of-bounds"):
                gather(x, at, y, 24, 1.0, 6, 4)
            poke(at, j, int(good[j]))
            hpvm.request_memory(y)
            before, replays = y.copy(), _count("replayed_launches")
            gather(x, at, y, 24, 1.0, 6, 4)
            assert _count("replayed_launches") == replays + 1
            hpvm.request_memory(y)
            np.testing.assert_allclose(y - before, x[good], rtol=1e-5, atol=1e-5)


def test_an_inner_expression_or_output_takes_the_normal_path(compiled_target: str,
                                                             rng: np.random.Generator) -> None:
    """A size computed one level down: not recorded, and still right on every launch. A leaf
    output carried up two levels that forwards an input (the leaf returns its y_bytes) is known to
    the replays: recorded, and right on every launch."""
    with hpvm.runtime(compiled_target):
        for rows, cols in ((3, 8), (5, 4), (3, 8), (3, 8)):
            x = rng.standard_normal(rows * cols).astype(np.float32)
            y = np.zeros(rows * cols, np.float32)
            hpvm.wait(hpvm.launch(g.scale_nested_expr, x, x.nbytes, y, y.nbytes, rows, cols, 0.5))
            np.testing.assert_array_equal(y, x * np.float32(0.5))
        assert _count("replayed_launches") == 0
        y = np.zeros(16, np.float32)
        hpvm.track_memory(y)  # (an untracked buffer goes back to the host: never replayed on a GPU)
        for k in (1.5, -2.0, 1.5):
            written = hpvm.wait(hpvm.launch(g.fill_nested_output, y, y.nbytes, 16, k))
            hpvm.request_memory(y)
            np.testing.assert_array_equal(y, np.full(16, k, np.float32))
            assert int(np.asarray(written).reshape(-1)[0]) == y.nbytes
        assert _count("replayed_launches") == 2


def test_sizes_carried_on_edges_are_known_to_replays(compiled_target: str, rng: np.random.Generator,
                                                     output_fetches: list) -> None:
    """HPVM-C's stages return the size they were given and pass it on an edge: a replay takes it
    from the root's argument (passes/passthrough.py), so the launch is replayed, and on a GPU no
    stage's output comes back to the host in between."""
    n = 40
    x = rng.standard_normal(n).astype(np.float32)
    h, y = np.zeros(n, np.float32), np.zeros(n, np.float32)
    fetches = output_fetches
    with hpvm.runtime(compiled_target):
        for buf in (x, h, y):
            hpvm.track_memory(buf)
        before = _count("replayed_launches")
        for step in range(4):
            hpvm.request_memory(x)
            start = x.copy()
            k, c = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
            if step == 1:
                fetches.clear()  # the first launch records (and reads every output)
            hpvm.wait(hpvm.launch(g.sized_stages, x, x.nbytes, h, h.nbytes, y, y.nbytes, n, k, c))
            for buf in (x, y):
                hpvm.request_memory(buf)
            want = start * np.float32(k) + np.float32(c)
            np.testing.assert_array_equal(y, want)
            np.testing.assert_array_equal(x, want)  # the third stage copies y back into x
        assert _count("replayed_launches") - before == 3
        # the stages are joined by edges (at the root: a chain's node, not its leaf): one stream
        recording = hpvm.compile(g.sized_stages, compiled_target).replays.find(
            (x, x.nbytes, h, h.nbytes, y, y.nbytes, n, 1.0, 0.0), hpvm.api.host._active().tracker)
        assert recording is not None
        assert recording.stream_plan is None or set(recording.stream_plan.stream_of) == {0}
    assert fetches == []
