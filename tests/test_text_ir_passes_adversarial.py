"""Each pass on hand-written textual IR: names the inliner makes that the text already uses, and
errors about statements the text gives no value to point at."""
from __future__ import annotations

import json
import os
import threading

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import CompileError, FrontendError, ParseError, VerificationError
from hpvm_py.ir.typecheck import MAX_EXPR_DEPTH

# a leaf adding `call @twice(1.0)` and its scalar parameter PARAM to a[i]
SPILLED = """module @root
graph @root(%a: inout ptr<f32>, %a_bytes: i64, %PARAM: f32) -> () {
  node %k = @k [%a_bytes // 4]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
  bind_in %PARAM -> %k.2
}
leaf @k(%a: inout ptr<f32>, %a_bytes: i64, %PARAM: f32) -> () target(any) {
  local %i: i64
  %i = instance_id.x(0)
  store %a[%i] = add<f32>(load<f32>(%a, %i), add<f32>(call @twice<f32>(1.0:f32), %PARAM))
}
func @twice(%x: f32) -> f32 {
  return (mul<f32>(%x, 2.0:f32))
}
"""


@pytest.mark.parametrize("param", ["_v.1", "x.twice.2", "_r.twice.3"])
def test_inlined_temporaries_take_no_parameter_name(target, rng, param):
    # the load spilled before the call, the helper's argument and its result are locals `_v.1`,
    # `x.twice.2`, `_r.twice.3`: a parameter of that name was hidden by the local
    a = rng.standard_normal(int(rng.integers(1, 9))).astype(np.float32)
    s = np.float32(rng.standard_normal())
    expected = a + (np.float32(2.0) + s)
    graph = hpvm.from_text(SPILLED.replace("PARAM", param), "spilled.hpvm")
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, s))
    np.testing.assert_array_equal(a, expected)


# a leaf calling @early, whose `if` holds a RETURN statement (on line 13)
EARLY = """module @root
graph @root(%a: inout ptr<f32>, %a_bytes: i64) -> () {
  node %k = @k [2]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
}
leaf @k(%a: inout ptr<f32>, %a_bytes: i64) -> () target(any) {
  do call @early<RESULT>(%a, instance_id.x(0))
}
func @early(%q: inout ptr<f32>, %j: i64) -> RESULT {
  local %x: f32
  if lt(%j, 1:i64) {
    RETURN
  }
  store %q[%j] = 1.0:f32
}
"""


@pytest.mark.parametrize("result, statement, error", [
    ("void", "return ()", FrontendError),  # not in tail position: the inliner's error
    ("f32", "return ()", VerificationError),  # no value: the type checker's
])
def test_an_empty_return_is_located_at_its_keyword(result, statement, error):
    text = EARLY.replace("RESULT", result).replace("RETURN", statement)
    with pytest.raises(error) as info:
        hpvm.compile(hpvm.from_text(text, "early.hpvm"), "python")
    assert (info.value.loc.file, info.value.loc.line, info.value.loc.col) == ("early.hpvm", 13, 4)


def test_a_print_of_text_only_is_located_at_its_keyword():
    text = EARLY.replace("RESULT", "void").replace("    RETURN\n", "").replace(
        "  store %q[%j] = 1.0:f32", '  print("text")')
    with pytest.raises(CompileError) as info:
        hpvm.compile(hpvm.from_text(text, "early.hpvm"), "cpu")
    assert (info.value.loc.file, info.value.loc.line, info.value.loc.col) == ("early.hpvm", 14, 2)


# a leaf doubling a[i], with the decision NOTE of a backend pass written in its text
NOTED = """module @root
graph @root(%a: inout ptr<f32>, %a_bytes: i64) -> () {
  node %k = @k [%a_bytes // 4]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
}
leaf @k(%a: inout ptr<f32>, %a_bytes: i64) -> () target(any) {
  local %i: i64
  NOTE
  %i = instance_id.x(0)
  store %a[%i] = mul<f32>(load<f32>(%a, %i), 2.0:f32)
}
"""


@pytest.mark.parametrize("note", [
    "note clip(dim=x, lower=true, bound=3:i64, plus=0)",  # cpu skipped instances 0 to 2
    "note clip(dim=w, lower=true, bound=3:i64, plus=0)",  # cpu: ValueError
    "note clip(dim=x)",  # cpu: KeyError
    "note privatise(buffer=%a_bytes)",  # gpu: AssertionError
    "note rowguard(at=1)",  # gpu: AssertionError (the literal and checked kernels kept it)
    "note dotmatch(loop=1)",
])
def test_notes_in_the_text_are_no_decisions_of_the_targets(target, rng, note):
    # notes are what a target's backend passes decided for one compile (a dump shows them); the
    # passes decide again, the text's notes are not obeyed
    a = rng.standard_normal(int(rng.integers(4, 12))).astype(np.float32)
    expected = a * np.float32(2.0)
    graph = hpvm.from_text(NOTED.replace("NOTE", note), "noted.hpvm")
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes))
    np.testing.assert_array_equal(a, expected)


# a leaf writing 2.0 to a[i], its statement at location @0:LINE:0
LOCATED = """module @root
file 0 "located.py"
graph @root(%a: inout ptr<f32>, %a_bytes: i64) -> () {
  node %k = @k [%a_bytes // 4]
  bind_in %a -> %k.0
  bind_in %a_bytes -> %k.1
}
leaf @k(%a: inout ptr<f32>, %a_bytes: i64) -> () target(any) {
  store %a[instance_id.x(0)] = 2.0:f32 @0:LINE:0
}
"""


def test_a_location_past_a_c_int_is_refused_where_it_is_written(target, rng):
    # the python target's compile() of its generated source took it: an OverflowError
    with pytest.raises(ParseError) as info:
        hpvm.from_text(LOCATED.replace("LINE", str(2**31)), "located.hpvm")
    assert (info.value.loc.line, info.value.loc.col) == (9, 39) and "at most" in info.value.message
    a = rng.standard_normal(int(rng.integers(1, 9))).astype(np.float32)
    graph = hpvm.from_text(LOCATED.replace("LINE", str(2**31 - 1)), "located.hpvm")
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes))
    np.testing.assert_array_equal(a, np.full_like(a, 2.0))


def test_a_note_nesting_too_deep_is_refused_where_it_is_written():
    # the parser read it without recursing; printing it (hpvm.to_text) hit a RecursionError
    bound = "%a_bytes"
    for _ in range(MAX_EXPR_DEPTH * 40):
        bound = f"add<i64>({bound}, 1:i64)"
    with pytest.raises(VerificationError) as info:
        hpvm.from_text(NOTED.replace("NOTE", f"note clip(bound={bound})"), "noted.hpvm")
    assert info.value.rule == "supported-python" and info.value.loc.line == 9
    within = "%a_bytes"
    for _ in range(MAX_EXPR_DEPTH):
        within = f"add<i64>({within}, 1:i64)"
    text = NOTED.replace("NOTE", f"note clip(bound={within})")
    assert hpvm.to_text(hpvm.from_text(text, "noted.hpvm")) == hpvm.to_text(hpvm.from_text(text))


@pytest.fixture
def pipe(tmp_path):
    """A named pipe whose every read ends (at once, empty) until the test's report is written:
    an error message that reads it would otherwise block the test for ever."""
    fifo = tmp_path / "source.py"
    os.mkfifo(fifo)
    stop = threading.Event()

    def release() -> None:
        while not stop.wait(0.5):
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:  # no reader now
                pass

    threading.Thread(target=release, daemon=True).start()
    yield fifo
    stop.set()


def test_a_file_line_naming_no_regular_file_is_refused(tmp_path, pipe):
    # an error located in it read its line for the snippet: a pipe blocked for ever (a device
    # such as /dev/zero filled the memory)
    text = LOCATED.replace('"located.py"', json.dumps(str(pipe))).replace("LINE", "9").replace(
        "2.0:f32", "2:i64")
    with pytest.raises(ParseError) as info:
        hpvm.from_text(text, "located.hpvm")
    assert (info.value.loc.line, info.value.loc.col) == (2, 7) and "no regular file" in info.value.message
    regular = tmp_path / "regular.py"
    regular.write_text("\n" * 8 + "the ninth line\n")
    with pytest.raises(VerificationError) as typed:
        hpvm.from_text(text.replace(str(pipe), str(regular)), "located.hpvm")
    assert "the ninth line" in str(typed.value)
