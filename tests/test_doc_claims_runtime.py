"""Claims of docs/settings.md, docs/streaming.md, docs/runtime.md and docs/profiling.md that only
examples tested, now tried by seeded generators (the audit's table: its claims.md):

- A number setting "refuses any other value with an hpvm_py.errors exception naming it"
  (settings.md): every value a generator makes of digits from other scripts, superscripts, signs,
  spaces, separators and suffixes is either the number its ASCII digits say or an HPVMError that
  names the variable, never a ValueError from int() (superscripts passed str.isdigit() and then
  failed int(); Arabic-Indic digits were read as numbers).
- A flag is off for 0/false/no/off and on for 1/true/yes/on "in any case", and any other value is
  on with an HPVMWarning naming the variable (settings.md).
- A timeout "loses nothing and leaves the handle usable" (streaming.md, "Errors and shutdown"):
  generated sequences of pushes, pops and waits with timeouts from 0.5 ms up against a slow stage;
  every push that returned pops once, in push order, with its own results in its buffers, and no
  push that timed out pops at all. And "after [wait()] returns, nothing writes any pushed buffer".
- "A tracked buffer that is resized or freed while tracked is an HPVMError at its next use"
  (runtime.md), on the cpu target for torch tensors resized or given other storage after a random
  number of (replayed) launches, and tracked again afterwards it computes as before.
- "Events of one track always nest" (profiling.md): random overlapping events on a few tracks,
  after the lane split.
"""
from __future__ import annotations

import datetime
import os
import random
import re
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS, child_pythonpath
from differential.data import load
from hpvm_py.errors import (HPVMError, HPVMTimeoutError, HPVMWarning, LaunchError,
                            MemoryTrackingError, StreamError)
from hpvm_py.support import profile as P
from hpvm_py.support import settings
from programs import lifecycle_graphs as g
from test_lifecycle import churned

HOST_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
ROOT = Path(__file__).resolve().parent.parent

# -- settings.md: number settings ------------------------------------------------------------------

# Pieces a value is made of: ASCII digits, and what a digit test might let through besides.
PIECES = ["0", "1", "7", "12", "64", "\u00b2", "\u0663", "\u0968", "\uff11", " ", "-", "+", "_",
          ".", "e", "x", "K", "m", "G", "\t"]


def _value(rng: random.Random) -> str:
    return "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 4)))


def _readers() -> dict[str, Callable[[], object]]:
    """Each number setting and the call that reads it where the runtime does."""
    from hpvm_py.backends.cpu import threads
    from hpvm_py.device import devices
    from hpvm_py.distributed import chooser, heap
    from hpvm_py.support import cores

    return {"HPVM_NUM_THREADS": cores.default_threads,
            "HPVM_CPU_SPINS": lambda: threads.idle_spins(4),
            "HPVM_FAKE_DEVICES": lambda: devices.device_count("fake"),
            "HPVM_HEAP_BYTES": heap.heap_bytes_from_env,
            "HPVM_COMM_ONESHOT_BYTES": chooser.oneshot_threshold,
            "HPVM_COMM_QUANTIZE_BYTES": lambda: chooser.quantize_threshold("fp8"),
            "HPVM_COMM_PUSH_BYTES": lambda: chooser.push_threshold(2),
            "HPVM_COMM_ONE_SHOT_PUSH_BYTES": lambda: chooser.one_shot_push_threshold(4)}


def _expected(name: str, text: str) -> int | None:
    """What the setting means by `text` (None: no number, to be refused), from the docs' table:
    ASCII digits only; a "bytes" setting also takes one K/M/G/T suffix (HPVM_HEAP_BYTES has a
    minimum, which the reader names in its error: treated as refused when it is not met); threads
    must be > 0."""
    if name.endswith("_BYTES"):
        m = re.fullmatch(r"([0-9]+)([kKmMgGtT]?)", text)
        if not m:
            return None
        value = int(m[1]) << {"": 0, "k": 10, "m": 20, "g": 30, "t": 40}[m[2].lower()]
        if name == "HPVM_HEAP_BYTES" and value < 4096 + 256:
            return None  # heap.py: its control block and one block
        return value
    if not re.fullmatch(r"[0-9]+", text):
        return None
    if name == "HPVM_NUM_THREADS" and not 0 < int(text) <= 4096:  # (settings.md: at most 4096)
        return None
    return int(text)


def _capped(name: str, value: int) -> int:
    # one-shot-by-stores has rows of at most ONE_SHOT_PUSH_BYTES (chooser.py caps the setting)
    if name == "HPVM_COMM_ONE_SHOT_PUSH_BYTES":
        from hpvm_py.distributed.chooser import ONE_SHOT_PUSH_BYTES

        return min(value, ONE_SHOT_PUSH_BYTES)
    return value


@pytest.mark.parametrize("seed", range(3))
def test_a_number_setting_is_its_ascii_digits_or_a_named_error(seed: int,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    for name, read in _readers().items():
        values = [_value(rng) for _ in range(60)] + ["\u00b2", "1\u00b2", "\u0663", "\u00b2M"]
        for text in values:
            monkeypatch.setenv(name, text)
            expected = _expected(name, text.strip() if text.strip() == text else "\0")
            try:
                got = read()
            except HPVMError as error:
                assert expected is None, (name, text, error)
                assert name in str(error), (name, text, error)
                continue
            # anything but an HPVMError (a ValueError from int()) fails the test here by itself
            assert expected is not None and got == _capped(name, expected), (name, text, got)


def test_a_gpu_device_number_is_ascii_digits(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpvm_py.device import devices

    monkeypatch.setenv("HPVM_FAKE_DEVICES", "2")
    monkeypatch.setattr(devices, "cuda_available", lambda: False)
    for text in ("fake:\u00b2", "fake:\u0661", "fake:-1", "fake: 1"):
        monkeypatch.setenv("HPVM_GPU_DEVICE", text)
        with pytest.raises(HPVMError, match="HPVM_GPU_DEVICE"):
            devices.gpu_device()
    monkeypatch.setenv("HPVM_GPU_DEVICE", "fake:1")
    assert devices.gpu_device() == "fake:1"


@pytest.mark.parametrize("text", ["60", "0.5", "1e9", "inf", "-inf", "nan", "1e14", "1e400", "0",
                                  "-1", "1e9x", "\u00b2"])
def test_a_seconds_setting_is_a_usable_timeout_or_a_named_error(text: str,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """HPVM_COMM_TIMEOUT=inf (or 1e14) passed as a number and then failed inside gloo's timedelta
    and the GPU kernels' int64 nanoseconds as an internal OverflowError: now a value is positive
    and at most 1e9 seconds, or it is refused naming the variable."""
    monkeypatch.setenv("HPVM_COMM_TIMEOUT", text)
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if 0 < value <= 1e9:
        assert settings.positive_seconds(settings.COMM_TIMEOUT) == value
        datetime.timedelta(seconds=value)  # what the consumers make of it must not overflow
        assert int(value * 1e9) < 2 ** 63
    else:
        with pytest.raises(HPVMError, match="HPVM_COMM_TIMEOUT"):
            settings.positive_seconds(settings.COMM_TIMEOUT)


def test_an_unbounded_init_timeout_is_refused_before_ranks_join(tmp_path) -> None:
    """hpvm.distributed.init(timeout=inf) and HPVM_COMM_TIMEOUT=inf on a torchrun world (of one
    rank here) were internal errors (OverflowError in datetime.timedelta); both are refused as a
    DistributedError naming the timeout."""
    code = ("import hpvm_py.distributed as d, sys\n"
            "try:\n    d.init(timeout=float(sys.argv[1]) if sys.argv[1] else None, device='cpu')\n"
            "except Exception as e:\n    print(type(e).__name__, e)\nelse:\n    print('joined')\n")
    env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), "RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29653", "HPVM_DIST_LAUNCHER": "torch",
           "HPVM_HEAP_BYTES": "1M", "HPVM_HEAP_DIR": str(tmp_path)}
    for argument, variable in (("inf", ""), ("1e14", ""), ("", "inf"), ("", "1e14")):
        env["HPVM_COMM_TIMEOUT"] = variable
        done = subprocess.run([sys.executable, "-c", code, argument], capture_output=True, text=True,
                              env=env, timeout=120)
        out = done.stdout.strip()
        assert out.startswith("DistributedError") and "timeout" in out.lower() and \
            "internal error" not in out, (argument, variable, out, done.stderr[-2000:])


# -- settings.md: flags ----------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(2))
def test_flag_words_in_any_case_and_other_values_warn(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    words = {w: False for w in ("0", "false", "no", "off")} | {w: True for w in ("1", "true", "yes", "on")}
    for k in range(40):
        word = rng.choice(sorted(words))
        cased = "".join(c.upper() if rng.random() < 0.5 else c for c in word)
        padded = rng.choice(["", " "]) + cased + rng.choice(["", " "])
        monkeypatch.setenv("HPVM_NO_CACHE", padded)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # a flag word warns about nothing
            assert settings.NO_CACHE.on() is words[word], padded
        # a value that is no flag word: on, with a warning naming the variable (once per value)
        other = f"{cased}{k}x{seed}"
        monkeypatch.setenv("HPVM_NO_CACHE", other)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert settings.NO_CACHE.on() is True
        assert [w.category for w in caught] == [HPVMWarning], other
        assert "HPVM_NO_CACHE" in str(caught[0].message)


# -- streaming.md: timeouts lose nothing -----------------------------------------------------------

ROUNDS = {"cpu": 2_000_000, "python": 20_000, "gpu": 200, "nvptx": 2_000_000}
TIMEOUTS = [0.0005, 0.002, 0.01]


class Pushed:
    """One push of slow_pipeline or side_by_side: its own buffers, so that its results can be told
    from every other item's."""

    def __init__(self, rng: np.random.Generator, n: int, rounds: int, tag: int, wide: bool):
        self.x = rng.integers(0, 2 ** 31, n, dtype=np.int64)
        self.y, self.z = np.zeros(n, np.int64), np.zeros(n, np.int64)
        self.rounds, self.tag, self.wide = rounds, tag, wide

    def args(self) -> tuple:
        x, y, z, n = self.x, self.y, self.z, len(self.x)
        if self.wide:
            return x, x.nbytes, y, y.nbytes, z, z.nbytes, n, self.rounds, self.tag
        return x, x.nbytes, y, y.nbytes, n, self.rounds, self.tag

    def check(self, result: tuple) -> None:
        assert tuple(result) == ((self.tag,) if self.wide else (self.tag, self.tag)), (result, self.tag)
        np.testing.assert_array_equal(self.y, churned(self.x, self.rounds))
        if self.wide:
            np.testing.assert_array_equal(self.z, self.y)


# (Triton's interpreter is slow: one gpu case per graph of leaves)
@pytest.mark.parametrize("target, graph, seed", [
    (t, graph, seed) for t in TARGETS
    for graph in ("slow_pipeline", "side_by_side", "one_internal_stage") for seed in range(3)
    if not (t == "gpu" and (seed or graph == "one_internal_stage"))])
def test_timed_out_pushes_pops_and_waits_lose_nothing(target: str, graph: str, seed: int) -> None:
    rng = np.random.default_rng([seed, len(graph)])
    wide = graph != "side_by_side"
    accepted: list[Pushed] = []
    popped = timeouts = 0
    with hpvm.runtime(target):
        h = hpvm.launch(getattr(g, graph), stream=True, depth=int(rng.integers(1, 3)))
        for step in range(36):
            if rng.random() < 0.6:
                item = Pushed(rng, 8, int(rng.integers(1, ROUNDS[target])), step, wide)
                try:
                    hpvm.push(h, *item.args(), timeout=float(rng.choice(TIMEOUTS + [30.0])))
                except HPVMTimeoutError:
                    timeouts += 1  # gave its item to no stage: it must never pop
                    continue
                accepted.append(item)
            elif popped == len(accepted):
                # every push so far popped: pop() raises at once rather than wait for a push
                started = time.monotonic()
                with pytest.raises(StreamError):
                    hpvm.pop(h, timeout=30)
                assert time.monotonic() - started < 10
            else:
                try:
                    result = hpvm.pop(h, timeout=float(rng.choice(TIMEOUTS)))
                except HPVMTimeoutError:
                    timeouts += 1
                    continue
                accepted[popped].check(result)
                popped += 1
        while True:  # a timed-out wait resumes on the next call
            try:
                hpvm.wait(h, timeout=float(rng.choice([0.001, 0.05])))
                break
            except HPVMTimeoutError:
                timeouts += 1
        finished = [(p.y.copy(), p.z.copy()) for p in accepted]
        for result in h.results():
            accepted[popped].check(result)
            popped += 1
        time.sleep(0.05)  # after wait() returned nothing writes a pushed buffer
        for item, (y, z) in zip(accepted, finished):
            np.testing.assert_array_equal(item.y, y)
            np.testing.assert_array_equal(item.z, z)
    assert popped == len(accepted) > 0
    if target in HOST_TARGETS:  # (a GPU may finish every item within the shortest timeout)
        assert timeouts  # the generator did time calls out (a slow stage, sub-ms timeouts)


@pytest.mark.parametrize("target, seed", [(t, seed) for t in TARGETS for seed in range(3)
                                          if not (t == "gpu" and seed)])  # (one interpreted case)
def test_pushers_in_threads_with_timeouts_pop_each_item_once_in_each_threads_order(target: str,
                                                                                   seed: int) -> None:
    """runtime.md, "Threads": pushes from several threads are taken one at a time and each item pops
    once, in push order. Three threads push to one stream of two independent stages (a fast one
    and a slow one, each returning the item's tag) with timeouts while a fourth pops with timeouts:
    a push that timed out in one thread while another's went through must have fed neither stage,
    or the two tags of later results would come from different items."""
    n, lock, done = 8, threading.Lock(), threading.Event()
    accepted: dict[int, Pushed] = {}
    popped: list[tuple] = []
    failures: list[BaseException] = []
    with hpvm.runtime(target):
        h = hpvm.launch(g.side_by_side, stream=True, depth=2)

        def pusher(k: int) -> None:
            rng = np.random.default_rng([seed, k])
            for j in range(12):
                item = Pushed(rng, n, int(rng.integers(1, ROUNDS[target])), k * 1000 + j, False)
                try:
                    hpvm.push(h, *item.args(), timeout=float(rng.choice(TIMEOUTS + [30.0])))
                except HPVMTimeoutError:
                    continue
                with lock:
                    accepted[item.tag] = item

        def popper() -> None:
            rng = random.Random(seed)
            while True:
                try:
                    popped.append(tuple(hpvm.pop(h, timeout=rng.choice(TIMEOUTS))))
                except HPVMTimeoutError:
                    continue
                except StreamError:  # every item pushed so far popped
                    if done.is_set():
                        return

        def guarded(work: Callable[[], None]) -> Callable[[], None]:
            def run() -> None:
                try:
                    work()
                except BaseException as error:  # reported by the test's thread below
                    failures.append(error)
                    done.set()
            return run

        pushers = [threading.Thread(target=guarded(lambda k=k: pusher(k))) for k in range(3)]
        popping = threading.Thread(target=guarded(popper))
        for t in pushers + [popping]:
            t.start()
        for t in pushers:
            t.join(120)
        done.set()
        popping.join(120)
        assert not failures, failures
        hpvm.wait(h, timeout=60)
        popped += [tuple(r) for r in h.results()]
    tags = [fast for fast, _ in popped]
    assert [slow for _, slow in popped] == tags  # both stages ran the same item
    assert sorted(tags) == sorted(accepted)  # each accepted push once, no timed-out one
    for k in range(3):
        mine = [t for t in tags if t // 1000 == k]
        assert mine == sorted(mine)  # a thread's pushes pop in its order
    for item in accepted.values():
        np.testing.assert_array_equal(item.y, churned(item.x, item.rounds))


@pytest.mark.parametrize("timeout", [float("inf"), 1e300, 1e10])
def test_a_timeout_longer_than_a_thread_can_wait_waits_as_none_does(timeout: float) -> None:
    """streaming.md: push, pop and wait "take timeout= seconds" (None: for ever). A timeout beyond
    threading.TIMEOUT_MAX (inf, 1e10) reached Lock.acquire as an OverflowError (an internal error);
    it now waits as None does, and NaN (no length of time: it timed a wait out at once, "within nan
    s") is a LaunchError at the call that leaves the stream and the runtime as they were."""
    target = (HOST_TARGETS or TARGETS)[-1]  # (a GPU machine's suite runs gpu and nvptx only)
    x = np.arange(4, dtype=np.int64)
    ys = [np.zeros(4, np.int64) for _ in range(3)]
    with hpvm.runtime(target):
        h = hpvm.launch(g.side_by_side, stream=True, depth=1)
        for k, y in enumerate(ys):  # depth 1: the later pushes wait for room
            hpvm.push(h, x, x.nbytes, y, y.nbytes, 4, 1000, k, timeout=timeout)
        with pytest.raises(LaunchError, match="timeout=nan"):
            hpvm.pop(h, timeout=float("nan"))
        assert tuple(hpvm.pop(h, timeout=timeout)) == (0, 0)
        with pytest.raises(LaunchError, match="timeout=nan"):
            hpvm.wait(h, timeout=float("nan"))
        hpvm.wait(h, timeout=timeout)
        assert [tuple(r) for r in h.results()] == [(1, 1), (2, 2)]
        for y in ys:
            np.testing.assert_array_equal(y, churned(x, 1000))
        hpvm.init(target)
        with pytest.raises(LaunchError, match="timeout=nan"):
            hpvm.cleanup(timeout=float("nan"))
        hpvm.cleanup(timeout=timeout)  # the refused cleanup stopped nothing: this one ends the init
        hpvm.wait(hpvm.launch(g.side_by_side, x, x.nbytes, ys[0], ys[0].nbytes, 4, 1, 9))


# -- runtime.md: a tracked buffer resized or given other memory -----------------------------------

INC = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64

@hpvm.leaf
def inc(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    a[i] = a[i] + 1.0

@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(inc, grid=n, a=a, a_bytes=a_bytes)
'''


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is not available")
@pytest.mark.parametrize("seed", range(3))
def test_a_tracked_tensor_whose_memory_moved_is_an_error_at_its_next_use(seed: int) -> None:
    torch = pytest.importorskip("torch")
    program = load(INC, f"claims_inc_{seed}")
    rng = random.Random(seed)
    with hpvm.runtime("cpu"):
        for _ in range(4):
            n = rng.randint(1, 64)
            t = torch.zeros(n)
            hpvm.track_memory(t)
            launches = rng.randint(1, 4)  # the second and later launches replay the recording
            for _ in range(launches):
                hpvm.wait(hpvm.launch(program.root, t, t.nbytes, n))
            how = rng.choice(["resize", "set", "storage"])
            if how == "resize":
                t.resize_(n + rng.randint(1 << 16, 1 << 18))  # a larger storage: the memory moves
            elif how == "set":
                t.set_(torch.full((n,), float(launches)).untyped_storage())
            else:
                t.set_(torch.full((n,), float(launches)))
            use = rng.choice(["launch", "request"])
            with pytest.raises(MemoryTrackingError, match="resized or its memory freed"):
                if use == "launch":
                    hpvm.wait(hpvm.launch(program.root, t, t.nbytes, n))
                else:
                    hpvm.request_memory(t)
            # forgotten: tracked again, it runs on its new memory
            hpvm.track_memory(t)
            before = t[:n].clone()
            hpvm.wait(hpvm.launch(program.root, t, t.nbytes, n))
            hpvm.request_memory(t)
            torch.testing.assert_close(t[:n], before + 1.0)
            hpvm.untrack_memory(t)


# -- profiling.md: the events of one track nest ----------------------------------------------------


@pytest.mark.parametrize("seed", range(200))
def test_the_events_of_one_track_nest_after_the_lane_split(seed: int) -> None:
    rng = random.Random(seed)
    prof = P.Profile(None)
    for _ in range(rng.randint(1, 40)):
        t0 = rng.randint(0, 100) * 1000 + rng.choice([0, 1, 999])
        t1 = t0 + rng.choice([0, rng.randint(0, 60) * 1000])
        prof.add("stage", "e", t0, t1, rng.choice(["stage s", "copy h2d fake:0", None]), None,
                 counted=False)
    count = len(prof.events)
    P._untangle(prof)
    assert len(prof.events) == count
    tracks: dict[int, list[dict]] = {}
    for event in prof.events:
        tracks.setdefault(event["tid"], []).append(event)
    for slices in tracks.values():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        ends: list[float] = []
        for e in slices:
            while ends and ends[-1] <= e["ts"]:
                ends.pop()
            assert not ends or e["ts"] + e["dur"] <= ends[-1], (seed, e, ends)
            ends.append(e["ts"] + e["dur"])


# -- torch.md: the op lets go of the tensors it passed, and only those -----------------------------

_TORCH_OPS: dict[str, object] = {}  # torch cannot remove an op: one for the module


def _axpy_op() -> object:
    """`y += alpha * x` as an op without target=, so that it joins whichever runtime runs."""
    if "axpy" not in _TORCH_OPS:
        from test_torch_adversarial import adv_axpy

        _TORCH_OPS["axpy"] = hpvm.torch.op(adv_axpy, name="hpvm_claims::axpy", shapes={"y": "x"},
                                           scalars={"n": lambda x: x.numel()})
    return _TORCH_OPS["axpy"]


# (CPU tensors: the host targets and the fake device's gpu)
@pytest.mark.parametrize("target, seed", [(t, seed) for t in TARGETS if t != "nvptx"
                                          for seed in range(2)])
def test_an_op_keeps_what_the_user_tracked_and_lets_go_of_the_rest(target: str, seed: int) -> None:
    """torch.md, "Where it runs": the op lets go of the tensors it passed "(those not tracked before
    the call)", and a CPU tensor run under a gpu runtime "has its data back when the op returns".
    A tensor the user tracked stays tracked through the call (request_memory brings the newest
    data home, untrack_memory lets go of it); one not tracked is let go, with its result in it."""
    torch = pytest.importorskip("torch")
    op = _axpy_op()
    rng = random.Random(seed)
    with hpvm.runtime(target):
        tracker = hpvm.api.host._active().tracker
        for _ in range(8):
            n = rng.randint(1, 50)
            x, y = torch.randn(n), torch.randn(n)
            track_x, track_y = rng.random() < 0.5, rng.random() < 0.5
            for buf, tracked in ((x, track_x), (y, track_y)):
                if tracked:
                    hpvm.track_memory(buf)
            expected = y + 2.0 * x
            held = len(tracker._objects)
            op(x, y, 2.0)
            assert len(tracker._objects) == held  # the untracked ones let go, the tracked kept
            if track_y:
                hpvm.request_memory(y)  # raises when the op untracked what the user tracked
            torch.testing.assert_close(y, expected)
            for buf, tracked in ((x, track_x), (y, track_y)):
                if tracked:
                    hpvm.untrack_memory(buf)
            assert len(tracker._objects) == held - track_x - track_y
