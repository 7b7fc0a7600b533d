"""Hand-edited .hpvm text against what the front end guarantees (docs/textual-ir.md): constants
that are no value of their type, true/false as numbers, pointer variables that hold something
other than one top-level malloc, and names that are no identifier of the generated code. Each is
refused at its position, or runs alike on every target, never an internal error (a KeyError in
the cpu code generator) or a process killed by LLVM. Generated programs also survive print ->
parse -> run on python and cpu with the original's results."""
from __future__ import annotations

import random
import re
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from differential import generator as gen
from differential.choices import RandomChoices
from differential.data import load, pattern, scalar, values
from hpvm_py.backends import registry
from hpvm_py.backends.base import symbol_name
from hpvm_py.errors import VerificationError
from hpvm_py.ir.parser import parse_module

# a leaf writing one value per instance: VALUE is an f32 expression, LOCALS its locals
LEAF = """module @root
graph @root(%c: out ptr<f32>, %c_bytes: i64, %n: i64) -> () {
  node %k = @k [%n]
  bind_in %c -> %k.0
  bind_in %c_bytes -> %k.1
}
leaf @k(%c: out ptr<f32>, %c_bytes: i64) -> () target(any) {
  local %i: i64
  local %x: TYPE
  %i = instance_id.x(0)
  %x = CONST
  store %c[%i] = cast<f32>(%x)
}
"""

# a leaf with scratch memory, as the front end writes `s = hpvm.malloc(16, f32)`
SCRATCH = """module @root
graph @root(%a: in ptr<f32>, %a_bytes: i64, %c: out ptr<f32>, %c_bytes: i64, %n: i64) -> () {
  node %k = @k [%n]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
  bind_in %c -> %k.2
  bind_in %c_bytes -> %k.3
}
leaf @k(%a: in ptr<f32>, %a_bytes: i64, %c: out ptr<f32>, %c_bytes: i64) -> () target(any) {
  local %i: i64
  local %s: ptr<f32>
  %i = instance_id.x(0)
  %s = malloc<ptr<f32>>(16:i64)
  store %s[%i] = load<f32>(%a, %i)
  barrier
  store %c[%i] = load<f32>(%s, sub<i64>(3:i64, %i))
}
"""


def run(text: str, target: str, n: int = 3, *args: Any) -> np.ndarray:
    c = np.full(n, -7, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(hpvm.from_text(text, "adversarial.hpvm"), *args, c, c.nbytes, n))
    return c


def refused(text: str, rule: str) -> VerificationError:
    with pytest.raises(VerificationError) as info:
        parse_module(text, "adversarial.hpvm")
    error = info.value
    assert error.rule == rule, str(error)
    assert error.loc is not None and error.loc.line > 0 and "^" in str(error), str(error)
    return error


# -- float constants ----------------------------------------------------------------------------


@pytest.mark.parametrize("const, nearest", [
    ("0.1:f16", "0.0999755859375:f16"),  # gpu used 0.1, python and cpu its f16
    ("1e-8:f16", "0.0:f16"),
    ("257:bf16", "256.0:bf16"),  # cpu 256, python and gpu 257
    ("257.0:bf16", "256.0:bf16"),
    ("1e-45:bf16", "0.0:bf16"),  # cpu 0, python and gpu an f32 subnormal
    ("3.4e38:bf16", "inf:bf16"),  # cpu inf, python and gpu a finite number
    ("70000:f16", "inf:f16"),
    ("1152921573326323713:f32", "1.1529216420458004e+18:f32"),  # 2**60 + 2**36 + 1: rounded twice
    ("1" + "0" * 400 + ":f64", "inf:f64"),  # an InternalError (OverflowError) at launch
])
def test_a_constant_that_is_no_value_of_its_type_is_refused(const: str, nearest: str) -> None:
    t = const.rsplit(":", 1)[1]
    error = refused(LEAF.replace("TYPE", t).replace("CONST", const), "kernel-types")
    assert f"the nearest is {nearest}" in str(error)
    assert error.loc.line == 11


@pytest.mark.parametrize("const, value", [
    ("0.10009765625:bf16", 0.10009765625), ("256.0:bf16", 256.0), ("inf:bf16", np.inf),
    ("0.0999755859375:f16", 0.0999755859375), ("65504.0:f16", 65504.0), ("-0.0:f16", -0.0),
    ("nan:f16", np.nan), ("1.401298464324817e-45:f32", 1.401298464324817e-45), ("1:f32", 1.0),
    ("5e-324:f64", 0.0),
])
@pytest.mark.parametrize("target", ["python", "cpu"])
def test_constants_of_their_type_read_and_run(const: str, value: float, target: str) -> None:
    t = const.rsplit(":", 1)[1]
    got = run(LEAF.replace("TYPE", t).replace("CONST", const), target)
    np.testing.assert_array_equal(got, np.full(3, value, np.float32))
    assert np.signbit(got[0]) == np.signbit(np.float32(value))


@pytest.mark.parametrize("const", ["0.1:f16", "257.0:bf16", "0.1:f32", "70000.0:f16"])
def test_a_bound_constant_that_is_no_value_of_its_type_is_refused(const: str) -> None:
    t = const.rsplit(":", 1)[1]
    text = LEAF.replace("local %x: TYPE\n", "").replace("%x = CONST\n", "") \
        .replace("%c_bytes: i64) -> () target", f"%c_bytes: i64, %x: {t}) -> () target") \
        .replace("  bind_in %c_bytes -> %k.1\n", f"  bind_in %c_bytes -> %k.1\n  bind_const {const} -> %k.2\n")
    with pytest.raises(VerificationError) as info:
        run(text, "python")
    assert info.value.rule == "node-inputs" and info.value.loc.line == 6, str(info.value)


@pytest.mark.parametrize("const", ["true:i64", "false:u8", "true:f32"])
def test_true_and_false_are_no_numbers(const: str) -> None:
    t = const.rsplit(":", 1)[1]
    refused(LEAF.replace("TYPE", t).replace("CONST", const), "kernel-types")


# -- pointer variables --------------------------------------------------------------------------


@pytest.mark.parametrize("old, new, rule", [
    ("%s = malloc<ptr<f32>>(16:i64)", "%s = %a", "pointer-views"),  # cpu: KeyError 's'
    ("%s = malloc<ptr<f32>>(16:i64)", "%s = select<ptr<f32>>(true:i1, %a, %c)", "pointer-views"),
    ("  %s = malloc<ptr<f32>>(16:i64)\n", "", "pointer-views"),  # cpu: AssertionError
    ("barrier", "barrier\n  %s = malloc<ptr<f32>>(16:i64)", "malloc-uniform"),
    ("barrier", "barrier\n  %a = %c", "pointer-views"),  # cpu: KeyError 'a'
    ("barrier", "barrier\n  %c = %s", "pointer-views"),
    ("barrier", "barrier\n  do malloc<ptr<f32>>(16:i64)", "malloc-uniform"),
    ("%s = malloc<ptr<f32>>(16:i64)", "if true:i1 {\n  %s = malloc<ptr<f32>>(16:i64)\n  }",
     "malloc-uniform"),
    ("%s = malloc<ptr<f32>>(16:i64)", "%s = malloc<ptr<f32>>(mul<i64>(%i, 4:i64))",
     "malloc-uniform"),  # cpu: KeyError; python and cpu sized it differently
    ("%s = malloc<ptr<f32>>(16:i64)", "%s = malloc<ptr<f32>>(add<i64>(instance_id.x(0), 16:i64))",
     "malloc-uniform"),
    ("%s = malloc<ptr<f32>>(16:i64)\n  store %s[%i]", "store %s[%i] = 0.0:f32\n  %s = malloc<ptr<f32>>(16:i64)\n  store %s[%i]",
     "pointer-views"),
])
def test_pointer_variables_hold_one_top_level_malloc(old: str, new: str, rule: str) -> None:
    assert old in SCRATCH
    refused(SCRATCH.replace(old, new, 1), rule)


def test_a_malloc_in_a_helper_is_refused() -> None:
    text = SCRATCH + """
func @h(%n: i64) -> void {
  local %p: ptr<i32>
  %p = malloc<ptr<i32>>(%n)
}
"""
    refused(text, "helper-no-intrinsics")


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_scratch_as_the_front_end_writes_it_runs(target: str) -> None:
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(run(SCRATCH, target, 4, a, a.nbytes), a[::-1])


# -- names --------------------------------------------------------------------------------------

_PTX_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*|_[A-Za-z0-9_]+")


@pytest.mark.parametrize("name", ["a b", "a.b", "1leaf", "_", "x+y", "é", "", "a.merge.p", '"q"'])
def test_symbols_are_identifiers_of_the_generated_code(name: str) -> None:
    assert _PTX_IDENTIFIER.fullmatch(symbol_name(name))
    assert symbol_name("vadd") == "vadd" and symbol_name("k_0") == "k_0"  # front end names


@pytest.mark.parametrize("name", ['@"a b"', "@a.b", '@"1leaf"', "@_"])
@pytest.mark.parametrize("target", ["python", "cpu", "nvptx"])
def test_a_leaf_named_as_no_identifier_compiles_and_runs(name: str, target: str) -> None:
    # nvptx: LLVM aborted the process on the space; ptxas refused the others (an "internal" error)
    text = SCRATCH.replace("@k", name)
    a = np.arange(4, dtype=np.float32)
    if target == "nvptx":
        if registry.compilable("nvptx"):
            hpvm.compile(hpvm.from_text(text), "nvptx")
        return
    np.testing.assert_array_equal(run(text, target, 4, a, a.nbytes), a[::-1])


# -- generated programs, printed and read back --------------------------------------------------


def test_generated_programs_read_back_compute_the_same() -> None:
    seeds = random.Random(20250101)
    for _ in range(4):
        c = RandomChoices(seeds.getrandbits(32))
        program = gen.generate(c, partial=False, hints={}, chained=None)
        root = load(program.source).root
        text = hpvm.to_text(root)
        back = hpvm.from_text(text, "generated.hpvm")
        assert hpvm.to_text(back) == text
        n = 6
        a_t, b_t, s_t = program.in_types
        rng = np.random.default_rng(1)
        a, b, s = values(a_t, n, rng), values(b_t, n, rng), scalar(s_t, rng)
        results = []
        for graph, target in ((root, "python"), (back, "python"), (back, "cpu")):
            out, out2 = pattern(program.out_type, n), pattern("i64", n)
            hist = np.zeros(16, np.int32)
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(graph, a, a.nbytes, b, b.nbytes, out, out.nbytes, hist,
                                      hist.nbytes, out2, out2.nbytes, s, n, 1, n))
            results.append([out.view(np.uint8), hist, out2])
        for got in results[1:]:
            for x, y in zip(results[0], got):
                np.testing.assert_array_equal(x, y)
