"""The python target (every differential test's oracle) in both of its modes, against the rules of
docs/language.md and against the cpu target.

- An expression may nest operations 128 deep (rule `supported-python`), on every target. The
  python target once wrapped each bf16 operation (its rounding), and each implicit cast of a
  nested comparison, in a call around an already parenthesised operation: two parentheses per
  level of the user's expression, past the 200 that Python accepts, and the oracle refused a
  valid leaf ("Python refuses the code it becomes") that cpu ran. (f16 is computed by NumPy's
  float16 directly: its chain guards the same limit.)
- Generated leaves over every scalar type (operations, casts, min/max, selects, lazy and/or,
  loops with data-dependent trip counts, early returns) give the same bits in the vector mode,
  instance by instance (HPVM_PYTHON_VECTOR=0) and on cpu.

Expected values come from this file, never from hpvm_py's helpers.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load

from conftest import TARGETS

RUNNABLE = [t for t in ("python", "cpu", "gpu") if t in TARGETS]
DEPTH = 127  # the deepest chain the front end accepts below its limit of 128

LEAF = '''
import math
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64


@hpvm.leaf
def body(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{u}]], b_bytes: i64, o: InOut[Ptr[{o}]],
         o_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
{body}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{u}]], b_bytes: i64, o: InOut[Ptr[{o}]],
         o_bytes: i64, n: i64):
    hpvm.node(body, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, o=o, o_bytes=o_bytes, n=n)
'''


@pytest.fixture(params=["1", "0"], ids=["vector", "instances"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("HPVM_PYTHON_VECTOR", request.param)
    return request.param


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 values that bf16 holds exactly, as their bits (the upper half)."""
    bits = np.asarray(values, np.float32).view(np.uint32)
    assert not np.any(bits & 0xFFFF), "not exact in bf16"
    return (bits >> 16).astype(np.uint16)


def _bf16_values(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


def _run(target: str, types: tuple[str, str, str], body: str, a: np.ndarray, b: np.ndarray,
         out_dtype: type) -> np.ndarray:
    t, u, o_t = types
    module = load(LEAF.format(t=t, u=u, o=o_t, body="".join(f"    {s}\n" for s in body.split("\n"))))
    o = np.zeros(len(a), out_dtype)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, o, o.nbytes, len(a)))
    return o


def _chain(depth: int, form: str, innermost: str) -> str:
    text = innermost
    for _ in range(depth - 1):
        text = form.format(text)
    return text


# -- expressions 128 deep ------------------------------------------------------------------------

@pytest.mark.parametrize("target", RUNNABLE)
def test_a_bf16_sum_127_deep(target: str, mode: str) -> None:
    a = np.array([1.0, 0.0, 2.0, -1.0], np.float32)  # 127 * a is exact in bf16
    body = f"o[i] = {_chain(DEPTH, '(x + {})', 'x')}"
    out = _run(target, ("bf16", "bf16", "bf16"), body, _bf16_bits(a), _bf16_bits(a), np.uint16)
    assert _bf16_values(out).tolist() == (127 * a).tolist()


@pytest.mark.parametrize("target", RUNNABLE)
def test_an_f16_product_127_deep(target: str, mode: str) -> None:
    a = np.array([1.0, 0.0, -1.0, 2.0], np.float16)
    body = f"o[i] = {_chain(DEPTH, '(x * {})', 'x')}"
    out = _run(target, ("f16", "f16", "f16"), body, a, a, np.float16)
    assert out.tolist() == [1.0, 0.0, -1.0, np.inf]  # 2**127 overflows f16


@pytest.mark.parametrize("target", RUNNABLE)
def test_a_comparison_chain_127_deep(target: str, mode: str) -> None:
    """Each comparison's i1 converts to f32 for the next: an implicit cast per level."""
    a = np.array([0.5, -1.0, 0.0, 1.0, 2.0], np.float32)
    b = np.array([0.0, 3.0, -2.0, 0.5, 1.0], np.float32)
    body = f"o[i] = {_chain(DEPTH, '(x < {})', 'y')}"
    out = _run(target, ("f32", "f32", "f32"), body, a, b, np.float32)
    want = []
    for x, y in zip(a.tolist(), b.tolist()):
        v = y
        for _ in range(DEPTH - 1):
            v = 1.0 if x < v else 0.0
        want.append(v)
    assert out.tolist() == want


# bf16 arithmetic rounds after each operation: the forms that wrap the most (three in four picks)
ARITHMETIC = ["(x + {})", "(x - {})", "(x * {})", "({} - y)"]
OTHERS = ["hpvm.T(x < {})", "hpvm.T({} >= y)", "min({}, y)", "max(x, {})", "abs({})",
          "math.floor({})", "({} if x > y else y)", "(x if {} else y)", "hpvm.math.fmin({}, x)",
          "hpvm.math.copysign({}, y)"]


@pytest.mark.skipif("python" not in TARGETS, reason="compares the python target's two modes (a CPU run)")
@pytest.mark.parametrize("seed", range(4))
def test_generated_deep_chains_run_alike_on_every_target(seed: int) -> None:
    """A bf16 chain of DEPTH operations picked at random: both python modes give cpu's bits (cpu
    computes the same roundings: docs/language.md, "Arithmetic")."""
    rng = random.Random(seed)
    t = "bf16"
    text, depth = "x", 1
    while depth < DEPTH - 1:
        form = rng.choice(ARITHMETIC if rng.random() < 0.75 else OTHERS)
        if form.startswith("hpvm.T("):  # a cast around a comparison: two levels
            depth += 1
            form = form.replace("hpvm.T(", f"hpvm.{t}(")
        text = form.format(text)
        depth += 1
    values = np.array([1.0, -0.5, 0.0, 2.0, -0.0, 0.25], np.float32)
    data = _bf16_bits(values)
    other = data[::-1].copy()
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        for label, target, vector in [("cpu", "cpu", "1"), ("vector", "python", "1"),
                                      ("instances", "python", "0")]:
            if target not in TARGETS:
                continue
            patch.setenv("HPVM_PYTHON_VECTOR", vector)
            results[label] = _run(target, (t, t, t), f"o[i] = {text}", data, other, np.uint16)
    first = next(iter(results.values()))
    for label, out in results.items():
        assert out.tobytes() == first.tobytes(), (label, out, first)


# -- both modes and cpu on generated leaves ------------------------------------------------------

INTS = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
FLOATS = ["f16", "f32", "f64"]
DTYPES = {"i8": np.int8, "i16": np.int16, "i32": np.int32, "i64": np.int64, "u8": np.uint8,
          "u16": np.uint16, "u32": np.uint32, "u64": np.uint64, "f16": np.float16,
          "f32": np.float32, "f64": np.float64}


def _edge_values(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
    dtype = np.dtype(DTYPES[t])
    if t in FLOATS:
        pool = [0.0, -0.0, 1.0, -1.5, 0.5, 2.5, np.inf, -np.inf, np.nan, 65504.0, 1e-7, 3.0]
        with np.errstate(over="ignore"):
            return np.array([pool[k] if k < len(pool) else rng.normal() * 30
                             for k in rng.integers(0, len(pool) + 4, n)]).astype(dtype)
    info = np.iinfo(dtype)
    pool = [info.min, info.max, 0, 1, 2, 7, info.bits, info.bits - 1, info.max - 1, 64, 65]
    return np.array([pool[k] for k in rng.integers(0, len(pool), n)], dtype=dtype)


def _operand(rng: random.Random, names: list[str], depth: int, t: str) -> str:
    if depth == 0 or rng.random() < 0.3:
        return rng.choice(names + ["i", "3", "1"] + (["0.5", "-0.0"] if t in FLOATS else []))
    a = _operand(rng, names, depth - 1, t)
    b = _operand(rng, names, depth - 1, t)
    ops = ["+", "-", "*", "//", "%"] + (["/"] if t in FLOATS else ["&", "|", "^", "<<", ">>"])
    return rng.choice([
        f"({a} {rng.choice(ops)} {b})", f"min({a}, {b})", f"max({a}, {b})",
        f"({a} if {a} < {b} else {b})", f"hpvm.{t}(({a} > {b}) and ({b} != 0))",
        f"hpvm.{t}(hpvm.{rng.choice(INTS + FLOATS)}({a}))", f"abs({a})",
    ])


def _generated_body(rng: random.Random, t: str) -> tuple[str, int]:
    """Statements over x (type t) and y (type u) whose values are stored to o[k * n + i]."""
    lines = []
    k = 0
    for _ in range(rng.randint(2, 4)):
        kind = rng.random()
        value = _operand(rng, ["x", "y"], 3, t)
        if kind < 0.4:
            lines.append(f"o[{k} * n + i] = {value}")
        elif kind < 0.6:
            lines += [f"if {value} > x:", f"    o[{k} * n + i] = y", "else:",
                      f"    o[{k} * n + i] = {value}"]
        elif kind < 0.8:  # a trip count from data: instance by instance in both modes
            lines += ["acc = x", "for j in range(hpvm.i64(y) % 4):", f"    acc = acc + {value}",
                      f"o[{k} * n + i] = acc"]
        else:
            lines += ["w = 0", f"while w < 3 and {value} > w:", "    w += 1", f"o[{k} * n + i] = w"]
        k += 1
    return "\n".join(lines), k


@pytest.mark.skipif("python" not in TARGETS, reason="compares the python target's two modes (a CPU run)")
@pytest.mark.parametrize("seed", range(6))
def test_generated_leaves_alike_in_both_modes_and_on_cpu(seed: int) -> None:
    rng = random.Random(seed)
    t = rng.choice(INTS + FLOATS)
    body, slots = _generated_body(rng, t)
    nrng = np.random.default_rng(seed)
    n = 9
    a, b = _edge_values(t, n, nrng), _edge_values(t, n, nrng)
    results = {}
    with pytest.MonkeyPatch.context() as patch:
        for label, target, vector in [("vector", "python", "1"), ("instances", "python", "0"),
                                      ("cpu", "cpu", "1")]:
            if target not in TARGETS:
                continue
            patch.setenv("HPVM_PYTHON_VECTOR", vector)
            module = load(LEAF.format(t=t, u=t, o=t, body="".join(f"    {s}\n" for s in body.split("\n"))))
            o = np.zeros(slots * n, DTYPES[t])
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, o, o.nbytes, n))
            results[label] = o
    first = results["vector"]
    for label, out in results.items():
        if first.dtype.kind == "f":  # one kind of NaN: their bits may differ between targets
            same = np.array_equal(out, first, equal_nan=True) and \
                np.array_equal(np.signbit(out) | np.isnan(out), np.signbit(first) | np.isnan(first))
        else:
            same = out.tobytes() == first.tobytes()
        assert same, (label, body, out, first)
