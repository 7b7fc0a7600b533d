"""A leaf whose target cannot run here: the error names the leaf's line, says why the target is
missing (from the backend's own import error or its why_unavailable()) and what to do instead.
The gpu backend's state is replaced for each test, so these hold whether or not it exists here."""
from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.errors import CompileError
from hpvm_py.rt.compiler import TARGETS

LEAF_LINE = 23  # the line of `def doubled` below


@hpvm.leaf(target="gpu")
def doubled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = 2.0 * x[i]


@hpvm.graph
def gpu_only(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(doubled, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


@pytest.fixture
def gpu_backend(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Point the gpu target at a module of our choosing; returns the setter."""
    monkeypatch.setattr(registry, "_instances", {k: v for k, v in registry._instances.items() if k != "gpu"})
    monkeypatch.setattr(registry, "_errors", {k: v for k, v in registry._errors.items() if k != "gpu"})
    monkeypatch.syspath_prepend(str(tmp_path))

    def use(module: str, source: str | None = None, cls: str = "Backend") -> None:
        if source is not None:
            (tmp_path / f"{module}.py").write_text(source)
            sys.modules.pop(module, None)
        row = dataclasses.replace(registry.TARGETS["gpu"], backend=(module, cls))
        monkeypatch.setitem(registry.TARGETS, "gpu", row)

    return use


def _error(target: str) -> str:
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(CompileError) as info:
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(gpu_only, x, x.nbytes, y, y.nbytes, 8))
    text = str(info.value)
    assert f"{Path(__file__).name}:{LEAF_LINE}:" in text and "Traceback" not in text
    assert "leaf doubled runs on target 'gpu'" in text and "target='gpu'" in text
    here = ", ".join(t for t in TARGETS if t != "gpu" and registry.available(t))  # nvptx on a GPU machine
    assert "target='any'" in text and f"({here})" in text
    return text


def test_backend_not_installed(gpu_backend) -> None:
    gpu_backend("hpvm_py.backends.not_in_this_copy")
    text = _error("cpu")
    assert "has no gpu backend" in text and "No module named" not in text
    assert registry.why_unavailable("gpu") in text


def test_backend_needs_a_missing_package(gpu_backend) -> None:
    gpu_backend("fake_gpu_backend", "import hpvm_test_missing_package.kernels\nclass Backend: pass\n")
    text = _error("cpu")
    assert "needs the Python package 'hpvm_test_missing_package'" in text
    assert "pip install hpvm_test_missing_package" in text


def test_backend_without_a_device_gives_its_own_reason(gpu_backend) -> None:
    gpu_backend("fake_gpu_device", "from hpvm_py.backends import base\n"
                "class Backend(base.Backend):\n    name = 'gpu'\n"
                "    def available(self):\n        return False\n"
                "    def why_unavailable(self):\n        return 'no CUDA driver was found'\n")
    assert not registry.available("gpu")
    text = _error("cpu")
    assert "no CUDA driver was found" in text


def test_unknown_target_is_named() -> None:
    assert "no target 'tpu'" in registry.why_unavailable("tpu")


UNRUNNABLE_TRITON = '''
from hpvm_py.backends.triton import TritonBackend


class Backend(TritonBackend):
    """Triton is installed (source is generated) but no CUDA GPU and no interpreter are here."""

    def available(self):
        return False

    def why_unavailable(self):
        return "target 'gpu' needs a CUDA GPU (none here)"
'''


@pytest.mark.skipif(registry.get("gpu") is None, reason="needs triton")
def test_a_gpu_leaf_without_cuda_is_a_compile_error_at_its_line(gpu_backend) -> None:
    """Issue 20: the graph compiles (Triton source needs no GPU), but its launch cannot compile the
    kernels: a CompileError at the leaf's line, with why and the targets that run here, as
    docs/language.md promises, not a LaunchError."""
    gpu_backend("unrunnable_triton", UNRUNNABLE_TRITON)
    assert registry.compilable("gpu") and not registry.available("gpu")
    x, y = np.ones(8, np.float32), np.zeros(8, np.float32)
    with pytest.raises(CompileError) as info:
        with hpvm.runtime("cpu"):
            hpvm.wait(hpvm.launch(gpu_only, x, x.nbytes, y, y.nbytes, 8))
    text = str(info.value)
    assert f"{Path(__file__).name}:{LEAF_LINE}:" in text and info.value.rule == "target-available"
    assert "@hpvm.leaf(target='gpu') of doubled" in text and "needs a CUDA GPU (none here)" in text
    here = ", ".join(t for t in TARGETS if t != "gpu" and registry.available(t))
    assert f"available here: {here})" in text and "hint 'cpu'" in text
