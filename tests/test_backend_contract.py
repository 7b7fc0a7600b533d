"""The backend contract (backends/base.py, docs/backends.md "Adding a target"): a target is one
Backend subclass and one row of the targets table (ir/targets.py's TARGETS, registry.TARGETS),
which the compiler, the placement policy, the plan, the executor, the streams and the command line
all read: no module names a target to treat it apart."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.errors import LaunchError
from hpvm_py.backends import registry
from hpvm_py.backends.base import Backend, LeafKernel
from hpvm_py.backends.python import PythonBackend, PythonLeafKernel
from hpvm_py.ir.targets import Target, hint_targets, leaf_targets
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.support import stats


@hpvm.leaf
def scaled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = k * x[i]


@hpvm.graph
def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32, n: i64):
    hpvm.node(scaled, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


class ToyKernel(PythonLeafKernel):
    launches = 0

    def launch(self, args, outputs, extents) -> None:
        type(self).launches += 1
        super().launch(args, outputs, extents)


class ToyBackend(PythonBackend):
    """The python target under another name, counting its launches."""

    name = "toy"
    memory_hits = "toy_cache_memory_hits"

    def build(self, leaf, ctx, checked, key):
        return ToyKernel(leaf, ctx, key[-1])


@pytest.fixture
def toy(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(registry.TARGETS, "toy", Target(ToyBackend))  # the one row
    monkeypatch.delitem(registry._instances, "toy", raising=False)
    return "toy"


def test_a_toy_target_is_one_subclass_and_one_row(toy: str) -> None:
    assert registry.available(toy) and registry.compilable(toy)
    x = np.arange(16, dtype=np.float32)
    y = np.zeros_like(x)
    before = ToyKernel.launches
    with hpvm.runtime(toy):
        hpvm.wait(hpvm.launch(scale, x, x.nbytes, y, y.nbytes, np.float32(3), 16))
    np.testing.assert_array_equal(y, 3 * x)
    assert ToyKernel.launches == before + 1
    compiled = compile_graph(scale, toy)
    (node,) = compiled.plan.nodes
    assert node.target == toy and isinstance(node.kernel, ToyKernel)
    assert node.bounds is None  # it checks every access itself, as the python target it extends
    assert not compiled.replayable


@hpvm.graph
def hinted(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32, n: i64):
    hpvm.node(scaled, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, hint="cpu")


class Reference(PythonBackend):
    name = "reference"


def test_the_python_target_is_one_subclass_and_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """The python target's ways (every node runs on it whatever the hints; no leaf may ask for it;
    no replays) come from its row and its class: the same row and a subclass under another name
    make a target that behaves the same."""
    python = registry.TARGETS["python"]
    assert python.reference and not python.leaf and not python.gpu
    monkeypatch.setitem(registry.TARGETS, "reference", Target(Reference, leaf=False, reference=True))
    monkeypatch.delitem(registry._instances, "reference", raising=False)
    assert "reference" in hint_targets() and "reference" not in leaf_targets()
    for target in ("python", "reference"):
        (node,) = compile_graph(hinted, target).plan.nodes
        assert node.target == target and node.placement.origin == "runtime"
    x = np.arange(8, dtype=np.float32)
    y = np.zeros_like(x)
    with hpvm.runtime("reference"):
        hpvm.wait(hpvm.launch(hinted, x, x.nbytes, y, y.nbytes, np.float32(2), 8))
    np.testing.assert_array_equal(y, 2 * x)
    assert not compile_graph(hinted, "reference").replayable


def test_the_gpu_targets_and_the_fallback_are_rows() -> None:
    rows = registry.TARGETS
    assert [t for t, row in rows.items() if row.gpu] == ["gpu", "nvptx"]
    assert rows["gpu"].fallback == ("nvptx", "gpu-supported")
    assert all(row.leaf for t, row in rows.items() if t != "python")


def test_the_shared_memory_cache_counts_per_target(toy: str) -> None:
    (leaf, ctx, kernel), = compile_graph(scale, toy).leaf_kernels()
    hits = stats.snapshot().get("toy_cache_memory_hits", 0)
    backend = registry.get(toy)
    assert backend is not None and backend.compile_leaf(leaf, ctx) is kernel
    assert stats.snapshot().get("toy_cache_memory_hits", 0) == hits + 1
    assert ToyBackend._memory is not PythonBackend._memory  # one table per target


def test_the_defaults_of_the_contract() -> None:
    class Bare(Backend):
        name = "bare"

    bare = Bare()
    assert bare.available() and bare.compilable() and "bare" in bare.why_unavailable()
    assert not Bare.checks_accesses and not Bare.compiles_at_launch and Bare.replays
    assert Bare.emits == {} and LeafKernel.prepares and LeafKernel.device is None
    assert not PythonLeafKernel.prepares
    with pytest.raises(NotImplementedError):
        bare.emit("llvm", None, None)  # type: ignore[arg-type]


def test_unknown_target_lists_the_table() -> None:
    with pytest.raises(LaunchError, match="cpu, gpu, nvptx, python"):
        compile_graph(scale, "tpu")
