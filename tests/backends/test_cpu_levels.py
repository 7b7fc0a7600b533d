"""HPVM_CPU_LEVEL: the cpu target's code for an x86-64 level instead of this CPU, so that a machine
with AVX-512 runs the code an AVX2 machine would get, and the differential runner checks it there."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import llvmlite.binding as llvm
import pytest

from hpvm_py.backends import jit
from hpvm_py.errors import CompileError

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


def _supported() -> list[str]:
    host = llvm.get_host_cpu_features()
    names = list(jit.LEVELS)
    return [name for k, name in enumerate(names)
            if all(host.get(f, False) for level in names[:k + 1] for f in jit.LEVELS[level])]


SUPPORTED = _supported()


def _level(name: str):  # noqa: ANN202
    return pytest.param(name, marks=pytest.mark.skipif(name not in SUPPORTED,
                                                       reason=f"this CPU cannot run {name} code"))


def test_an_unknown_level_is_refused(monkeypatch):
    monkeypatch.setenv("HPVM_CPU_LEVEL", "skylake")
    with pytest.raises(CompileError, match=r"HPVM_CPU_LEVEL='skylake': expected one of x86-64-v3, "):
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
    features["avx512bw"] = False
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v3")  # what it needs is there again
    assert jit.code_cpu() == ("x86-64-v3", "")
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64-v4")
    with pytest.raises(CompileError, match=r"lacks avx512bw,"):
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


@pytest.mark.parametrize("level", [_level("x86-64-v3"), _level("x86-64-v4")])
def test_the_differential_runner_agrees_at_a_level(level, tmp_path):
    """A few random graphs of every category, compiled for the level, against the python target
    (the runner itself is run at the levels on more graphs: docs/debugging.md)."""
    env = dict(os.environ, HPVM_CPU_LEVEL=level, HPVM_CACHE_DIR=str(tmp_path / "cache"))
    done = subprocess.run([sys.executable, str(RUNNER), "--graphs", "12", "--targets", "cpu", "--seed", "12",
                           "--save-dir", str(tmp_path / "saved")], capture_output=True, text=True, timeout=400,
                          env=env)
    assert done.returncode == 0 and " 0 mismatches" in done.stdout, done.stdout + done.stderr
