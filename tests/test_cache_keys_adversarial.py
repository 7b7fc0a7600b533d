"""The caches of compiled code keyed by everything the code depends on: a setting that changes the
code a backend generates, changed between two compiles of the same leaf in one process, gives the
second compile the code for its own value, not the kernel the memory cache kept for the first."""
from __future__ import annotations

import platform
import struct
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f16, f32, i64
from hpvm_py.backends import jit, registry
from hpvm_py.rt import lowering_choice as C
from hpvm_py.support import stats
from programs import lowering_stand_ins as S

N = 64


@hpvm.leaf
def widen(a: In[Ptr[f16]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    b[i] = f32(a[i]) * f32(2.0)


@hpvm.graph
def widen_graph(a: In[Ptr[f16]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    hpvm.node(widen, grid=(N,), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes)


def _compiled_kernel(graph, target: str):  # noqa: ANN001, ANN202
    graph.compiled_for.clear()  # a compile of its own (the graph keeps what it compiled)
    kernel, = [k for _, _, k in hpvm.compile(graph, target=target).leaf_kernels()]
    return kernel


def _widened(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    a = rng.standard_normal(N).astype(np.float16)
    b = np.zeros(N, np.float32)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(widen_graph, a, a.nbytes, b, b.nbytes))
    return b, a.astype(np.float32) * np.float32(2.0)


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64") or not
                    registry.available("cpu") or "x86-64-v3" not in jit.runnable_levels(),
                    reason="needs an x86-64 CPU with F16C")
def test_a_cpu_level_set_between_compiles_gets_code_for_that_level(monkeypatch, tmp_path: Path) -> None:
    """The cpu target's memory cache was keyed by the IR, the context and checked only: after
    HPVM_CPU_LEVEL=x86-64, a new compile of a leaf compiled before for this CPU got the kernel made
    for this CPU (F16C conversions, AVX2), never code for the level asked for; code for the level
    converts f16 in software (softhalf.py's helpers)."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    monkeypatch.delenv("HPVM_CPU_LEVEL", raising=False)
    rng = np.random.default_rng()
    native = _compiled_kernel(widen_graph, "cpu")
    got, want = _widened(rng)
    np.testing.assert_array_equal(got, want)
    monkeypatch.setenv("HPVM_CPU_LEVEL", "x86-64")
    baseline = _compiled_kernel(widen_graph, "cpu")
    assert baseline._code is not native._code
    got, want = _widened(rng)
    np.testing.assert_array_equal(got, want)
    # the objects made (each under its level's disk key): one for this CPU, one for x86-64 whose
    # conversions call the software helpers
    objects = [p.read_bytes() for p in (tmp_path / "cache").rglob("*.cpu.o")]
    helpers = [sorted(s for s in jit.undefined_symbols(o) if s.startswith("__")) for o in objects]
    assert sorted(helpers) == [[], ["__extendhfsf2"]]
    monkeypatch.delenv("HPVM_CPU_LEVEL")
    hits = stats.snapshot().get("cpu_cache_memory_hits", 0)
    _compiled_kernel(widen_graph, "cpu")  # each level's kernel is kept
    assert stats.snapshot()["cpu_cache_memory_hits"] == hits + 1


@hpvm.leaf
def square(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    b[i] = a[i] * a[i]


@hpvm.graph
def square_graph(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    hpvm.node(square, grid=(N,), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes)


def _cubin_arch(cubin: bytes) -> int:
    """The SM a cubin is for: the low byte of its ELF header's e_flags (0x5a: sm_90)."""
    return struct.unpack_from("<I", cubin, 0x30)[0] & 0xFF


@pytest.mark.skipif(not registry.compilable("nvptx"), reason="no ptxas here")
def test_an_nvptx_arch_set_between_compiles_gets_a_cubin_for_that_arch(monkeypatch,
                                                                      tmp_path: Path) -> None:
    """The nvptx target's memory cache was keyed by the IR, the context and checked only: after
    HPVM_NVPTX_ARCH=sm_90, a new compile of a leaf compiled before for sm_80 got the sm_80 cubin
    (which an sm_90 GPU does not load)."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    for arch in ("sm_80", "sm_90", "sm_80"):
        monkeypatch.setenv("HPVM_NVPTX_ARCH", arch)
        kernel = _compiled_kernel(square_graph, "nvptx")
        assert _cubin_arch(kernel.cubin) == int(arch[3:])


# one leaf, as two .hpvm files hold it: equal IR (locations are not part of it) at other places
OVER_TEXT = """version 1
module @g

graph @g(%a: in ptr<f32>, %a_bytes: i64, %b: out ptr<f32>, %b_bytes: i64) -> () {
  node %over = @over [8]
  bind_in %a -> %over.0
  bind_in %a_bytes -> %over.1
  bind_in %b -> %over.2
  bind_in %b_bytes -> %over.3
}

leaf @over(%a: in ptr<f32>, %a_bytes: i64, %b: out ptr<f32>, %b_bytes: i64) -> () target(any) {
  local %i: i64
  %i = instance_id.x(0)
  store %b[%i] = load<f32>(%a, add<i64>(%i, 1:i64))
}
"""


@pytest.mark.parametrize("target", [t for t in ("python", "cpu", "gpu") if registry.available(t)])
def test_a_leaf_equal_to_one_compiled_elsewhere_reports_errors_at_its_own_line(target: str) -> None:
    """The python target's memory cache served a leaf the kernel compiled for another leaf of equal
    IR at other lines (another file's): its out-of-bounds error named the first file's line."""
    a = np.random.default_rng().standard_normal(8).astype(np.float32)
    b = np.zeros(8, np.float32)
    for name, blank, line in (("first.hpvm", "", 15), ("second.hpvm", "\n\n", 17),
                              ("first.hpvm", "", 15)):
        graph = hpvm.from_text(blank + OVER_TEXT, name)
        with hpvm.runtime(target), pytest.raises(hpvm.errors.ExecutionError) as caught:
            hpvm.wait(hpvm.launch(graph, a, a.nbytes, b, b.nbytes))
        assert (caught.value.loc.file, caught.value.loc.line) == (name, line)
        assert "out-of-bounds load from a[8]" in str(caught.value)


def test_a_python_kernel_still_serves_a_leaf_of_equal_ir_at_the_same_lines() -> None:
    kernels = [hpvm.compile(hpvm.from_text(OVER_TEXT, "same.hpvm"), target="python").leaf_kernels()
               for _ in range(2)]
    assert kernels[0][0][2] is kernels[1][0][2]


@pytest.mark.parametrize("setting, first, second", [("HPVM_DOT_PRECISION", "ieee", "tf32x3"),
                                                    ("HPVM_NVPTX_ARCH", "sm_80", "sm_90")])
def test_a_lowering_decision_is_not_read_back_for_other_code(monkeypatch, tmp_path: Path,
                                                            setting: str, first: str,
                                                            second: str) -> None:
    """The disk cache's decision between the Triton and NVPTX lowerings was keyed without the
    settings that change their code: a process with HPVM_DOT_PRECISION=tf32x3 (Triton's dot
    kernels on tensor cores) kept the lowering timed against the IEEE kernel, never timing its
    own."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    monkeypatch.delenv("HPVM_GPU_LOWERING", raising=False)

    def decide(setting_value: str, gpu: float, nvptx: float) -> str:
        monkeypatch.setenv(setting, setting_value)
        monkeypatch.setattr(C, "_kept", {})  # a new process: only the disk remembers
        stand_ins = S.StandIns({"gpu": gpu, "nvptx": nvptx})
        S.install(stand_ins, monkeypatch.setattr)
        choice = C.LoweringChoice(S.bump.ir, S.CTX, "gpu", stand_ins.compile)
        call, _ = S.launch_args(C.MIN_INSTANCES)
        return choice.kernel_for(stand_ins.own("gpu"), False, call, [], [(C.MIN_INSTANCES,)],
                                 "cuda:0").target

    assert decide(first, gpu=2.0, nvptx=1.0) == "nvptx"
    assert decide(second, gpu=1.0, nvptx=2.0) == "gpu"  # timed again: its own code is faster
    assert decide(first, gpu=1.0, nvptx=2.0) == "nvptx"  # the first setting's decision, kept
