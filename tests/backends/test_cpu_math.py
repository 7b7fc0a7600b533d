"""cpu backend: math functions against NumPy (exact where IEEE defines the result, else ulps)."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from cpu_harness import assert_floats, bf16_to_f32, f32_to_bf16, leaves_from_source, run
from hpvm_py import types as T
from hpvm_py.ir import semantics as S

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])

# name -> (NumPy reference on the compute type, exact?)
UNARY = {
    "sqrt": (np.sqrt, True), "rsqrt": (lambda x: 1 / np.sqrt(x), True), "exp": (np.exp, False),
    "exp2": (np.exp2, False), "expm1": (np.expm1, False), "log": (np.log, False),
    "log2": (np.log2, False), "log10": (np.log10, False), "log1p": (np.log1p, False),
    "sin": (np.sin, False), "cos": (np.cos, False), "tan": (np.tan, False),
    "asin": (np.arcsin, False), "acos": (np.arccos, False), "atan": (np.arctan, False),
    "sinh": (np.sinh, False), "cosh": (np.cosh, False), "tanh": (np.tanh, False),
    "asinh": (np.arcsinh, False), "acosh": (np.arccosh, False), "atanh": (np.arctanh, False),
    "erf": (lambda x: _erf(x).astype(x.dtype), False),
    "erfc": (lambda x: _erfc(x).astype(x.dtype), False),
    "fabs": (np.fabs, True), "floor": (np.floor, True), "ceil": (np.ceil, True),
    "trunc": (np.trunc, True), "round": (np.rint, True),
}
BINARY = {
    "pow": (np.power, False), "atan2": (np.arctan2, False), "hypot": (np.hypot, False),
    "fmod": (np.fmod, True), "copysign": (S.copysign, True),
    "min": (lambda a, b: np.where((a < b) | np.isnan(a), a, b), True),
    "max": (lambda a, b: np.where((a > b) | np.isnan(a), a, b), True),
}
ULPS = {"f32": 4, "f64": 2, "f16": 1, "bf16": 1}

rng = np.random.default_rng(99)
SPECIAL = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 2.0, 10.0, -10.0, np.inf, -np.inf, np.nan, 1e-6]


def _inputs(t: T.ScalarType, n: int = 200) -> np.ndarray:
    values = np.concatenate([SPECIAL, rng.uniform(-4, 4, n), rng.uniform(-100, 100, n // 4)])
    return f32_to_bf16(values) if t.name == "bf16" else values.astype(t.numpy_dtype)


def _compute(x: np.ndarray, t: T.ScalarType) -> np.ndarray:
    if t.name == "bf16":
        return bf16_to_f32(x)
    return x.astype(np.float32) if t.name == "f16" else x


def _values(x: np.ndarray, t: T.ScalarType) -> np.ndarray:
    """Buffer contents as floats (bf16 bits decoded)."""
    return bf16_to_f32(x) if t.name == "bf16" else x


def _round(x: np.ndarray, t: T.ScalarType) -> np.ndarray:
    if t.name == "bf16":
        return bf16_to_f32(f32_to_bf16(x))
    return x.astype(t.numpy_dtype)


def _leaf(t: str, names: list[str], arity: int, call: str = "hpvm.math.{name}"):
    params = "".join(f"{v}: In[Ptr[{t}]], {v}_bytes: i64, " for v in "abc"[:arity])
    outs = ", ".join(f"o_{n}: Out[Ptr[{t}]], o_{n}_bytes: i64" for n in names)
    operands = ", ".join(f"{v}[i]" for v in "abc"[:arity])
    body = "".join(f"    o_{n}[i] = {call.format(name=n)}({operands})\n" for n in names)
    mod = leaves_from_source(f"@hpvm.leaf\ndef fns_{t}({params}{outs}):\n"
                             f"    i = hpvm.get_node_instance_id_x(hpvm.get_node())\n{body}")
    return getattr(mod, f"fns_{t}")


def _launch(leaf, inputs: list[np.ndarray], n_out: int) -> list[np.ndarray]:
    outs = [np.zeros_like(inputs[0]) for _ in range(n_out)]
    args: list = []
    for a in inputs + outs:
        args += [a, None]
    run(leaf, [(inputs[0].size,)], *args)
    return outs


@pytest.mark.parametrize("tname", ["f32", "f64", "f16", "bf16"])
def test_unary_functions(tname):
    t = T.SCALAR_TYPES[tname]
    a = _inputs(t)
    names = list(UNARY)
    outs = _launch(_leaf(tname, names, 1), [a], len(names))
    x = _compute(a, t)
    for name, got in zip(names, outs):
        ref, exact = UNARY[name]
        want = _round(ref(x), t)
        assert_floats(_values(got, t), want, ulps=0 if exact else ULPS[tname], what=f"{tname} {name}")


@pytest.mark.parametrize("tname", ["f32", "f64", "f16", "bf16"])
def test_binary_functions(tname):
    t = T.SCALAR_TYPES[tname]
    a, b = _inputs(t), _inputs(t)[::-1].copy()
    names = list(BINARY)
    outs = _launch(_leaf(tname, names, 2), [a, b], len(names))
    x, y = _compute(a, t), _compute(b, t)
    for name, got in zip(names, outs):
        ref, exact = BINARY[name]
        want = _round(ref(x, y), t)
        assert_floats(_values(got, t), want, ulps=0 if exact else ULPS[tname], what=f"{tname} {name}")


@pytest.mark.parametrize("tname", ["f32", "f64"])
def test_fmin_fmax_ignore_nan(tname):
    t = T.SCALAR_TYPES[tname]
    # IEEE minimumNumber/maximumNumber: a NaN operand is ignored, and -0 < +0 in either order
    a = np.array([1.0, np.nan, 3.0, np.nan, -2.0, np.inf, 0.0, -0.0], dtype=t.numpy_dtype)
    b = np.array([2.0, 5.0, np.nan, np.nan, -3.0, 1.0, -0.0, 0.0], dtype=t.numpy_dtype)
    lo, hi = _launch(_leaf(tname, ["fmin", "fmax"], 2), [a, b], 2)
    assert_floats(lo, np.array([1.0, 5.0, 3.0, np.nan, -3.0, 1.0, -0.0, -0.0], t.numpy_dtype))
    assert_floats(hi, np.array([2.0, 5.0, 3.0, np.nan, -2.0, np.inf, 0.0, 0.0], t.numpy_dtype))


@pytest.mark.parametrize("tname", ["f32", "f64"])
def test_copysign_of_a_nan_is_positive(tname):
    # inf - inf is a NaN whose sign is the hardware's (negative on x86): it must not leak out
    mod = leaves_from_source(f"""
@hpvm.leaf
def sign_of_nan(a: In[Ptr[{tname}]], a_bytes: i64, b: In[Ptr[{tname}]], b_bytes: i64,
                o: Out[Ptr[{tname}]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = math.copysign(a[i], b[i] - b[i])
""")
    dtype = T.SCALAR_TYPES[tname].numpy_dtype
    a = np.array([2.0, -3.0, 0.0, -0.0, np.inf], dtype=dtype)
    b = np.array([np.inf, -np.inf, np.nan, 1.0, -np.inf], dtype=dtype)
    out = np.zeros_like(a)
    run(mod.sign_of_nan, [(a.size,)], a, None, b, None, out, None)
    assert_floats(out, np.abs(a))


@pytest.mark.parametrize("tname", ["f32", "f64"])
def test_fma_is_fused(tname):
    t = T.SCALAR_TYPES[tname]
    a, b, c = (_inputs(t, 100) for _ in range(3))
    b, c = rng.permutation(b), rng.permutation(c)
    (got,) = _launch(_leaf(tname, ["fma"], 3), [a, b, c], 1)
    from fractions import Fraction

    want = []
    for x, y, z in zip(a.tolist(), b.tolist(), c.tolist()):
        if not all(math.isfinite(v) for v in (x, y, z)):
            want.append(x * y + z)  # no rounding question: infinities and NaN
        else:
            want.append(float(Fraction(x) * Fraction(y) + Fraction(z)))  # exact, rounded once
    assert_floats(got, np.array(want, dtype=np.float64).astype(t.numpy_dtype),
                  ulps=0 if tname == "f64" else 1)
    # a*b+c rounds twice and differs from fma where the product's low bits matter
    e = 30 if tname == "f64" else 12
    x = np.array([1 + 2.0**-e], dtype=t.numpy_dtype)
    (fused,) = _launch(_leaf(tname, ["fma"], 3), [x, x, -np.ones(1, t.numpy_dtype)], 1)
    assert fused[0] == 2.0 ** (1 - e) + 2.0 ** (-2 * e)


def test_predicates():
    mod = leaves_from_source("""
        @hpvm.leaf
        def preds(a: In[Ptr[f32]], a_bytes: i64, n: Out[Ptr[i1]], n_bytes: i64,
                  inf: Out[Ptr[i1]], inf_bytes: i64, fin: Out[Ptr[i1]], fin_bytes: i64,
                  r: Out[Ptr[i64]], r_bytes: i64):
            i = hpvm.get_node_instance_id_x(hpvm.get_node())
            n[i] = hpvm.math.isnan(a[i])
            inf[i] = math.isinf(a[i])
            fin[i] = hpvm.math.isfinite(a[i])
            if hpvm.math.isfinite(a[i]):
                r[i] = round(a[i])
    """)
    a = np.array([0.0, np.nan, np.inf, -np.inf, 2.5, 3.5, -2.5, 1e3], dtype=np.float32)
    n, inf, fin = (np.zeros(a.size, bool) for _ in range(3))
    r = np.zeros(a.size, np.int64)
    run(mod.preds, [(a.size,)], a, None, n, None, inf, None, fin, None, r, None)
    assert np.array_equal(n, np.isnan(a))
    assert np.array_equal(inf, np.isinf(a))
    assert np.array_equal(fin, np.isfinite(a))
    assert list(r[np.isfinite(a)]) == [0, 2, 4, -2, 1000]  # half to even, as Python's round


@pytest.mark.parametrize("tname", ["i8", "i32", "i64", "u32", "u64"])
def test_integer_abs_min_max(tname):
    t = T.SCALAR_TYPES[tname]
    mod = leaves_from_source(f"""
        @hpvm.leaf
        def intfns(a: In[Ptr[{tname}]], a_bytes: i64, b: In[Ptr[{tname}]], b_bytes: i64,
                   o_abs: Out[Ptr[{tname}]], o_abs_bytes: i64, o_min: Out[Ptr[{tname}]],
                   o_min_bytes: i64, o_max: Out[Ptr[{tname}]], o_max_bytes: i64):
            i = hpvm.get_node_instance_id_x(hpvm.get_node())
            o_abs[i] = abs(a[i])
            o_min[i] = min(a[i], b[i])
            o_max[i] = max(a[i], b[i])
    """)
    info = np.iinfo(t.numpy_dtype)
    a = np.concatenate([[info.min, info.max, 0, 1], rng.integers(info.min, info.max, 100,
                                                                 dtype=t.numpy_dtype)])
    a = a.astype(t.numpy_dtype)
    b = rng.permutation(a)
    o_abs, o_min, o_max = (np.zeros_like(a) for _ in range(3))
    run(mod.intfns, [(a.size,)], a, None, b, None, o_abs, None, o_min, None, o_max, None)
    with np.errstate(all="ignore"):
        assert np.array_equal(o_abs, np.abs(a))  # abs(INT_MIN) wraps to INT_MIN, as in NumPy
    assert np.array_equal(o_min, np.minimum(a, b))
    assert np.array_equal(o_max, np.maximum(a, b))


def test_fmin_fmax_are_compares_and_selects_not_llvm_minimumnum() -> None:
    """LLVM 22 lowers a scalar maximumnum on AVX-512 CPUs, where it knows one operand is never NaN,
    to a vmaxss that returns the other operand's NaN: fmax(inf, 0/0) gave NaN on the GPU
    machines' CPUs (tests/differential/reproducers/mixed-239505244.json; an AVX2 machine gave inf).
    The cpu backend spells fmin/fmax out as compares and selects, which every x86 lowers right."""
    from hpvm_py.backends.cpu.backend import CpuBackend
    from hpvm_py.ir.context import NodeContext

    module = leaves_from_source('''
        @hpvm.leaf
        def number_minmax(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
            i = hpvm.instance_id(0)
            v = -f32(i * 3 + 1)  # never NaN: LLVM knows it
            y[2 * i] = hpvm.math.fmax(v, x[i] / x[i])
            y[2 * i + 1] = hpvm.math.fmin(v, x[i] / x[i])
    ''')
    leaf = module.number_minmax.ir
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer",) * 2 + ("uniform",) * 2,
                      output_modes=())
    text = CpuBackend().llvm_ir(leaf, ctx)
    assert not re.search(r"llvm\.(minimum|maximum)num", text), text
    x = np.array([0.0, 2.0, np.inf, 0.0], np.float32)
    y = np.zeros(8, np.float32)
    run(module.number_minmax, [(4,)], x, x.nbytes, y, y.nbytes)
    v = -(np.arange(4, dtype=np.float32) * 3 + 1)
    with np.errstate(invalid="ignore"):
        ratio = x / x  # NaN, 1, NaN, NaN
    np.testing.assert_array_equal(y[0::2], np.fmax(v, ratio))
    np.testing.assert_array_equal(y[1::2], np.fmin(v, ratio))
