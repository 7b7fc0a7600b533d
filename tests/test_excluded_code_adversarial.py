"""Code that a constant condition excludes (hunt: deadcode): its literal expressions are not
evaluated, as in Python, but it is still checked otherwise (docs/language.md, "Arithmetic"), and
the targets agree, bit for bit, with the python target on what runs. And the gpu target's checked
kernel, which stops a lane at its first failing access as python stops the instance."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm

from deadlines import deadline
from differential.data import load

TYPE_ERRORS = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, f64
K = 0.0
N = 0


@hpvm.leaf
def excluded(f: Out[Ptr[f64]], f_bytes: i64, x: f64):
    f[0] = x
{line}


@hpvm.graph
def root(f: Out[Ptr[f64]], f_bytes: i64, x: f64):
    hpvm.node(excluded, grid=1, f=f, f_bytes=f_bytes, x=x)
'''


@pytest.mark.parametrize("line", [
    "    f[1] = x if N == 0 else hpvm.f64(1.5 & 2)",
    "    f[1] = x if N == 0 else hpvm.f64(2 << 0.5)",
    "    f[1] = hpvm.f64(N != 0 and (2 ^ 1.0) > 0)",
    "    f[1] = hpvm.f64(N == 0 or (1 / N | 2) > 0)",
    "    if N:\n        f[1] = hpvm.f64(K >> 1)",
    "    while N:\n        f[1] = hpvm.f64(1 & 0.0)\n        break",
])
def test_a_type_error_among_literals_is_refused_in_excluded_code(line: str) -> None:
    """`1.5 & 2` in an arm that a constant condition excludes is refused as the same operation of
    a float variable is: the front end caught the bitwise operator's type error as if it were
    an evaluation error (a division by zero) and replaced it by 0.0."""
    module = load(TYPE_ERRORS.format(line=line))
    f = np.zeros(2, np.float64)
    refused = pytest.raises(hpvm.errors.FrontendError, match="bitwise operator needs integers")
    with refused as caught:
        with hpvm.runtime(target="python"):
            hpvm.wait(hpvm.launch(module.root, f, f.nbytes, np.float64(1.0)))
    # the user's line: the leaf's third, or its fourth below an `if`/`while`
    assert caught.value.loc is not None and caught.value.loc.line == 11 + ("\n" in line)


def test_integer_bitwise_literals_in_excluded_code_still_compile(target: str, rng) -> None:
    """Integer bitwise operators among literals stay legal there; what runs is exact."""
    line = "    f[1] = x * 2.0 if N == 0 else hpvm.f64(1 // N & 2 | 5 << 3)"
    module = load(TYPE_ERRORS.format(line=line))
    x = np.float64(rng.uniform(-4.0, 4.0))
    f = np.zeros(2, np.float64)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, f, f.nbytes, x))
    np.testing.assert_array_equal(f, np.array([x, x * 2.0]))


EXCLUDED = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, f64
K = 0.0
N = 0


@hpvm.leaf
def excluded(f: Out[Ptr[f64]], f_bytes: i64, x: f64):
{lines}


@hpvm.graph
def root(f: Out[Ptr[f64]], f_bytes: i64, x: f64):
    hpvm.node(excluded, grid=1, f=f, f_bytes=f_bytes, x=x)
'''


def _excluded(expressions: list[str], target: str, x: np.float64) -> None:
    """Each expression stored as f[j] on `target` is what Python computes for it (x an f64)."""
    lines = "\n".join(f"    f[{j}] = hpvm.f64({e})" for j, e in enumerate(expressions))
    module = load(EXCLUDED.format(lines=lines))
    f = np.zeros(len(expressions), np.float64)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, f, f.nbytes, x))
    scope = {"K": 0.0, "N": 0, "x": float(x)}
    want = np.array([float(eval(e, scope)) for e in expressions], np.float64)
    np.testing.assert_array_equal(f.view(np.int64), want.view(np.int64))


CHAINS = [
    "0.0 < K < 1.0 / K",
    "1.0 < K < x < 1.0 / K",
    "(x if 0 != N == 1 / N else 2.0 * x)",
    "(1.0 / K if K != 0.0 != 1.0 / K else x - 1.0)",
]


def test_a_chained_comparison_found_false_excludes_its_later_operands(target: str, rng) -> None:
    """`0.0 < K < 1.0 / K` with K = 0.0 is False, as in Python, which evaluates no operand after
    a comparison found false (a chain is an `and`): the front end evaluated every operand first
    and refused 1.0 / K as a division by zero in a constant expression."""
    _excluded(CHAINS, target, np.float64(rng.uniform(-4.0, 4.0)))


DECIDED = [
    "x < 1.0 < K <= 1.0 / K < x",
    "(x > 0.0 or K == 0.0) or 1.0 / K > x",
    "(x > 0.0 and K != 0.0) and 1.0 / K > x",
    "(1.0 / K if (x > 0.0 and N != 0) else x + 1.0)",
    "(x - 1.0 if not (x > 0.0 and N) else 1.0 / K)",
    "(x * 3.0 if x < 0.0 or not (x > 1.0 and bool(N)) else 1.0 / K)",
    "(x if (x > 0.0 or (x < 1.0 or True)) and not (N and x > 0.0) else 1.0 / K)",
]

DECIDED_STATEMENTS = '''
    s = x
    if x > 0.0 and N != 0:
        s = 1.0 / K
    elif not (x <= 0.0 or True):
        s = x / K
    while x > 0.0 and N != 0:
        s = 1.0 / N
        break
    f[{j}] = s
'''


def test_an_and_or_that_a_literal_decides_excludes_what_it_guards(target: str, rng) -> None:
    """`(x > 0.0 or K == 0.0) or 1.0 / K > x` is True and `1.0 / K if x > 0.0 and N != 0 else
    x` is x, as in Python, though x is a run-time value: True decides an `or` and False an `and`
    wherever it stands, not only first, and `not` keeps that known. The front end knew a
    condition only from a literal, so it evaluated the excluded 1.0 / K and refused it as a
    division by zero in a constant expression."""
    x = np.float64(rng.uniform(-4.0, 4.0))
    _excluded(DECIDED, target, x)
    lines = "\n".join(f"    f[{j}] = hpvm.f64({e})" for j, e in enumerate(DECIDED))
    module = load(EXCLUDED.format(lines=lines + DECIDED_STATEMENTS.format(j=len(DECIDED))))
    f = np.zeros(len(DECIDED) + 1, np.float64)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, f, f.nbytes, x))
    assert f[-1].view(np.int64) == x.view(np.int64)



RUNS_OFF = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def scan(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    i = hpvm.instance_id(0)
    s = i
{body}
    out[i] = s


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64, big: i64):
    hpvm.node(scan, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, big=big)
'''

RUNNING_OFF = {
    "per-lane while": "    while a[s] == 0:\n        s += 1",
    "uniform while": "    k = 0\n    while k < big:\n        s += a[k]\n        k += 1",
    "uniform for": "    for t in range(0, big):\n        s += a[t + i]",
    "per-lane for": "    for t in range(i, big + i):\n        s += a[t]",
}


@pytest.mark.parametrize("body", RUNNING_OFF)
def test_a_loop_that_runs_off_a_buffer_ends_with_its_error(target: str, body: str, rng) -> None:
    """A loop over range(2**62), or one that runs while it reads 0, reading past its buffer's end,
    fails with the out-of-bounds load, as on python: the gpu target's checked kernel went on
    running a failed lane on the masked load's 0, so these loops never ended."""
    n = int(rng.integers(2, 30))
    a = np.zeros(n, np.int64)
    a[: int(rng.integers(0, n))] = rng.integers(1, 9)  # the per-lane while: these lanes end
    module = load(RUNS_OFF.format(body=RUNNING_OFF[body]))
    with deadline(120), hpvm.runtime(target), pytest.raises(hpvm.errors.ExecutionError) as info:
        hpvm.wait(hpvm.launch(module.root, a, np.zeros(n, np.int64), n, 2**62))
    assert f"out-of-bounds load from a[{n}]" in str(info.value), str(info.value)


SPREAD_RUNS_OFF = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def total(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, big: i64):
    s = 0
    for k in range(0, big):               # one instance: on gpu its lanes share the iterations
        s += a[k]
    out[0] = s


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, big: i64):
    hpvm.node(total, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, big=big)
'''


def test_a_reduction_over_lanes_that_runs_off_a_buffer_ends_with_its_error(target: str,
                                                                            rng) -> None:
    """The same for a reduction loop that the gpu target spreads over a program's lanes: its
    checked kernel ran the chunks after a failing one to range(2**62)'s end."""
    n = int(rng.integers(1, 3000))
    a = rng.integers(-9, 9, n).astype(np.int64)
    module = load(SPREAD_RUNS_OFF)
    with deadline(120), hpvm.runtime(target), pytest.raises(hpvm.errors.ExecutionError) as info:
        hpvm.wait(hpvm.launch(module.root, a, np.zeros(1, np.int64), 2**62))
    assert f"out-of-bounds load from a[{n}]" in str(info.value), str(info.value)
