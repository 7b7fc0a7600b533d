"""The tracker's compact forms (rt/tracker.py, MemoryObject: no copies dict while the user's buffer
is the only copy, shared valid sets, the checks passed and the host argument held bare until a
second) under seeded sequences of launches on the host and on two GPUs (fake ones without CUDA):
one buffer as two or three parameters, of one element type and of two (a uint16 array as u16 and
as bf16), tracked by the user or by a launch, dtypes changed in place, buffers replaced, against
NumPy. Then minimised reproducers of what they found: an ndarray subclass (np.matrix) had no
buffer kind, so a dtype or writability changed in place since its checks passed went unchecked,
and a relaunch on one was an internal error on the cpu target; threads evicting from one table of
checks passed at once raised a KeyError."""
from __future__ import annotations

import gc
import threading
import time

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import registry
from hpvm_py.errors import LaunchError
from hpvm_py.rt import args as rt_args
from programs import tracker_compact as P

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")

N = 8
F = np.float32
# the graphs with nodes on gpu:0 and gpu:1 run where fake devices stand in (no CUDA: CI), where
# there are always two
FAKE = registry.available("gpu") and not registry.available("nvptx")
F32_GRAPHS = (P.hop, P.on_host, P.on_gpu1) if FAKE else (P.on_host,)
BITS_GRAPHS = (P.bits_hop, P.bits_host) if FAKE else (P.bits_host,)


def _fresh_f32(rng: np.random.Generator, kind: str):
    values = rng.integers(-4, 5, N).astype(F)
    if kind == "torch":
        return torch.from_numpy(values)
    return np.matrix(values.reshape(1, N)) if kind == "matrix" else values


def _flat(buf) -> np.ndarray:
    return np.asarray(buf).reshape(-1)


def _hop_reference(x: np.ndarray, y: np.ndarray, z: np.ndarray, k: float) -> None:
    """What hop does, in place (x, y and z may be one array)."""
    y += x * F(k)
    z[:] = y * F(2)
    y += z


def _f32_sequence(seed: int, target: str, steps: int) -> None:
    rng = np.random.default_rng(seed)
    kinds = ["numpy", "torch", "matrix"]
    bufs = [_fresh_f32(rng, kinds[rng.integers(3)]) for _ in range(3)]
    model = [_flat(b).copy() for b in bufs]
    tracked = [False] * 3
    log: list[tuple] = []
    last = None  # the last launch: (graph, x, y, z, k)

    def launch(graph, xi: int, yi: int, zi: int, k: float) -> None:
        hpvm.wait(hpvm.launch(graph, bufs[xi], bufs[yi], bufs[zi], N, k))
        _hop_reference(model[xi], model[yi], model[zi], k)

    with hpvm.runtime(target):
        for step in range(steps):
            op = rng.integers(7)
            i = int(rng.integers(3))
            if op <= 2:  # a launch, the same buffer as any of x, y, z
                graph = F32_GRAPHS[rng.integers(len(F32_GRAPHS))]
                xi, yi, zi = (int(j) for j in rng.integers(3, size=3))
                last = (graph, xi, yi, zi, float(rng.integers(-2, 3)))
                log.append(("launch", graph.name, *last[1:]))
                launch(*last)
            elif op == 3 and not tracked[i]:  # the host writes a buffer that is its own
                values = rng.integers(-4, 5, N).astype(F)
                log.append(("write", i))
                _flat(bufs[i])[:] = values
                model[i][:] = values
            elif op == 4:
                log.append(("untrack" if tracked[i] else "track", i))
                (hpvm.untrack_memory if tracked[i] else hpvm.track_memory)(bufs[i])
                tracked[i] = not tracked[i]
            elif op == 5:  # replaced (its id may come again)
                if tracked[i]:
                    hpvm.untrack_memory(bufs[i])
                    tracked[i] = False
                np.testing.assert_array_equal(_flat(bufs[i]), model[i], err_msg=str(log))
                bufs[i] = _fresh_f32(rng, kinds[rng.integers(3)])
                model[i] = _flat(bufs[i]).copy()
                log.append(("replace", i, type(bufs[i]).__name__))
                gc.collect()
                last = None
            elif op == 6 and last is not None:
                # the last launch again, after one of its buffers' dtype changed in place:
                # refused, though it passed the checks before; then again as it was
                i = last[1 + int(rng.integers(3))]
                buf = bufs[i]
                log.append(("int32", i))
                if isinstance(buf, np.ndarray):
                    buf.dtype = np.int32
                else:
                    buf.data = buf.view(torch.int32)
                try:
                    with pytest.raises(LaunchError, match="must hold f32 elements, got i32"):
                        hpvm.launch(last[0], *(bufs[j] for j in last[1:4]), N, last[4])
                finally:
                    if isinstance(buf, np.ndarray):
                        buf.dtype = F
                    else:
                        buf.data = buf.view(torch.float32)
                launch(*last)
            for j in range(3):
                if not tracked[j]:
                    np.testing.assert_array_equal(_flat(bufs[j]), model[j], err_msg=f"{j}: {log}")
        for j in range(3):
            if tracked[j]:
                hpvm.request_memory(bufs[j])
                np.testing.assert_array_equal(_flat(bufs[j]), model[j], err_msg=f"{j}: {log}")


@pytest.mark.parametrize("seed", [0, 2, 3])
def test_seeded_launches_on_shared_and_replaced_buffers(target: str, seed: int) -> None:
    _f32_sequence(seed, target, steps=20)


def _bits(x: np.ndarray) -> np.ndarray:
    """bits_hop's y: the bf16 bits of (x % 256) * 0.5 (exact in bf16)."""
    values = (x % 256).astype(F) * F(0.5)
    return (values.view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("seed", [4, 6])
def test_seeded_launches_viewing_one_array_as_u16_and_bf16(target: str, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)

    def fresh():
        values = rng.integers(0, 2**16, N, dtype=np.uint16)
        return np.matrix(values.reshape(1, N)) if rng.integers(3) == 0 else values

    bufs = [fresh() for _ in range(3)]
    model = [_flat(b).copy() for b in bufs]
    tracked = [False] * 3
    log: list[tuple] = []
    with hpvm.runtime(target):
        for _ in range(16):
            op = rng.integers(5)
            i = int(rng.integers(3))
            if op <= 1:
                graph = BITS_GRAPHS[rng.integers(len(BITS_GRAPHS))]
                xi, yi = (int(j) for j in rng.integers(3, size=2))
                log.append((graph.name, xi, yi))
                hpvm.wait(hpvm.launch(graph, bufs[xi], bufs[yi], N))
                model[yi][:] = _bits(model[xi])
            elif op == 2:
                log.append(("untrack" if tracked[i] else "track", i))
                (hpvm.untrack_memory if tracked[i] else hpvm.track_memory)(bufs[i])
                tracked[i] = not tracked[i]
            elif op == 3 and not tracked[i]:
                log.append(("int16", i))
                bufs[i].dtype = np.int16  # neither u16 nor bf16 bits now
                try:
                    with pytest.raises(LaunchError, match="must hold (u16|bf16) elements"):
                        hpvm.launch(BITS_GRAPHS[0], bufs[i], bufs[i], N)
                finally:
                    bufs[i].dtype = np.uint16
            elif op == 4:
                if tracked[i]:
                    hpvm.untrack_memory(bufs[i])
                    tracked[i] = False
                np.testing.assert_array_equal(_flat(bufs[i]), model[i], err_msg=str(log))
                bufs[i] = fresh()
                model[i] = _flat(bufs[i]).copy()
                log.append(("replace", i))
        for j in range(3):
            if tracked[j]:
                hpvm.request_memory(bufs[j])
            np.testing.assert_array_equal(_flat(bufs[j]), model[j], err_msg=f"{j}: {log}")


# -- minimised reproducers -------------------------------------------------------------------------

def test_a_relaunch_on_an_ndarray_subclass_runs_it_again(target: str) -> None:
    """The cpu target's second launch matched its recording, whose check of a buffer that is not
    an exact ndarray asked it for torch's is_contiguous(): an internal error."""
    x = np.matrix(np.arange(N, dtype=F).reshape(1, N))
    y, z = np.ones(N, F), np.zeros(N, F)
    expected_y, expected_z = y.copy(), z.copy()
    with hpvm.runtime(target):
        for k in (1.0, 2.0, 2.0):
            hpvm.wait(hpvm.launch(P.on_host, x, y, z, N, k))
            _hop_reference(_flat(x), expected_y, expected_z, k)
    np.testing.assert_array_equal(y, expected_y)
    np.testing.assert_array_equal(z, expected_z)


@pytest.mark.parametrize("tracked", [False, True])
def test_an_ndarray_subclass_changed_in_place_is_checked_again(target: str, tracked: bool) -> None:
    """A matrix passed the checks once: a second launch took it as it was then (no buffer kind to
    compare), after its dtype changed in place (int32 bits read as f32) or it was made read-only
    (an InOut parameter wrote into it)."""
    x = np.matrix(np.arange(N, dtype=F).reshape(1, N))
    y, z = np.matrix(np.ones((1, N), F)), np.zeros(N, F)
    with hpvm.runtime(target):
        if tracked:
            hpvm.track_memory(x)
            hpvm.track_memory(y)
        hpvm.wait(hpvm.launch(P.on_host, x, y, z, N, 1.0))
        x.dtype = np.int32
        with pytest.raises(LaunchError, match="argument 'x' of on_host must hold f32 elements, "
                           "got i32") as info:
            hpvm.launch(P.on_host, x, y, z, N, 1.0)
        assert info.value.loc is not None and info.value.loc.file == __file__
        x.dtype = F
        y.flags.writeable = False
        before = _flat(y).copy()
        with pytest.raises(LaunchError, match="argument 'y' of on_host is written by the graph "
                           r"\(InOut\[...\]\) but is a read-only array"):
            hpvm.launch(P.on_host, x, y, z, N, 1.0)
        np.testing.assert_array_equal(_flat(y), before)
        y.flags.writeable = True
        hpvm.wait(hpvm.launch(P.on_host, x, y, z, N, 1.0))  # as it was: accepted again
        if tracked:
            hpvm.request_memory(y)
    np.testing.assert_array_equal(_flat(y), (np.arange(N, dtype=F) + before) * 3)


class _SlowToIterate(dict):
    """A table whose iteration hands the interpreter to another thread between choosing a key and
    giving it: the window of the race below, a few bytecodes wide in a plain dict, made wide."""

    def __iter__(self):
        for key in list(dict.__iter__(self)):
            time.sleep(0)
            yield key


def test_threads_remembering_checks_at_once_evict_one_entry_each() -> None:
    """Two threads evicting the oldest entry of one full table (the runtime's checks passed, once
    its graphs have more than 64 pointer parameters, launched on fresh buffers from two threads)
    both took the same key: the second's `del` was a KeyError, an internal error of its launch."""
    table = _SlowToIterate()
    failures: list[str] = []

    def remember(first: int) -> None:
        try:
            for key in range(first, first + 300):
                rt_args._remember(table, key, (key,))
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(repr(exc))

    threads = [threading.Thread(target=remember, args=(k * 1000,), daemon=True) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads)
    assert failures == []
    assert len(table) == rt_args._CHECKED_KEPT
