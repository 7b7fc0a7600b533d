"""Scalar corners the other semantic tests do not generate, against rules written out here.

Seeded generators build each case; the expected values come from exact arithmetic in this file
(fractions and integer rounding), never from hpvm_py's own helpers, and every target must match
them bit for bit (any NaN equals any NaN):

- `hpvm.math.fma` rounds once (IEEE fusedMultiplyAdd) on every target and on the host, as
  llvm.fma and tl.fma do; a*b+c rounded twice differs where the product's low bits matter.
- `//` and `%` of literals give what the same operation gives at run time: a zero float divisor
  gives `a / b` (an infinity or NaN) and NaN, not the integer rule's 0.
- An int becomes a float once rounded, however it arrives: a leaf's cast of an i64, an int
  literal in a float context, a node constant, a launch argument, `hpvm.f32(k)` on the host.
  Rounding through f64 first (`np.float32(k)`, `float(k)`) rounds twice.
- `isnan` / `isinf` / `isfinite` of f16 and bf16 values are i1s that `and` / `or` combine (the
  python target's vector mode once gave float16 "truths" that `|` refused).
"""
from __future__ import annotations

import math
import random
from fractions import Fraction

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py import types as T
from hpvm_py.ir import semantics as S

SEED = 20240611


def _same(got: float, want: float) -> bool:
    """Bit for bit as floats: -0.0 differs from 0.0; any NaN equals any NaN."""
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1.0, got) == math.copysign(1.0, want)


# -- exact rounding, written out independently ------------------------------------------------

FORMATS = {"f16": (11, -14, 15), "bf16": (8, -126, 127), "f32": (24, -126, 127), "f64": (53, -1022, 1023)}


def round_exact(x: Fraction, t: str) -> float:
    """The float of type t nearest to x (ties to even), or an infinity beyond t's range."""
    if x == 0:
        return 0.0
    digits, emin, emax = FORMATS[t]
    sign = -1.0 if x < 0 else 1.0
    m = abs(x)
    e = m.numerator.bit_length() - m.denominator.bit_length()  # 2**e <= m < 2**(e + 2)
    while Fraction(2) ** e > m:
        e -= 1
    while Fraction(2) ** (e + 1) <= m:
        e += 1
    quantum = Fraction(2) ** (max(e, emin) - digits + 1)  # spacing of t's values near m
    q, r = divmod(m, quantum)
    if r > quantum / 2 or (r == quantum / 2 and q % 2 == 1):
        q += 1
    value = q * quantum
    largest = (2 - Fraction(2) ** (1 - digits)) * Fraction(2) ** emax
    if value > largest:
        return sign * math.inf
    return sign * float(value)  # exact: value has at most `digits` significant bits


def fma_rule(x: float, y: float, z: float, t: str) -> float:
    """IEEE fusedMultiplyAdd: x * y + z with one rounding to t."""
    if not all(math.isfinite(v) for v in (x, y, z)):
        if math.isfinite(x) and math.isfinite(y) and not math.isnan(z):
            return z  # a finite product cannot cancel an infinity
        return x * y + z  # infinities and NaN: no rounding question
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    if exact == 0:
        product_zero = x == 0 or y == 0
        # an exact zero is -0 only when both addends are -0 (rounding to nearest)
        negative = product_zero and math.copysign(1, x) * math.copysign(1, y) < 0 and \
            math.copysign(1, z) < 0
        return -0.0 if negative else 0.0
    return round_exact(exact, t)


# -- hpvm.math.fma ----------------------------------------------------------------------------

FMA_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {t}


@hpvm.leaf
def fused(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, c: In[Ptr[{t}]],
          c_bytes: i64, out: Out[Ptr[{t}]], out_bytes: i64):
    i = hpvm.instance_id(0)
    out[i] = hpvm.math.fma(a[i], b[i], c[i])


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, c: In[Ptr[{t}]],
         c_bytes: i64, out: Out[Ptr[{t}]], out_bytes: i64, n: i64):
    hpvm.node(fused, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes,
              out=out, out_bytes=out_bytes)
'''


def fma_operands(t: str, rng: random.Random, n: int) -> list[tuple[float, float, float]]:
    """Triples where one rounding and two differ: x * y close to -z (cancellation), products
    whose low bits decide a tie, plus signed zeros, infinities, NaN and overflow."""
    digits = FORMATS[t][0]
    special = [0.0, -0.0, 1.0, -1.0, math.inf, -math.inf, math.nan, 1e30, -1e-30, 3e38]
    out = []
    for _ in range(n):
        kind = rng.randrange(4)
        if kind == 0:  # (1 + 2**-k)**2 - 1: the 2**-2k term falls off when rounded twice
            k = rng.randrange(digits // 2, digits)
            x = (1 + 2.0 ** -k) * rng.choice([1, -1, 2 ** rng.randrange(-20, 20)])
            out.append((x, x, -x * x))
        elif kind == 1:
            x, y = rng.uniform(-4, 4), rng.uniform(-4, 4)
            out.append((x, y, -(x * y) * (1 + rng.uniform(-1e-6, 1e-6))))
        elif kind == 2:
            out.append((rng.choice(special), rng.choice(special), rng.choice(special)))
        else:
            out.append((rng.gauss(0, 1e3), rng.gauss(0, 1e3), rng.gauss(0, 1)))
    return out


@pytest.mark.parametrize("t", ["f32", "f64"])
@pytest.mark.parametrize("vector", ["1", "0"])
def test_fma_rounds_once(target: str, t: str, vector: str,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    # (HPVM_PYTHON_VECTOR=0 changes only the python target: the others run the same leaf twice)
    monkeypatch.setenv("HPVM_PYTHON_VECTOR", vector)
    rng = random.Random(SEED + (t == "f64"))
    dtype = T.SCALAR_TYPES[t].numpy_dtype
    with np.errstate(over="ignore"):
        a, b, c = (np.array(col, dtype) for col in zip(*fma_operands(t, rng, 160)))
    module = load(FMA_SOURCE.format(t=t))
    out = np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, out, out.nbytes,
                              len(a)))
    host = hpvm.math.fma(a, b, c)  # the same function called on the host
    for x, y, z, got, on_host in zip(a.tolist(), b.tolist(), c.tolist(), out.tolist(), host.tolist()):
        want = fma_rule(x, y, z, t)
        assert _same(got, want), (target, t, x, y, z, got, want)
        assert _same(on_host, want), ("host", t, x, y, z, on_host, want)


# -- literal // and % by zero -----------------------------------------------------------------

FOLD_HEADER = """
import math
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, f64
"""

FOLD_LEAF = """
@hpvm.leaf
def folded(a: In[Ptr[f64]], a_bytes: i64, b: In[Ptr[f64]], b_bytes: i64, lit: Out[Ptr[f64]],
           lit_bytes: i64, run: Out[Ptr[f64]], run_bytes: i64):
"""

FOLD_CASE = """    lit[{k}] = hpvm.f64({p} {op} {q})
    run[{k}] = a[{k}] {op} b[{k}]
"""

FOLD_ROOT = """
@hpvm.graph
def root(a: In[Ptr[f64]], a_bytes: i64, b: In[Ptr[f64]], b_bytes: i64, lit: Out[Ptr[f64]],
         lit_bytes: i64, run: Out[Ptr[f64]], run_bytes: i64):
"""


def _literal(v: float) -> str:
    if math.isnan(v):
        return "math.nan"
    if math.isinf(v):
        return "math.inf" if v > 0 else "(-math.inf)"
    return repr(v)


def floor_rule(x: float, y: float, op: str) -> float:
    """NumPy's float // and % (docs/language.md): a zero divisor gives x / y and NaN."""
    if y == 0:
        if op == "%" or math.isnan(x) or x == 0:
            return math.nan
        return math.copysign(math.inf, x) * math.copysign(1, y)
    if op == "//":
        return math.nan if not math.isfinite(x) else x // y
    return math.nan if not math.isfinite(x) else x % y


def test_literal_division_by_zero_is_the_run_time_rule(target: str) -> None:
    rng = random.Random(SEED)
    dividends = [0.0, -0.0, 1.0, -1.0, 5.5, -7.25, 1e300, math.inf, -math.inf, math.nan]
    cases = [(rng.choice(dividends), rng.choice(["//", "%"]), rng.choice([0.0, -0.0, 2.0, -0.5]))
             for _ in range(16)]
    body = "".join(FOLD_CASE.format(k=k, p=_literal(p), op=op, q=_literal(q))
                   for k, (p, op, q) in enumerate(cases))
    call = ("    hpvm.node(folded, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, lit=lit, "
            "lit_bytes=lit_bytes, run=run, run_bytes=run_bytes)\n")
    module = load(FOLD_HEADER + FOLD_LEAF + body + FOLD_ROOT + call)
    a = np.array([c[0] for c in cases])
    b = np.array([c[2] for c in cases])
    lit, run = np.zeros_like(a), np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, lit, lit.nbytes, run, run.nbytes))
    for (p, op, q), folded, computed in zip(cases, lit.tolist(), run.tolist()):
        want = floor_rule(p, q, op)
        assert _same(computed, want), (target, p, op, q, "run time", computed, want)
        assert _same(folded, want), (target, p, op, q, "literals", folded, want)


# -- int to float, rounded once wherever the int comes from -----------------------------------

def near_ties(rng: random.Random, n: int) -> list[int]:
    """Ints just off a tie of f32 (or bf16) whose rounding to f64 lands exactly on the tie."""
    out = []
    for _ in range(n):
        digits = rng.choice([24, 8])
        top = rng.randrange(digits + 31, 63)  # beyond f64's 53 bits for the f32 ties
        tie = (1 << top) + (rng.randrange(1 << (digits - 1)) << (top - digits + 1)) + (1 << (top - digits))
        out.append(tie + rng.choice([1, -1, 2, 0]))
    return out


CONVERT_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, f32, bf16


@hpvm.leaf
def convert(k: In[Ptr[i64]], k_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
            half: Out[Ptr[bf16]], half_bytes: i64, arg: f32, node: f32):
    out[0] = hpvm.f32(k[0])
    out[1] = hpvm.f32({v})
    out[2] = hpvm.f32(k[0]) * 0.0 + {v}
    out[3] = arg
    out[4] = node
    half[0] = hpvm.bf16(k[0])
    half[1] = hpvm.bf16({v})


@hpvm.graph
def root(k: In[Ptr[i64]], k_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, half: Out[Ptr[bf16]],
         half_bytes: i64, arg: f32):
    hpvm.node(convert, k=k, k_bytes=k_bytes, out=out, out_bytes=out_bytes, half=half,
              half_bytes=half_bytes, arg=arg, node={v})
'''


def test_int_to_float_rounds_once(target: str) -> None:
    rng = random.Random(SEED)
    for v in near_ties(rng, 6):
        want = round_exact(Fraction(v), "f32")
        # bf16 from an integer goes through f32, as every target converts it (docs/language.md)
        want_bf16 = round_exact(Fraction(want), "bf16")
        module = load(CONVERT_SOURCE.format(v=v))
        k = np.array([v], np.int64)
        out = np.zeros(5, np.float32)
        half = np.zeros(2, np.uint16)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, k, k.nbytes, out, out.nbytes, half, half.nbytes, v))
        where = ["leaf cast", "cast of a literal", "literal operand", "launch argument", "node constant"]
        for name, got in zip(where, out.tolist()):
            assert got == want, (target, v, name, got, want)
        for name, got in zip(where, S.bf16_from_bits(half).tolist()):
            assert got == want_bf16, (target, v, "bf16 " + name, got, want_bf16)
        assert float(hpvm.f32(v)) == want, ("host hpvm.f32", v)


def test_huge_int_literal_is_an_infinity() -> None:
    """An int literal beyond every float is inf in a float context, as 2**128 is for an f32 (it
    used to escape as an OverflowError blamed on the graph's node line)."""
    source = CONVERT_SOURCE.format(v="10**400").replace("node=10**400", "node=1")
    module = load(source)
    k = np.array([1], np.int64)
    out = np.zeros(5, np.float32)
    half = np.zeros(2, np.uint16)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(module.root, k, k.nbytes, out, out.nbytes, half, half.nbytes, 1))
    assert out[1] == np.inf and out[2] == np.inf


# -- float predicates of 16-bit floats as truth values ----------------------------------------

PREDICATE_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {t}


@hpvm.leaf
def classify(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, out: Out[Ptr[i64]],
             out_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
    out[i] = 1 if hpvm.math.isinf(x) or hpvm.math.isnan(y) else 0
    out[n + i] = 1 if hpvm.math.isfinite(x) and not hpvm.math.isnan(y) else 0
    out[2 * n + i] = hpvm.i64(hpvm.math.isnan(x)) + hpvm.i64(hpvm.math.isinf(y))


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, out: Out[Ptr[i64]],
         out_bytes: i64, n: i64):
    hpvm.node(classify, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out,
              out_bytes=out_bytes, n=n)
'''


@pytest.mark.parametrize("t", ["f16", "bf16"])
def test_predicates_of_half_floats_combine(target: str, t: str) -> None:
    rng = random.Random(SEED)
    pool = [0.0, -0.0, 1.5, -2.0, math.inf, -math.inf, math.nan, 65504.0, 1e5]
    xs = [rng.choice(pool) for _ in range(24)]
    ys = [rng.choice(pool) for _ in range(24)]
    with np.errstate(over="ignore"):
        if t == "bf16":
            a, b = S.bf16_to_bits(np.array(xs, np.float32)), S.bf16_to_bits(np.array(ys, np.float32))
            xs, ys = S.bf16_from_bits(a).tolist(), S.bf16_from_bits(b).tolist()
        else:
            a, b = np.array(xs, np.float16), np.array(ys, np.float16)
            xs, ys = a.tolist(), b.tolist()
    module = load(PREDICATE_SOURCE.format(t=t))
    n = len(xs)
    out = np.zeros(3 * n, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, out, out.nbytes, n))
    for i, (x, y) in enumerate(zip(xs, ys)):
        assert out[i] == int(math.isinf(x) or math.isnan(y)), (target, t, x, y)
        assert out[n + i] == int(math.isfinite(x) and not math.isnan(y)), (target, t, x, y)
        assert out[2 * n + i] == int(math.isnan(x)) + int(math.isinf(y)), (target, t, x, y)
