"""Hunted bugs of streams whose buffers move between pushes (rt/stream/streaming.py, `_keep_moved`;
rt/args.py, `_bind_again`): a buffer resized, its storage replaced, or untracked and tracked again
after an item is popped is used at its memory now by the next push's item, as a launch tracks it
afresh, whether its bind streams or keeps the first push's value; one the user tracked and resized
without untracking it is refused at the push."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT, TARGETS, child_pythonpath

pytest.importorskip("torch")

# The stream runs in a child: on the memory the buffer had (freed by the move) an item may crash
# the process. Each case pushes, pops, moves a buffer, fills every buffer afresh, pushes and pops
# twice (the second push passes the same objects again: the stream's fast path) and compares with
# NumPy; it prints "ok <case>" or "FAIL <case>: why".
_CHILD = """
import sys
import numpy as np
import torch
import hpvm_py as hpvm
from hpvm_py.errors import MemoryTrackingError
sys.path.insert(0, "tests")
from programs import rebind_graphs as rg, stream_graphs as sg, moved_buffer_graphs as mg

target, seed, names = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
rng = np.random.default_rng(seed)
n = 1 << 16  # (its memory is mapped for it alone: the old address is unmapped once freed)


def fresh(size, kind):
    a = rng.standard_normal(size).astype(np.float32)
    return torch.from_numpy(a).clone() if kind == "torch" else a  # (its own storage: resizable)


tracked = []  # the buffers the user tracked: written on the host between untrack and track,
# read after request_memory (docs/language.md: the runtime owns a tracked buffer's copies)


def is_tracked(b):
    return any(t is b for t in tracked)


def fill(b):
    values = rng.standard_normal(b.shape[0]).astype(np.float32)
    if is_tracked(b):
        hpvm.untrack_memory(b)
    b[:] = torch.from_numpy(values) if isinstance(b, torch.Tensor) else values
    if is_tracked(b):
        hpvm.track_memory(b)


def host(b):
    if is_tracked(b):
        hpvm.request_memory(b)
    # (a copy: a tensor that NumPy viewed once can never be resized)
    return b.clone().numpy() if isinstance(b, torch.Tensor) else b


def address(b):
    return b.data_ptr() if isinstance(b, torch.Tensor) else b.ctypes.data


def move(b, how):
    if how == "np_grow":
        b.resize(8 * n, refcheck=False)
    elif how == "np_back":  # the same size, elsewhere (the old memory freed)
        b.resize(8 * n, refcheck=False)
        b.resize(n, refcheck=False)
    elif how == "torch_resize":
        try:
            b.resize_(8 * n)
        except RuntimeError as exc:  # the python target viewed it with NumPy: torch refuses
            assert "not resizable" in str(exc), exc
            return False
    elif how == "torch_set":
        b.set_(torch.empty(n, dtype=torch.float32))
    elif how == "torch_data":
        b.data = torch.empty(2 * n, dtype=torch.float32)
    elif how == "retrack":  # tracked by the user: untracked, resized, tracked again
        hpvm.untrack_memory(b)
        b.resize(8 * n, refcheck=False)
        hpvm.track_memory(b)
    elif how == "untrack":  # untracked (not moved), then tracked again
        hpvm.untrack_memory(b)
        hpvm.track_memory(b)
    else:
        raise ValueError(how)
    return True


GRAPHS = {  # name -> graph, push(x, y, k), expected y[:n] from x, y (before), k, first k
    # every bind keeps the first push's value (x, y, the sizes, n and k)
    "update": (rg.update, lambda x, y, k: (x, x.nbytes, y, y.nbytes, n, k),
               lambda x, y, k, k1: y + x * np.float32(k1)),
    # x, y and k stream; the sizes and n keep the first push's
    "scaled": (sg.scaled, lambda x, y, k: (x, x.nbytes, y, y.nbytes, k, n),
               lambda x, y, k, k1: x * np.float32(k)),
    # x keeps the first push's; y and k stream
    "first_source": (sg.scaled_first_source, lambda x, y, k: (x, x.nbytes, y, y.nbytes, k, n),
                     lambda x, y, k, k1: x * np.float32(k)),
    # x streams into the first stage and keeps the first push's in the second
    "mixed": (mg.scaled_plus_first, lambda x, y, k: (x, x.nbytes, y, y.nbytes, k, n),
              lambda x, y, k, k1: x * np.float32(k) + x),
    # as "update", in an internal-node stage
    "nested": (mg.nested_update, lambda x, y, k: (x, x.nbytes, y, y.nbytes, n, k),
               lambda x, y, k, k1: y + x * np.float32(k1)),
}


def case(name):
    graph_name, which, how, *other = name.split("/")
    graph, args_of, expect = GRAPHS[graph_name]
    kind = "torch" if how.startswith("torch") else "numpy"
    x, y = fresh(n, kind), fresh(n, kind)
    tracked.clear()
    if how in ("retrack", "untrack", "tracked"):
        tracked.append(x if which == "x" else y)
        hpvm.track_memory(tracked[0])
    k1 = float(rng.uniform(-2, 2))
    h = hpvm.launch(graph, stream=True)
    before = host(y)[:n].copy()
    hpvm.push(h, *args_of(x, y, k1))
    hpvm.pop(h)
    got = host(y)[:n]
    if not np.allclose(got, expect(host(x)[:n], before, k1, k1), rtol=1e-5, atol=1e-5):
        return "the first item is wrong"
    b = x if which == "x" else y
    was = address(b)
    if how == "tracked":  # the user's tracked buffer, resized without untracking it: refused
        b.resize(8 * n, refcheck=False)
        line = sys._getframe().f_lineno + 2
        try:
            hpvm.push(h, *args_of(fresh(n, kind) if other else x, y, k1))
        except MemoryTrackingError as exc:
            hpvm.wait(h)
            if exc.loc is None or exc.loc.line != line or "resized" not in exc.message:
                return f"refused elsewhere or otherwise: {exc}"
            return None
        hpvm.wait(h)
        return "the push was not refused"
    if not move(b, how):
        hpvm.wait(h)
        return None
    if how in ("torch_set", "torch_data") and address(b) == was:  # (a resize may grow in place)
        return "the move kept the address"
    for step in range(2):
        fill(x)
        fill(y)
        k = float(rng.uniform(-2, 2))
        # a push may pass another object than the first push's to a bind that keeps the first's
        xs = fresh(n, kind) if other else x
        ys = host(y).copy()
        rest = ys[n:].copy()
        hpvm.push(h, *args_of(xs, y, k))
        hpvm.pop(h)
        want = expect(host(x)[:n], ys[:n], k, k1)
        got = host(y)
        if not np.allclose(got[:n], want, rtol=1e-5, atol=1e-5):
            bad = int(np.sum(~np.isclose(got[:n], want, rtol=1e-5, atol=1e-5)))
            return f"round {step}: {bad} of {n} values differ from NumPy's"
        if not np.array_equal(got[n:], rest):
            return f"round {step}: y was written past its first {n} values"
    hpvm.wait(h)
    return None


with hpvm.runtime(target):
    for name in names:
        failure = case(name)
        print(f"FAIL {name}: {failure}" if failure else f"ok {name}", flush=True)
"""

HOST_TARGETS = [t for t in ("cpu", "python") if t in TARGETS]

_MOVES = ["np_grow", "np_back", "torch_resize", "torch_set", "torch_data", "retrack", "untrack"]
# graph/buffer moved/how (/other: a push passes another object to x, which keeps the first's)
STREAMED = [f"scaled/{b}/{how}" for b in ("x", "y") for how in [*_MOVES, "tracked"]]
KEPT = ([f"update/{b}/{how}" for b in ("x", "y") for how in _MOVES]
        + [f"first_source/x/{how}" for how in _MOVES]
        + [f"first_source/x/{how}/other" for how in _MOVES]
        + [f"mixed/x/{how}" for how in _MOVES] + [f"nested/y/{how}" for how in _MOVES]
        + ["update/y/tracked", "first_source/x/tracked/other", "nested/x/tracked"])


def _run_child(target: str, cases: list[str]) -> None:
    """Run the cases in a child; fails with the seed and the cases that failed, or how the child
    ended."""
    seed = int.from_bytes(os.urandom(4), "little")
    env = dict(os.environ, PYTHONPATH=child_pythonpath(ROOT), PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", _CHILD, target, str(seed), ",".join(cases)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    results = {}
    for line in proc.stdout.splitlines():
        status, _, rest = line.partition(" ")
        name, _, why = rest.partition(": ")
        results[name] = "ok" if status == "ok" else why
    assert proc.returncode == 0, (f"seed {seed}: the child ended with {proc.returncode} after "
                                  f"{len(results)} of {len(cases)} cases:\n{proc.stderr[-3000:]}")
    failed = {name: why for name, why in results.items() if why != "ok"}
    assert not failed and len(results) == len(cases), (seed, failed)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_streamed_buffer_moved_between_pushes_is_used_where_it_is(target: str) -> None:
    """x and y stream: pushed again after a move, each is bound again at its memory now (a NumPy
    array resized away and back to its size too: rt/args.py, _bind_again)."""
    _run_child(target, STREAMED)


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_a_kept_buffer_moved_between_pushes_is_used_where_it_is(target: str) -> None:
    """x (and y) keep the first push's buffer: moved since, it is used at its memory now, even
    when the push passes another object to that bind (rt/stream/streaming.py, _keep_moved)."""
    _run_child(target, KEPT)


@pytest.mark.skipif("gpu" not in TARGETS, reason="no gpu target here")
def test_buffers_moved_between_pushes_on_the_gpu_target() -> None:
    """The same on `gpu`, whose items run whole (rt/stream/items.py)."""
    _run_child("gpu", [f"update/y/{how}" for how in _MOVES] + [f"scaled/x/{how}" for how in _MOVES]
               + ["first_source/x/np_back/other", "mixed/x/np_back", "nested/y/torch_set",
                  "update/y/tracked", "first_source/x/tracked/other"])
