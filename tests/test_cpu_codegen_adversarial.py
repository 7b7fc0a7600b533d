"""The cpu target's code generation against the python target, adversarially: seeded random
leaves over every scalar type (casts, wrapping and saturating arithmetic, shifts, divisions by
zero and by launch scalars, NaN and signed zeros, bool conditions, loops whose trip counts are 0,
1 or many with break/continue, loops the planner interchanges with the instance loop) on 1-3-D
grids of sizes that are not multiples of a vector width, at every x86-64 level this CPU runs
(HPVM_CPU_LEVEL: CI may have AVX2 where this machine has AVX-512), and atomics on i1 buffers,
which the LLVM lowering (cpu, nvptx) refused while the python target ran them and the gpu
target's error sent users to cpu and nvptx."""
from __future__ import annotations

import itertools
import random
import warnings

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import types as T
from hpvm_py.backends import jit
from hpvm_py.errors import HPVMError
from differential.data import load, same, scalar, values


LEVELS = jit.runnable_levels()
HEADER = """import math
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64
"""

# -- i1 atomics: computed on 0 and 1, stored as `!= 0` -------------------------------------------

BOOL_OPS = {"atomic_add": np.logical_or, "atomic_sub": np.logical_xor, "atomic_min": np.logical_and,
            "atomic_max": np.logical_or, "atomic_and": np.logical_and, "atomic_or": np.logical_or,
            "atomic_xor": np.logical_xor, "atomic_xchg": lambda old, v: v}
BOOL_SOURCE = HEADER + "".join(f"""

@hpvm.leaf
def leaf_{op}(a: In[Ptr[i1]], a_bytes: i64, h: InOut[Ptr[i1]], h_bytes: i64, o: InOut[Ptr[i1]],
              o_bytes: i64, u: InOut[Ptr[i1]], u_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = hpvm.{op}(h, i, a[i])
    hpvm.{op}(u, i % 2, a[i])     # old value unused; many instances on one element


@hpvm.graph
def root_{op}(a: In[Ptr[i1]], a_bytes: i64, h: InOut[Ptr[i1]], h_bytes: i64, o: InOut[Ptr[i1]],
              o_bytes: i64, u: InOut[Ptr[i1]], u_bytes: i64, n: i64):
    hpvm.node(leaf_{op}, grid=n, a=a, a_bytes=a_bytes, h=h, h_bytes=h_bytes, o=o, o_bytes=o_bytes,
              u=u, u_bytes=u_bytes)
""" for op in BOOL_OPS)


@pytest.fixture(scope="module")
def bool_leaves():
    return load(BOOL_SOURCE)


@pytest.mark.parametrize("op", sorted(BOOL_OPS))
@pytest.mark.parametrize("target", [t for t in TARGETS if t != "gpu"])  # (gpu refuses them)
def test_atomics_on_i1_buffers_compute_on_0_and_1(bool_leaves, target: str, op: str) -> None:
    """Every pair of old and new values: the old value comes back, the element holds the op's
    result as an i1 (a byte 0 or 1: a byte add would leave 2, a NumPy bool subtract raises)."""
    a = np.array([False, True, False, True] * 5)
    h = np.array([False, False, True, True] * 5)
    o = np.zeros(20, np.bool_)
    u = np.array([False, True])
    start_h, start_u = h.copy(), u.copy()
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(getattr(bool_leaves, f"root_{op}"), a, h, o, u, 20))
    assert np.array_equal(o, start_h)
    assert np.array_equal(h, BOOL_OPS[op](start_h, a))
    assert set(h.view(np.uint8).tolist()) <= {0, 1} and set(u.view(np.uint8).tolist()) <= {0, 1}
    if op != "atomic_xchg":  # the others commute: the result does not depend on the order
        want = start_u.copy()
        for i in range(20):
            want[i % 2] = BOOL_OPS[op](want[i % 2], a[i])
        assert np.array_equal(u, want)


# -- seeded random leaves, python against cpu at every level ------------------------------------

INTS = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
FLOATS = ["f16", "bf16", "f32", "f64"]
TYPES = INTS + FLOATS
FLOAT_LITERALS = ["0.0", "-0.0", "0.5", "-2.5", "1.5", "1e30", "-1e-30", "65520.0", "3e9", "1e-40",
                  "2147483648.0", "9.3e18", "1.8446744073709552e19", "-1e-310", "255.5", "-128.5"]


class _Leaf:
    """One random leaf body: expressions of every type over x0 = a[i], x1 = b[i], the launch's
    scalar s and loop counters; statements with nested loops, break and continue."""

    def __init__(self, seed: int):
        self.r = random.Random(seed)
        self.vars: dict[str, str] = {}
        self.lines: list[str] = []
        self.count = 0

    def literal(self, t: str) -> str:
        if t in FLOATS:
            return f"hpvm.{t}({self.r.choice(FLOAT_LITERALS)})"
        lo, hi = T.SCALAR_TYPES[t].min_value(), T.SCALAR_TYPES[t].max_value()
        bits = T.SCALAR_TYPES[t].bits
        value = self.r.choice([0, 1, 3, 7, -1, lo, hi, bits, bits - 1, bits + 1, 65, self.r.randint(lo, hi)])
        return f"hpvm.{t}({min(max(value, lo), hi)})"

    def expr(self, t: str, depth: int) -> str:
        kinds = ["literal", "var", "var", "cast"] + (["binary"] * 3 + ["unary", "minmax", "select"]
                                                      if depth > 0 else [])
        kind = self.r.choice(kinds)
        same_type = [v for v, vt in self.vars.items() if vt == t]
        if kind == "var" and same_type:
            return self.r.choice(same_type)
        if kind in ("cast", "var"):
            if self.vars and self.r.random() < 0.6:
                return f"hpvm.{t}({self.r.choice(sorted(self.vars))})"
            return f"hpvm.{t}({self.expr(self.r.choice(TYPES), depth - 1)})" if depth > 0 else self.literal(t)
        if kind == "literal":
            return self.literal(t)
        if kind == "binary":
            ops = ["+", "-", "*", "//", "%"] + (["&", "|", "^", "<<", ">>"] if t in INTS else ["/"])
            return f"({self.expr(t, depth - 1)} {self.r.choice(ops)} {self.expr(t, depth - 1)})"
        if kind == "unary":
            return self.r.choice([f"(-{self.expr(t, depth - 1)})", f"abs({self.expr(t, depth - 1)})"]
                                 + ([f"(~{self.expr(t, depth - 1)})"] if t in INTS else
                                    [f"math.floor({self.expr(t, depth - 1)})",
                                     f"hpvm.math.round({self.expr(t, depth - 1)})"]))
        if kind == "minmax":
            fn = self.r.choice(["min", "max"] + (["hpvm.math.fmin", "hpvm.math.fmax", "math.copysign"]
                                                 if t in FLOATS else []))
            return f"{fn}({self.expr(t, depth - 1)}, {self.expr(t, depth - 1)})"
        return f"({self.expr(t, depth - 1)} if {self.cond(depth - 1)} else {self.expr(t, depth - 1)})"

    def cond(self, depth: int) -> str:
        kind = self.r.choice(["compare", "compare", "chain", "and", "not", "bool"] if depth > 0 else ["compare"])
        t = self.r.choice(TYPES)
        if kind == "compare":
            op = self.r.choice(["<", "<=", ">", ">=", "==", "!="])
            return f"({self.expr(t, max(depth - 1, 0))} {op} {self.expr(t, max(depth - 1, 0))})"
        if kind == "chain":
            return f"({self.expr(t, depth - 1)} < {self.expr(t, depth - 1)} <= {self.expr(t, depth - 1)})"
        if kind == "not":
            return f"(not {self.cond(depth - 1)})"
        if kind == "bool":
            return f"bool({self.expr(t, depth - 1)})"
        return f"({self.cond(depth - 1)} and {self.cond(depth - 1)})"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def block(self, indent: int, budget: int, in_loop: bool) -> None:
        outer = dict(self.vars)
        for _ in range(self.r.randint(1, max(1, budget))):
            self.statement(indent, budget - 1, in_loop)
        if indent > 1:  # assigned on one path only: not read after it
            self.vars = outer

    def statement(self, indent: int, budget: int, in_loop: bool) -> None:
        kinds = ["assign", "assign"] + (["if", "for", "while"] if budget > 0 else []) \
            + (["break", "continue"] if in_loop else [])
        kind = self.r.choice(kinds)
        if kind == "assign":
            t = self.r.choice(TYPES)
            value = self.expr(t, self.r.choice([1, 2, 3]))
            self.count += 1
            self.emit(indent, f"v{self.count} = {value}")
            self.vars[f"v{self.count}"] = t
        elif kind == "if":
            self.emit(indent, f"if {self.cond(2)}:")
            self.block(indent + 1, budget - 1, in_loop)
        elif kind == "for":
            self.count += 1
            bounds = self.r.choice(["m", "m, 0, -1", "0, m, 3", "hpvm.u8(250), hpvm.u8(m + 250)",
                                    "hpvm.i8(120), hpvm.i8(m + 120), hpvm.i8(3)", "i % 5", "0"])
            self.emit(indent, f"for k{self.count} in range({bounds}):")
            self.block(indent + 1, budget - 1, True)
        elif kind == "while":
            self.count += 1
            self.emit(indent, f"w{self.count} = 0")
            self.emit(indent, f"while w{self.count} < m and {self.cond(1)}:")
            self.emit(indent + 1, f"w{self.count} += 1")
            self.block(indent + 1, budget - 1, True)
        else:
            self.emit(indent, kind)


GRIDS = {1: "n", 2: "(w, h)", 3: "(w, h, d)"}
INDEX = {1: "hpvm.instance_id(0)", 2: "hpvm.instance_id(1) * w + hpvm.instance_id(0)",
         3: "(hpvm.instance_id(2) * h + hpvm.instance_id(1)) * w + hpvm.instance_id(0)"}


def generated(seed: int) -> tuple[str, dict]:
    leaf = _Leaf(seed)
    r = leaf.r
    ta, tb, ts, to, to2 = (r.choice(TYPES) for _ in range(5))
    dims = r.choice([1, 2, 3])
    leaf.vars = {"x0": ta, "x1": tb, "s": ts, "i": "i64", "m": "i64"}
    leaf.emit(1, f"i = {INDEX[dims]}")
    leaf.emit(1, "x0 = a[i]")
    leaf.emit(1, "x1 = b[i]")
    leaf.block(1, r.randint(1, 4), False)
    leaf.emit(1, f"out[i] = hpvm.{to}({leaf.expr(to, 3)})")
    leaf.emit(1, "for kk in range(m):")  # interchanged with the x loop: unit stride, uniform range
    leaf.vars["kk"] = "i64"
    leaf.emit(2, f"out2[kk * n + i] = hpvm.{to2}({leaf.expr(to2, 2)})")
    params = (f"a: In[Ptr[{ta}]], a_bytes: i64, b: In[Ptr[{tb}]], b_bytes: i64, out: InOut[Ptr[{to}]], "
              f"out_bytes: i64, out2: InOut[Ptr[{to2}]], out2_bytes: i64, s: {ts}, m: i64, n: i64, "
              "w: i64, h: i64, d: i64")
    binds = ", ".join(f"{p}={p}" for p in ("a", "a_bytes", "b", "b_bytes", "out", "out_bytes", "out2",
                                            "out2_bytes", "s", "m", "n", "w", "h", "d"))
    source = (HEADER + f"\n\n@hpvm.leaf\ndef body({params}):\n" + "\n".join(leaf.lines)
              + f"\n\n\n@hpvm.graph\ndef root({params}):\n    hpvm.node(body, grid={GRIDS[dims]}, {binds})\n")
    return source, {"types": (ta, tb, ts, to, to2), "dims": dims}


def _run(module, meta: dict, target: str, seed: int, shape: tuple[int, int, int], m: int) -> dict:
    rng = np.random.default_rng(seed)
    ta, tb, ts, to, to2 = meta["types"]
    n = shape[0] * shape[1] * shape[2]
    a, b = values(ta, n, rng), values(tb, n, rng)
    out, out2 = values(to, n, rng), values(to2, max(m, 0) * n, rng)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, a, b, out, out2, scalar(ts, rng), m, n, *shape))
    except HPVMError as exc:
        return {"error": type(exc).__name__}
    return {"out": (out, to), "out2": (out2, to2)}


def _check_generated(seeds: range) -> None:
    for seed in seeds:
        source, meta = generated(seed)
        module = load(source)
        rng = random.Random(seed)
        for trial in range(2):
            width = rng.choice([0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33])
            shape = {1: (width, 1, 1), 2: (width, rng.choice([1, 3, 4, 5]), 1),
                     3: (width, rng.choice([1, 2, 5]), rng.choice([1, 2]))}[meta["dims"]]
            m = rng.choice([0, 1, 2, 5, -1])
            want = _run(module, meta, "python", seed * 10 + trial, shape, m)
            got = _run(module, meta, "cpu", seed * 10 + trial, shape, m)
            assert want.keys() == got.keys(), (seed, shape, m, want, got)
            for key in want:
                if key != "error":
                    (x, t), (y, _) = want[key], got[key]
                    assert same(x, y, t), f"seed {seed} shape {shape} m {m}: {key} differs\n{source}"


@pytest.mark.parametrize("level", LEVELS)
def test_generated_leaves_match_python_at_every_level(monkeypatch, level: str) -> None:
    """Fresh programs for each level (the level is read when a leaf is first compiled, and the
    disk cache keys on it): what CI's CPU runs, checked here."""
    monkeypatch.setenv("HPVM_CPU_LEVEL", level)
    _check_generated(range(100 * (LEVELS.index(level) + 1), 100 * (LEVELS.index(level) + 1) + 4))


# -- every cast and operator on edge values, vectorised over the instances -----------------------

EDGE_FLOATS = [0.0, -0.0, 0.5, -0.5, 2.5, -2.5, 127.5, -128.5, 255.5, 65504.0, 65520.0, 2.0**31,
               -2.0**31 - 1, 2.0**63, -2.0**63, 2.0**64, 3.5e38, 1e300, 1e-40, 5e-324, 6e-8, 3e-8,
               np.inf, -np.inf, np.nan, 16777217.0, 1.00390625, 1.0009765625]


def _edge_values(t: str) -> np.ndarray:
    st = T.SCALAR_TYPES[t]
    if st.is_float:
        with np.errstate(all="ignore"):
            data = np.array(EDGE_FLOATS)
            return T.bf16_to_bits(data.astype(np.float32)) if t == "bf16" else data.astype(st.numpy_dtype)
    lo, hi = st.min_value(), st.max_value()
    pool = [0, 1, 2, 7, -1, -7, lo, hi, lo + 1, hi - 1, st.bits - 1, st.bits, 64, 2**31, 2**63 - 1]
    return np.array([v for v in pool if lo <= v <= hi], dtype=object).astype(st.numpy_dtype)


@pytest.mark.parametrize("level", LEVELS)
def test_casts_and_operators_on_edge_values_at_every_level(monkeypatch, level: str) -> None:
    monkeypatch.setenv("HPVM_CPU_LEVEL", level)
    for t in ("i8", "u32", "i64", "u64", "f16", "bf16", "f32", "f64"):
        ops = ["x + y", "x - y", "x * y", "x // y", "x % y", "min(x, y)", "max(x, y)", "-x", "abs(x)"]
        ops += ["x << y", "x >> y", "~x"] if t in INTS else ["x / y", "hpvm.math.fmin(x, y)",
                                                            "math.copysign(x, y)", "math.trunc(x)"]
        outputs = [(f"c_{d}", d, f"hpvm.{d}(x)") for d in TYPES + ["i1"]] + \
            [(f"o{k}", t, op) for k, op in enumerate(ops)]
        params = ", ".join(f"{name}: InOut[Ptr[{d}]], {name}_bytes: i64" for name, d, _ in outputs)
        body = "\n".join(f"    {name}[i] = {e}" for name, _, e in outputs)
        binds = ", ".join(f"{name}={name}, {name}_bytes={name}_bytes" for name, _, _ in outputs)
        module = load(HEADER + f"""

@hpvm.leaf
def leaf(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, {params}):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
{body}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, {params}, n: i64):
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, {binds})
""")
        pool = _edge_values(t)
        pairs = np.array(list(itertools.product(range(len(pool)), repeat=2)))
        results = []
        for target in ("python", "cpu"):
            arrays = [np.zeros(len(pairs), np.uint16 if d == "bf16" else np.bool_ if d == "i1"
                               else T.SCALAR_TYPES[d].numpy_dtype) for _, d, _ in outputs]
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, pool[pairs[:, 0]], pool[pairs[:, 1]], *arrays,
                                      len(pairs)))
            results.append(arrays)
        for (name, d, e), x, y in zip(outputs, *results):
            assert same(x, y, d), f"{t}: {e} ({d}) differs at level {level}"
