"""Streaming launches: push/pop order, pipelining semantics, errors and shutdown without hangs."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, HPVMError, LaunchError, StreamError
from programs import stream_graphs as g


def _item(rng, n: int, k: float):
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    return x, y, (x, x.nbytes, y, y.nbytes, k, n)


def test_pop_returns_items_in_push_order(target: str, rng) -> None:
    items = [_item(rng, 50 + 7 * i, 0.5 + i) for i in range(7)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True, depth=2)
        for _, _, args in items:
            hpvm.push(h, *args)
        totals = [hpvm.pop(h) for _ in items]
        hpvm.wait(h)
    for (x, y, (_, _, _, _, k, n)), (total,) in zip(items, totals):
        expected = x * np.float32(k) + np.float32(1)
        np.testing.assert_array_equal(y, expected)
        assert total == pytest.approx(float(expected.sum(dtype=np.float64)), rel=1e-5)


def test_non_streaming_bind_keeps_the_first_value(target: str, rng) -> None:
    items = [_item(rng, 40, k) for k in (2.0, 5.0, 9.0)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.kept_factor, stream=True)
        for _, _, args in items:
            hpvm.push(h, *args)
        hpvm.wait(h)
        results = list(h.results())
    assert len(results) == 3
    for x, y, _ in items:
        np.testing.assert_array_equal(y, x * np.float32(2.0) + np.float32(1))


def test_results_iterates_while_another_thread_pushes(target: str, rng) -> None:
    items = [_item(rng, 30, float(i)) for i in range(5)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True)

        def producer() -> None:
            for _, _, args in items:
                hpvm.push(h, *args)
            hpvm.wait(h)

        t = threading.Thread(target=producer)
        t.start()
        got = list(h.results())
        t.join(30)
    assert len(got) == len(items)


def test_stage_failure_surfaces_from_pop_and_wait_with_node_name(target: str) -> None:
    x = np.arange(16, dtype=np.int32)
    y = np.zeros(16, np.int32)
    with hpvm.runtime(target):
        h = hpvm.launch(g.may_fail, stream=True)
        hpvm.push(h, x, x.nbytes, y, y.nbytes, 0, 16)
        assert hpvm.pop(h, timeout=60) == (0,)
        hpvm.push(h, x, x.nbytes, y, y.nbytes, 1000, 16)  # out of bounds in the first stage
        with pytest.raises(ExecutionError, match="checked_divide") as info:
            hpvm.pop(h, timeout=60)
        assert "stage" in str(info.value)
        with pytest.raises(ExecutionError):
            hpvm.wait(h, timeout=60)


def test_misuse_is_reported_at_the_call(target: str, rng) -> None:
    x, y, args = _item(rng, 8, 1.0)
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True)
        with pytest.raises(LaunchError, match="missing"):
            hpvm.push(h, x)
        with pytest.raises(LaunchError, match="f32"):
            hpvm.push(h, x.astype(np.float64), x.nbytes * 2, y, y.nbytes, 1.0, 8)
        with pytest.raises(StreamError, match="nothing pushed"):
            hpvm.pop(h)
        hpvm.push(h, *args)
        hpvm.wait(h)
        with pytest.raises(StreamError, match="closed"):
            hpvm.push(h, *args)
        assert len(list(h.results())) == 1
        with pytest.raises(StreamError):
            hpvm.pop(h)
        plain = hpvm.launch(g.two_stages, *args)
        with pytest.raises(StreamError, match="non-streaming"):
            hpvm.pop(plain)
        with pytest.raises(StreamError):
            hpvm.launch(g.two_stages, *args, stream=True)


def test_pushing_everything_before_popping_never_deadlocks(target: str, rng) -> None:
    items = [_item(rng, 4, 1.0) for _ in range(40)]  # far more than the FIFO depths hold
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True, depth=1)
        for _, _, args in items:
            hpvm.push(h, *args, timeout=60)
        hpvm.wait(h, timeout=60)
        assert len(list(h.results())) == 40


def test_pop_timeout(target: str, rng) -> None:
    n = 2000
    a = rng.random(n, dtype=np.float32)
    bufs = [np.zeros(n, np.float32) for _ in range(4)]
    args = [a, a.nbytes]
    for b in bufs:
        args += [b, b.nbytes]
    with hpvm.runtime(target):
        h = hpvm.launch(g.four_stages, stream=True)
        # enough work to outlast a 1 ms pop (Triton's interpreter is slow: less for gpu; a GPU
        # thread runs nvptx's loop fast: more for it, about 45 ms per stage on an H100). Each stage
        # ends well within the stream's 50 ms poll: pop() must still stop at its own deadline.
        hpvm.push(h, *args, n, {"gpu": 300, "nvptx": 10_000_000}.get(target, 100000))
        with pytest.raises(hpvm.errors.HPVMTimeoutError):
            hpvm.pop(h, timeout=0.001)
        assert hpvm.pop(h, timeout=120) == (1,)  # the timed-out pop lost nothing
        hpvm.wait(h, timeout=60)


def test_cleanup_stops_open_streams(target: str, rng) -> None:
    _, _, args = _item(rng, 8, 1.0)
    hpvm.init(target)
    h = hpvm.launch(g.two_stages, stream=True)
    hpvm.push(h, *args)
    hpvm.cleanup()  # must not hang with a stream still open
    with pytest.raises(HPVMError):
        hpvm.launch(g.two_stages, stream=True)


def test_items_of_changing_sizes_and_factors_match_numpy(target: str, rng) -> None:
    """Every item brings its own buffers, sizes and scalars; cpu stages reuse a packed launch
    between items whose sizes match, so sizes repeat, change back and forth, and include 1."""
    sizes = [17, 64, 17, 1, 200, 64, 64, 17, 1, 200]
    items = [_item(rng, n, float(rng.uniform(-3, 3))) for n in sizes]
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True, depth=int(rng.integers(1, 4)))
        for _, _, args in items:
            hpvm.push(h, *args, timeout=60)
        hpvm.wait(h, timeout=120)
        totals = [total for (total,) in h.results()]
    for (x, y, (_, _, _, _, k, _)), total in zip(items, totals):
        expected = x * np.float32(k) + np.float32(1)
        np.testing.assert_array_equal(y, expected)
        assert total == pytest.approx(float(expected.sum(dtype=np.float64)), rel=1e-4, abs=1e-4)


def test_a_repointed_launch_takes_each_items_scalar_bits(target: str, rng) -> None:
    """Items of one size reuse a stage's packed launch, which rewrites only the scalars that
    changed: zeros of either sign and NaNs must each reach the kernel as pushed."""
    n = 24
    factors = [2.0, 0.0, -0.0, -0.0, 0.0, float("nan"), float("nan"), -3.5, -3.5]
    items = [_item(rng, n, k) for k in factors]
    with hpvm.runtime(target):
        h = hpvm.launch(g.scaled, stream=True)
        for x, y, (_, _, _, _, k, _) in items:
            hpvm.push(h, x, x.nbytes, y, y.nbytes, k, n, timeout=60)
        hpvm.wait(h, timeout=120)
    for x, y, (_, _, _, _, k, _) in items:
        if np.isnan(k):  # (a GPU's NaN need not carry NumPy's bits)
            assert np.isnan(y).all()
            continue
        expected = x * np.float32(k)
        np.testing.assert_array_equal(y.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("bad", [1, -1, 16])
def test_an_out_of_bounds_item_after_in_bounds_ones_is_caught(target: str, bad: int) -> None:
    """Items proven in bounds run the unchecked kernel; the next one, equal but for the scalar
    that moves its index one element out, must run checked code and fail at the access."""
    x = np.arange(16, dtype=np.int32)
    ys = [np.zeros(16, np.int32) for _ in range(4)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.may_fail, stream=True)
        for y in ys[:3]:
            hpvm.push(h, x, x.nbytes, y, y.nbytes, 0, 16)
        for y in ys[:3]:
            assert hpvm.pop(h, timeout=60) == (0,)
            np.testing.assert_array_equal(y, x)
        hpvm.push(h, x, x.nbytes, ys[3], ys[3].nbytes, bad, 16)
        with pytest.raises(ExecutionError, match="checked_divide") as info:
            hpvm.pop(h, timeout=60)
        assert "out of bounds" in str(info.value) and info.value.loc.line > 0
        with pytest.raises(ExecutionError):
            hpvm.wait(h, timeout=60)


@pytest.mark.parametrize("target, threads", [("cpu", 1), ("python", 2)])
def test_host_leaf_stages_share_one_scheduler_thread(target: str, threads: int, rng) -> None:
    """cpu leaves start their kernels on the native pool from one scheduler thread; stages that
    cannot (python leaves, internal nodes, GPU targets) keep a thread each."""
    _, _, args = _item(rng, 32, 2.0)
    with hpvm.runtime(target):
        h = hpvm.launch(g.two_stages, stream=True)
        names = [t.name for t in threading.enumerate() if t.name.startswith("hpvm-stage-")]
        hpvm.push(h, *args)
        hpvm.wait(h, timeout=60)
    assert len(names) == threads


def test_a_push_rechecks_what_may_have_changed_since_the_last(target: str, rng) -> None:
    """A push takes from the last push the arguments that are the very same objects: a size
    (the same int) passed with a smaller new buffer is still checked against it, a buffer made
    read-only since is refused where the graph writes it, and one that was untracked since is
    bound again; each refusal names the argument, and the stream runs on afterwards."""
    n = 40
    x, y = rng.random(n, dtype=np.float32), np.zeros(n, np.float32)
    size = x.nbytes
    with hpvm.runtime(target):
        hpvm.track_memory(y)
        h = hpvm.launch(g.two_stages, stream=True, depth=4)
        hpvm.push(h, x, size, y, size, 2.0, n)
        hpvm.pop(h)
        small = np.zeros(n // 2, np.float32)
        with pytest.raises(LaunchError, match="has only"):
            hpvm.push(h, x, size, small, size, 2.0, n)
        y.flags.writeable = False
        with pytest.raises(LaunchError, match="read-only"):
            hpvm.push(h, x, size, y, size, 2.0, n)
        y.flags.writeable = True
        hpvm.untrack_memory(y)
        hpvm.push(h, x, size, y, size, 3.0, n)
        hpvm.pop(h)
        hpvm.wait(h)
    np.testing.assert_array_equal(y, x * np.float32(3) + np.float32(1))
