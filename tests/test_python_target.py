"""The python target: print() and breakpoint() in leaves, errors at the leaf's own line, and the
two execution shapes (vectorised and per instance) agreeing."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from hpvm_py.backends.base import BufferArg, NodeContext
from hpvm_py.backends.python import PythonBackend
from conftest import TARGETS
from programs import python_target_kernels as kernels

PROGRAM = textwrap.dedent('''
    import numpy as np
    import hpvm_py as hpvm
    from hpvm_py import InOut, Ptr, f32, i64

    @hpvm.leaf
    def k(a: InOut[Ptr[f32]], a_bytes: i64):
        i = hpvm.instance_id(0)
        v = a[i] * 2.0
        MARKER
        a[i] = v

    @hpvm.graph
    def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
        hpvm.node(k, grid=n, a=a, a_bytes=a_bytes)

    a = np.arange(3, dtype=np.float32)
    with hpvm.runtime(TARGET):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, 3))
    print("result", a.tolist())
''')


def write_program(tmp_path: Path, marker: str, target: str = "python") -> Path:
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM.replace("MARKER", marker).replace("TARGET", repr(target)))
    return path


def run(path: Path, stdin: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    env.pop("PYTHONBREAKPOINT", None)
    return subprocess.run([sys.executable, str(path)], input=stdin, capture_output=True, text=True,
                          timeout=120, env=env)


def test_print_in_a_leaf_prints_every_instance(tmp_path: Path) -> None:
    result = run(write_program(tmp_path, 'print("instance", i, "value", v)'))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if line.startswith("instance")]
    assert sorted(lines) == ["instance 0 value 0.0", "instance 1 value 2.0", "instance 2 value 4.0"]
    assert "result [0.0, 2.0, 4.0]" in result.stdout


def test_breakpoint_stops_in_the_leaf_at_its_source_line(tmp_path: Path) -> None:
    path = write_program(tmp_path, "breakpoint()")
    # at the first stop: show the location and a variable, then continue through every instance
    result = run(path, stdin="p (int(i), float(v))\nl\nc\nc\nc\n")
    assert result.returncode == 0, result.stderr
    assert "(0, 0.0)" in result.stdout
    assert str(path) in result.stdout  # pdb shows the leaf's own file ...
    assert "v = a[i] * 2.0" in result.stdout  # ... and its source lines
    assert "result [0.0, 2.0, 4.0]" in result.stdout


@pytest.mark.skipif(TARGETS == ["python"], reason="no compiled target on this machine")
def test_print_is_rejected_on_compiled_targets(tmp_path: Path, compiled_target: str) -> None:
    result = run(write_program(tmp_path, 'print("x")', compiled_target))
    assert result.returncode != 0
    assert "print() is supported only by target='python'" in result.stderr
    assert "prog.py:10" in result.stderr


def test_out_of_bounds_names_the_leaf_line(tmp_path: Path) -> None:
    path = write_program(tmp_path, "v = a[i + 5]")
    result = run(path)
    assert result.returncode != 0
    assert "ExecutionError" in result.stderr and f"{path}:10" in result.stderr
    assert "out-of-bounds load from a[" in result.stderr and "[rule: memory-in-bounds]" in result.stderr


LEAF_SOURCE = Path(__file__).resolve().parent / "programs" / "python_target_kernels.py"


def test_vector_and_per_instance_shapes_agree(rng) -> None:
    from programs import python_target_kernels as kp

    leaf = kp.masked.ir
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform", "uniform"),
                      output_modes=())
    x = (rng.standard_normal(3000) * 10).astype(np.float32)
    outs = []
    for vector in ("1", "0"):
        os.environ["HPVM_PYTHON_VECTOR"] = vector
        try:
            kernel = PythonBackend().compile_leaf(leaf, ctx)
            assert kernel.code.vector == (vector == "1")
            y = np.zeros_like(x)
            from hpvm_py.backends.base import BufferArg

            kernel.launch([BufferArg(x, 0, x.nbytes, x), np.int64(x.nbytes), BufferArg(y, 0, y.nbytes, y),
                           np.int64(y.nbytes), np.int64(2900)], [], [(3000,)])
            outs.append(y)
        finally:
            os.environ.pop("HPVM_PYTHON_VECTOR", None)
    np.testing.assert_array_equal(outs[0], outs[1])
    assert outs[0][2900:].sum() == 0  # guarded instances wrote nothing


@pytest.mark.parametrize("vector", ["1", "0"])
@pytest.mark.parametrize("instances", [5, 0])
def test_guarded_accesses_to_empty_buffers_touch_nothing(vector: str, instances: int,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 20: loads, stores and atomics that no instance runs, on buffers of 0 elements (the
    vectorised shape once gathered an empty selection and failed to broadcast it); also a grid of
    no instance."""
    monkeypatch.setenv("HPVM_PYTHON_VECTOR", vector)
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 4 + ("uniform",),
                      output_modes=())
    kernel = PythonBackend().compile_leaf(kernels.guarded.ir, ctx)
    assert kernel.code.vector == (vector == "1")
    a, b, h = np.zeros(0, np.float32), np.zeros(0, np.float32), np.zeros(0, np.int32)
    out = np.zeros(instances, np.float32)
    args = [arg for buf in (a, b, h, out) for arg in (BufferArg(buf, 0, buf.nbytes, buf), np.int64(buf.nbytes))]
    kernel.launch(args + [np.int64(0)], [], [(instances,)])
    assert np.array_equal(out, np.ones(instances, np.float32))

def test_generated_code_is_readable_and_keeps_names() -> None:
    from programs import python_target_kernels as kp

    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform", "uniform"),
                      output_modes=())
    source = PythonBackend().compile_leaf(kp.masked.ir, ctx).source
    assert "def masked(x, x_bytes, y, y_bytes, n" in source
    assert "limit" in source  # the user's variable names survive


def test_large_vadd_and_stencil_run_vectorised() -> None:
    """What makes the held-out sizes run in seconds: whole-array NumPy code, not instance by
    instance (asserted on the generated kernels rather than timed, which would depend on the host)."""
    import hpvm_py as hpvm
    import stencil
    import vadd

    for root in (vadd.root, stencil.root):
        kernels = hpvm.compile(root, target="python").leaf_kernels()
        assert kernels and all(kernel.code.vector for _, _, kernel in kernels), root
    vadd.main("python", n=100_000)  # each checks its result against NumPy
    stencil.main("python", nx=70, ny=20, nz=12)


def test_locals_named_like_generated_names(target: str, rng) -> None:
    """A leaf whose locals are called group, lanes, id_0x, n_0x, _t1 and np (names the python
    target generates or imports) sums blocks through scratch memory and barriers on every target
    as NumPy does (it once broke malloc on the python target)."""
    import hpvm_py as hpvm

    n, block = 1000, kernels.CLASH_BLOCK
    blocks = -(-n // block)
    x = rng.standard_normal(n).astype(np.float32)
    partial = np.zeros(blocks, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(kernels.clashing_root, x, x.nbytes, partial, partial.nbytes, n, blocks))
    padded = np.zeros(blocks * block, np.float32)
    padded[:n] = x
    np.testing.assert_allclose(partial, padded.reshape(blocks, block).sum(1), rtol=1e-5, atol=1e-5)
