"""Adversarial streams: seeded sequences of pushes (fresh buffers or a small ring of them, items
sharing an accumulator, scalars that steer control flow, an index out of range now and then),
pops and pushes with timeouts that may pass, pauses, host writes to buffers no item in flight
uses, a producer thread pushing while the test pops, and wait() with a timeout that may pass.
Every popped value and every buffer equals running the items one after another in NumPy (exact:
small integers in f32), on every target and whichever scheduler runs the stages; an item whose
index is out of range fails at its pop, every item before it pops its result, and nothing after
it changes the accumulator or the outputs, also where they are tracked on the GPU."""
from __future__ import annotations


import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, HPVMTimeoutError
from conftest import TARGETS
from programs import stream_adversarial as g
from stream_driver import StreamDriver, slow_events

N = 8  # elements of a ring buffer; an item uses n <= N of them
TIMEOUT = 120
KINDS = ("idx", "x", "y", "acc", "out")
GRAPHS = ("pipe3", "pipe3_mixed", "pipe3_inner", "pipe3_kept")


def lags(seed: int) -> list[int]:
    """Questions each item's event answers "not yet" (stream_driver.slow_events)."""
    return [int(v) for v in np.random.default_rng(seed).choice([0, 0, 1, 2, 5], 4096)]


class Model:
    """The items run one after another in NumPy, each on copies of the real buffers."""

    def __init__(self, kept: bool):
        self.copies: dict[int, np.ndarray] = {}
        self.kept = kept
        self.first: dict | None = None

    def of(self, a: np.ndarray) -> np.ndarray:
        if id(a) not in self.copies:
            self.copies[id(a)] = a.copy()
        return self.copies[id(a)]

    def apply(self, it: dict) -> tuple | None:
        """The item's popped values, or None when it fails (an index out of range)."""
        if self.first is None:
            self.first = it
        x_buf, k = it["x"], np.float32(it["k"])
        if self.kept:  # x, x_bytes and k bind without streaming: the first push's
            x_buf, k = self.first["x"], np.float32(self.first["k"])
        idx, x, y, acc, out = (self.of(a) for a in
                               (it["idx"], x_buf, it["y"], it["acc"], it["out"]))
        n, mode = it["n"], it["mode"]
        j = idx[:n].astype(np.int64)
        if (j < 0).any() or (j >= x.size).any():
            return None
        y[:n] = x[j] * k if mode > 0 else x[j] - k
        t = np.float32(mode + 1)
        acc[:n] = acc[:n] + y[:n] * t
        s = np.float32(0)
        for i in range(n):
            s = np.float32(s + acc[i])
        out[0] = s
        return (np.float32(s * (t + np.float32(0.5))), np.int32(mode + 1))


class Run(StreamDriver):
    """One generated stream."""

    WAIT = TIMEOUT  # seconds a call may block before it is a hang

    def __init__(self, seed: int, graph: str, tracked: bool):
        self.rng = r = np.random.default_rng(seed)
        self.graph = graph
        self.depth = int(r.integers(1, 9))
        self.count = int(r.integers(5, 40))
        self.fail_at = int(r.integers(0, self.count)) if r.random() < 0.4 else None
        self.ring = {kind: [self._new(kind, N) for _ in range(int(r.integers(1, 4)))]
                     for kind in KINDS}
        self.shared_acc = r.random() < 0.5
        self.threaded = r.random() < 0.25
        self.tracked = {id(b) for bufs in self.ring.values() for b in bufs
                        if tracked and r.random() < 0.5}
        self.model = Model(graph == "pipe3_kept")
        self.items: list[dict] = []  # the pushed items, in push order
        self.failed: int | None = None  # the first pushed item that fails
        self.popped = 0
        self.pop_failed = False
        self.first_x: np.ndarray | None = None
        self.decoys: list[np.ndarray] = []

    def _new(self, kind: str, size: int) -> np.ndarray:
        r = self.rng
        if kind == "idx":
            return r.integers(0, N, size).astype(np.int32)
        if kind == "x":
            return r.integers(-4, 5, max(size, N)).astype(np.float32)
        if kind == "out":
            return np.full(max(size, 1) if r.random() < 0.5 else 1, -7, np.float32)
        return r.integers(-3, 4, size).astype(np.float32)

    def make(self, number: int) -> dict:
        r = self.rng
        n = int(r.integers(1, N + 1))
        it: dict = {"n": n, "k": float(r.integers(-2, 4)), "mode": int(r.integers(-2, 3))}
        for kind in KINDS:
            if kind == "acc" and self.shared_acc:
                it[kind] = self.ring["acc"][0]
            elif r.random() < 0.6:
                it[kind] = self.ring[kind][int(r.integers(0, len(self.ring[kind])))]
            else:
                it[kind] = self._new(kind, n if r.random() < 0.5 else int(r.integers(n, N + 3)))
        if self.graph == "pipe3_kept":
            if self.first_x is None:
                self.first_x = it["x"]
            elif r.random() < 0.5:  # ignored: every item reads the first push's x
                it["x"] = np.full(int(r.integers(1, N + 3)), 99, np.float32)
                self.decoys.append(it["x"])
        if number == self.fail_at:
            it["idx"] = bad = it["idx"].copy()
            bad[int(r.integers(0, n))] = int(r.choice([-1, it["x"].size, 1000]))
        return it

    def users(self, a: np.ndarray) -> list[int]:
        if a is self.first_x:
            return list(range(len(self.items)))
        return [i for i, it in enumerate(self.items) if any(it[kind] is a for kind in KINDS)]

    def push(self, handle, it: dict, timeout: float | None) -> str:
        args: list = []
        for kind in KINDS:
            args += [it[kind], it[kind].nbytes]
        try:
            hpvm.push(handle, *args, np.float32(it["k"]), it["mode"], it["n"], timeout=timeout)
        except HPVMTimeoutError:
            assert timeout is not None and timeout < 1
            return "timeout"
        except ExecutionError as exc:
            assert self.failed is not None and "gather_scale" in str(exc)
            return "refused"
        it["expected"] = None if self.failed is not None else self.model.apply(it)
        if self.failed is None and it["expected"] is None:
            self.failed = len(self.items)
        self.items.append(it)
        return "ok"

    def pop(self, handle, timeout: float) -> bool:
        k = self.popped
        try:
            got = hpvm.pop(handle, timeout=timeout)
        except HPVMTimeoutError:
            assert timeout < 1, f"pop of item {k} timed out"
            return False
        except ExecutionError as exc:
            assert self.failed is not None and k >= self.failed, f"item {k}: {exc}"
            assert "gather_scale" in str(exc)
            self.pop_failed = True
            return True
        assert self.failed is None or k < self.failed, f"item {k} popped after failed {self.failed}"
        assert got == self.items[k]["expected"], f"item {k}: {got} != {self.items[k]['expected']}"
        self.popped += 1
        out = self.items[k]["out"]
        if all(i <= k for i in self.users(out)):  # its out holds its result (no later item's)
            if id(out) in self.tracked:
                hpvm.request_memory(out)
            np.testing.assert_array_equal(out, self.model.of(out))
        return True

    def refill(self) -> None:
        """The host refills a buffer no item uses now."""
        r = self.rng
        kind = KINDS[int(r.integers(0, 5))]
        a = self.ring[kind][int(r.integers(0, len(self.ring[kind])))]
        if id(a) not in self.tracked and all(i < self.popped for i in self.users(a)):
            a[:] = self.model.of(a)[:] = self._new(kind, a.size)[:a.size]

    def finish(self, handle) -> None:
        r = self.rng
        if r.random() < 0.3:
            try:
                hpvm.wait(handle, timeout=0.0)
            except HPVMTimeoutError:
                pass  # closed to pushes, still draining: wait() again
            except ExecutionError:
                assert self.failed is not None
        try:
            hpvm.wait(handle, timeout=TIMEOUT)
        except ExecutionError:
            assert self.failed is not None
        except hpvm.errors.LaunchError:
            pass  # (the wait above returned: wait() once per handle)
        if not self.pop_failed:
            try:
                for got in handle.results():
                    assert got == self.items[self.popped]["expected"]
                    self.popped += 1
                assert self.failed is None
            except ExecutionError:
                assert self.popped == self.failed
        assert self.popped == (len(self.items) if self.failed is None else self.failed)
        # every buffer holds what the items before the failing one made of it (the failing
        # stage's own y, and idx, may hold anything once an item failed)
        seen = {id(a): (kind, a) for it in self.items for kind, a in ((k, it[k]) for k in KINDS)}
        for key, (kind, a) in seen.items():
            if self.failed is not None and kind in ("y", "idx"):
                continue
            if key in self.model.copies:
                if key in self.tracked:
                    hpvm.request_memory(a)
                np.testing.assert_array_equal(a, self.model.copies[key], err_msg=kind)
        for decoy in self.decoys:
            if decoy is not self.first_x:
                assert (decoy == 99).all(), "an ignored (non-streaming) argument was written"


def _cases() -> list:
    cases = []
    for target in TARGETS:
        seeds = range(6)
        for graph in GRAPHS:
            for seed in seeds:
                cases.append(pytest.param(target, graph, seed, id=f"{target}-{graph}-{seed}"))
    return cases


@pytest.mark.parametrize("target, graph, seed", _cases())
def test_generated_streams_match_running_the_items_in_order(target: str, graph: str, seed: int,
                                                          monkeypatch) -> None:
    run = Run(1000 * GRAPHS.index(graph) + seed, graph, tracked=seed % 2 == 1)
    if target in ("gpu", "nvptx"):
        slow_events(monkeypatch, lags(seed))
    with hpvm.runtime(target):
        for bufs in run.ring.values():
            for b in bufs:
                if id(b) in run.tracked:
                    hpvm.track_memory(b)
        handle = hpvm.launch(getattr(g, graph), stream=True, depth=run.depth)
        if run.threaded:
            run.drive_threaded(handle)
        else:
            run.drive(handle)
        run.finish(handle)


def _failing_stream(target: str, graph, pushes: list, tracked: list[np.ndarray], depth: int = 8
                    ) -> None:
    """Push every item (until one is refused), pop the first, expect the second's failure."""
    with hpvm.runtime(target):
        for b in tracked:
            hpvm.track_memory(b)
        handle = hpvm.launch(graph, stream=True, depth=depth)
        for args in pushes:
            try:
                hpvm.push(handle, *args, timeout=TIMEOUT)
            except ExecutionError:
                break
        hpvm.pop(handle, timeout=TIMEOUT)
        with pytest.raises(ExecutionError, match="gather_"):
            hpvm.pop(handle, timeout=TIMEOUT)
        with pytest.raises(ExecutionError):
            hpvm.wait(handle, timeout=TIMEOUT)
        for b in tracked:
            hpvm.request_memory(b)
            hpvm.untrack_memory(b)


@pytest.mark.parametrize("every", [False, True], ids=["acc-tracked", "all-tracked"])
def test_a_failing_checked_stage_runs_neither_its_items_later_stages_nor_later_items(
        target: str, every: bool, monkeypatch) -> None:
    """Item 1's gather reads out of range (its kernel is the checked one: the index comes from
    the data). Its accumulate stage must not run, nor any later item: the accumulator, tracked
    (on a GPU: used in place, where a dropped item's writes would stay), holds item 0's sum alone.
    Whole GPU items used to queue the failing item's later stages behind its checked kernel, and
    the later items behind its event, all writing the tracked accumulator."""
    if target in ("gpu", "nvptx"):
        slow_events(monkeypatch, lags(7))
    idx_ok = np.arange(N, dtype=np.int32)
    idx_bad = idx_ok.copy()
    idx_bad[3] = 1000
    x = np.arange(N, dtype=np.float32) + 1
    acc, out, y = np.zeros(N, np.float32), np.zeros(1, np.float32), np.zeros(N, np.float32)
    pushes = [(idx, idx.nbytes, x, x.nbytes, y, y.nbytes, acc, acc.nbytes, out, out.nbytes,
               np.float32(1.0), 0, N) for idx in [idx_ok, idx_bad] + [idx_ok] * 5]
    _failing_stream(target, g.pipe3, pushes, [idx_ok, idx_bad, x, acc, out, y] if every else [acc])
    np.testing.assert_array_equal(acc, x - 1)  # item 0: y = x - k, acc += y * (mode + 1)
    assert out[0] == (x - 1).sum()


@pytest.mark.parametrize("tracked", [True, False], ids=["tracked", "untracked"])
@pytest.mark.parametrize("items", ["1", "0"], ids=["whole-items", "stage-scheduler"])
def test_items_after_a_failing_checked_item_never_add_into_a_buffer(target: str, tracked: bool,
                                                                    items: str,
                                                                    monkeypatch) -> None:
    """One checked stage adding into acc: item 1 fails at element 3, so items 2.. never run
    (item 1's other instances may have added theirs before the failure: cpu's do). On a GPU,
    whole items used to queue the later items behind the failing one's event (writing a tracked
    acc in place), and the stage scheduler the next item behind it on the stage's stream (its
    GPU_DEPTH), whose results were then copied home too."""
    monkeypatch.setenv("HPVM_STREAM_ITEMS", items)
    if target in ("gpu", "nvptx"):
        slow_events(monkeypatch, lags(8))
    idx_ok = np.arange(N, dtype=np.int32)
    idx_bad = idx_ok.copy()
    idx_bad[3] = 1000
    x, acc = np.ones(N, np.float32), np.zeros(N, np.float32)
    pushes = [(idx, idx.nbytes, x, x.nbytes, acc, acc.nbytes, N)
              for idx in [idx_ok, idx_bad] + [idx_ok] * 5]
    _failing_stream(target, g.gather_into, pushes, [idx_ok, idx_bad, x, acc] if tracked else [])
    assert acc[3] == 1 and set(acc.tolist()) <= {1.0, 2.0}, acc


def test_a_non_streaming_edge_keeps_the_first_value_and_holds_no_later_one(target: str) -> None:
    """count reaches the second stage over a non-streaming edge: every item adds 1 to the first
    n0 elements of its z (the first item's n), and the producer's later values are not queued
    for a consumer that never takes them (they piled up in the edge's FIFO until the end)."""
    rng = np.random.default_rng(5)
    sizes = [4] + [int(v) for v in rng.integers(4, N + 1, 59)]
    items = [(rng.integers(-4, 5, n).astype(np.float32), np.zeros(n, np.float32),
              rng.integers(-4, 5, n).astype(np.float32), np.float32(rng.integers(-2, 3)), n)
             for n in sizes]
    zs = [z.copy() for _, _, z, _, _ in items]
    with hpvm.runtime(target):
        handle = hpvm.launch(g.kept_edge, stream=True, depth=3)
        popped = []
        for x, y, z, k, n in items:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, z, z.nbytes, k, n, timeout=TIMEOUT)
            popped.append(hpvm.pop(handle, timeout=TIMEOUT)[0])
        assert all(fifo.empty() for fifo in handle.edge_fifos.values())
        hpvm.wait(handle, timeout=TIMEOUT)
    for (x, y, z, k, n), z0, total in zip(items, zs, popped):
        np.testing.assert_array_equal(y, x * k)
        z0[:4] += np.float32(1)
        np.testing.assert_array_equal(z, z0)
        s = np.float32(0)
        for v in z0[:4]:
            s = np.float32(s + v)
        assert total == s
