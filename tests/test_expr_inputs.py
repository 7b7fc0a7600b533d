"""Integer expressions of graph parameters on node inputs (`hpvm.node(f, size=rows * cols)`):
evaluated when the node fires on every target, kept by the textual IR (bind_expr) and by
`hpvmc compile` / `hpvm.load`, and refused with a located error where they cannot feed an input."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.errors import ExecutionError, HPVMError, VerificationError
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.ir.verify import verify_module

from errcheck import check_error, program_path
from programs import expr_input_errors as E
from programs import expr_inputs as P

ROOT = Path(__file__).resolve().parent.parent


def _expected(x: np.ndarray, rows: int, cols: int) -> np.ndarray:
    i = np.arange(rows * cols)
    y = x * (i // cols).astype(np.float32)
    y[rows * cols - 1] += np.float32(1)
    return y


def _run(graph, target: str, rows: int, cols: int, rng) -> None:
    x = rng.standard_normal(rows * cols).astype(np.float32)
    y = np.zeros_like(x)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, x, x.nbytes, y, y.nbytes, rows, cols))
    np.testing.assert_array_equal(y, _expected(x, rows, cols))


@pytest.mark.parametrize("rows,cols", [(1, 1), (3, 7), (17, 5)])
def test_expressions_feed_inputs_on_every_target(target, rows, cols, rng):
    _run(P.expr_root, target, rows, cols, rng)


@pytest.mark.parametrize("graph", [P.expr_ref_root, P.nested_root], ids=["bind_input", "nested"])
def test_reference_form_and_nested_graphs(target, graph, rng):
    _run(graph, target, 4, 6, rng)


def test_a_relaunch_evaluates_the_expressions_again(target, rng):
    """The second launch with the same buffers may take the replay path; new sizes are new keys."""
    with hpvm.runtime(target):
        for rows, cols in [(4, 4), (4, 4), (2, 8), (2, 8), (4, 4)]:
            x = rng.standard_normal(16).astype(np.float32)
            y = np.zeros_like(x)
            hpvm.wait(hpvm.launch(P.expr_root, x, x.nbytes, y, y.nbytes, rows, cols))
            np.testing.assert_array_equal(y, _expected(x, rows, cols))


def test_expressions_in_a_streaming_launch(target, rng):
    items = [(rng.standard_normal(12).astype(np.float32), np.zeros(12, np.float32)) for _ in range(3)]
    with hpvm.runtime(target):
        handle = hpvm.launch(P.streaming_root, stream=True)
        for x, y in items:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, 3, 4)
        for _ in items:
            hpvm.pop(handle)
        hpvm.wait(handle)
    for x, y in items:
        np.testing.assert_array_equal(y, _expected(x, 3, 4))


def test_an_expression_of_per_parent_values(target):
    acc = np.zeros(1, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.per_parent_root, acc, acc.nbytes, 6))
    assert acc[0] == 6 * (5 * 2 + 1)


def test_the_textual_ir_keeps_expressions(target, rng):
    text = print_module(P.expr_root.module())
    node = P.scale_rows.user_name  # (a node is named after its def, not its process-unique IR name)
    assert f"bind_expr %rows * %cols -> %{node}.4" in text
    assert f"bind_expr %cols % (%cols + 1) -> %{node}.5" in text
    assert f"bind_expr (%rows * %cols - 1) // 1 -> %{node}.6" in text
    parsed = parse_module(text, "expr.hpvm")
    assert print_module(parsed) == text
    assert parsed.root_func.expr_binds == P.expr_root.module().root_func.expr_binds
    verify_module(parsed)
    _run(hpvm.from_text(text, "expr.hpvm"), target, 5, 3, rng)


def test_hpvmc_compile_then_load_keeps_expressions(tmp_path, rng):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "hpvm_py.cli", "compile", str(ROOT / "tests" / "programs" / "expr_inputs.py"),
         "--graph", "expr_root", "--target", "python", "-o", str(out)], capture_output=True,
        text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "bind_expr %rows * %cols" in (out / "expr_root.hpvm").read_text()
    graph = hpvm.load(out, "expr_root")
    for target in ("python", "cpu"):
        _run(graph, target, 3, 5, rng)


@pytest.mark.parametrize("graph,tag", [
    (E.bad_pointer_expr, "ptr-expr"),
    (E.bad_float_expr, "float-expr"),
    (E.bad_float_param, "float-param"),
    (E.bad_pointer_arith, "ptr-arith"),
    (E.bad_streamed_expr, "stream"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_expressions_are_located_errors(graph, tag):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(graph, target="python")
    rule = "internal-nodes-only-structure" if tag in ("float-param", "ptr-arith") else "node-inputs"
    check_error(info.value, VerificationError, program_path(E), tag, rule)


def test_a_value_outside_the_input_type_fails_the_launch(target):
    y = np.zeros(1, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(E.overflow_at_launch, y, y.nbytes, 1))  # 100 fits an i8
        assert y[0] == 100
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(E.overflow_at_launch, y, y.nbytes, 2))
    check_error(info.value, ExecutionError, program_path(E), "overflow", "node-inputs")
    assert "200" in str(info.value)


_TEXT_INPUT = """
module @root
graph @root(%a: in ptr<f32>, %a_bytes: i64, %n: i64, %s: f32) -> () {
  node %k = @k
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
  BIND
}
leaf @k(%a: in ptr<f32>, %a_bytes: i64, %m: i64, %t: f32) -> () target(any) {
}
"""


@pytest.mark.parametrize("bind,rule", [
    ("bind_expr %n * 2 -> %k.2 bind_in %s -> %k.3", None),
    ("bind_expr %n * 2 -> %k.3 bind_in %n -> %k.2", "node-inputs"),
    ("bind_expr %n * 2 -> %k.0 bind_in %n -> %k.2 bind_in %s -> %k.3", "node-inputs"),
    ("bind_expr %s * 2 -> %k.2 bind_in %s -> %k.3", "node-inputs"),
    ("bind_expr %n + 1 -> %k.2 bind_expr %n - 1 -> %k.2 bind_in %s -> %k.3", "input-single-source"),
    ("bind_in %n -> %k.2 bind_expr %n - 1 -> %k.2 bind_in %s -> %k.3", "input-single-source"),
    ("bind_expr %n + 1 -> %k.4 bind_in %n -> %k.2 bind_in %s -> %k.3", "ports-exist"),
])
def test_the_verifier_checks_textual_expressions(bind, rule):
    module = parse_module(_TEXT_INPUT.replace("BIND", bind), "bad.hpvm")
    if rule is None:
        verify_module(module)
        return
    with pytest.raises(VerificationError) as info:
        verify_module(module)
    assert info.value.rule == rule, info.value


def test_the_graph_picture_shows_expressions():
    from hpvm_py.ir.dot import module_to_dot

    dot = module_to_dot(P.expr_root.module())
    assert 'label="%rows * %cols"' in dot


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("root", [P.expr_root, P.nested_root, P.per_parent_root], ids=lambda r: r.name)
def test_expression_graphs_assemble_for_nvptx(root):
    """Without a GPU the nvptx target still compiles (ptxas assembles) the leaves such graphs run."""
    assert all(kernel.cubin for _, _, kernel in compile_graph(root, "nvptx").leaf_kernels())


@pytest.mark.parametrize("graph, first_only", [("expr_unbound", False), ("expr_bound_plain", True),
                                               ("expr_bound_streaming", False)])
def test_a_streaming_expression_reads_parameters_as_the_nodes_binds_of_them(target, graph,
                                                                             first_only):
    """docs/language.md: the first item's value where the node binds the parameter without
    streaming; the item's own where it binds it streaming, or only through expressions."""
    ms = [10, 11, -7, 40]
    ys = [np.full(2, -1, np.int64) for _ in ms]
    with hpvm.runtime(target):
        handle = hpvm.launch(getattr(P, graph), stream=True, depth=2)
        for y, m in zip(ys, ms):
            hpvm.push(handle, y, y.nbytes, m, timeout=60)
        for _ in ms:
            hpvm.pop(handle, timeout=60)
        hpvm.wait(handle, timeout=60)
    for y, m in zip(ys, ms):
        seen = ms[0] if first_only else m
        assert y.tolist() == [seen, seen * 2], (graph, m, y)
