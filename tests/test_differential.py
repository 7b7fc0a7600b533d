"""Differential testing: random programs must compute the same on every target.

Each generated program (tests/differential/generator.py) runs on the python target twice (as whole
arrays, and instance by instance) and on every compiled target available; outputs must agree bit
for bit (NaNs compare equal whatever their payload; -0.0 and 0.0 do not). Transcendental functions
are left out of the bitwise part: they come from different libraries on each target (libm, NumPy,
CUDA) and agree to a few ulps, which tests/test_semantics.py checks with a tolerance.

A failing case prints the program's source and inputs: paste them into a regular test.
HPVM_DIFF_EXAMPLES sets the number of programs (default 200).
"""
from __future__ import annotations

import os

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpvm_py as hpvm
from hpvm_py import types as T
from conftest import TARGETS
from differential.data import load, same, scalar, values
from differential.generator import Program, programs

EXAMPLES = int(os.environ.get("HPVM_DIFF_EXAMPLES", "200"))


def run(program: Program, target: str, vector: bool, inputs: dict) -> dict[str, np.ndarray]:
    module = load(program.source)
    arrays = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
    a, b, out, hist, out2 = (arrays[k] for k in ("a", "b", "out", "hist", "out2"))
    previous = os.environ.get("HPVM_PYTHON_VECTOR")
    os.environ["HPVM_PYTHON_VECTOR"] = "1" if vector else "0"
    try:
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, out, out.nbytes, hist, hist.nbytes,
                                  out2, out2.nbytes, inputs["s"], inputs["n"], inputs["p"], inputs["l"]))
    finally:
        if previous is None:
            os.environ.pop("HPVM_PYTHON_VECTOR", None)
        else:
            os.environ["HPVM_PYTHON_VECTOR"] = previous
    return {"out": out, "hist": hist, "out2": out2}


def describe(program: Program, inputs: dict, name: str, got: dict, expected: dict) -> str:
    shown = {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()}
    return (f"targets disagree on {name}\n--- program ---\n{program.source}\n--- inputs ---\n{shown}\n"
            f"--- reference (python, vectorised) ---\n{expected[name].tolist()}\n"
            f"--- got ---\n{got[name].tolist()}")


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                 HealthCheck.filter_too_much])
@given(program=programs(), seed=st.integers(0, 2**32 - 1), shape=st.tuples(st.integers(1, 3), st.integers(1, 6)))
def test_targets_agree(program: Program, seed: int, shape: tuple[int, int]) -> None:
    rng = np.random.default_rng(seed)
    p, l = shape if program.hierarchical else (1, shape[0] * shape[1])
    n = p * l
    a_t, b_t, s_t = program.in_types
    out_dtype = T.SCALAR_TYPES[program.out_type].numpy_dtype
    inputs = {"a": values(a_t, n, rng), "b": values(b_t, n, rng), "out": np.zeros(n, out_dtype),
              "hist": rng.integers(-5, 5, 16, dtype=np.int32), "out2": np.zeros(n, np.int64),
              "s": scalar(s_t, rng), "n": n, "p": p, "l": l}
    reference = run(program, "python", True, inputs)
    configurations = [("python", False)] + [(t, True) for t in TARGETS if t != "python"]
    for target, vector in configurations:
        got = run(program, target, vector, inputs)
        for name, t in (("out", program.out_type), ("hist", "i32"), ("out2", "i64")):
            assert same(got[name], reference[name], t), \
                f"[{target}{'' if vector else ', per instance'}] " + describe(program, inputs, name, got, reference)
