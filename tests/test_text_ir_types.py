"""The textual IR's type check (hpvm_py/ir/typecheck.py): a hand-edited .hpvm file whose leaf body
breaks the typing the front end guarantees gets a located VerificationError naming the rule, not an
internal error from a backend; every program the front end makes still reads back."""
from __future__ import annotations

from pathlib import Path

import pytest

import hpvm_py as hpvm
from hpvm_py.errors import VerificationError
from hpvm_py.ir.typecheck import MAX_EXPR_DEPTH

SOURCE = "case.hpvm"

HEAD = """; hpvm-py textual IR
module @root
file 0 "vadd.py"

graph @root(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: out ptr<f32>, %c_bytes: i64, %n: i64) -> () @0:18:0 {
  node %vadd = @vadd [%n] @0:20:4
  bind_in %a -> %vadd.0 @0:20:4
  bind_in %a_bytes -> %vadd.1 @0:20:4
  bind_in %b -> %vadd.2 @0:20:4
  bind_in %b_bytes -> %vadd.3 @0:20:4
  bind_in %c -> %vadd.4 @0:20:4
  bind_in %c_bytes -> %vadd.5 @0:20:4
}

leaf @vadd(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: out ptr<f32>, %c_bytes: i64) -> () target(any) @0:11:0 {
  local %i: i64
"""  # the body starts on line 17
STORE = "  store %c[%i] = add<f32>(load<f32>(%a, %i), load<f32>(%b, %i)) @0:14:4\n"
ID = "  %i = instance_id.x(0) @0:13:4\n"


def program(body: str) -> str:
    return HEAD + body + "}\n"


def deep_expr(depth: int) -> str:
    e = "load<f32>(%a, %i)"
    for _ in range(depth):
        e = f"add<f32>({e}, 1.0:f32)"
    return ID + f"  store %c[%i] = {e} @0:14:4\n"


def deep_if(depth: int) -> str:
    return ID + "if lt(%i, 10:i64) {\n" * depth + "  break\n" * 0 + "}\n" * depth + STORE


VADD = ("vadd.py",)
# (name, body, rule, (file, line, col)): file None is the .hpvm text itself (no @F:L:C there)
CASES = [
    ("op_type_mismatch", ID + "  store %c[%i] = add<i32>(load<f32>(%a, %i), load<f32>(%b, %i)) @0:14:4\n",
     "kernel-types", ("vadd.py", 14, 4)),
    ("load_scalar", ID + "  store %c[%i] = add<f32>(load<f32>(%i, %i), load<f32>(%b, %i)) @0:14:4\n",
     "kernel-types", ("vadd.py", 14, 4)),
    ("load_float_index", ID + "  store %c[%i] = load<f32>(%a, 1.5:f32) @0:14:4\n",
     "kernel-types", ("vadd.py", 14, 4)),
    ("load_wrong_type", ID + "  store %c[%i] = add<f32>(load<i32>(%a, %i), load<f32>(%b, %i)) @0:14:4\n",
     "kernel-types", ("vadd.py", 14, 4)),
    ("assign_type", "  %i = 1.5:f32 @0:13:4\n" + STORE, "kernel-types", ("vadd.py", 13, 4)),
    ("const_overflow", "  %i = 99999999999999999999999:i64 @0:13:4\n" + STORE, "kernel-types",
     ("vadd.py", 13, 4)),
    ("const_neg_u", "  %i = cast<i64>(-1:u64) @0:13:4\n" + STORE, "kernel-types", ("vadd.py", 13, 4)),
    ("const_nan_i64", "  %i = nan:i64 @0:13:4\n" + STORE, "kernel-types", ("vadd.py", 13, 4)),
    ("const_float_int", "  %i = 1.5:i64 @0:13:4\n" + STORE, "kernel-types", ("vadd.py", 13, 4)),
    ("break_outside", ID + "  break\n" + STORE, "supported-python", (None, 18, 2)),
    ("continue_outside", ID + "  if lt(%i, 1:i64) { continue }\n" + STORE, "supported-python",
     (None, 18, 21)),
    ("for_float", ID + "  for %i = range(0.0:f32, 3:i64, 1:i64) { }\n" + STORE, "kernel-types",
     (None, 18, 17)),
    ("if_int_cond", ID + "  if %i { }\n" + STORE, "kernel-types", (None, 18, 5)),
    ("while_float_cond", ID + "  while 1.5:f32 { break }\n" + STORE, "kernel-types", (None, 18, 8)),
    ("store_wrong_type", ID + "  store %c[%i] = 1:i64 @0:14:4\n", "kernel-types", ("vadd.py", 14, 4)),
    ("return_value_no_out", ID + "  return (%i)\n" + STORE, "leaf-returns-outputs", (None, 18, 10)),
    ("call_a_leaf", ID + "  store %c[%i] = call @vadd<f32>(%i) @0:14:4\n", "node-function",
     ("vadd.py", 14, 4)),
    ("deep_expr", deep_expr(MAX_EXPR_DEPTH + 1), "supported-python", ("vadd.py", 14, 4)),
    # deeper than Python's stack, on a located statement (its location reaches every
    # sub-expression before the check: ir.kernel.walk_exprs walks without recursion)
    ("deep_expr_5000", deep_expr(5000), "supported-python", ("vadd.py", 14, 4)),
    ("deep_if", deep_if(MAX_EXPR_DEPTH + 1), "supported-python", (None, 18 + MAX_EXPR_DEPTH, 3)),
]


@pytest.mark.parametrize("name,body,rule,where", CASES, ids=[c[0] for c in CASES])
def test_ill_typed_bodies_are_located_errors(name: str, body: str, rule: str,
                                             where: tuple[str | None, int, int]) -> None:
    with pytest.raises(VerificationError) as info:
        hpvm.from_text(program(body), SOURCE)
    exc = info.value
    assert exc.rule == rule, exc
    file, line, col = where
    assert (exc.loc.file, exc.loc.line, exc.loc.col) == (file or SOURCE, line, col), str(exc)
    assert str(exc).startswith(f"{file or SOURCE}:{line}:{col + 1}: error: "), str(exc)


@pytest.mark.parametrize("body", [
    ID + STORE,
    ID + "  for %i = range(0:i64, 3:i64, 1:i64) { if eq(%i, 1:i64) { continue } break }\n" + STORE,
    ID + "  while lt(%i, 3:i64) { %i = add<i64>(%i, 1:i64) }\n" + STORE,
    "  %i = -9223372036854775808:i64\n" + STORE,
    deep_expr(MAX_EXPR_DEPTH - 1),
    deep_if(MAX_EXPR_DEPTH - 1),
], ids=["plain", "loop-break", "while", "i64-min", "deep-expr-at-limit", "deep-if-at-limit"])
def test_well_typed_bodies_are_accepted(body: str) -> None:
    hpvm.from_text(program(body), SOURCE)


def _graphs():
    """Every graph of the examples and tests/programs that prints (import errors: skipped)."""
    import glob
    import importlib
    import importlib.util
    import os
    import sys
    import warnings

    from hpvm_py.frontend.decorators import GraphDef

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for extra in ("tests", "examples", "tests/programs"):
        if os.path.join(root, extra) not in sys.path:
            sys.path.insert(0, os.path.join(root, extra))
    files = sorted(glob.glob(f"{root}/examples/*.py") + glob.glob(f"{root}/examples/hpvm_suite/*.py")
                   + glob.glob(f"{root}/tests/programs/*.py"))
    for path in files:
        stem = os.path.basename(path)[:-3]
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                if "/tests/programs/" in path:
                    name = "programs." + stem
                    module = importlib.import_module(name)
                else:
                    name = "rt_" + stem
                    spec = importlib.util.spec_from_file_location(name, path)
                    module = importlib.util.module_from_spec(spec)
                    sys.modules[name] = module
                    spec.loader.exec_module(module)
        except BaseException:  # a program that needs a device, two ranks, ...
            continue
        for gname, g in list(vars(module).items()):
            if isinstance(g, GraphDef) and g.pyfunc.__module__ == name:
                yield f"{stem}.{gname}", g


def _read_back_all() -> int:
    """Print and read back every front-end graph; how many did (run in a process of its own)."""
    from hpvm_py.errors import HPVMError

    count = 0
    for label, g in _graphs():
        try:
            text = hpvm.to_text(g)
        except HPVMError:
            continue  # a deliberately bad program
        parsed = hpvm.from_text(text, "x.hpvm")  # no VerificationError from the type check
        assert hpvm.to_text(parsed) == text, label
        count += 1
    return count


def test_every_front_end_program_still_reads_back() -> None:
    """In a process of its own: importing every example and test program runs their module code
    (one sets TRITON_INTERPRET for itself), which must not reach the other tests' process."""
    import subprocess
    import sys

    here = Path(__file__).resolve().parent
    code = (f"import sys; sys.path.insert(0, {str(here)!r}); import test_text_ir_types as t; "
            "print('read back', t._read_back_all())")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    count = int(done.stdout.split("read back")[-1])
    assert count > 100, done.stdout
