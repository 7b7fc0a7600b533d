"""Control flow found wrong by a hunt (about 1,200 generated leaves with breaks, continues and
returns at several depths, data-dependent and huge trip counts, run on every target against the
python target and NumPy): a gpu `for` left by break or return ran to its trip count (a
range(2**62) never ended); the gpu checked kernel reported the first failure in time, not the
lowest failing instance's; the cpu target's process aborted in LLVM's vectoriser on an instance
loop around a negative-step range from data."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm

from conftest import TARGETS
from deadlines import deadline
from differential.data import load

LEFT_EARLY = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def search(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    i = hpvm.instance_id(0)
    trips = 0
    for k in range(0, big):               # uniform bounds, left by a break
        trips += 1
        if k >= a[i]:
            break
    out[i] = trips
    for j in range(i, big + i, 3):        # bounds per lane, left by a return
        if j >= i + 3 * a[i]:
            out[n + i] = j
            return
        out[n + i] = -1


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    hpvm.node(search, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, big=big)
'''


@pytest.mark.parametrize("target", TARGETS)
def test_a_huge_loop_left_early_ends_on_every_target(target: str) -> None:
    """A `for` over range(2**62) that every instance leaves after a few trips (break, return)
    ends: the gpu target's loops ran to their trip count (Triton's `for` cannot exit early)."""
    module = load(LEFT_EARLY)
    rng = np.random.default_rng()
    n = int(rng.integers(1, 40))
    a = rng.integers(0, 6, n).astype(np.int64)
    out = np.zeros(2 * n, np.int64)
    with deadline(60), hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, out, n, 2**62))
    expected = np.concatenate([a + 1, np.arange(n) + 3 * a])
    np.testing.assert_array_equal(out, expected)


LATE_FAILURE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def late(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, first: i64):
    i = hpvm.instance_id(0)
    acc = 0
    for k in range(n + 8):
        if k == n + 4 - i:                # the lower an instance, the later its failure
            if i >= first:
                acc += a[n + i]               # out of bounds
            break
        acc += a[i]
    out[i] = acc


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, first: i64):
    hpvm.node(late, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, first=first)
'''


@pytest.mark.parametrize("target", TARGETS)
def test_the_first_failing_instance_is_reported_though_it_fails_last(target: str) -> None:
    """Instances of one block that leave a loop by break after an out-of-bounds access: the error
    names the lowest failing instance's access, as on python, though higher ones fail in earlier
    trips (the gpu target reported the first failure in time). On nvptx, where each instance is a
    thread, one of the failing accesses."""
    module = load(LATE_FAILURE)
    rng = np.random.default_rng()
    n = int(rng.integers(2, 30))  # one block of lanes on gpu
    first = int(rng.integers(0, n - 1))
    a = rng.integers(-9, 9, n).astype(np.int64)
    with hpvm.runtime(target), pytest.raises(hpvm.errors.ExecutionError) as info:
        hpvm.wait(hpvm.launch(module.root, a, np.zeros(n, np.int64), n, first))
    message = str(info.value)
    if target == "nvptx":  # one thread an instance: they race for the report (docs/language.md)
        assert any(f"load from a[{n + i}]" in message for i in range(first, n)), message
    else:
        assert f"load from a[{n + first}]" in message, message


NEGATIVE_STEP_RANGE = '''
import sys
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i32, i64

@hpvm.leaf
def body(a: In[Ptr[i64]], a_bytes: i64, b: In[Ptr[i32]], b_bytes: i64, out: InOut[Ptr[i64]],
         out_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    for k in range(hpvm.i64(b[i] % 4), -2, -3):
        out[i] = a[i + 1] if i + 1 < n else 4

@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, b: In[Ptr[i32]], b_bytes: i64, out: InOut[Ptr[i64]],
         out_bytes: i64, n: i64):
    hpvm.node(body, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out,
              out_bytes=out_bytes, n=n)

rng = np.random.default_rng(int(sys.argv[1]))
n = int(rng.integers(200, 2000))
a = rng.integers(-100, 100, n).astype(np.int64)
b = rng.integers(-100, 100, n).astype(np.int32)
outs = []
for target in ("python", "cpu"):
    out = np.full(n, -7, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, out, out.nbytes, n))
    outs.append(out)
print("equal" if np.array_equal(*outs) else "different")
'''


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target cannot run here")
def test_a_negative_step_range_from_data_around_a_guarded_load_compiles_on_cpu(tmp_path) -> None:
    """LLVM 22's vectoriser aborted the process (an assertion in VPlanRecipes.cpp) on the
    instance loop around such a loop, when the driver asked for two interleaved vectors: a loop
    with a loop inside is no longer interleaved. In a process of its own, as an abort is no
    exception; compiled afresh (no disk cache)."""
    script = tmp_path / "negative_step.py"  # a leaf is compiled from its file's source
    script.write_text(NEGATIVE_STEP_RANGE)
    env = dict(os.environ, HPVM_NO_CACHE="1", PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    seed = str(np.random.default_rng().integers(1 << 31))
    done = subprocess.run([sys.executable, str(script), seed], env=env, capture_output=True,
                          text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["equal"]
