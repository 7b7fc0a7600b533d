"""Constants bound to node inputs (`hpvm.node(f, k=3)`): typed by the input, run on every target,
kept by the textual IR (print -> parse -> print) and by `hpvmc compile` / `hpvm.load`, and
rejected with a located error where they cannot feed the input."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import HPVMError, VerificationError
from hpvm_py.ir import semantics as S
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.ir.verify import verify_module
from hpvm_py.types import bf16

from errcheck import check_error, program_path
from programs import const_input_errors as E
from programs import const_inputs as C

ROOT = Path(__file__).resolve().parent.parent


def _expected(x: np.ndarray) -> np.ndarray:
    v = x * np.float32(2.5) + np.float32(-3) + np.float32(-128) + np.float32(255)
    return -v


def _run_constants(graph, target: str, n: int, rng) -> None:
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(target):
        wide = hpvm.wait(hpvm.launch(graph, x, x.nbytes, y, y.nbytes, n))
    np.testing.assert_allclose(y, _expected(x), rtol=1e-6)
    assert wide == 2e300


@pytest.mark.parametrize("n", [1, 37])
def test_constants_feed_inputs_on_every_target(target, n, rng):
    _run_constants(C.constants_root, target, n, rng)


def test_constants_are_typed_by_the_input():
    root = C.constants_root.module().root_func
    binds = {C.affine.ir.params[b.dst_port].name: b.value for b in root.const_binds}
    assert {name: (c.value, c.type.name) for name, c in binds.items()} == {
        "k": (2.5, "f32"), "off": (-3, "i64"), "neg": (True, "i1"), "small": (-128, "i8"),
        "wide": (1e300, "f64"), "byte": (255, "u8")}


def test_one_leaf_in_two_nodes_with_different_constants(target, rng):
    n = 10
    x = rng.standard_normal(n).astype(np.float32)
    y, z = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(C.two_shifts, x, x.nbytes, y, y.nbytes, z, z.nbytes, n))
    np.testing.assert_array_equal(y, ((x.astype(np.float64) + 0.25) * 2.0).astype(np.float32))
    np.testing.assert_array_equal(z, (x.astype(np.float64) - 4.0).astype(np.float32))
    values = [(b.value.value, b.value.type.name) for b in C.two_shifts.module().root_func.const_binds]
    assert values == [(0.25, "f64"), (True, "i1"), (-4.0, "f64"), (False, "i1")]


def test_a_float_constant_is_rounded_to_its_input_type_once(target, rng):
    n = 9
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(C.bf16_root, x, x.nbytes, y, y.nbytes, n))
    b = S.typed_value(0.1, bf16)
    assert b != np.float32(0.1)  # bf16 keeps 8 bits of mantissa
    np.testing.assert_array_equal(y, x + b)


def test_the_textual_ir_keeps_constants():
    text = print_module(C.constants_root.module())
    assert "bind_const 2.5:f32 -> %affine.4" in text and "bind_const true:i1 -> %affine.6" in text
    assert "bind_const -128:i8 -> %affine.7" in text and "bind_const 1e+300:f64" in text
    parsed = parse_module(text, "constants.hpvm")
    assert print_module(parsed) == text
    assert parsed.root_func.const_binds == C.constants_root.module().root_func.const_binds
    verify_module(parsed)


def test_a_graph_loaded_from_text_runs_its_constants(target, rng):
    loaded = hpvm.from_text(hpvm.to_text(C.constants_root), "constants.hpvm")
    _run_constants(loaded, target, 11, rng)


def test_hpvmc_compile_then_load_keeps_constants(tmp_path, rng):
    out = tmp_path / "out"
    result = subprocess.run(
        [sys.executable, "-m", "hpvm_py.cli", "compile", str(ROOT / "tests" / "programs" / "const_inputs.py"),
         "--graph", "constants_root", "--target", "python", "-o", str(out)], capture_output=True,
        text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "bind_const 2.5:f32" in (out / "constants_root.hpvm").read_text()
    graph = hpvm.load(out, "constants_root")
    for target in ("python", "cpu"):
        _run_constants(graph, target, 5, rng)


def test_constants_in_a_streaming_launch(target, rng):
    n = 12
    items = [(rng.standard_normal(n).astype(np.float32), np.zeros(n, np.float32)) for _ in range(3)]
    with hpvm.runtime(target):
        handle = hpvm.launch(C.streaming_root, stream=True)
        for x, y in items:
            hpvm.push(handle, x, x.nbytes, y, y.nbytes, n)
        results = [hpvm.pop(handle) for _ in items]
        hpvm.wait(handle)
    for (x, y), result in zip(items, results):
        np.testing.assert_allclose(y, _expected(x), rtol=1e-6)
        assert result == (2e300,)


def test_a_relaunch_keeps_constants(target, rng):
    """The second launch with the same buffers may take the replay path: constants stay."""
    n = 16
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(target):
        for _ in range(3):
            x[:] = rng.standard_normal(n).astype(np.float32)
            hpvm.wait(hpvm.launch(C.constants_root, x, x.nbytes, y, y.nbytes, n))
            np.testing.assert_allclose(y, _expected(x), rtol=1e-6)


@pytest.mark.parametrize("graph,tag", [
    (E.bad_constant_pointer, "const-pointer"),
    (E.bad_constant_range, "const-range"),
    (E.bad_constant_float_range, "const-f32-range"),
    (E.bad_constant_float_for_int, "const-float-int"),
    (E.bad_constant_bool, "const-bool"),
    (E.bad_constant_string, "const-string"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_bad_constants_are_located_errors(graph, tag):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(graph, target="python")
    check_error(info.value, VerificationError, program_path(E), tag, "node-inputs")


_TEXT_INPUT = """
module @root
graph @root(%a: in ptr<f32>, %a_bytes: i64) -> () {
  node %k = @k
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
  BIND
}
leaf @k(%a: in ptr<f32>, %a_bytes: i64, %s: i64) -> () target(any) {
}
"""


@pytest.mark.parametrize("bind,rule", [
    ("bind_const 3:i32 -> %k.2", "bind-types"),
    ("bind_const 3.0:i64 -> %k.2", "node-inputs"),
    ("bind_const 99999999999999999999:i64 -> %k.2", "node-inputs"),
    ("bind_const 0:i64 -> %k.0", "node-inputs"),
    ("bind_const 1:i64 -> %k.2 bind_const 2:i64 -> %k.2", "input-single-source"),
    ("bind_const 1:i64 -> %k.3", "ports-exist"),
])
def test_the_verifier_checks_textual_constants(bind, rule):
    module = parse_module(_TEXT_INPUT.replace("BIND", bind), "bad.hpvm")
    with pytest.raises(VerificationError) as info:
        verify_module(module)
    assert info.value.rule == rule, info.value


def test_the_graph_picture_shows_constants():
    from hpvm_py.ir.dot import module_to_dot

    dot = module_to_dot(C.constants_root.module())
    assert 'label="2.5"' in dot and 'label="-128"' in dot and 'label="true"' in dot
