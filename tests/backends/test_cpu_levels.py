"""HPVM_CPU_LEVEL: the cpu target's code for an x86-64 level instead of this CPU, so that a machine
with AVX-512 runs the code an AVX2 machine would get, and the differential runner checks it there.
Below x86-64-v3 there is no F16C: f16 converts through backends/softhalf.py's helpers, checked here
on every half and on floats at every rounding boundary."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import jit
from hpvm_py.errors import CompileError
from programs import semantic_kernels as K
from hpvm_py import types as T

RUNNER = Path(__file__).resolve().parents[1] / "differential" / "runner.py"
VECTOR_IR = """
define void @add(ptr noalias %a, ptr noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %next, %loop ]
  %pa = getelementptr float, ptr %a, i64 %i
  %pb = getelementptr float, ptr %b, i64 %i
  %x = load float, ptr %pa
  %y = load float, ptr %pb
  %s = fadd float %x, %y
  store float %s, ptr %pa
  %next = add i64 %i, 1
  %done = icmp eq i64 %next, %n
  br i1 %done, label %exit, label %loop
exit:
  ret void
}
"""


SUPPORTED = jit.runnable_levels()


def _level(name: str):  # noqa: ANN202
    return pytest.param(name, marks=pytest.mark.skipif(name not in SUPPORTED,
                                                       reason=f"this CPU cannot run {name} code"))


def test_an_unknown_level_is_refused(monkeypatch):
    monkeypatch.setenv("HPVM_CPU_LEVEL", "skylake")
    with pytest.raises(CompileError, match=r"HPVM_CPU_LEVEL='skylake': expected one of x86-64, "):
        jit.code_cpu()


def test_a_level_beyond_this_cpu_is_refused(monkeypatch):
    """Code this CPU cannot run would die of an illegal instruction: refused, naming what lacks."""
    features = llvm.get_host_cpu_features()
    features["avx2"] = False
    features["fma"] = False
    monkeypatch.setattr(llvm, "get_host_cpu_features", lambda: features)
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v3")
    with pytest.raises(CompileError, match=r"lacks avx2, fma, so code for that level could not run here"):
        jit.code_cpu()
    features["avx2"] = features["fma"] = True
    # x86-64-v4's AVX-512 all there but one, whatever this machine has (CI's may have none)
    for feature in ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"):
        features[feature] = feature != "avx512bw"
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v3")  # what it needs is there again
    assert jit.code_cpu() == ("x86-64-v3", "")
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v4")
    with pytest.raises(CompileError, match=r"lacks avx512bw, so code for that level could not run"):
        jit.code_cpu()


@pytest.mark.skipif("x86-64-v3" not in SUPPORTED, reason="this CPU has no AVX2")
def test_the_level_decides_the_vector_registers(monkeypatch):
    """x86-64-v3 vectorises with AVX2's ymm registers and never AVX-512's zmm; the cache key names
    the level."""
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v3")
    assembly = jit.target_machine().emit_assembly(jit.optimize(VECTOR_IR))
    at_level = jit.host_signature()
    monkeypatch.delenv("HPVM_CPU_LEVEL")
    assert "ymm" in assembly and "zmm" not in assembly
    assert "cpu=x86-64-v3;" in at_level and at_level != jit.host_signature()


def test_without_f16c_halves_convert_in_software(monkeypatch):
    """At x86-64-v2 LLVM calls __extendhfsf2 and __truncsfhf2; the JIT gets softhalf.py's."""
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v2")
    ir = """
define float @widen(half %h) {
  %f = fpext half %h to float
  ret float %f
}
define half @narrow(float %f) {
  %h = fptrunc float %f to half
  ret half %h
}
"""
    data = jit.emit_object(jit.optimize(ir))
    assert set(jit.undefined_symbols(data)) == {"__extendhfsf2", "__truncsfhf2"}
    loaded = jit.LoadedObject(data)  # refused if the helpers were not provided
    assert loaded.address("widen") and loaded.address("narrow")


def _convert_all(level: str, monkeypatch) -> None:
    """Every f16 bit pattern to f32, and floats around every f16 rounding boundary (and random
    ones) to f16, compiled for `level`, bit for bit against NumPy."""
    monkeypatch.setenv("HPVM_CPU_LEVEL", level)
    halves = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    widened = halves.astype(np.float32)
    # each f16 value and the floats just below and above it, the midpoints to its neighbours
    # and their neighbours, then random floats of every exponent
    finite = np.sort(np.unique(widened[np.isfinite(widened)]))
    mids = ((finite[:-1].astype(np.float64) + finite[1:]) / 2).astype(np.float32)
    rng = np.random.default_rng(4242)
    edges = np.concatenate([finite, mids, np.float32([65504, 65519.996, 65520, 65536, 1e30, np.inf,
                                                      -np.inf, np.nan, 2.0 ** -25, 2.0 ** -26])])
    edges = np.concatenate([edges, np.nextafter(edges, np.float32(np.inf)),
                            np.nextafter(edges, np.float32(-np.inf))])
    floats = np.concatenate([edges, -edges, rng.integers(0, 1 << 32, 200_000, dtype=np.uint64)
                             .astype(np.uint32).view(np.float32)])
    cast = K.make_graph(K.make_cast(T.f16, T.f32), 2)
    back = K.make_graph(K.make_cast(T.f32, T.f16), 2)
    with hpvm.runtime("cpu"):
        out = np.zeros(len(halves), np.float32)
        hpvm.wait(hpvm.launch(cast, halves, halves.nbytes, out, out.nbytes, len(halves)))
        nan = np.isnan(widened)
        np.testing.assert_array_equal(out[~nan].view(np.uint32), widened[~nan].view(np.uint32))
        assert np.isnan(out[nan]).all()
        narrowed = np.zeros(len(floats), np.float16)
        hpvm.wait(hpvm.launch(back, floats, floats.nbytes, narrowed, narrowed.nbytes, len(floats)))
    with np.errstate(over="ignore"):
        want = floats.astype(np.float16)
    nan = np.isnan(want)
    np.testing.assert_array_equal(narrowed[~nan].view(np.uint16), want[~nan].view(np.uint16))
    assert np.isnan(narrowed[nan]).all()


@pytest.mark.parametrize("level", [_level("x86-64"), _level("x86-64-v3")])
def test_halves_convert_at_a_level_as_numpy_does(level, monkeypatch):
    """The software conversions (x86-64) and F16C's (x86-64-v3) give NumPy's bits."""
    _convert_all(level, monkeypatch)


@pytest.mark.parametrize("level", [_level("x86-64"), _level("x86-64-v2"), _level("x86-64-v3"),
                                   _level("x86-64-v4")])
def test_the_differential_runner_agrees_at_a_level(level, tmp_path):
    """A few random graphs of every category, compiled for the level, against the python target
    (the runner itself is run at the levels on more graphs: docs/debugging.md)."""
    env = dict(os.environ, HPVM_CPU_LEVEL=level, HPVM_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(RUNNER), "--graphs", "12", "--targets", "cpu", "--seed", "12",
                           "--save-dir", str(tmp_path / "saved")], capture_output=True, text=True, timeout=400,
                          env=env)
    assert done.returncode == 0 and " 0 mismatches" in done.stdout, done.stdout + done.stderr
