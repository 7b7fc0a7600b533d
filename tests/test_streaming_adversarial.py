"""Adversarial streams over generated pipelines (tests/programs/stream_random.py): 1-4 stages joined
by streaming edges, placed by hints on the host and on both fake GPUs (or all on one GPU: whole
items on `gpu`), an internal node as a stage, buffers and scalars bound without streaming (every
item takes the first push's: a decoy pushed later is never read), items of 0 instances. Seeded
sequences push fresh buffers, ring buffers pushed again while earlier items are in flight (also as
another item's input), non-overlapping views of one array, fresh read-only views, tracked buffers;
pop with and without timeouts that may pass; refill idle buffers on the host; push from a thread
while this one pops; stop the stream with cleanup() at a random point; fail one item in a chosen
stage (an index shifted by the item's scalar). A model runs the items one after another in NumPy
(exact: small integers in f32): every pop returns its item's values in push order, buffers that no
later item touches hold their item's results at its pop, every buffer ends as the model says (but
those the failing item or later ones may have written in the stages up to the failing one), the
failing item's pop raises its stage's error, and no call hangs (each run is joined with a
timeout). (tests/test_stream_adversarial.py drives one three-stage graph; this one the shapes.)"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.device import device_count, gpu_device
from hpvm_py.errors import ExecutionError, HPVMTimeoutError, LaunchError, StreamError
from conftest import TARGETS
from programs import stream_random as g
from stream_driver import StreamDriver, slow_events
from thread_runs import run_in_thread

N = 8  # elements of a ring buffer; an item uses n <= N of them
T = 60  # seconds a pop, push or wait may take before it counts as a hang
# stages placed anywhere, on the host, on the default GPU and on numbered GPUs that exist here (two
# fake ones on CI; one on a one-GPU machine, where "gpu:1" is an invalid device)
GPUS = device_count(gpu_device().partition(":")[0])
HINTS = ["any", "any", "cpu", "gpu"] + [f"gpu:{k}" for k in range(min(GPUS, 2))]
WRITTEN = ("y", "acc", "out", "z")


def key(a):
    """A buffer's memory (views of one array are matched by where they lie)."""
    return (a.__array_interface__["data"][0], a.nbytes)


class Model:
    """The items run one after another in NumPy, each on copies of the real buffers."""

    def __init__(self):
        self.mem = {}

    def of(self, a):
        k = key(a)
        if k not in self.mem:
            self.mem[k] = a.copy()
        return self.mem[k]


class Run(StreamDriver):
    """One generated stream: its graph's shape, its buffers, the items pushed and popped."""

    WAIT = T  # seconds a call may block before it is a hang

    def __init__(self, seed, target, whole=False, kept=0.12):
        r = self.rng = np.random.default_rng(seed)
        self.target = target
        self.stages = int(r.integers(1, 5))
        self.hints = tuple(str(r.choice(HINTS)) if target != "python" else "any" for _ in range(4))
        if whole:  # every stage on the one GPU: whole items where the target is gpu
            self.hints = ("any",) * 4
        self.inner = bool(r.random() < 0.25) and self.stages >= 2
        binds = [(0, "x"), (0, "y"), (1, "y"), (1, "acc"), (2, "acc"), (2, "out"),
                 (3, "y"), (3, "z")]
        self.kept = frozenset(b for b in binds if b[0] < self.stages and r.random() < kept) \
            if r.random() < 0.5 and self.stages > 1 else frozenset()
        self.fails = int(r.integers(0, self.stages))  # the stage where the failing item fails
        self.graph = g.graph(self.stages, self.hints, self.inner, self.kept, max(1, self.fails))
        self.dont_care = []  # buffers that items at or after the failing one may have written
        self.depth = int(r.integers(1, 5))
        self.count = int(r.integers(3, 25))
        self.fail_at = int(r.integers(0, self.count)) if r.random() < 0.35 else None
        self.threaded = r.random() < 0.25
        self.cleanup_at = int(r.integers(0, self.count)) if r.random() < 0.1 else None
        # ring buffers: some plain, some non-overlapping views of one base
        self.bases = []
        self.ring = {}
        for kind in WRITTEN:
            bufs = []
            base = np.zeros(4 * N, np.float32) + r.integers(-3, 4, 4 * N).astype(np.float32)
            self.bases.append(base)
            for j in range(int(r.integers(1, 4))):
                if r.random() < 0.4:
                    bufs.append(base[j * N:(j + 1) * N])
                else:
                    bufs.append(r.integers(-3, 4, N).astype(np.float32))
            self.ring[kind] = bufs
        self.xbase = r.integers(-4, 5, 3 * N).astype(np.float32)
        self.xbase.flags.writeable = False
        self.tracked = []
        if target != "python":
            for bufs in self.ring.values():
                for b in bufs:
                    if r.random() < 0.3 and b.base is None:
                        self.tracked.append(b)
        self.model = Model()
        self.items = []
        self.failed = None
        self.popped = 0
        self.pop_failed = False
        self.first = None
        self.decoys = []
        self.stopped = False

    def make(self, number):
        r = self.rng
        n = int(r.integers(0 if r.random() < 0.1 else 1, N + 1))
        it = {"n": n, "k": float(r.choice([-1.0, 1.0, 2.0]))}
        used = set()
        for kind in WRITTEN:
            if r.random() < 0.7:
                choices = [b for b in self.ring[kind] if id(b) not in used]
                b = choices[int(r.integers(0, len(choices)))]
            else:
                b = r.integers(-3, 4, N if r.random() < 0.7 else N + 2).astype(np.float32)
            used.add(id(b))
            it[kind] = b
        roll = r.random()
        if roll < 0.3:  # a fresh read-only view of the x base
            a = int(r.integers(0, N))
            it["x"] = self.xbase[a:a + N + int(r.integers(0, N))]
        elif roll < 0.5:  # another kind's ring buffer (written by earlier items)
            kind = str(r.choice(WRITTEN))
            firsts = [self.first[k2] for k2 in WRITTEN] if self.first is not None else []
            cands = [b for b in self.ring[kind] if id(b) not in used and
                     not any(np.shares_memory(b, f) for f in firsts)]
            it["x"] = cands[0] if cands else r.integers(-4, 5, N).astype(np.float32)
        else:
            x = r.integers(-4, 5, N + int(r.integers(0, 4))).astype(np.float32)
            if r.random() < 0.5:
                x.flags.writeable = False
            it["x"] = x
        if self.first is None or r.random() < 0.5:
            w = r.integers(-2, 3, N).astype(np.float32)
            if r.random() < 0.5:
                w.flags.writeable = False
        else:
            w = np.full(N, 99, np.float32)
        it["w"] = w
        if number == 0:
            self.first_made = it
        xs = (self.first_made["x"] if (0, "x") in self.kept else it["x"]).size
        it["off"] = int(r.integers(0, xs - n + 1))
        it["pad"] = 0
        if number == self.fail_at:
            if self.fails == 0:
                it["off"] = int(r.choice([-1, xs - n + 1, 1000]))
            else:
                it["n"] = max(n, 1)
                it["pad"] = int(r.choice([-1, 1000, N]))
        return it

    def v(self, stage, name, it):
        return self.first[name] if (stage, name) in self.kept else it[name]

    def written(self, it, upto):
        """The buffers the item's stages before `upto` write (and stage `upto`'s own, in part)."""
        names = [(0, "y"), (1, "acc"), (2, "out"), (3, "z")]
        return [self.v(st, nm, it) for st, nm in names if st <= min(upto, self.stages - 1)]

    def expect(self, it):
        """Apply the item to the model; its pop values or None (fails)."""
        if self.first is None:
            self.first = it
        if self.failed is not None:
            self.dont_care += self.written(it, self.fails)
            return None
        fails = None
        if it["n"] > 0 and (self.v(0, "off", it) < 0 or self.v(0, "off", it) + it["n"] >
                            self.v(0, "x", it).size):
            fails = 0
        elif it["n"] > 0 and it["pad"] != 0:
            fails = self.fails
        if fails is not None:
            assert fails == self.fails, (fails, self.fails)
            self.dont_care += self.written(it, fails)
        r = self._expect(it, fails)
        return None if fails is not None else r

    def _expect(self, it, fails):
        if it is not self.first:
            if it["w"] is not self.first["w"]:
                self.decoys.append((it["w"], it["w"].copy()))
        m, v = self.model, self.v
        n, off = it["n"], v(0, "off", it)
        k = np.float32(it["k"] if self.stages == 1 else self.first["k"])
        x = m.of(v(0, "x", it))
        if fails == 0:
            return None
        y = m.of(v(0, "y", it))
        y[:n] = x[off:off + n] * k
        off = off if n > 0 else 0  # (no instance: the output's 0)
        outs = [np.int64(off)]
        if self.stages >= 2 and fails != 1:
            w = m.of(self.first["w"])
            acc = m.of(v(1, "acc", it))
            y = m.of(v(1, "y", it))
            acc[:n] = acc[:n] + y[:n] * w[:n] + np.float32(off)
            outs.append(np.int64(off + 1 if n > 0 else 0))
        if self.stages >= 3 and fails not in (1, 2):
            acc = m.of(v(2, "acc", it))
            s = np.float32(0)
            for i in range(n):
                s = np.float32(s + acc[i])
            out = m.of(v(2, "out", it))
            out[0] = s + np.float32(outs[1])
            outs.append(s)
        if self.stages >= 4 and fails is None:
            z = m.of(v(3, "z", it))
            y = m.of(v(3, "y", it))
            z[:n] = z[:n] * np.float32(0.5) + y[:n] + s
            outs.append(np.float32(s + 1) if n > 0 else np.float32(0))
        return tuple(outs)

    def args(self, it):
        a = []
        for kind in ("x", "y", "w", "acc", "out", "z"):
            a += [it[kind], it[kind].nbytes]
        return a + [it["off"], np.float32(it["k"]), it["n"]] + [it["pad"]]

    def push(self, h, it, timeout):
        try:
            hpvm.push(h, *self.args(it), timeout=timeout)
        except HPVMTimeoutError:
            assert timeout is not None and timeout < 1, "push timed out"
            return "timeout"
        except ExecutionError as exc:
            assert self.failed is not None, f"push refused: {exc}"
            assert self.stage_name() in str(exc), exc
            return "refused"
        it["expected"] = self.expect(it)
        if self.failed is None and it["expected"] is None:
            self.failed = len(self.items)
        self.items.append(it)
        return "ok"

    def stage_name(self):
        return ["shift_scale", "acc_", "total", "blend"][self.fails]

    def care(self, a):
        return not any(np.shares_memory(a, d) for d in self.dont_care)

    def users(self, a):
        firsts = [self.first[k] for k in ("x", "y", "acc", "out", "z", "w")] if self.first else []
        if any(np.shares_memory(f, a) for f in firsts):
            return list(range(len(self.items)))  # (a kept bind: every item's)
        return [i for i, it in enumerate(self.items)
                if any(np.shares_memory(it[k], a) for k in ("x", "y", "acc", "out", "z"))]

    def pop(self, h, timeout):
        k = self.popped
        try:
            got = hpvm.pop(h, timeout=timeout)
        except HPVMTimeoutError:
            assert timeout < 1, f"pop of item {k} timed out"
            return False
        except ExecutionError as exc:
            assert self.failed is not None and k >= self.failed, f"item {k}: {exc}"
            assert self.stage_name() in str(exc), exc
            self.pop_failed = True
            return True
        assert self.failed is None or k < self.failed, f"item {k} popped after failed {self.failed}"
        exp = self.items[k]["expected"]
        assert len(got) == len(exp) and all(a == b and type(a) == type(b) for a, b in zip(got, exp)), \
            f"item {k}: {got!r} != {exp!r}"
        self.popped += 1
        for kind in ("out", "acc", "y", "z"):
            a = self.items[k][kind]
            if kind in ("acc", "out") and self.stages < (2 if kind == "acc" else 3):
                continue
            if kind == "z" and self.stages < 4:
                continue
            if all(i <= k for i in self.users(a)) and not any(a is t for t in self.tracked) \
                    and self.care(a):
                np.testing.assert_array_equal(a, self.model.of(a), err_msg=f"{kind} after pop {k}")
        return True

    def stopped_early(self, h, pushed: int) -> bool:
        """hpvm.cleanup() at the chosen point: every later call on the stream is refused."""
        if self.cleanup_at is None or pushed < self.cleanup_at:
            return False
        hpvm.cleanup(timeout=T)
        self.stopped = True
        for call in (lambda: hpvm.pop(h, timeout=1), lambda: hpvm.wait(h, timeout=1),
                     lambda: hpvm.push(h, *self.args(self.make(999)), timeout=1)):
            try:
                call()
            except (StreamError, LaunchError):
                pass
            else:
                raise AssertionError("a call on a cleaned-up stream returned")
        return True

    def refill(self) -> None:
        """The host rewrites a buffer no item uses now."""
        r = self.rng
        kind = str(r.choice(WRITTEN))
        a = self.ring[kind][int(r.integers(0, len(self.ring[kind])))]
        if not any(a is t for t in self.tracked) and all(i < self.popped for i in self.users(a)):
            v = r.integers(-3, 4, a.size).astype(np.float32)
            a[:] = v
            self.model.of(a)[:] = v

    def finish(self, h):
        r = self.rng
        if r.random() < 0.3:
            try:
                hpvm.wait(h, timeout=0.0)
            except HPVMTimeoutError:
                pass
            except ExecutionError:
                assert self.failed is not None
        try:
            hpvm.wait(h, timeout=T)
        except ExecutionError:
            assert self.failed is not None
        except LaunchError:
            pass
        if not self.pop_failed:
            try:
                for got in h.results():
                    exp = self.items[self.popped]["expected"]
                    assert got == exp, f"results {self.popped}: {got} != {exp}"
                    self.popped += 1
                assert self.failed is None
            except ExecutionError:
                assert self.popped == self.failed
        assert self.popped == (len(self.items) if self.failed is None else self.failed), \
            (self.popped, len(self.items), self.failed)
        for t in self.tracked:
            hpvm.request_memory(t)
        seen = {}
        for it in self.items:
            for kind in ("y", "acc", "out", "z", "x", "w"):
                seen[id(it[kind])] = (kind, it[kind])
        for _, (kind, a) in seen.items():
            if not self.care(a):
                continue
            if key(a) in self.model.mem:
                np.testing.assert_array_equal(a, self.model.mem[key(a)], err_msg=kind)
        for d, c in self.decoys:
            np.testing.assert_array_equal(d, c, err_msg="decoy")

    def go(self):
        with hpvm.runtime(self.target):
            for t in self.tracked:
                hpvm.track_memory(t)
            h = hpvm.launch(self.graph, stream=True, depth=self.depth)
            if self.threaded:
                self.drive_threaded(h)
            else:
                self.drive(h)
            if not self.stopped:
                self.finish(h)


def _run_within(run: Run, seconds: float) -> None:
    """Run the stream on a thread; a run still going after `seconds` is a hang."""
    run_in_thread(run.go, seconds=seconds, what="the stream")


def _cases() -> list:
    cases = [pytest.param(t, seed, False, id=f"{t}-{seed}") for t in TARGETS for seed in range(20)]
    cases += [pytest.param(t, seed, True, id=f"{t}-one-gpu-{seed}")
              for t in TARGETS if t in ("gpu", "nvptx") for seed in range(100, 116)]
    return cases


@pytest.mark.parametrize("target, seed, whole", _cases())
def test_generated_pipelines_pop_what_the_items_make_in_order(target: str, seed: int, whole: bool,
                                                              monkeypatch) -> None:
    if target in ("gpu", "nvptx") or not whole:
        slow_events(monkeypatch, np.random.default_rng(seed).choice([0, 0, 1, 2, 5, 20], 4096).tolist())
    run = Run(seed, target, whole=whole, kept=0.3 if whole else 0.12)
    _run_within(run, 3 * T)


def _args(bufs: list[np.ndarray], off: int = 0, k: float = 1.0, n: int = N, pad: int = 0) -> list:
    args: list = []
    for b in bufs:
        args += [b, b.nbytes]
    return args + [off, np.float32(k), n, pad]


@pytest.mark.parametrize("stages", [1, 3, 4])
def test_items_of_no_instances_pop_zeros_between_others(target: str, stages: int) -> None:
    """An item of grid 0 runs no instance (its replicated outputs pop as 0, as from a launch; on
    a GPU it cannot run whole and runs alone) and leaves the items around it intact."""
    graph = g.graph(stages)
    bufs = [np.arange(N, dtype=np.float32) for _ in range(6)]
    with hpvm.runtime(target):
        handle = hpvm.launch(graph, stream=True, depth=2)
        popped = []
        for n in [3, 0, 2]:
            hpvm.push(handle, *_args(bufs, off=1, k=2.0, n=n), timeout=T)
            popped.append(hpvm.pop(handle, timeout=T))
        hpvm.wait(handle, timeout=T)
    assert popped[1] == (0, 0, np.float32(0), np.float32(0))[:stages]
    assert [p[0] for p in (popped[0], popped[2])] == [1, 1]
    np.testing.assert_array_equal(bufs[1][:4], [2, 4, 6, 3])  # y: x[1:4] * 2, then x[1:3] * 2


def test_a_dropped_stream_gives_its_buffers_back_to_the_host(target: str) -> None:
    """A stream dropped with items in flight and unpopped: once its stages end, a host write to
    its buffers is what the next launch reads (no stale device copy stands)."""
    import gc
    graph = g.graph(3)
    bufs = [np.ones(N, np.float32) for _ in range(6)]
    with hpvm.runtime(target):
        handle = hpvm.launch(graph, stream=True, depth=4)
        for _ in range(3):
            hpvm.push(handle, *_args(bufs), timeout=T)
        hpvm.pop(handle, timeout=T)
        threads = handle._threads
        del handle
        gc.collect()
        for t in threads:
            t.join(T)
        assert not any(t.is_alive() for t in threads)
        for b in bufs:
            b[:] = 2
        out = hpvm.wait(hpvm.launch(graph, *_args(bufs)))
    assert out[2] == np.float32(6 * N)  # acc = 2 + y * w = 2 + 2 * 2
    np.testing.assert_array_equal(bufs[3], np.full(N, 6, np.float32))
