"""What the language allows and the other generators never write (tests/differential/extended.py):
helpers with several call sites and tail returns, parameters named as the caller's locals,
exactly rounded math functions at their edges, `round`/`int`/`float`/`bool`, integer powers,
chained comparisons, truth values of numbers, tuple, chained, annotated and augmented
assignments (of buffer elements too), `elif` chains, narrow typed loop bounds, loads at indices
from data, module-level constants, bool buffers, rounding edges of f16/bf16 and two outputs of
any types over a one-to-one edge, on 1-D to 3-D grids: every target against the python target,
bit for bit; the nvptx target compiles and assembles them where ptxas is installed.

Found by this hunt (each test below failed before its fix):

- A helper call as the base of an integer power (`twice(a[i]) ** 3`) was refused with "the base
  of ** must not have side effects" and no rule, though a helper without pointers has none: the
  refusal is kept (each copy is inlined again, so helpers powering their callee's result grow
  8-fold per level), but it now says why, names rule `supported-python` and is documented
  (docs/language.md, "Python in leaves").
- Two f32 `pow` (or `hypot`) calls side by side (`math.pow(x, 0.5) + math.pow(x + 1.0, 0.5)`)
  aborted the whole process on the cpu target: the operands were quieted with llvm.canonicalize,
  SLP packed two of them into a <2 x float>, and LLVM's x86 backend cannot select that ("Do not
  know how to custom type legalize this operation!", UNREACHABLE). The quiet bit is now set with
  integer operations (backends/cpu/mathfns.py, `_quiet`).
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpvm_py as hpvm
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.errors import FrontendError
from hpvm_py.rt.compiler import compile_graph
from conftest import ROOT, TARGETS, child_pythonpath
from differential.choices import HypothesisChoices, RandomChoices
from differential.data import load, same
from differential.extended import BlindProgram, blind_program, run_blind

RUNNABLE = [t for t in TARGETS if t in ("cpu", "gpu")]
POWER = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i64


@hpvm.func
def twice(x: i64) -> i64:
    if x > 3:
        return x * 2
    else:
        return x - 1


@hpvm.func
def peek(p: Ptr[i64], at: i64) -> i64:
    return p[at]


@hpvm.leaf
def leaf(a: In[Ptr[i64]], a_bytes: i64, o: InOut[Ptr[i64]], o_bytes: i64):
    i = hpvm.instance_id(0)
    t = twice(a[i])
    o[i] = {expr}


@hpvm.graph
def root(a: In[Ptr[i64]], a_bytes: i64, o: InOut[Ptr[i64]], o_bytes: i64, n: i64):
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes)
'''


@pytest.mark.parametrize("base", ["twice(a[i])", "peek(a, i)", "hpvm.atomic_add(o, i, 1)"])
def test_a_power_base_that_calls_a_helper_is_refused_with_its_rule(base: str) -> None:
    module = load(POWER.format(expr=f"{base} ** 3"))
    with pytest.raises(FrontendError, match=r"base of \*\* is repeated.*\[rule: supported-python\]"):
        hpvm.compile(module.root, target="python")


@pytest.mark.parametrize("target", TARGETS)
def test_a_helper_result_assigned_first_may_be_powered(target: str) -> None:
    module = load(POWER.format(expr="t ** 3 + 1"))
    a = np.random.default_rng().integers(-50, 50, 9, dtype=np.int64)
    o = np.zeros(9, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, o, 9))
    assert o.tolist() == (np.where(a > 3, a * 2, a - 1) ** 3 + 1).tolist()


TWO_POWS = """
import math
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i64, f32, f64


@hpvm.leaf
def leaf(a: In[Ptr[{t}]], a_bytes: i64, o: InOut[Ptr[{t}]], o_bytes: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    o[i] = {expr}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, o: InOut[Ptr[{t}]], o_bytes: i64, n: i64):
    hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, o=o, o_bytes=o_bytes)


a = np.array([float(v) for v in {values}], np.{dtype})
o = np.zeros_like(a)
with hpvm.runtime("cpu"):
    hpvm.wait(hpvm.launch(root, a, o, len(a)))
print(o.tobytes().hex())
"""


@pytest.mark.skipif("cpu" not in TARGETS, reason="the cpu target is not available here")
@pytest.mark.parametrize("t", ["f32"])  # <2 x double> is a legal x86 type: f64 never failed
@pytest.mark.parametrize("expr", ["math.pow(x, 0.5) + math.pow(x + 1.0, 0.5)",
                                  "math.hypot(x, 3.0) * math.hypot(x - 1.0, 2.0)"])
def test_side_by_side_pow_and_hypot_compile_on_cpu(tmp_path, t: str, expr: str) -> None:
    """In a child process: LLVM's abort would take the test runner with it."""
    values = np.random.default_rng().uniform(-2, 40, 37).tolist() + [float("nan"), float("inf"), -0.0]
    script = tmp_path / "two_pows.py"
    script.write_text(TWO_POWS.format(t=t, dtype=t.replace("f", "float"), expr=expr, values=[repr(v) for v in values]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    got = np.frombuffer(bytes.fromhex(run.stdout.strip()), np.dtype(t.replace("f", "float")))
    x = np.array(values, got.dtype)
    with np.errstate(invalid="ignore"):
        want = (np.power(x, 0.5) + np.power(x + 1, 0.5) if "pow" in expr
                else np.hypot(x, 3.0) * np.hypot(x - 1, 2.0))
    np.testing.assert_allclose(got, want, rtol=4 * np.finfo(got.dtype).eps, equal_nan=True)


def outcomes(program: BlindProgram, seed: int, extents: tuple[int, int, int]) -> dict[str, dict]:
    module = load(program.source)
    found = {}
    for target in ["python"] + RUNNABLE:
        found[target] = run_blind(program, module, target, seed, extents)
    previous = os.environ.get("HPVM_PYTHON_VECTOR")
    os.environ["HPVM_PYTHON_VECTOR"] = "0"  # the oracle instance by instance, too
    try:
        found["python (instances)"] = run_blind(program, module, "python", seed, extents)
    finally:
        if previous is None:
            os.environ.pop("HPVM_PYTHON_VECTOR", None)
        else:
            os.environ["HPVM_PYTHON_VECTOR"] = previous
    return found


def check(program: BlindProgram, seed: int, extents: tuple[int, int, int]) -> None:
    found = outcomes(program, seed, extents)
    reference = found.pop("python")
    for target, got in found.items():
        for name, (expected, t) in reference.items():
            assert same(expected, got[name][0], t), (
                f"{target} disagrees on {name} [{t}]\n--- program ---\n{program.source}\n"
                f"--- reference ---\n{expected.tolist()}\n--- got ---\n{got[name][0].tolist()}")


@settings(max_examples=int(os.environ.get("HPVM_DIFF_EXAMPLES", "15")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), seed=st.integers(0, 2**32 - 1),
       extents=st.tuples(st.integers(1, 5), st.integers(1, 3), st.integers(1, 3)))
def test_blind_programs_agree(data: st.DataObject, seed: int, extents: tuple[int, int, int]) -> None:
    program = data.draw(st.composite(lambda draw: blind_program(HypothesisChoices(draw)))())
    extents = tuple(e if d < program.dims else 1 for d, e in enumerate(extents))
    check(program, seed, extents)


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("seed", range(3))
def test_blind_programs_assemble_for_nvptx(seed: int) -> None:
    module = load(blind_program(RandomChoices(seed)).source)
    kernels = [k for _, _, k in compile_graph(module.root, "nvptx").leaf_kernels()]
    assert len(kernels) == 2 and all(k.cubin for k in kernels)
