"""Signed zeros, NaN, infinities and out-of-range values: every target computes exactly what the
language defines (docs/language.md, "Arithmetic"), for f16, bf16, f32 and f64.

The expected values come from the rules written out below in plain Python, independently of
hpvm_py.ir.semantics, on every pair of awkward inputs.
"""
from __future__ import annotations

import importlib.util
import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import types as T
from hpvm_py.ir import semantics as S

SPECIAL = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.5, 2.5, -2.5, 0.5, -0.5, 300.0,
           -300.0, 3e9, -3e9, 1e30]
FLOATS = ["f16", "bf16", "f32", "f64"]

SOURCE = '''
import math
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i64, u64, {t}


@hpvm.leaf
def edges(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
          f_bytes: i64, k: Out[Ptr[i64]], k_bytes: i64, u: Out[Ptr[u64]], u_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
    f[i] = hpvm.math.fmin(x, y)
    f[n + i] = hpvm.math.fmax(x, y)
    f[2 * n + i] = min(x, y)
    f[3 * n + i] = max(x, y)
    f[4 * n + i] = math.copysign(x, y)
    f[5 * n + i] = abs(x)
    f[6 * n + i] = hpvm.math.round(x)
    f[7 * n + i] = math.floor(x)
    f[8 * n + i] = math.trunc(x)
    f[9 * n + i] = -x
    k[i] = round(x)
    k[n + i] = hpvm.i32(x)
    k[2 * n + i] = hpvm.u8(x)
    k[3 * n + i] = hpvm.i64(x)
    u[i] = hpvm.u64(x)


@hpvm.leaf
def extremes(a: In[Ptr[{t}]], a_bytes: i64, group: In[Ptr[i64]], group_bytes: i64,
             m: InOut[Ptr[{t}]], m_bytes: i64):
    i = hpvm.instance_id(0)
    hpvm.atomic_min(m, 2 * group[i], a[i])
    hpvm.atomic_max(m, 2 * group[i] + 1, a[i])


@hpvm.graph
def atomics(a: In[Ptr[{t}]], a_bytes: i64, group: In[Ptr[i64]], group_bytes: i64,
            m: InOut[Ptr[{t}]], m_bytes: i64, n: i64):
    hpvm.node(extremes, grid=n, a=a, a_bytes=a_bytes, group=group, group_bytes=group_bytes, m=m,
              m_bytes=m_bytes)


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
         f_bytes: i64, k: Out[Ptr[i64]], k_bytes: i64, u: Out[Ptr[u64]], u_bytes: i64, n: i64):
    hpvm.node(edges, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, f=f, f_bytes=f_bytes,
              k=k, k_bytes=k_bytes, u=u, u_bytes=u_bytes, n=n)
'''


# -- the rules, one value at a time ---------------------------------------------------------------

def _ordered(x: float, y: float, lower: bool) -> float:
    """The smaller (lower) or larger of two non-NaN values; -0 < +0."""
    if x == y:
        return x if (math.copysign(1, x) < 0) == lower else y
    return min(x, y) if lower else max(x, y)


def fmin_rule(x: float, y: float) -> float:  # IEEE minimumNumber
    return y if math.isnan(x) else x if math.isnan(y) else _ordered(x, y, True)


def fmax_rule(x: float, y: float) -> float:  # IEEE maximumNumber
    return y if math.isnan(x) else x if math.isnan(y) else _ordered(x, y, False)


def min_rule(x: float, y: float) -> float:  # x if x < y or isnan(x) else y
    return x if x < y or math.isnan(x) else y


def max_rule(x: float, y: float) -> float:
    return x if x > y or math.isnan(x) else y


def saturate(x: float, lo: int, hi: int) -> int:
    """Float to integer: toward zero, clamped to the type's range, NaN gives 0."""
    if math.isnan(x):
        return 0
    if math.isinf(x):
        return hi if x > 0 else lo
    return max(lo, min(hi, math.trunc(x)))


def half_even(x: float) -> float:
    return x if not math.isfinite(x) else math.copysign(float(round(x)), x)


FLOAT_RULES = [fmin_rule, fmax_rule, min_rule, max_rule, math.copysign, math.fabs, half_even,
               lambda x: x if not math.isfinite(x) else math.copysign(math.floor(x), x),
               lambda x: x if not math.isfinite(x) else math.copysign(math.trunc(x), x),
               lambda x: -x]
INT_RULES = [lambda x: saturate(half_even(x), -2**63, 2**63 - 1) if math.isfinite(x)
             else saturate(x, -2**63, 2**63 - 1),
             lambda x: saturate(x, -2**31, 2**31 - 1), lambda x: saturate(x, 0, 255),
             lambda x: saturate(x, -2**63, 2**63 - 1)]


# -- running ------------------------------------------------------------------------------------

def _load(t: str, folder: Path):
    path = folder / f"float_edges_{t}.py"
    path.write_text(SOURCE.format(t=t))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _stored(values: list[float], t: str) -> np.ndarray:
    """The inputs as buffer contents of type t (bf16 as bit patterns)."""
    with np.errstate(over="ignore"):
        if t == "bf16":
            return S.bf16_to_bits(np.array(values, np.float32))
        return np.array(values, T.SCALAR_TYPES[t].numpy_dtype)


def _decoded(buf: np.ndarray, t: str) -> list[float]:
    return [float(v) for v in (S.bf16_from_bits(buf) if t == "bf16" else buf)]


def _same(got: float, want: float) -> bool:
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


@pytest.mark.parametrize("t", FLOATS)
def test_signed_zeros_nan_and_range(target: str, t: str, tmp_path: Path) -> None:
    module = _load(t, tmp_path)
    pairs = list(itertools.product(SPECIAL, repeat=2))
    a, b = _stored([p[0] for p in pairs], t), _stored([p[1] for p in pairs], t)
    n = len(pairs)
    f = np.zeros(len(FLOAT_RULES) * n, a.dtype)
    k = np.zeros(len(INT_RULES) * n, np.int64)
    u = np.zeros(n, np.uint64)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, f, f.nbytes, k, k.nbytes, u,
                              u.nbytes, n))
    xs, ys = _decoded(a, t), _decoded(b, t)  # the values after rounding to t
    got = _decoded(f, t)
    for r, rule in enumerate(FLOAT_RULES):
        for i, (x, y) in enumerate(zip(xs, ys)):
            want = rule(x, y) if r < 5 else rule(x)
            assert _same(got[r * n + i], want), (target, t, r, x, y, got[r * n + i], want)
    for r, rule in enumerate(INT_RULES):
        for i, x in enumerate(xs):
            assert k[r * n + i] == rule(x), (target, t, r, x, int(k[r * n + i]))
    assert [int(v) for v in u] == [saturate(x, 0, 2**64 - 1) for x in xs]


GROUPS = [[0.0, -0.0], [-0.0, 0.0], [0.0, math.nan, -0.0], [math.nan, math.nan],
          [math.nan, 1.0, -math.inf], [2.5, math.inf, math.nan], [-0.0, -0.0, 0.0, 0.0]]


@pytest.mark.parametrize("t", FLOATS)
def test_float_atomic_min_max(target: str, t: str, tmp_path: Path) -> None:
    """atomic_min/max on floats are fmin/fmax: NaN operands are ignored and -0 < +0, so the
    result does not depend on the order in which instances run (each element starts as NaN)."""
    module = _load(t, tmp_path)
    values = [v for g in GROUPS for v in g]
    group = np.array([k for k, g in enumerate(GROUPS) for _ in g], np.int64)
    a = _stored(values, t)
    m = _stored([math.nan] * (2 * len(GROUPS)), t)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.atomics, a, a.nbytes, group, group.nbytes, m, m.nbytes,
                              len(values)))
    got = _decoded(m, t)
    for k, g in enumerate(GROUPS):
        low, high = math.nan, math.nan
        for v in g:
            low, high = fmin_rule(low, v), fmax_rule(high, v)
        assert _same(got[2 * k], low) and _same(got[2 * k + 1], high), (target, t, g, got[2 * k:2 * k + 2])


def test_host_math_functions_follow_the_same_rules() -> None:
    """hpvm.math.* called on the host (outside a leaf) agrees with what leaves compute."""
    for x, y in itertools.product(SPECIAL, repeat=2):
        for fn, rule in ((hpvm.math.fmin, fmin_rule), (hpvm.math.fmax, fmax_rule),
                         (hpvm.math.min, min_rule), (hpvm.math.max, max_rule)):
            assert _same(float(fn(np.float64(x), np.float64(y))), rule(x, y)), (fn, x, y)
