"""Math functions on special values: every target gives what C's functions give and what the
python target gives (docs/language.md, "Arithmetic"), bit for bit where the result is exact and to
a few ulps elsewhere, with the same NaNs, infinities and zero signs, for f16, bf16, f32 and f64.

Reproducers first (each failed before its fix), then a seeded generator that applies every math
function to special and random wide-range inputs and compares each target with the python one.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import types as T
from hpvm_py.backends import jit
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.ir import semantics as S

from conftest import TARGETS
from differential.data import load

FLOATS = ["f16", "bf16", "f32", "f64"]
LEVELS = jit.runnable_levels()
# A signaling NaN (quiet bit clear) of each type, as its bits
SNAN = {"f16": 0x7C01, "bf16": 0x7F81, "f32": 0x7F800001, "f64": 0x7FF0000000000001}
UINT = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}
def _stored(values: list[float], t: str) -> np.ndarray:
    """Buffer contents of type t (bf16 as bits); the string "snan" is a signaling NaN."""
    numbers = [0.0 if v == "snan" else v for v in values]
    with np.errstate(all="ignore"):
        out = S.bf16_to_bits(np.array(numbers, np.float32)) if t == "bf16" else \
            np.array(numbers, T.SCALAR_TYPES[t].numpy_dtype)
    bits = out if t == "bf16" else out.view(UINT[t])
    for i, v in enumerate(values):
        if v == "snan":
            bits[i] = SNAN[t]
    return out


def _decoded(buf: np.ndarray, t: str) -> np.ndarray:
    return (S.bf16_from_bits(buf) if t == "bf16" else buf).astype(np.float64)


def _same(got: float, want: float) -> bool:
    if math.isnan(want):
        return math.isnan(got)
    return got == want and math.copysign(1, got) == math.copysign(1, want)


LEAF = '''
import math
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {t}


@hpvm.leaf
def fns(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
        f_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
{early}    x = a[i]
    y = b[i]
{body}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
         f_bytes: i64, n: i64):
    hpvm.node(fns, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, f=f, f_bytes=f_bytes, n=n)
'''
# `if n < 0: return` before the body makes the python target run instance by instance, on NumPy
# scalars, where NumPy's functions take other paths than on whole arrays
EARLY_RETURN = "    if n < 0:\n        return\n"


def _run(target: str, t: str, exprs: list[str], xs: list, ys: list,
         per_instance: bool) -> np.ndarray:
    body = "\n".join(f"    f[{k} * n + i] = {e}" for k, e in enumerate(exprs))
    module = load(LEAF.format(t=t, body=body, early=EARLY_RETURN if per_instance else ""))
    a, b = _stored(xs, t), _stored(ys, t)
    n = len(xs)
    f = np.zeros(len(exprs) * n, a.dtype)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, f, f.nbytes, n))
    return _decoded(f, t).reshape(len(exprs), n)


# -- pow(x, 0.5) is C's pow, not sqrt -------------------------------------------------------------

@pytest.mark.parametrize("per_instance", [False, True])
@pytest.mark.parametrize("t", FLOATS)
def test_pow_with_exponent_one_half_is_pow_not_sqrt(target: str, t: str, per_instance: bool) -> None:
    """pow(-0.0, 0.5) is +0.0 and pow(-inf, 0.5) is +inf (C, IEEE 754), where sqrt gives -0.0 and
    NaN. NumPy's power computes a scalar exponent 0.5 as sqrt: the python target (and the gpu
    target in Triton's interpreter) gave -0.0 and NaN, cpu and the GPUs +0.0 and inf."""
    xs = [-0.0, 0.0, -math.inf, math.inf, 4.0, -4.0, math.nan]
    wants = [0.0, 0.0, math.inf, math.inf, 2.0, math.nan, math.nan]
    exprs = ["x ** 0.5", "hpvm.math.pow(x, 0.5)", "np.power(x, y)", "math.pow(x, y)"]
    got = _run(target, t, exprs, xs, [0.5] * len(xs), per_instance)
    for k, e in enumerate(exprs):
        for x, g, want in zip(xs, got[k], wants):
            assert _same(g, want), (target, t, e, x, g, want)


def test_host_pow_with_exponent_one_half() -> None:
    """hpvm.math.pow on the host computes as leaves do."""
    assert _same(float(hpvm.math.pow(-0.0, 0.5)), 0.0)
    assert _same(float(hpvm.math.pow(np.float32(-math.inf), np.float32(0.5))), math.inf)
    got = hpvm.math.pow(np.array([-0.0, -math.inf, 9.0], np.float32), np.float32(0.5))
    assert got.dtype == np.float32
    assert all(_same(float(g), w) for g, w in zip(got, [0.0, math.inf, 3.0])), got


@pytest.mark.parametrize("name", ["erf", "erfc"])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_host_erf_keeps_its_argument_type(name: str, dtype: type, rng) -> None:
    """hpvm.math.erf/erfc on the host return the argument's float type, rounded from double as
    the python target's are (they returned float64 for f16 and f32 arguments); integers give
    float64, as NumPy's functions do."""
    fn = getattr(hpvm.math, name)
    xs = (rng.standard_normal(64) * 2).astype(dtype)
    got = fn(xs)
    assert got.dtype == dtype
    assert np.array_equal(got, np.array([getattr(math, name)(float(x)) for x in xs]).astype(dtype))
    one = fn(dtype(0.25))
    assert type(one) is dtype and one == dtype(getattr(math, name)(0.25))
    assert fn(np.arange(3)).dtype == np.float64

# -- a signaling NaN is a NaN like any other --------------------------------------------------------

SNAN_CASES = [  # (expression, x, y, result)
    ("hpvm.math.fmin(x, y)", "snan", 2.0, 2.0), ("hpvm.math.fmin(x, y)", 2.0, "snan", 2.0),
    ("hpvm.math.fmax(x, y)", "snan", -2.0, -2.0), ("hpvm.math.fmax(x, y)", -2.0, "snan", -2.0),
    ("hpvm.math.pow(x, y)", "snan", 0.0, 1.0), ("x ** y", 1.0, "snan", 1.0),
    ("hpvm.math.hypot(x, y)", math.inf, "snan", math.inf),
    ("hpvm.math.hypot(x, y)", "snan", -math.inf, math.inf),
    ("min(x, y)", "snan", 2.0, math.nan), ("max(x, y)", 2.0, "snan", math.nan),
    ("math.copysign(x, y)", -3.0, "snan", 3.0), ("hpvm.math.sqrt(x)", "snan", 0.0, math.nan),
]


def _check_signaling_nans(target: str, t: str, per_instance: bool) -> None:
    exprs = sorted({c[0] for c in SNAN_CASES})
    xs, ys = [c[1] for c in SNAN_CASES], [c[2] for c in SNAN_CASES]
    got = _run(target, t, exprs, xs, ys, per_instance)
    for i, (e, x, y, want) in enumerate(SNAN_CASES):
        g = got[exprs.index(e)][i]
        assert _same(g, want), (target, t, e, x, y, g, want)


@pytest.mark.parametrize("per_instance", [False, True])
@pytest.mark.parametrize("t", FLOATS)
def test_a_signaling_nan_is_a_nan(target: str, t: str, per_instance: bool) -> None:
    """fmin/fmax ignore a signaling NaN operand as they ignore a quiet one, pow(sNaN, 0) and
    pow(1, sNaN) are 1 and hypot(inf, sNaN) is inf. Before: the python target's fmin/fmax (NumPy's
    scalar loop, C's fminf) gave NaN, cpu's pow and hypot (glibc) NaN, and the python target's f16
    hypot NaN (its f16 -> f32 conversion keeps the NaN signaling; the CPU's quiets it)."""
    _check_signaling_nans(target, t, per_instance)


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is not available here")
@pytest.mark.parametrize("level", LEVELS)
def test_a_signaling_nan_is_a_nan_at_every_cpu_level(monkeypatch, level: str) -> None:
    monkeypatch.setenv("HPVM_CPU_LEVEL", level)
    for t in ("f16", "f32", "f64"):
        _check_signaling_nans("cpu", t, per_instance=False)


def test_host_fmin_fmax_ignore_a_signaling_nan() -> None:
    """hpvm.math.fmin on the host, on NumPy scalars and on arrays whose length leaves lanes past
    the last full vector (NumPy computes those with C's fminf, which answers NaN)."""
    snan = np.array([SNAN["f32"]], np.uint32).view(np.float32)[0]
    assert float(hpvm.math.fmin(snan, np.float32(1.0))) == 1.0
    assert float(hpvm.math.fmax(np.float32(-1.0), snan)) == -1.0
    xs = np.full(19, snan)
    assert (hpvm.math.fmin(xs, np.ones(19, np.float32)) == 1.0).all()
    assert (hpvm.math.fmax(np.zeros(19, np.float32), xs) == 0.0).all()
    assert float(hpvm.math.hypot(np.float32(-math.inf), snan)) == math.inf


# -- every function, special and random inputs, each target against python --------------------------

UNARY = ["sqrt", "rsqrt", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos",
         "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "erf",
         "erfc", "fabs", "floor", "ceil", "trunc", "round", "abs"]
BINARY = ["pow", "atan2", "fmod", "copysign", "hypot", "fmin", "fmax", "min", "max"]
OPERATORS = ["x ** y", "x // y", "x % y", "x ** 2", "x ** 3", "x ** -1", "x ** 0.5",
             "hpvm.math.fma(x, y, x)", "hpvm.f32(hpvm.math.isnan(x)) + 2.0 * hpvm.f32(hpvm.math.isinf(x))"
             " + 4.0 * hpvm.f32(hpvm.math.isfinite(y))"]
EXPRS = [f"hpvm.math.{f}(x)" for f in UNARY] + [f"hpvm.math.{f}(x, y)" for f in BINARY] + OPERATORS
# exact by definition or correctly rounded everywhere: bit for bit
EXACT = {f"hpvm.math.{f}(x)" for f in ("sqrt", "fabs", "floor", "ceil", "trunc", "round", "abs")} | \
    {f"hpvm.math.{f}(x, y)" for f in ("fmod", "copysign", "fmin", "fmax", "min", "max")} | \
    {"x // y", "x % y", "x ** 2", "hpvm.math.fma(x, y, x)", OPERATORS[-1]}
ULPS = 4


def _inputs(t: str, seed: int) -> tuple[list, list]:
    """Pairs of special values, then random ones: bit patterns (every class), wide magnitudes,
    and small multiples of 1/4 (exact halves for round, integers for pow)."""
    largest = {"f16": 65504.0, "bf16": 3.3895313892515355e38, "f32": 3.4028234663852886e38,
               "f64": 1.7976931348623157e308}[t]
    smallest = {"f16": 2.0 ** -24, "bf16": 2.0 ** -133, "f32": 2.0 ** -149, "f64": 5e-324}[t]
    special = [0.0, -0.0, math.nan, math.inf, -math.inf, 1.0, -1.0, 0.5, -0.5, 2.0, -3.0, 2.5,
               largest, -largest, smallest, -smallest, 710.0, -104.0, 1e22, "snan"]
    xs, ys = (list(v) for v in zip(*itertools.product(special, repeat=2)))
    rng = np.random.default_rng(seed)
    n = 256
    bits = {"f16": 16, "bf16": 32, "f32": 32, "f64": 64}[t]
    dtype = {"f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64}[t]
    for values in (xs, ys):
        raw = rng.integers(0, 2 ** bits - 1, n, dtype=np.uint64, endpoint=True)
        patterns = raw.astype({16: np.uint16, 32: np.uint32, 64: np.uint64}[bits]).view(dtype)
        wide = np.where(rng.random(n) < 0.5, -1, 1) * np.exp(rng.uniform(-30, 30, n))
        quarters = np.round(rng.uniform(-6, 6, n) * 4) / 4
        kind = rng.integers(0, 3, n)
        with np.errstate(all="ignore"):
            values += list(np.where(kind == 0, patterns.astype(np.float64),
                                    np.where(kind == 1, wide, quarters)))
    return xs, ys


def _ulps(a: float, b: float, t: str) -> int:
    """Distance between two finite values of type t, in units in the last place of t."""
    dtype, uint = {"f16": (np.float16, np.uint16), "bf16": (np.float32, np.uint32),
                   "f32": (np.float32, np.uint32), "f64": (np.float64, np.uint64)}[t]
    ordered = []
    for v in (a, b):
        u = int(np.array(v, dtype).view(uint))
        top = 1 << (8 * np.dtype(dtype).itemsize - 1)
        ordered.append(top - u if u >= top else u + top)  # order of bits = order of values
    return abs(ordered[0] - ordered[1]) >> (16 if t == "bf16" else 0)


def _differences(ref: np.ndarray, got: np.ndarray, t: str, xs: np.ndarray, ys: np.ndarray) -> list:
    bad = []
    for k, e in enumerate(EXPRS):
        for r, g, x, y in zip(ref[k], got[k], xs, ys):
            if _same(g, r):
                continue
            # (one infinite, the other finite: infinity is the value after the largest finite one, so
            # a result within a few ulps of that may overflow on one target: libdevice's f64
            # hypot(1.0, DBL_MAX) is inf on an H200, C's is DBL_MAX)
            if math.isnan(r) or math.isnan(g) or (math.isinf(r) and math.isinf(g)) or \
                    r == 0 or g == 0 or (r < 0) != (g < 0) or e in EXACT or _ulps(r, g, t) > ULPS:
                bad.append((e, x, y, r, g))
    return bad


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("target", [t for t in TARGETS if t != "python"])
def test_generated_math_matches_python(target: str, t: str) -> None:
    seed = FLOATS.index(t) + 1
    xs, ys = _inputs(t, seed)
    ref = _run("python", t, EXPRS, xs, ys, per_instance=False)
    got = _run(target, t, EXPRS, xs, ys, per_instance=False)
    shown_x, shown_y = _decoded(_stored(xs, t), t), _decoded(_stored(ys, t), t)
    bad = _differences(ref, got, t, shown_x, shown_y)
    assert not bad, f"{len(bad)} differences, e.g. {bad[:5]}"


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("t", FLOATS)
def test_every_math_function_assembles_for_nvptx(t: str) -> None:
    """Without a GPU the nvptx target still compiles (ptxas assembles) every function of the
    generated leaf, in each float type (the GPU runs of the test above compare its results)."""
    body = "\n".join(f"    f[{k} * n + i] = {e}" for k, e in enumerate(EXPRS))
    module = load(LEAF.format(t=t, body=body, early=""))
    (kernel,) = [k for _, _, k in compile_graph(module.root, "nvptx").leaf_kernels()]
    assert kernel.cubin
