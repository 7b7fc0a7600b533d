"""Signs of zeros and NaNs (docs/language.md, "Arithmetic", "Which NaN"): the sign of a zero is
bit for bit the python target's on every target, for the operations test_float_edge_cases.py
leaves out (`0.0 - x`, `-0.0 - x`, `x + 0.0`, `x * -0.0`, `ceil`, `%`, `//`, `fma` into -0.0,
casts between float types, scalar arguments); which NaN comes out is not specified, so NaNs are
compared as NaNs, and nothing in a leaf may show a NaN's sign (`copysign`, integer casts,
comparisons of `-x`). A NaN constant is stored with its bits, on f16, bf16, f32 and f64.
"""
from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import types as T
from hpvm_py.ir import semantics as S

FLOATS = ["f16", "bf16", "f32", "f64"]
UINT = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}
# quiet NaNs of both signs, one with a payload, as bits
NANS = {"f16": [0x7E00, 0xFE00, 0x7E15], "bf16": [0x7FC0, 0xFFC0, 0x7FC5],
        "f32": [0x7FC00000, 0xFFC00000, 0x7FC01234],
        "f64": [0x7FF8000000000000, 0xFFF8000000000000, 0x7FF8000000001234]}
SPECIAL = [0.0, -0.0, math.inf, -math.inf, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 3.0, -3.0]

EXPRS = ["0.0 - x", "-0.0 - x", "x + 0.0", "x - 0.0", "x + -0.0", "x * 0.0", "x * -0.0",
         "-(x - y)", "-(x * y)", "math.ceil(x)", "math.ceil(-x)", "x % y", "x // y", "-x % y",
         "math.fmod(x, y)", "hpvm.math.fma(x, y, -0.0)", "hpvm.math.fma(x, 0.0, -0.0)",
         "x * y + -0.0", "(x * 0.5) * 0.0", "y if x < y else -0.0", "KZ * x", "x + KZ",
         "hpvm.f16(x) * 1.0", "hpvm.bf16(x) * 1.0", "hpvm.f32(x) * 1.0", "hpvm.f64(x) * 1.0",
         "hpvm.f16(hpvm.f64(x) * 1e-30)", "hpvm.f32(hpvm.f64(x) * 1e-300)", "s", "1.0 / s"]
# results that are never NaN, whatever the sign of a NaN x or y (a fifth of the inputs)
BLIND = ["math.copysign(1.0, -x)", "math.copysign(1.0, x * y)", "hpvm.f64(hpvm.i32(-x))",
         "1.0 if -x < 0.0 else 2.0", "1.0 if -x else 2.0", "hpvm.math.fmin(-x, 1.0)",
         "hpvm.math.fmax(x - y, -0.0)", "1.0 if hpvm.math.isnan(-x) else 0.0"]

SOURCE = '''
import math
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {t}
KZ = -0.0
KN = -math.nan


@hpvm.leaf
def signs(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
          f_bytes: i64, s: {t}, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
{body}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, f: Out[Ptr[{t}]],
         f_bytes: i64, s: {t}, n: i64):
    hpvm.node(signs, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, f=f, f_bytes=f_bytes,
              s=s, n=n)
'''


def _load(t: str, folder: Path):
    lines = [f"    f[{k} * n + i] = {e}" for k, e in enumerate(EXPRS + BLIND)]
    lines += [f"    f[{len(EXPRS) + len(BLIND)} * n + i] = KN",
              f"    f[{len(EXPRS) + len(BLIND) + 1} * n + i] = -math.nan"]
    path = folder / f"zero_signs_{t}.py"
    path.write_text(SOURCE.format(t=t, body="\n".join(lines)))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _inputs(t: str, n: int, rng: np.random.Generator) -> np.ndarray:
    """n values of t as stored (bf16 as bits): specials, NaNs of both signs, random numbers."""
    numbers = np.where(rng.random(n) < 0.6, rng.choice(SPECIAL, n),
                       rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n))
    with np.errstate(over="ignore"):
        out = S.bf16_to_bits(numbers.astype(np.float32)) if t == "bf16" else \
            numbers.astype(T.SCALAR_TYPES[t].numpy_dtype)
    bits = out if t == "bf16" else out.view(UINT[t])
    nan = rng.random(n) < 0.2
    bits[nan] = rng.choice(np.array(NANS[t], UINT[t]), int(nan.sum()))
    return out


def _values(buf: np.ndarray, t: str) -> np.ndarray:
    return S.bf16_from_bits(buf) if t == "bf16" else buf


def _run(module, target: str, t: str, a: np.ndarray, b: np.ndarray, s: float) -> np.ndarray:
    n = len(a)
    f = np.zeros((len(EXPRS) + len(BLIND) + 2) * n, a.dtype)
    scalar = S.bf16_from_bits(S.bf16_to_bits(np.array([s], np.float32)))[0] if t == "bf16" else \
        T.SCALAR_TYPES[t].numpy_dtype.type(s)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, f, f.nbytes, scalar, n))
    return f


@pytest.mark.parametrize("t", FLOATS)
def test_zero_signs_are_exact_and_nans_stay_unseen(target: str, t: str, tmp_path: Path) -> None:
    seed = random.SystemRandom().randrange(2**32)
    rng = np.random.default_rng(seed)
    module = _load(t, tmp_path)
    n = 300
    a, b = _inputs(t, n, rng), _inputs(t, n, rng)
    s = float(rng.choice([0.0, -0.0]))
    want = _run(module, "python", t, a, b, s)
    got = _run(module, target, t, a, b, s)
    bits = UINT[t]
    for k, expr in enumerate(EXPRS + BLIND):
        w, g = want[k * n:(k + 1) * n], got[k * n:(k + 1) * n]
        same = (np.isnan(_values(w, t)) & np.isnan(_values(g, t))) | (w.view(bits) == g.view(bits))
        bad = np.flatnonzero(~same)
        assert not bad.size, (seed, t, target, expr, _values(a, t)[bad[0]], _values(b, t)[bad[0]],
                              _values(w, t)[bad[0]], _values(g, t)[bad[0]])
        assert k < len(EXPRS) or not np.isnan(_values(g, t)).any(), (seed, t, target, expr)
    constants = got[(len(EXPRS) + len(BLIND)) * n:].view(bits)
    assert (constants == NANS[t][1]).all(), (t, target, hex(int(constants[0])))
