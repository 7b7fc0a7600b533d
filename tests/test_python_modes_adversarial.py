"""The python target's two modes (vector and instance by instance) against rules written out here.

The python target is the oracle of every differential test, so both of its modes must give what
docs/language.md promises; expected values come from this file, never from hpvm_py's helpers:

- Under a per-instance `if`, a load at a uniform index is still a value of the masked lanes: an
  `if`, a conditional expression, an `and` / `or` or a `for` bound built on it runs as written
  (the vector mode once tested such an array with Python's `if` and crashed, or passed it to
  range()), and reads nothing when no instance takes the branch.
- `x if c else y` with c the same for every instance evaluates only the arm c picks, also when
  that arm is a per-instance `and` / `or` that loads: the vector mode once evaluated its left side
  before the select and failed on an index the program never reads.
- Where several instances index out of bounds at different statements, the error is the first
  failing access in sequential order (the lowest failing instance's first failure), as on every
  other target: the vector mode once reported the first statement at which any instance failed.
"""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.backends.python.kernel import PythonLeafKernel
from hpvm_py.errors import ExecutionError

SEED = 20240917
N = 8  # instances, and elements of `a` and `out`

HEADER = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i32, i64


@hpvm.leaf
def body(a: In[Ptr[i32]], a_bytes: i64, out: InOut[Ptr[i32]], out_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
'''

ROOT = '''

@hpvm.graph
def root(a: In[Ptr[i32]], a_bytes: i64, out: InOut[Ptr[i32]], out_bytes: i64, n: i64):
    hpvm.node(body, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n)
'''

BODY_LINE = HEADER.count("\n") + 1  # the file line of a body's first statement


def _run(body: list[str], a: np.ndarray) -> np.ndarray:
    module = load(HEADER + "".join(f"    {s}\n" for s in body) + ROOT)
    out = np.full(N, -1, np.int32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, out, out.nbytes, N))
    return out


@pytest.fixture(params=["1", "0"], ids=["vector", "instances"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HPVM_PYTHON_VECTOR", request.param)
    return request.param


@pytest.fixture
def no_serial_rerun(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail if a vector kernel runs its instances one by one (the rerun after an out-of-bounds
    access would hide a vector-mode fault that the program never makes)."""
    serial = PythonLeafKernel._launch_instances

    def guarded(self: PythonLeafKernel, code, *args, **kwargs):  # type: ignore[no-untyped-def]
        assert not self.code.vector, "the vector kernel fell back to running instance by instance"
        return serial(self, code, *args, **kwargs)

    monkeypatch.setattr(PythonLeafKernel, "_launch_instances", guarded)


# -- a uniform load under a per-instance condition -------------------------------------------

MASKED_UNIFORM = [
    # (statements under `if i % 2 == 0:`, the value odd instances keep, even instances' value)
    (["if a[3] > 2:", "    v = 5"], 1, lambda a: 5 if a[3] > 2 else 1),
    (["v = 7 if a[3] > 2 else 9"], 1, lambda a: 7 if a[3] > 2 else 9),
    (["v = a[3] > 2 and a[2] > 1"], 1, lambda a: int(a[3] > 2 and a[2] > 1)),
    (["v = a[3] < 0 or a[5] > 4"], 1, lambda a: int(a[3] < 0 or a[5] > 4)),
    (["for j in range(a[1], a[4]):", "    v += j"], 1, lambda a: 1 + sum(range(a[1], a[4]))),
]


@pytest.mark.parametrize("case", range(len(MASKED_UNIFORM)))
def test_uniform_load_under_a_per_instance_condition(mode: str, case: int) -> None:
    inner, odd, even = MASKED_UNIFORM[case]
    a = np.array([0, 2, 3, 4, 9, 6, 6, 7], np.int32)
    body = ["v = 1", "if i % 2 == 0:"] + [f"    {s}" for s in inner] + ["out[i] = v"]
    out = _run(body, a)
    assert out.tolist() == [even(a.tolist()) if i % 2 == 0 else odd for i in range(N)]


def test_uniform_loads_under_a_branch_no_instance_takes(mode: str) -> None:
    """`a[n]` is out of bounds, but no instance reaches it: nothing is read."""
    a = np.arange(N, dtype=np.int32)
    body = ["v = 1", "if i > 100:", "    for j in range(a[n]):", "        v += j",
            "    if a[n] > 0:", "        v = 3", "out[i] = v"]
    assert _run(body, a).tolist() == [1] * N


# -- a uniform select whose arm is a per-instance lazy `and` --------------------------------

def test_uniform_select_evaluates_only_its_arm(mode: str, no_serial_rerun: None) -> None:
    a = np.arange(N, dtype=np.int32)
    body = ["v = (a[i + 100] > 0 and a[i] > 0) if n > 100 else i < 3",
            "w = 5 if n < 100 else (a[i + 200] if i > 2 else a[i - 300])",
            "out[i] = v * 10 + w"]
    assert _run(body, a).tolist() == [(i < 3) * 10 + 5 for i in range(N)]


# -- several instances out of bounds: the error of the first in sequential order -----------

def _failing_program(rng: random.Random) -> tuple[list[str], tuple[int, str, int]]:
    """Loads and stores, each out of bounds in one chosen instance (or none), and the error every
    target reports: (line, access, index) of the lowest failing instance's first failure."""
    body, faults = ["acc = 0"], []
    for k in range(rng.randrange(3, 7)):
        who = rng.randrange(-1, N)  # -1: no instance fails here
        jump = 0 if who < 0 else rng.choice([N, 20 + k, -(1 + k) - N])
        index = f"i + {jump} * hpvm.i64(i == {who})"
        if rng.random() < 0.5:
            body.append(f"acc += a[{index}]")
            access = "load from a"
        else:
            body.append(f"out[{index}] = acc + {k}")
            access = "store to out"
        if who >= 0:
            faults.append((who, k + 1, access, who + jump))
    if not faults:
        body.append(f"out[i + {N} * hpvm.i64(i == 0)] = acc")
        faults.append((0, len(body) - 1, "store to out", N))
    who, stmt, access, index = min(faults)
    return body, (BODY_LINE + stmt, access, index)


@pytest.mark.parametrize("seed", range(8))
def test_first_failure_in_sequential_order(mode: str, seed: int) -> None:
    rng = random.Random(SEED + seed)
    body, (line, access, index) = _failing_program(rng)
    a = np.arange(N, dtype=np.int32)
    with pytest.raises(ExecutionError) as info:
        _run(body, a)
    message = str(info.value)
    where = re.search(r":(\d+):\d+: error", message)
    assert where and int(where.group(1)) == line, (body, message)
    assert f"{access}[{index}]" in message, (body, message)


def test_failed_vector_launch_leaves_what_instance_mode_leaves(monkeypatch: pytest.MonkeyPatch) -> None:
    """Instance 5 fails at the first store, instance 0 at the second: instances run in order
    until the failure (docs/language.md: the python target may stop at the failing instance), the
    same in both modes, and no instance after instance 0 wrote."""
    body = ["out[i + 40 * hpvm.i64(i == 5)] = i + 10", "out[i - 30 * hpvm.i64(i == 0)] = i + 20"]
    a = np.arange(N, dtype=np.int32)
    left = {}
    for mode in ("1", "0"):
        monkeypatch.setenv("HPVM_PYTHON_VECTOR", mode)
        module = load(HEADER + "".join(f"    {s}\n" for s in body) + ROOT)
        out = np.full(N, -1, np.int32)
        with pytest.raises(ExecutionError, match=r"store to out\[-30\]"):
            with hpvm.runtime("python"):
                hpvm.wait(hpvm.launch(module.root, a, a.nbytes, out, out.nbytes, N))
        left[mode] = out.tolist()
    assert left["1"] == left["0"] == [10] + [-1] * (N - 1)
