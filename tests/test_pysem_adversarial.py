"""Does a leaf mean what its Python text means? Constructs the front end accepts, checked against
what plain Python computes (with the typing of docs/language.md), on the python target (the
oracle the other targets are differentially tested against, so a front-end misreading is
invisible there) and on cpu.

Found by this hunt (each test below fails without its fix):

- An i1 meeting an int literal took the i1 type, so the literal became its truth: `flag == 2` was
  True, `flag & 2` 1, `flag | 2` 1, `max(flag, 5)` 1, `flag if c else 5` 1. An int literal now
  makes the operation an i64 (Python's `True == 2` is False); a literal given to an i1 variable
  must be True, False, 1 or 0 (`typing-narrowing`).
- `round(i)` of an integer went through f32: `round(2**24 + 1)` of an i64 gave 2**24.
- `x = y = value` gave `y` the value of `x` after the assignment: `y` took `x`'s type (`x: i8`
  then `x = y = 100` made `y * 2` wrap to -56), and `o[i] = y = 1.75` read the write-only `o`.
- The middle operand of a chained comparison is used by two comparisons of the IR: an atomic or a
  helper given a pointer there ran twice (`while 0 < atomic_add(q, 0, 1) < 5` counted by two).
  It is now a located error (`supported-python`).
- A float variable reused as a `range` loop variable became a float counter: an internal error
  (an LLVM `zext float`) on cpu. Now a located error.
"""
from __future__ import annotations

import random
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.errors import FrontendError

SEED = 20250714
TARGETS = ["python", "cpu"]

HEADER = """\
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, Out, InOut, Ptr, i1, i8, i16, i32, i64, u8, u16, u32, u64, f32, f64
"""




def leaf_source(body: list[str], params: list[tuple[str, str]], extra: str = "") -> str:
    """A one-instance leaf writing its results to `o` (f64), and its root."""
    sig = "".join(f", {name}: {t}" for name, t in params)
    binds = "".join(f", {name}={name}" for name, _ in params)
    return HEADER + extra + f"""

@hpvm.leaf
def leaf(o: Out[Ptr[f64]], o_bytes: i64{sig}):
{textwrap.indent(chr(10).join(body), "    ")}


@hpvm.graph
def root(o: Out[Ptr[f64]], o_bytes: i64{sig}):
    hpvm.node(leaf, o=o, o_bytes=o_bytes{binds})
"""


def run(module, target: str, n: int, *args) -> np.ndarray:
    o = np.zeros(n)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, o, o.nbytes, *args))
    return o


# -- an i1 meeting an int literal ---------------------------------------------------------------

BOOL_FORMS = [
    ("b == {k}", lambda b, c, k: b == k), ("b != {k}", lambda b, c, k: b != k),
    ("b < {k}", lambda b, c, k: b < k), ("{k} <= b", lambda b, c, k: k <= b),
    ("b > {k}", lambda b, c, k: b > k), ("b & {k}", lambda b, c, k: b & k),
    ("b | {k}", lambda b, c, k: b | k), ("b ^ {k}", lambda b, c, k: b ^ k),
    ("{k} ^ b", lambda b, c, k: k ^ b), ("max(b, {k})", lambda b, c, k: max(b, k)),
    ("min({k}, b)", lambda b, c, k: min(k, b)), ("b if c else {k}", lambda b, c, k: b if c else k),
    ("{k} if c else b", lambda b, c, k: k if c else b), ("b + {k}", lambda b, c, k: b + k),
    ("b * {k} - b", lambda b, c, k: b * k - b), ("(b == {k}) + (c != {k})",
                                                  lambda b, c, k: (b == k) + (c != k)),
    ("b ** 2 + {k}", lambda b, c, k: b ** 2 + k), ("-b < {k} < b + 3",
                                                   lambda b, c, k: -b < k < b + 3),
]


def bool_cases(seed: int, n: int) -> list[tuple[str, object]]:
    rnd = random.Random(seed)
    return [(form, fn, rnd.choice([-3, -1, 0, 1, 2, 3, 5, 255]))
            for form, fn in (rnd.choice(BOOL_FORMS) for _ in range(n))]


@pytest.mark.parametrize("target", TARGETS)
def test_a_bool_meets_an_int_literal_as_python_does(tmp_path: Path, target: str) -> None:
    cases = bool_cases(SEED, 40) + [(form, fn, 2) for form, fn in BOOL_FORMS]
    body = [f"o[{j}] = {form.format(k=k)}" for j, (form, _, k) in enumerate(cases)]
    module = load(leaf_source(body, [("b", "i1"), ("c", "i1")]))
    for b, c in [(True, False), (False, True), (True, True)]:
        got = run(module, target, len(cases), b, c)
        for j, (form, fn, k) in enumerate(cases):
            assert got[j] == fn(b, c, k), (form.format(k=k), b, c, got[j])


@pytest.mark.parametrize("text", ["f = 5", "f = -1", "f = 0.5", "g: i1 = 2"])
def test_a_literal_given_to_an_i1_variable_must_be_a_bool(tmp_path: Path, text: str) -> None:
    module = load(leaf_source(["f = x > 0", text, "o[0] = f"], [("x", "i64")]))
    with pytest.raises(FrontendError) as info:
        run(module, "python", 1, 3)
    assert info.value.rule == "typing-narrowing" and "i1" in str(info.value)


def test_bool_literals_and_zero_one_still_assign_to_an_i1(tmp_path: Path) -> None:
    body = ["f = x > 0", "o[0] = f", "f = 0", "o[1] = f", "f = True", "o[2] = f", "g: i1 = 1",
            "o[3] = g", "o[4] = bool(7) + hpvm.i1(0)"]
    module = load(leaf_source(body, [("x", "i64")]))
    assert run(module, "python", 5, 3).tolist() == [1, 0, 1, 1, 1]


# -- round() of an integer ----------------------------------------------------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_round_of_an_integer_is_the_integer(tmp_path: Path, target: str) -> None:
    body = ["o[0] = round(x)", "o[1] = round(y)", "o[2] = round(x) - x", "o[3] = round(b) + round(7)",
            "o[4] = round(z)", "o[5] = round(2.5) + round(-0.5)"]
    module = load(leaf_source(body, [("x", "i64"), ("y", "i32"), ("b", "i1"), ("z", "f64")]))
    for x in [2**24 + 1, 2**53 + 1, -(2**62) - 3]:
        y = 2**31 - 1
        got = run(module, target, 6, x, y, True, -2.5)
        # the output buffer is f64: compare through the same rounding
        assert got.tolist() == [float(x), float(y), 0.0, 8.0, -2.0, 2.0], x


# -- x = y = value ------------------------------------------------------------------------------

def chained_cases(seed: int, n: int) -> list[tuple[str, int, int]]:
    rnd = random.Random(seed)
    limits = {"i8": 127, "i16": 32767, "u8": 255, "u16": 65535, "i32": 2**31 - 1}
    out = []
    for _ in range(n):
        t = rnd.choice(sorted(limits))
        out.append((t, rnd.randint(1, limits[t]), rnd.randint(2, 1000)))
    return out


@pytest.mark.parametrize("target", TARGETS)
def test_chained_assignment_gives_each_target_the_value(tmp_path: Path, target: str) -> None:
    cases = chained_cases(SEED, 12)
    body: list[str] = []
    for j, (t, k, m) in enumerate(cases):
        # `x` is narrow; `y` is a fresh name, so `y = k` alone would make it an i64
        body += [f"x{j}: {t} = 1", f"x{j} = y{j} = {k}", f"o[{2 * j}] = y{j} * {m}",
                 f"o[{2 * j + 1}] = x{j}"]
    n = 2 * len(cases)
    body += [f"o[{n}] = f = 1.75", f"o[{n + 1}] = f", f"o[{n + 2}] = z = w = a + 1",
             f"o[{n + 3}] = z + w", "q = r = a * 3", f"o[{n + 4}] = q - r + q"]
    module = load(leaf_source(body, [("a", "i64")]))
    got = run(module, target, n + 5, 5)
    for j, (t, k, m) in enumerate(cases):
        assert got[2 * j] == k * m and got[2 * j + 1] == k, (t, k, m)
    assert got[n:].tolist() == [1.75, 1.75, 6.0, 12.0, 15.0]


# -- chained comparisons ------------------------------------------------------------------------

SIDE_EFFECTS = """
@hpvm.func
def bump(p: Ptr[i64], k: i64) -> i64:
    p[1] = p[1] + 1
    return k


@hpvm.func
def twice(k: i64) -> i64:
    return k * 2
"""


def counting_source(cond: str) -> str:
    return HEADER + SIDE_EFFECTS + f"""

@hpvm.leaf
def leaf(o: Out[Ptr[f64]], o_bytes: i64, q: InOut[Ptr[i64]], q_bytes: i64):
    x = 0
    while {cond}:
        x += 1
    o[0] = x


@hpvm.graph
def root(o: Out[Ptr[f64]], o_bytes: i64, q: InOut[Ptr[i64]], q_bytes: i64):
    hpvm.node(leaf, o=o, o_bytes=o_bytes, q=q, q_bytes=q_bytes)
"""


@pytest.mark.parametrize("middle", ["hpvm.atomic_add(q, 0, 1)", "bump(q, x)", "-hpvm.atomic_add(q, 0, 1)"])
def test_a_chained_comparison_refuses_a_middle_operand_with_effects(tmp_path: Path, middle: str) -> None:
    module = load(counting_source(f"0 <= {middle} < 5"))
    o, q = np.zeros(1), np.zeros(2, np.int64)
    with pytest.raises(FrontendError) as info:
        with hpvm.runtime("python"):
            hpvm.wait(hpvm.launch(module.root, o, o.nbytes, q, q.nbytes))
    assert info.value.rule == "supported-python" and "chained comparison" in str(info.value)
    assert info.value.loc is not None and info.value.loc.line > 0


@pytest.mark.parametrize("target", TARGETS)
def test_a_chained_comparison_with_effects_at_its_ends_runs_them_once(tmp_path: Path,
                                                                      target: str) -> None:
    # effects in the first or last operand, and a pure helper in the middle, are fine
    module = load(counting_source("hpvm.atomic_add(q, 0, 1) < twice(2) < 5 + x"))
    o, q = np.zeros(1), np.zeros(2, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, o, o.nbytes, q, q.nbytes))
    # as Python: the atomic returns 0, 1, 2, 3 (each < 4), then 4 (false): once per test
    assert o[0] == 4 and q[0] == 5


# -- loop variables -----------------------------------------------------------------------------

@pytest.mark.parametrize("first", ["i = 0.5", "i: f64 = 2.0"])
def test_a_float_variable_cannot_count_a_range(tmp_path: Path, first: str) -> None:
    body = [first, "c = 0", "for i in range(16777215, 16777220):", "    c += 1", "o[0] = c"]
    module = load(leaf_source(body, []))
    for target in TARGETS:
        with pytest.raises(FrontendError) as info:
            run(module, target, 1)
        assert "loop variable 'i'" in str(info.value)
