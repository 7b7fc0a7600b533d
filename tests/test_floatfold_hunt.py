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
