"""passes/passthrough.py alone, on textual IR: which outputs a leaf forwards from its scalar inputs
(a stream then knows them on the host: rt/stream/items.py), and every way one is not forwarded."""
from __future__ import annotations

import pytest

from hpvm_py.ir.parser import parse_module
from hpvm_py.passes.passthrough import forwarded_outputs

GRAPH = """
module @root
graph @root(%a: inout ptr<f32>, %a_bytes: i64, %m: i64, %c: i32) -> () {
  node %k = @k [4]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
  bind_in %m -> %k.2
  bind_in %c -> %k.3
}
"""


def leaf(outputs: str, body: str) -> object:
    text = GRAPH + f"""
leaf @k(%a: inout ptr<f32>, %a_bytes: i64, %m: i64, %c: i32) -> ({outputs}) target(any) {{
  local %i: i64
  local %s: i64
{body}
}}
"""
    return next(f for f in parse_module(text).leaves() if f.name == "k")


def test_returned_inputs_are_forwarded_by_position() -> None:
    k = leaf("i64, i64, i32", """
  store %a[0:i64] = 1.0:f32
  return (%m, %a_bytes, %c)""")
    assert forwarded_outputs(k) == {0: 2, 1: 1, 2: 3}


def test_every_return_must_give_the_same_input() -> None:
    k = leaf("i64, i64", """
  if lt(instance_id.x(0), 2:i64) {
    return (%m, %a_bytes)
  }
  return (%m, %m)""")
    assert forwarded_outputs(k) == {0: 2}


@pytest.mark.parametrize("outputs, body", [
    # an input assigned anywhere (even after the return that reads it in the text's order)
    ("i64", """
  for %i = range(0:i64, 3:i64, 1:i64) {
    %m = add<i64>(%m, 1:i64)
  }
  return (%m)"""),
    # a loop variable that is a parameter's name is assigned by the loop
    ("i64", """
  for %m = range(0:i64, 3:i64, 1:i64) {
    store %a[%m] = 0.0:f32
  }
  return (%m)"""),
    # a computed value, a local holding the input, a conversion
    ("i64", "  return (add<i64>(%m, 0:i64))"),
    ("i64", """
  %s = %m
  return (%s)"""),
    ("i64", "  return (cast<i64>(%c))"),
    # the body does not end with a return on every path
    ("i64", """
  if lt(instance_id.x(0), 2:i64) {
    return (%m)
  } else {
    return (%m)
  }"""),
])
def test_what_is_not_forwarded(outputs: str, body: str) -> None:
    assert forwarded_outputs(leaf(outputs, body)) == {}
