"""Pass-time arithmetic against run-time arithmetic (hunt: floatfold): an expression the front end
or a pass folds from constants gives, bit for bit, what the same expression of launch arguments
computes on every target (docs/language.md, "Arithmetic"), the python target being the oracle.
"""
from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.ir import semantics as S

# values whose min/max the language decides differently from Python's builtins: signed zeros,
# NaNs in either place, equal values of two kinds (1 and 1.0)
EDGES = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1.0, -1.0, 2.5, 1, 0, -3]

MINMAX = '''
import math
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, f64


@hpvm.leaf
def pick(f: Out[Ptr[f64]], f_bytes: i64{params}):
{body}


@hpvm.graph
def root(f: Out[Ptr[f64]], f_bytes: i64{params}):
    hpvm.node(pick, grid=1, f=f, f_bytes=f_bytes{binds})
'''


def _literal(v: int | float) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "math.nan" if math.copysign(1.0, v) > 0 else "-math.nan"
    if isinstance(v, float) and math.isinf(v):
        return "math.inf" if v > 0 else "-math.inf"
    return repr(v)


def _module(path: Path, body: list[str], params: list[str]):
    path.write_text(MINMAX.format(body="\n".join(body),
                                  params="".join(f", {p}: f64" for p in params),
                                  binds="".join(f", {p}={p}" for p in params)))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _rule(fn: str, values: list[int | float]) -> np.float64:
    """min/max of values by the language's rule (ir/semantics.py), two at a time from the left."""
    pick = S.minimum if fn == "min" else S.maximum
    out = np.float64(values[0])
    for v in values[1:]:
        out = pick(out, np.float64(v))
    return out


def _run(module, target: str, n: int, args: list[np.float64]) -> np.ndarray:
    f = np.zeros(n, np.float64)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, f, f.nbytes, *args))
    return f


def test_min_max_of_literals_keep_the_language_rule(target: str, rng, tmp_path: Path) -> None:
    """`min(0.0, -0.0)` of two literals is -0.0 and `max(1.0, math.nan)` NaN, as `min(a, b)` of
    arguments holding them: the front end folded literals with Python's min/max, which return the
    first of two equal values and skip a NaN after the first operand."""
    cases = [(str(rng.choice(["min", "max"])), [EDGES[k] for k in rng.integers(0, len(EDGES), 3)])
             for _ in range(40)]
    cases += [("min", [0.0, -0.0]), ("max", [-0.0, 0.0]), ("max", [1.0, math.nan]),
              ("min", [1, math.nan, 3])]
    folded = [f"    f[{k}] = hpvm.f64({fn}({', '.join(map(_literal, vs))}))"
              for k, (fn, vs) in enumerate(cases)]
    params = [f"p{k}_{j}" for k, (_, vs) in enumerate(cases) for j in range(len(vs))]
    computed = [f"    f[{k}] = {fn}({', '.join(f'p{k}_{j}' for j in range(len(vs)))})"
                for k, (fn, vs) in enumerate(cases)]
    args = [np.float64(v) for _, vs in cases for v in vs]
    stem = f"floatfold_minmax_{target}"
    want = _run(_module(tmp_path / f"{stem}_args.py", computed, params), "python", len(cases), args)
    got = _run(_module(tmp_path / f"{stem}_literals.py", folded, []), target, len(cases), [])
    ref = [_rule(fn, vs) for fn, vs in cases]
    for k, (fn, vs) in enumerate(cases):
        for expected in (want[k], ref[k]):
            same = (math.isnan(got[k]) and math.isnan(expected)) or \
                got[k].view(np.uint64) == expected.view(np.uint64)
            assert same, f"{fn}({', '.join(map(_literal, vs))}) on {target}: {got[k]!r}, " \
                f"not {expected!r}"


GUARDS = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, f32
K = 0.0
N = 0


@hpvm.leaf
def guarded(f: Out[Ptr[f32]], f_bytes: i64, x: f32):
    f[0] = 1.0 / K if K != 0.0 else x
    f[1] = x if K == 0.0 else 1.0 / K
    f[2] = hpvm.f32(K != 0.0 and 1.0 / K > x)
    f[3] = hpvm.f32(x > 0.0 and K != 0.0 and 1.0 / K > x)
    f[4] = hpvm.f32(K == 0.0 or 1.0 / K > x)
    f[5] = hpvm.f32((-1.0) ** 0.5 if N else x)
    f[6] = x + hpvm.f32(2 ** 100000 if N else 3)
    s = x
    if K != 0.0:
        s = 1.0 / K
    while N:
        s = 1.0 / N
        break
    f[7] = s
    if N:
        t = 1 / N
    else:
        t = x * 2.0
    f[8] = t


@hpvm.graph
def root(f: Out[Ptr[f32]], f_bytes: i64, x: f32):
    hpvm.node(guarded, grid=1, f=f, f_bytes=f_bytes, x=x)
'''


def test_literals_a_constant_condition_excludes_are_not_evaluated(target: str, rng,
                                                                 tmp_path: Path) -> None:
    """`1.0 / K if K != 0.0 else x` with a module-level K = 0.0 is x, as in Python, which never
    evaluates the excluded operand: the front end folded both operands of a conditional (and every
    operand of `and`/`or`, and both branches of an `if`) and refused the guarded division as a
    division by zero in a constant expression."""
    path = tmp_path / f"floatfold_guards_{target}.py"
    path.write_text(GUARDS)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    x = np.float32(rng.uniform(-4.0, 4.0))
    f = np.zeros(9, np.float32)
    with hpvm.runtime(target=target):
        hpvm.wait(hpvm.launch(module.root, f, f.nbytes, x))
    want = np.array([x, x, 0.0, 0.0, 1.0, x, x + np.float32(3), x, x * np.float32(2)], np.float32)
    np.testing.assert_array_equal(f, want)


def test_a_literal_division_by_zero_that_runs_is_still_refused(tmp_path: Path) -> None:
    path = tmp_path / "floatfold_live_division.py"
    path.write_text(GUARDS.replace("1.0 / K if K != 0.0 else x", "1.0 / K if K == 0.0 else x"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    f = np.zeros(9, np.float32)
    with pytest.raises(hpvm.errors.FrontendError, match="division by zero in a constant expression") \
            as caught:
        with hpvm.runtime(target="python"):
            hpvm.wait(hpvm.launch(module.root, f, f.nbytes, np.float32(1.0)))
    assert caught.value.loc.line == 10 and caught.value.loc.file == str(path)
