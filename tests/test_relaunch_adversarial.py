"""A relaunch gives exactly what a first launch gives (docs/runtime.md, "Launching again"): the
replayed, rebound and retargeted paths (rt/replay.py, rt/recording.py) against NumPy, while the
host changes scalars (signed zeros, NaN, inf, int / float / NumPy forms, grids of 0), buffers
(rings past the 64 recordings kept, rotated roles, fresh outputs, one buffer twice, slices of one
base, torch views), contents, tracking, writability, dtypes, HPVM_REBIND and profiles between
launches; a refused or failed launch raises what the same launch raises on a fresh runtime.
Minimized reproducers first, then the seeded generator that found them."""
from __future__ import annotations

import gc
import os
import re
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, HPVMError, LaunchError
from hpvm_py.rt import replay as replay_module
from programs import relaunch_adversarial as g

torch = pytest.importorskip("torch")

TARGETS = __import__("conftest").TARGETS
COMPILED = [t for t in TARGETS if t != "python"]
F32 = np.float32
JOIN_TIMEOUT = 60.0


def _gpu(target: str) -> bool:
    return target in ("gpu", "nvptx")


# -- an empty grid relaunched with other floats ---------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("graph", ["affine_root", "two_kernels"])
def test_an_empty_grid_relaunched_with_other_floats_runs_nothing(target: str, graph: str) -> None:
    """A recorded launch of 0 instances replayed with another float: the gpu target's empty
    launch had no scalars to patch (KeyError inside set_uniform, an InternalError)."""
    x, y = np.ones(8, F32), np.full(8, 5.0, F32)
    tail = (0.0, False) if graph == "affine_root" else (0.0,)
    with hpvm.runtime(target), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (two_kernels' Out parameter: written in part)
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        for k in (1.0, 2.0, -0.0, float("nan"), 3):
            hpvm.wait(hpvm.launch(getattr(g, graph), x, x.nbytes, y, y.nbytes, 0, k, *tail))
        hpvm.request_memory(y)
        if target != "python":
            assert hpvm.stats()["replayed_launches"] >= 3
        hpvm.wait(hpvm.launch(getattr(g, graph), x, x.nbytes, y, y.nbytes, 8, 2.0, *tail))
    np.testing.assert_array_equal(y, np.full(8, 5.0 * 2 + 1 if graph == "affine_root" else 2.0, F32))


# -- two threads replaying copies of one recording ------------------------------------------------

@pytest.mark.parametrize("target", COMPILED)
def test_a_thread_replaying_a_copy_does_not_write_another_threads_edges(
        target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Thread B replays its buffer set between the two kernels of thread A's replay of the same
    graph on another set. On a GPU target B's recording was a copy of A's (rebound), sharing the
    device array on the edge between the kernels: A's second kernel read B's values. One replay of
    such copies at a time (Recording.edges); the other takes the normal path."""
    n = 16
    xa, ya = np.full(n, 1.0, F32), np.zeros(n, F32)
    xb, yb = np.full(n, 2.0, F32), np.zeros(n, F32)
    launch_step = replay_module._launch_step
    main = threading.get_ident()
    armed: list[bool] = []
    failures: list[BaseException] = []

    def launch_b() -> None:
        try:
            hpvm.wait(hpvm.launch(g.two_kernels, xb, xb.nbytes, yb, yb.nbytes, n, 1.0, 0.5))
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            failures.append(exc)

    def step_then_b(*args: Any) -> None:
        launch_step(*args)
        if armed and threading.get_ident() == main:
            armed.clear()  # once, after A's first kernel
            other = threading.Thread(target=launch_b)
            other.start()
            other.join(JOIN_TIMEOUT)
            assert not other.is_alive(), "thread B hangs"

    with hpvm.runtime(target):
        for buf in (xa, ya, xb, yb):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(g.two_kernels, xa, xa.nbytes, ya, ya.nbytes, n, 1.0, 0.5))
        hpvm.wait(hpvm.launch(g.two_kernels, xb, xb.nbytes, yb, yb.nbytes, n, 1.0, 0.5))
        monkeypatch.setattr(replay_module, "_launch_step", step_then_b)
        armed.append(True)
        before = hpvm.stats()["replayed_launches"]
        hpvm.wait(hpvm.launch(g.two_kernels, xa, xa.nbytes, ya, ya.nbytes, n, 1.0, 0.5))
        assert hpvm.stats()["replayed_launches"] > before  # (A replayed: the case is not vacuous)
        assert not armed
        for buf in (ya, yb):
            hpvm.request_memory(buf)
    assert not failures, failures
    np.testing.assert_array_equal(ya, np.full(n, 1.5, F32))
    np.testing.assert_array_equal(yb, np.full(n, 2.5, F32))


@pytest.mark.parametrize("target", COMPILED)
def test_threads_looping_over_rings_of_their_own_get_their_own_results(target: str) -> None:
    """Three threads, each over its own ring of inputs and outputs (copies of one recording),
    handing the interpreter's lock over as often as it can."""
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    n, rounds = 16, 30 if _gpu(target) else 60
    failures: list[str] = []

    def work(t: int) -> None:
        xs = [np.full(n, float(10 * t + j), F32) for j in range(3)]
        ys = [np.zeros(n, F32) for _ in range(2)]
        with hpvm.runtime(target):
            for buf in xs + ys:
                hpvm.track_memory(buf)
            for it in range(rounds):
                x, y = xs[it % 3], ys[it % 2]
                hpvm.wait(hpvm.launch(g.two_kernels, x, x.nbytes, y, y.nbytes, n, 1.0, 0.0))
                hpvm.request_memory(y)
                if not np.array_equal(y, x):
                    failures.append(f"thread {t} step {it}: {y[:4]} for {x[:4]}")
                    return

    hpvm.init(target)
    try:
        threads = [threading.Thread(target=work, args=(t,)) for t in range(3)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(JOIN_TIMEOUT)
        assert not any(th.is_alive() for th in threads), "a thread hangs"
    finally:
        sys.setswitchinterval(old)
        hpvm.cleanup()
    assert not failures, failures


# -- generated sequences --------------------------------------------------------------------------

def _f32sum(values: np.ndarray) -> F32:
    """total()'s sum: in order, in f32."""
    s = F32(0)
    for v in values:
        s = F32(s + v)
    return s


def _first_line(exc: BaseException) -> str:
    """An error without its location (the launch's line differs between the two calls)."""
    return f"{type(exc).__name__}: {str(exc).splitlines()[0].split(' error: ', 1)[-1]}"


_OUT_OF_BOUNDS = re.compile(r"ExecutionError: (\w+): out-of-bounds .* \[rule: memory-in-bounds\]")


def _same_leaf_out_of_bounds(a: str, b: str) -> bool:
    """Two out-of-bounds errors of one leaf: where several of its instances fail, a compiled
    target reports the one recorded first, which threads and GPU blocks race for (docs/language.md,
    "Memory"), so a relaunch may name another failing access than a cold launch did."""
    first, second = _OUT_OF_BOUNDS.fullmatch(a), _OUT_OF_BOUNDS.fullmatch(b)
    return first is not None and second is not None and first[1] == second[1]


class Sequence:
    """Random launches of six graphs over a pool of buffers; between them the host writes,
    tracks, untracks, requests, replaces, freezes and retypes buffers, restarts the runtime,
    toggles HPVM_REBIND and profiles; loops over rings of buffer sets and over slices of one base.
    A mirror of every buffer follows NumPy; an error must be expected, and a fresh runtime must
    raise the same for the same launch."""

    def __init__(self, target: str, seed: int) -> None:
        self.target, self.seed = target, seed
        self.rng = np.random.default_rng(seed)
        self.gpu = _gpu(target)
        self.log: list[str] = []
        r = self.rng
        self.floats = [r.standard_normal(s).astype(F32) for s in (32, 32, 24, 17, 32, 1)]
        self.ints = [np.zeros(s, np.int32) for s in (32, 9)]
        self.ats = [np.array([v], np.int64) for v in (4, 0, 17)]
        self.mirror = {id(b): b.copy() for b in self.buffers()}
        self.tracked: dict[int, Any] = {}
        self.last: tuple[Any, ...] | None = None
        self.counts = {"replayed_launches": 0, "rebound_launches": 0}

    def buffers(self) -> list[np.ndarray]:
        return self.floats + self.ints + self.ats

    def fail(self, what: str) -> None:
        raise AssertionError(f"{self.target} seed {self.seed}: {what}\nlast steps:\n" +
                             "\n".join(self.log[-12:]))

    def name(self, b: np.ndarray) -> str:
        for pool, p in ((self.floats, "f"), (self.ints, "i"), (self.ats, "at")):
            for k, o in enumerate(pool):
                if o is b:
                    return f"{p}{k}"
        return "?"

    # -- tracking
    def track(self, b: np.ndarray) -> None:
        hpvm.track_memory(b)
        self.tracked[id(b)] = b

    def untrack(self, b: np.ndarray) -> None:
        if self.tracked.pop(id(b), None) is not None:
            hpvm.untrack_memory(b)

    def home(self) -> None:
        if self.gpu:
            for b in list(self.tracked.values()):
                hpvm.request_memory(b)

    def start(self) -> None:
        hpvm.init(self.target)
        self.tracked.clear()
        if self.gpu:  # (an untracked host buffer goes home after each launch: never replayed)
            for b in self.buffers():
                self.track(b)

    def stop(self) -> None:
        self.home()
        stats = hpvm.stats()
        for key in self.counts:
            self.counts[key] += stats[key]
        hpvm.cleanup()

    def check(self, where: Any) -> None:
        self.home()
        for b in self.buffers():
            want = self.mirror[id(b)]
            if not np.array_equal(b, want, equal_nan=b.dtype.kind == "f"):
                self.fail(f"at {where}, buffer {self.name(b)} is {b[:6]}..., NumPy says {want[:6]}...")

    # -- argument forms
    def float_arg(self) -> tuple[Any, F32]:
        v = float(self.rng.choice([0.0, -0.0, 1.5, -2.0, 0.25, 3.0, np.nan, np.inf, 1e30]))
        form = int(self.rng.integers(5))
        if form == 0:
            return F32(v), F32(v)
        if form == 1 and np.isfinite(v) and v == int(v):
            return int(v), F32(int(v))
        if form == 2:
            return np.float64(v), F32(v)
        return v, F32(v)

    def int_arg(self, v: int) -> Any:
        form = int(self.rng.integers(10))
        return (v, np.int64(v), np.int32(v))[form] if form < 3 else v

    def buffer_arg(self, pool: list[np.ndarray]) -> tuple[Any, np.ndarray]:
        b = pool[int(self.rng.integers(len(pool)))]
        if not self.gpu and self.rng.random() < 0.2:  # (on a GPU each object has its own copies)
            return torch.from_numpy(b), b
        return b, b

    @staticmethod
    def refuses_writes(arg: Any, b: np.ndarray) -> bool:
        return isinstance(arg, np.ndarray) and not b.flags.writeable

    # -- launching
    def launch(self, graph: Any, args: tuple[Any, ...], apply: Callable[[Any], None],
               written: list[np.ndarray], expect: type[HPVMError] | None = None) -> None:
        self.last = (self.log[-1], graph, args, apply, written, expect)
        try:
            out = hpvm.wait(hpvm.launch(graph, *args))
        except HPVMError as exc:
            said = _first_line(exc)
            self.log.append("  -> " + said)
            if expect is None or not isinstance(exc, expect):
                self.fail(f"raised {said}, expected {expect}")
            self.same_when_cold(graph, args, said)
            self.home()
            for b in written:  # (a failed launch may have written a part)
                self.mirror[id(b)] = b.copy()
            return
        if expect is not None:
            self.fail(f"no {expect.__name__}")
        apply(out)

    def same_when_cold(self, graph: Any, args: tuple[Any, ...], said: str) -> None:
        self.stop()
        self.start()
        try:
            hpvm.wait(hpvm.launch(graph, *args))
            cold = "nothing"
        except HPVMError as exc:
            cold = _first_line(exc)
        if cold != said and not (self.target != "python" and _same_leaf_out_of_bounds(cold, said)):
            self.fail(f"a relaunch raised\n  {said}\nwhere a fresh runtime raises\n  {cold}")

    def op_affine(self) -> None:
        r = self.rng
        (x, xb), (y, yb) = self.buffer_arg(self.floats), self.buffer_arg(self.floats)
        size = min(xb.size, yb.size)
        n = int(r.choice([0, 1, size, size - 1, size // 2]))
        k, kf = self.float_arg()
        c, _ = self.float_arg()
        cf = F32(float(c))
        f = bool(r.integers(2))
        flip = (f, np.bool_(f), int(f))[int(r.integers(3))]
        self.log.append(f"affine x={self.name(xb)} y={self.name(yb)} n={n} k={k!r} c={c!r} "
                        f"flip={flip!r} ({type(y).__name__})")

        def apply(_: Any) -> None:
            xv = self.mirror[id(xb)][:n].copy()
            with np.errstate(all="ignore"):
                v = self.mirror[id(yb)][:n] * kf + xv + cf
            self.mirror[id(yb)][:n] = -v if f else v
        self.launch(g.affine_root, (x, xb.nbytes, y, yb.nbytes, self.int_arg(n), k, c, flip), apply,
                    [yb], LaunchError if self.refuses_writes(y, yb) else None)

    def op_sum(self) -> None:
        r = self.rng
        (x, xb), (y, yb), (z, zb) = (self.buffer_arg(self.floats) for _ in range(3))
        size = min(xb.size, yb.size)
        n = int(r.choice([0, 1, size, size - 1]))
        k, kf = self.float_arg()
        m, mf = self.float_arg()
        self.log.append(f"sum_chain x={self.name(xb)} y={self.name(yb)} z={self.name(zb)} n={n} "
                        f"k={k!r} m={m!r}")

        def apply(out: Any) -> None:
            with np.errstate(all="ignore"):
                self.mirror[id(yb)][:n] = self.mirror[id(xb)][:n] * kf
                s = _f32sum(self.mirror[id(yb)][:n])
                self.mirror[id(zb)][0] = s
                want = F32(s * mf)
            got = F32(out)
            if not (np.array_equal(got, want, equal_nan=True) and
                    (np.isnan(want) or np.signbit(got) == np.signbit(want))):
                self.fail(f"sum_chain returned {got!r}, NumPy says {want!r}")
        refused = self.refuses_writes(y, yb) or self.refuses_writes(z, zb)
        self.launch(g.sum_chain, (x, xb.nbytes, y, yb.nbytes, z, zb.nbytes, self.int_arg(n), k, m),
                    apply, [yb, zb], LaunchError if refused else None)

    def op_prefix(self) -> None:
        at = self.ats[int(self.rng.integers(len(self.ats)))]
        (x, xb), (y, yb) = self.buffer_arg(self.floats), self.buffer_arg(self.floats)
        k, kf = self.float_arg()
        count = int(at[0])
        self.log.append(f"data_prefix at={self.name(at)}[0]={count} x={self.name(xb)} "
                        f"y={self.name(yb)} k={k!r}")
        refused = self.refuses_writes(y, yb)

        def apply(_: Any) -> None:
            with np.errstate(all="ignore"):
                self.mirror[id(yb)][:max(count, 0)] = self.mirror[id(xb)][:max(count, 0)] * kf + F32(1)
        expect = LaunchError if refused else ExecutionError if count > min(xb.size, yb.size) else None
        self.launch(g.data_prefix, (at, at.nbytes, x, xb.nbytes, y, yb.nbytes, k), apply, [yb], expect)

    def op_blocked(self) -> None:
        r = self.rng
        (x, xb), (y, yb) = self.buffer_arg(self.floats), self.buffer_arg(self.floats)
        size = min(xb.size, yb.size)
        n = int(r.choice([0, 1, size, size - 1, min(5, size)]))
        lanes = int(r.choice([1, 3, 4, 8, 32]))
        k, kf = self.float_arg()
        self.log.append(f"blocked x={self.name(xb)} y={self.name(yb)} n={n} lanes={lanes} k={k!r}")

        def apply(_: Any) -> None:
            xv = self.mirror[id(xb)][:n].copy()
            with np.errstate(all="ignore"):
                self.mirror[id(yb)][:n] = self.mirror[id(yb)][:n] + xv * kf
        self.launch(g.blocked, (x, xb.nbytes, y, yb.nbytes, self.int_arg(n), self.int_arg(lanes), k),
                    apply, [yb], LaunchError if self.refuses_writes(y, yb) else None)

    def op_two(self) -> None:
        (x, xb), (y, yb) = self.buffer_arg(self.floats), self.buffer_arg(self.floats)
        size = min(xb.size, yb.size)
        n = int(self.rng.choice([0, 1, size, size - 1]))
        k, kf = self.float_arg()
        c, cf = self.float_arg()
        self.log.append(f"two_kernels x={self.name(xb)} y={self.name(yb)} n={n} k={k!r} c={c!r}")

        def apply(_: Any) -> None:
            with np.errstate(all="ignore"):
                self.mirror[id(yb)][:n] = self.mirror[id(xb)][:n] * kf + cf
        self.launch(g.two_kernels, (x, xb.nbytes, y, yb.nbytes, self.int_arg(n), k, c), apply, [yb],
                    LaunchError if self.refuses_writes(y, yb) else None)

    def op_accumulate(self) -> None:
        r = self.rng
        h = self.ints[int(r.integers(len(self.ints)))]
        n = int(r.choice([0, 1, h.size, h.size - 1]))
        step = int(r.choice([0, 1, -3, 7, 2**20]))
        form = int(r.integers(4))
        given = (step, np.int32(step), np.int64(step), np.int16(step) if abs(step) < 2**15 else step)[form]
        self.log.append(f"accumulate h={self.name(h)} n={n} step={given!r}")

        def apply(_: Any) -> None:
            with np.errstate(all="ignore"):
                self.mirror[id(h)][:n] += np.int32(step) * np.arange(n, dtype=np.int32)
        self.launch(g.accumulate, (h, h.nbytes, self.int_arg(n), given), apply, [h],
                    LaunchError if not h.flags.writeable else None)

    def op_again(self) -> None:
        """The last launch again, the very same arguments (its recording replays)."""
        if self.last is None:
            return
        text, graph, args, apply, written, expect = self.last
        live = self.buffers()
        for a in args:
            if isinstance(a, torch.Tensor):
                a = a.numpy()
                if not any(a.ctypes.data == b.ctypes.data for b in live):
                    return
            elif isinstance(a, np.ndarray):
                if not any(a is b for b in live) or not a.flags.writeable or a.dtype == np.int64:
                    return  # (replaced, refused, or data-dependent: decided on the data of then)
        if expect is not None:
            return
        self.log.append("again: " + text)
        self.launch(graph, args, apply, written, expect)

    # -- between launches
    def op_write(self) -> None:
        b = self.buffers()[int(self.rng.integers(len(self.buffers())))]
        if not b.flags.writeable:
            return
        was = id(b) in self.tracked
        if self.gpu and was:  # (the host writes a tracked buffer only untracked: docs/runtime.md)
            self.untrack(b)
        i = int(self.rng.integers(b.size))
        b[i] = int(self.rng.choice([0, 3, 17, 32, 40, -1])) if b.dtype == np.int64 else \
            self.rng.standard_normal()
        self.mirror[id(b)][i] = b[i]
        self.log.append(f"write {self.name(b)}[{i}] = {b[i]}")
        if self.gpu and (was or self.rng.random() < 0.5):
            self.track(b)

    def op_tracking(self) -> None:
        b = self.buffers()[int(self.rng.integers(len(self.buffers())))]
        if id(b) not in self.tracked:
            self.log.append(f"track {self.name(b)}")
            self.track(b)
        elif self.rng.random() < 0.5:
            self.log.append(f"untrack {self.name(b)}")
            self.untrack(b)
        else:
            self.log.append(f"request {self.name(b)}")
            hpvm.request_memory(b)

    def op_replace(self) -> None:
        """A new array in an old one's place (its id and address may be reused)."""
        pool = (self.floats, self.ints)[int(self.rng.integers(2))]
        j = int(self.rng.integers(len(pool)))
        old = pool[j]
        self.home()
        self.untrack(old)
        size, dtype = old.size, old.dtype
        del self.mirror[id(old)]
        pool[j] = old = None
        gc.collect()
        pool[j] = new = (self.rng.standard_normal(size) * 4).astype(dtype)
        self.mirror[id(new)] = new.copy()
        if self.gpu:
            self.track(new)
        self.log.append(f"replace {self.name(new)}")

    def op_writeable(self) -> None:
        b = self.floats[int(self.rng.integers(len(self.floats)))]
        if b.flags.writeable:
            self.home()  # (its data home first: a read-only array cannot take it back)
        b.flags.writeable = not b.flags.writeable
        self.log.append(f"{self.name(b)} writeable = {b.flags.writeable}")

    def op_retype(self) -> None:
        """A buffer's dtype changed in place is refused, as a fresh runtime refuses it."""
        b = self.floats[int(self.rng.integers(len(self.floats)))]
        if not b.flags.writeable:
            return
        x = self.floats[0] if b is not self.floats[0] else self.floats[1]
        self.log.append(f"{self.name(b)}.dtype = int32, launched")
        b.dtype = np.int32
        try:
            self.launch(g.affine_root, (x, x.nbytes, b, b.nbytes, 1, 1.0, 0.0, False), lambda _: None,
                        [], LaunchError)
        finally:
            b.dtype = F32

    def op_restart(self) -> None:
        self.log.append("cleanup, init")
        self.stop()
        self.start()

    def op_rebind_setting(self) -> None:
        os.environ["HPVM_REBIND"] = str(int(self.rng.integers(2)))
        self.log.append(f"HPVM_REBIND={os.environ['HPVM_REBIND']}")

    def op_profile(self) -> None:
        self.log.append("profile")
        with hpvm.profile(None):
            for _ in range(int(self.rng.integers(1, 5))):
                self.op_again() if self.rng.random() < 0.6 else self.op_affine()
        self.log.append("profile ends")

    def op_ring(self) -> None:
        """A loop over R sets of buffers: past the recordings kept, roles rotated, a fresh output
        at every other step, one buffer at both positions."""
        r = self.rng
        count = int(r.integers(2, 24 if self.gpu else 71))
        size = int(r.choice([1, 7, 32]))
        shape = int(r.integers(4))  # 0: (i, i+1); 1: fresh outputs; 2: rotating; 3: (i, i)
        bufs = [r.standard_normal(size).astype(F32) for _ in range(count + 1)]
        mirror = [b.copy() for b in bufs]
        if self.gpu:
            for b in bufs:
                hpvm.track_memory(b)
        n = int(r.choice([size, size - 1, 1]))
        rounds = int(r.integers(2, 4))
        self.log.append(f"ring of {count} shape={shape} size={size} n={n} rounds={rounds}")
        for rnd in range(rounds):
            for i in range(count):
                xi, yi = ((i + rnd) % (count + 1), (i + rnd + 1) % (count + 1)) if shape == 2 else \
                    (i, i) if shape == 3 else (i, i + 1)
                k, kf = self.float_arg() if r.random() < 0.5 else (2.0, F32(2.0))
                fresh = shape == 1 and r.random() < 0.5
                y, ym = (np.zeros(size, F32), np.zeros(size, F32)) if fresh else (bufs[yi], mirror[yi])
                xv = mirror[xi][:n].copy()
                with np.errstate(all="ignore"):
                    ym[:n] = ym[:n] * kf + xv + F32(1.0)
                hpvm.wait(hpvm.launch(g.affine_root, bufs[xi], bufs[xi].nbytes, y, y.nbytes, n, k, 1.0,
                                      False))
                if fresh:
                    if self.gpu:
                        hpvm.request_memory(y)
                    if not np.array_equal(y, ym, equal_nan=True):
                        self.fail(f"ring step {i} round {rnd}: fresh output {y}, NumPy says {ym}")
        if self.gpu:
            for b in bufs:
                hpvm.untrack_memory(b)
        for i, (b, want) in enumerate(zip(bufs, mirror)):
            if not np.array_equal(b, want, equal_nan=True):
                self.fail(f"ring buffer {i} is {b}, NumPy says {want}")

    def op_slices(self) -> None:
        """Fresh slices (and torch views) of one base, apart from one another (host targets: on a
        GPU, objects sharing memory have copies of their own)."""
        if self.gpu:
            return
        r = self.rng
        base = r.standard_normal(64).astype(F32)
        mirror = base.copy()
        length = int(r.choice([8, 16]))
        rounds = int(r.integers(3, 12))
        self.log.append(f"slices of {length}, {rounds} rounds")
        for _ in range(rounds):
            a, b = (int(v) * length for v in r.choice(64 // length, 2, replace=False))
            x = torch.from_numpy(base)[a:a + length] if r.random() < 0.3 else base[a:a + length]
            y = torch.from_numpy(base)[b:b + length] if r.random() < 0.3 else base[b:b + length]
            k, kf = self.float_arg() if r.random() < 0.4 else (0.5, F32(0.5))
            with np.errstate(all="ignore"):
                mirror[b:b + length] = mirror[b:b + length] * kf + mirror[a:a + length]
            hpvm.wait(hpvm.launch(g.affine_root, x, length * 4, y, length * 4, length, k, 0.0, False))
            if not np.array_equal(base, mirror, equal_nan=True):
                self.fail(f"slices [{a}:] -> [{b}:]: {base}, NumPy says {mirror}")

    def run(self, steps: int) -> dict[str, int]:
        ops = [(self.op_affine, 3), (self.op_again, 6), (self.op_ring, 0.4), (self.op_slices, 0.4),
               (self.op_profile, 0.4), (self.op_sum, 2), (self.op_prefix, 2), (self.op_blocked, 2),
               (self.op_two, 2), (self.op_accumulate, 2), (self.op_write, 2), (self.op_tracking, 1.5),
               (self.op_replace, 0.7), (self.op_writeable, 0.6), (self.op_restart, 0.2),
               (self.op_rebind_setting, 0.3), (self.op_retype, 0.3)]
        weights = np.array([w for _, w in ops])
        weights /= weights.sum()
        self.start()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # (Out parameters written in part)
                for step in range(steps):
                    ops[int(self.rng.choice(len(ops), p=weights))][0]()
                    if self.rng.random() < 0.15:
                        self.check(step)
                self.check("the end")
        finally:
            for b in self.floats:
                b.flags.writeable = True
            self.stop()
        return self.counts


@pytest.mark.parametrize("seed", range(3))
def test_generated_relaunches_compute_what_numpy_computes(seed: int,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    for target in TARGETS:
        # (op_rebind_setting writes os.environ; set here first, so the test ends with it as it
        # found it: a 0 left over turned the next file's lane off)
        monkeypatch.setenv("HPVM_REBIND", "1")
        steps = {"cpu": 250, "python": 120 if seed == 0 else 0}.get(target, 110)  # (interpreted)
        if not steps:
            continue
        counts = Sequence(target, 7300 + seed).run(steps)
        if target != "python":  # (not vacuous: the fast paths ran)
            assert counts["replayed_launches"] >= steps // 10, counts
