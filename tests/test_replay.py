"""Replayed launches (rt/replay.py) compute exactly what a fresh launch computes."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hpvm_py as hpvm
from programs import replay_graphs as g

pytestmark = pytest.mark.skipif("cpu" not in __import__("conftest").TARGETS,
                                reason="replay applies to the cpu target")


def launch(a, b, n, k):
    return hpvm.wait(hpvm.launch(g.chain, a, a.nbytes, b, b.nbytes, n, k))


def expected(a0: np.ndarray, n: int, k: float) -> tuple[np.ndarray, float]:
    b = a0[:n] * np.float32(k)
    return b, float(np.float32(b.sum(dtype=np.float32) if n else 0) * np.float32(2))


def test_replays_follow_new_scalar_values() -> None:
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    with hpvm.runtime("cpu"):
        before = hpvm.stats()["replayed_launches"]
        results = [launch(a, b, 64, k) for k in (1.0, 2.5, -3.0, 0.5)]
        after = hpvm.stats()["replayed_launches"]
    assert after - before == 3  # the first launch recorded, the others replayed
    for k, result in zip((1.0, 2.5, -3.0, 0.5), results):
        np.testing.assert_array_equal(b, a * np.float32(0.5))  # b holds the last launch
        assert result == pytest.approx(float(np.sum(a * np.float32(k), dtype=np.float64)) * 2, rel=1e-5)


def test_a_replay_writes_only_into_outputs_it_keeps() -> None:
    """A node's output that no later node reads is written again by every replay: the recorded
    launch must keep that array (it once held only its address, and a replay wrote into freed
    memory: other arrays' data, or the allocator's lists, which crashed a later free)."""
    src = np.array([0, 111, 0, 0], np.int64)
    out = np.zeros(1, np.int64)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(g.unread_edge, src, src.nbytes, out, out.nbytes))
        before = hpvm.stats()["replayed_launches"]
        for round_ in range(20):
            others = [np.zeros(1, np.int64) for _ in range(256)]  # take freed 8-byte blocks
            src[1] = 0x5EED0000 + round_
            hpvm.wait(hpvm.launch(g.unread_edge, src, src.nbytes, out, out.nbytes))
            written = [int(a[0]) for a in others if a[0] != 0]
            assert not written, f"a replay wrote {[hex(v) for v in written]} into other arrays"
        assert hpvm.stats()["replayed_launches"] - before == 20
    assert out[0] == 7


def test_new_integers_or_new_buffers_record_again() -> None:
    a = np.arange(64, dtype=np.float32)
    b = np.zeros(64, np.float32)
    other = np.zeros(64, np.float32)
    with hpvm.runtime("cpu"):
        launch(a, b, 64, 1.0)
        start = hpvm.stats()["replayed_launches"]
        launch(a, b, 32, 1.0)  # a different grid: recorded anew, not replayed
        launch(a, other, 64, 1.0)  # a different buffer object
        assert hpvm.stats()["replayed_launches"] == start
        launch(a, other, 64, 2.0)
        assert hpvm.stats()["replayed_launches"] == start + 1
    np.testing.assert_array_equal(other, a * 2)
    np.testing.assert_array_equal(b[:32], a[:32])


def test_values_on_edges_are_refreshed_in_replays() -> None:
    a = np.ones(16, np.float32)
    b = np.zeros(16, np.float32)
    with hpvm.runtime("cpu"):
        first = launch(a, b, 16, 1.0)
        a[:] = 3.0  # the data changes; the sum computed by the first node flows on an edge
        second = launch(a, b, 16, 1.0)
    assert first == 32.0 and second == 96.0


def test_an_out_of_bounds_launch_is_never_replayed_unchecked() -> None:
    a = np.arange(64, dtype=np.float32)
    short = np.zeros(63, np.float32)
    with hpvm.runtime("cpu"):
        for _ in range(3):
            with pytest.raises(hpvm.errors.ExecutionError, match="out-of-bounds"):
                hpvm.wait(hpvm.launch(g.chain, a, a.nbytes, short, short.nbytes, 64, 1.0))


def test_concurrent_launches_stay_correct() -> None:
    a = np.arange(256, dtype=np.float32)
    outs = [np.zeros(256, np.float32) for _ in range(4)]
    errors: list[BaseException] = []
    with hpvm.runtime("cpu"):
        def worker(buf: np.ndarray, k: float) -> None:
            try:
                for _ in range(50):
                    total = launch(a, buf, 256, k)
                    assert total == pytest.approx(float(np.sum(a * np.float32(k), dtype=np.float64)) * 2,
                                                  rel=1e-5)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=worker, args=(outs[i], float(i + 1))) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors, errors[0]
    for i, buf in enumerate(outs):
        np.testing.assert_array_equal(buf, a * np.float32(i + 1))


# -- a root node holding one leaf (the Parboil block pattern) --------------------------------------

def launch_blocks(a, at, b, nblocks, w, k):
    return hpvm.launch(g.blocks, a, a.nbytes, at, at.nbytes, b, b.nbytes, nblocks, w, k)


def block_data(rng: np.random.Generator, size: int, lanes: int) -> tuple[np.ndarray, ...]:
    """Values, indices into them (one per lane) and the output."""
    return (rng.standard_normal(size).astype(np.float32), rng.integers(0, size, lanes),
            np.zeros(lanes, np.float32))


def test_a_block_node_is_replayed_and_counted_as_a_fresh_launch(rng: np.random.Generator) -> None:
    w, nblocks = 8, 6
    a, at, b = block_data(rng, 50, w * nblocks)
    with hpvm.runtime("cpu"):
        hpvm.wait(launch_blocks(a, at, b, nblocks, w, 1.0))
        fresh = hpvm.stats()
        for k in (2.0, -0.5, 3.25):
            at[:] = rng.integers(0, 50, w * nblocks)  # data the kernel reads: never stale
            hpvm.wait(launch_blocks(a, at, b, nblocks, w, k))
            np.testing.assert_array_equal(b, a[at] * np.float32(k))
        after = hpvm.stats()
    assert after["replayed_launches"] - fresh["replayed_launches"] == 3
    # a replay counts what a fresh launch counts: one kernel, two nodes (the block node and its leaf)
    assert after["kernel_launches"] - fresh["kernel_launches"] == 3
    assert after["nodes_run"] - fresh["nodes_run"] == 6


def test_a_replayed_block_leaf_still_checks_indices_from_data(rng: np.random.Generator) -> None:
    """The leaf's index comes from data: a replay runs the checked kernel, so an index that goes
    out of bounds after recording is reported, every time."""
    w, nblocks = 4, 5
    a, at, b = block_data(rng, 20, w * nblocks)
    with hpvm.runtime("cpu"):
        hpvm.wait(launch_blocks(a, at, b, nblocks, w, 1.0))
        for bad in (20, -1, 2**40):
            at[rng.integers(0, w * nblocks)] = bad
            with pytest.raises(hpvm.errors.ExecutionError, match="out-of-bounds"):
                hpvm.wait(launch_blocks(a, at, b, nblocks, w, 2.0))
            at[:] = rng.integers(0, 20, w * nblocks)
            replays = hpvm.stats()["replayed_launches"]
            # the same arguments as the failed launch: that one matched the recording too
            hpvm.wait(launch_blocks(a, at, b, nblocks, w, 2.0))
            assert hpvm.stats()["replayed_launches"] == replays + 1
            np.testing.assert_array_equal(b, a[at] * np.float32(2.0))


def test_new_block_counts_record_again(rng: np.random.Generator) -> None:
    a = rng.standard_normal(64).astype(np.float32)
    at = rng.integers(0, 64, 64)
    b = np.zeros(64, np.float32)
    with hpvm.runtime("cpu"):
        for nblocks, w in ((4, 8), (8, 8), (4, 8), (2, 32)):
            b[:] = 0
            hpvm.wait(launch_blocks(a, at, b, nblocks, w, 1.5))
            n = nblocks * w
            np.testing.assert_array_equal(b[:n], a[at[:n]] * np.float32(1.5))
            assert not b[n:].any()


def test_a_replay_writes_each_scalar_that_changed(rng: np.random.Generator) -> None:
    """A replay rewrites only the scalars that differ from its last run's (same type, same bits):
    random runs of two scalars, one changing at a time or both or neither, through signed zeros,
    NaN and an int equal to a float, each launch's output as the values passed."""
    pool = [0.0, -0.0, 1.5, float("nan"), -2.0, 2, 2.0, np.float32(1.5)]
    x = np.zeros(2, np.float32)
    k, m = 1.0, 1.0
    with hpvm.runtime("cpu"):
        before = hpvm.stats()["replayed_launches"]
        for step in range(300):
            change = int(rng.integers(4))  # 0: neither, 1: k, 2: m, 3: both
            if change & 1:
                k = pool[int(rng.integers(len(pool)))]
            if change & 2:
                m = pool[int(rng.integers(len(pool)))]
            hpvm.wait(hpvm.launch(g.two_scalars, x, x.nbytes, k, m))
            want = np.array([k, m], np.float32)
            for got, value in zip(x, want):  # bit for bit (a zero's sign too); NaN as NaN
                assert np.isnan(got) if np.isnan(value) else got.view(np.uint32) == value.view(np.uint32), \
                    (step, k, m, x)
        assert hpvm.stats()["replayed_launches"] - before >= 290  # the replay path, not fresh launches
