"""Each pass alone, on textual IR: parse, run the pass, compare with the expected text."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from hpvm_py.errors import FrontendError
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.passes import PIPELINE, run_passes
from hpvm_py.passes.fold import fold_constants
from hpvm_py.passes.inline import inline_helpers

HEADER = """
module @root
graph @root(%a: inout ptr<f32>, %a_bytes: i64) -> () {
  node %k = @k [4]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
}
"""


def module(body: str, helpers: str = "", locals_: str = "") -> str:
    return HEADER + textwrap.dedent(f"""
    leaf @k(%a: inout ptr<f32>, %a_bytes: i64) -> () target(any) {{
      local %i: i64
      local %x: f32
    {textwrap.indent(textwrap.dedent(locals_), '  ')}
    {textwrap.indent(textwrap.dedent(body), '  ')}
    }}
    """) + helpers


def body_of(text: str, leaf: str = "k") -> str:
    """The printed body of one leaf, without locations."""
    printed = print_module(parse_module(text))
    start = printed.index(f"leaf @{leaf}(")
    return printed[start:]


def test_fold_evaluates_integer_and_float_constants() -> None:
    src = module("""
      %i = add<i64>(mul<i64>(3:i64, 4:i64), floordiv<i64>(-7:i64, 2:i64))
      %x = mul<f32>(1.5:f32, 2.0:f32)
      store %a[%i] = %x
    """)
    out = print_module(fold_constants(parse_module(src)))
    assert "%i = 8:i64" in out  # 12 + (-4): floor division
    assert "%x = 3.0:f32" in out


def test_fold_wraps_and_follows_kernel_semantics() -> None:
    src = module("""
      %i = cast<i64>(add<i8>(127:i8, 1:i8))
      store %a[0:i64] = cast<f32>(shl<i32>(1:i32, 40:i32))
      store %a[1:i64] = cast<f32>(mod<i32>(7:i32, 0:i32))
      store %a[2:i64] = cast<f32>(cast<i32>(1e10:f32))
    """)
    out = print_module(fold_constants(parse_module(src)))
    assert "%i = -128:i64" in out  # i8 wraps
    assert "store %a[0:i64] = 0.0:f32" in out  # shift count >= width gives 0
    assert "store %a[1:i64] = 0.0:f32" in out  # a zero divisor gives 0
    assert "store %a[2:i64] = 2147483648.0:f32" in out  # saturates to 2**31-1, which rounds up in f32


def test_fold_removes_branches_decided_by_constants() -> None:
    src = module("""
      if lt(1:i64, 2:i64) {
        store %a[0:i64] = 1.0:f32
      } else {
        store %a[0:i64] = 2.0:f32
      }
      while false:i1 {
        store %a[1:i64] = 3.0:f32
      }
    """)
    out = print_module(fold_constants(parse_module(src)))
    assert "if " not in out and "while" not in out
    assert "store %a[0:i64] = 1.0:f32" in out and "2.0:f32" not in out


HELPERS = """
func @twice(%v: f32) -> f32 {
  return (mul<f32>(%v, 2.0:f32))
}
func @bump(%p: ptr<f32>, %j: i64) -> void {
  store %p[%j] = add<f32>(load<f32>(%p, %j), 1.0:f32)
}
"""


def test_inline_replaces_calls_and_renames_locals() -> None:
    src = module("""
      %i = instance_id.x(0)
      %x = call @twice<f32>(load<f32>(%a, %i))
      do call @bump<void>(%a, %i)
    """, HELPERS)
    out = print_module(inline_helpers(parse_module(src)))
    assert "call @" not in out and "func @" not in out
    assert "local %v.twice." in out  # the helper's parameter became a renamed local
    assert "store %a[%j.bump." in out  # the pointer argument replaced the helper's pointer


def test_inline_keeps_evaluation_order_around_a_call() -> None:
    # a[i] is read before bump() runs, as Python evaluates left to right
    helpers = HELPERS + """
func @bumped(%p: ptr<f32>, %j: i64) -> f32 {
  store %p[%j] = add<f32>(load<f32>(%p, %j), 1.0:f32)
  return (load<f32>(%p, %j))
}
"""
    src = module("""
      %x = add<f32>(load<f32>(%a, 0:i64), call @bumped<f32>(%a, 0:i64))
    """, helpers)
    out = print_module(inline_helpers(parse_module(src)))
    first_read = out.index("load<f32>(%a, 0:i64)")
    first_store = out.index("store %a[")
    assert first_read < first_store


def test_inline_keeps_a_call_inside_and_lazy() -> None:
    src = module("""
      %i = instance_id.x(0)
      if land(lt(%i, 2:i64), gt(call @twice<f32>(load<f32>(%a, %i)), 0.0:f32)) {
        store %a[%i] = 0.0:f32
      }
    """, HELPERS)
    out = body_of(print_module(inline_helpers(parse_module(src))))
    # the helper's body runs under an if on the left side
    import re

    assignment = re.search(r"\n\s+%v\.twice\.\d+ = ", out)
    assert assignment is not None and out.index("if %_l.") < assignment.start()


def test_inline_rejects_a_non_tail_return() -> None:
    helpers = """
func @early(%v: f32) -> f32 {
  if gt(%v, 0.0:f32) {
    return (%v)
  }
  %v = neg<f32>(%v)
  return (%v)
}
"""
    src = module("%x = call @early<f32>(1.0:f32)", helpers)
    with pytest.raises(FrontendError, match="tail position"):
        inline_helpers(parse_module(src))


def test_passes_are_pure() -> None:
    src = module("%x = call @twice<f32>(mul<f32>(2.0:f32, 3.0:f32))", HELPERS)
    before = parse_module(src)
    text_before = print_module(before)
    run_passes(before)
    assert print_module(before) == text_before


def test_dump_ir_prints_after_the_named_pass(tmp_path) -> None:
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""
        import hpvm_py as hpvm
        from hpvm_py import InOut, Ptr, f32, i64

        @hpvm.func
        def twice(v: f32) -> f32:
            return v * 2.0

        @hpvm.leaf
        def k(a: InOut[Ptr[f32]], a_bytes: i64):
            i = hpvm.instance_id(0)
            a[i] = twice(a[i])

        @hpvm.graph
        def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
            hpvm.node(k, grid=n, a=a, a_bytes=a_bytes)

        hpvm.compile(root, target="python")
    """))
    names = [name for name, _ in PIPELINE]
    result = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=120,
                            env={**__import__("os").environ, "HPVM_DUMP_IR": "frontend,inline"})
    assert result.returncode == 0, result.stderr
    assert "; ---- IR after frontend ----" in result.stderr
    assert "; ---- IR after inline ----" in result.stderr
    assert "; ---- IR after fold ----" not in result.stderr
    after_inline = result.stderr.split("; ---- IR after inline ----")[1]
    assert "call @twice" not in after_inline and "call @twice" in result.stderr
    assert names == ["inline", "fold"]
