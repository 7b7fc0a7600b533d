"""Translation validation of the passes: programs whose result a pass changed, each checked on
every target against NumPy."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64
from hpvm_py.errors import FrontendError, VerificationError


@hpvm.func
def positive_or_zero(x: i64) -> i64:
    if x > 0:
        kept = x
    return kept  # 0 where x <= 0: a call's locals start as zero


@hpvm.leaf
def clamp_each(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    for j in range(n):
        a[j] = positive_or_zero(a[j])


@hpvm.graph
def clamp_graph(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(clamp_each, a=a, a_bytes=a_bytes, n=n)


def test_a_helper_called_in_a_loop_starts_with_zero_locals(target, rng):
    # inlined in a loop, the helper's local kept the previous iteration's value
    a = rng.integers(-50, 50, 64)
    a[1::2] = -np.abs(a[1::2])  # some calls after a positive one take the other path
    expected = np.where(a > 0, a, 0)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(clamp_graph, a, a.nbytes, a.size))
    np.testing.assert_array_equal(a, expected)


CLIP_GRAPH = """
module @root
graph @root(%o: inout ptr<i64>, %o_bytes: i64, %n: i64) -> () {
  node %k = @k [16]
  bind_in %o -> %k.0
  bind_in %o_bytes -> %k.1
  bind_in %n -> %k.2
}
leaf @k(%o: inout ptr<i64>, %o_bytes: i64, %n: i64) -> () target(any) {
  local %i: i64
  local %m: i64
  local %v: i64
BODY
}
"""


@pytest.mark.parametrize("body, expected", [
    # the guard reads %i before its one assignment (zero there): every instance or none runs on
    ("""
  if ge(%i, %n) { return () }
  %i = instance_id.x(0)
  store %o[%i] = 1:i64
""", lambda n: np.full(16, int(n > 0))),
    # the bound %m reads %v before %v's one assignment: %m is 1, not n + 1
    ("""
  %i = instance_id.x(0)
  %m = add<i64>(%v, 1:i64)
  %v = %n
  if lt(%i, %m) { store %o[%i] = 1:i64 }
""", lambda n: (np.arange(16) < 1).astype(np.int64)),
], ids=["guard-before-the-definition", "bound-reads-a-later-definition"])
def test_clip_takes_only_definitions_made_before_the_guard(target, rng, body, expected):
    # cpu's clip pass made bounds of them as if they were defined when the guard ran
    graph = hpvm.from_text(CLIP_GRAPH.replace("BODY", body))
    n = int(rng.integers(1, 12))
    o = np.zeros(16, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, o, o.nbytes, n))
    np.testing.assert_array_equal(o, expected(n))


MATMUL_GRAPH = """
module @root
graph @root(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: inout ptr<f32>,
            %c_bytes: i64, %n: i64, %k: i64) -> () {
  node %m = @naive [%n, %n]
  bind_in %a -> %m.0
  bind_in %a_bytes -> %m.1
  bind_in %b -> %m.2
  bind_in %b_bytes -> %m.3
  bind_in %c -> %m.4
  bind_in %c_bytes -> %m.5
  bind_in %n -> %m.6
  bind_in %k -> %m.7
}
leaf @naive(%a: in ptr<f32>, %a_bytes: i64, %b: in ptr<f32>, %b_bytes: i64, %c: inout ptr<f32>,
            %c_bytes: i64, %n: i64, %k: i64) -> () target(any) {
  local %j: i64
  local %i: i64
  local %r: i64
  local %acc: f32
  local %t: i64
  %j = instance_id.x(0)
ROW
  %acc = 0.0:f32
  for %t = range(0:i64, %k, 1:i64) {
    %acc = add<f32>(%acc, mul<f32>(load<f32>(%a, add<i64>(mul<i64>(%r, %k), %t)),
                                   load<f32>(%b, add<i64>(mul<i64>(%t, %n), %j))))
  }
  store %c[add<i64>(mul<i64>(%i, %n), %j)] = %acc
}
"""


@pytest.mark.parametrize("row, a_row", [
    ("  %r = %i\n  %i = instance_id.y(0)", 0),  # %r is read from %i before %i is set: row 0
    ("  %i = instance_id.y(0)\n  %r = add<i64>(%r, 1:i64)", 1),  # %r reads itself: row 1
], ids=["let-reads-a-later-definition", "let-reads-itself"])
def test_dotmatch_takes_only_definitions_made_before_their_reads(target, rng, row, a_row):
    # gpu's dotmatch replaced %r by a later definition (the real product), or recursed forever
    graph = hpvm.from_text(MATMUL_GRAPH.replace("ROW", row))
    n, k = 16, int(rng.integers(1, 20))
    a = rng.integers(-3, 4, (n, k)).astype(np.float32)
    b = rng.integers(-3, 4, (k, n)).astype(np.float32)
    c = np.zeros((n, n), np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, b, b.nbytes, c, c.nbytes, n, k))
    np.testing.assert_array_equal(c, np.broadcast_to(a[a_row] @ b, (n, n)))


@hpvm.leaf
def halves(o: InOut[Ptr[f32]], o_bytes: i64, n: i64):
    n = n // 2
    scratch = hpvm.malloc(n * 4, hpvm.f32)  # n // 2 f32 of the input n
    i = hpvm.instance_id(0)
    scratch[i] = o[i] * 2.0
    o[i] = scratch[i] + 1.0


@hpvm.graph
def halves_graph(o: InOut[Ptr[f32]], o_bytes: i64, n: i64, m: i64):
    hpvm.node(halves, grid=m, o=o, o_bytes=o_bytes, n=n)


def test_a_malloc_size_reads_a_reassigned_parameter_as_it_was_there(target, rng):
    # the IR's size names the node's input n; the python target read the body's n, halved again
    m = int(rng.integers(2, 17))
    o = rng.standard_normal(m).astype(np.float32)
    expected = o * 2 + 1
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(halves_graph, o, o.nbytes, 2 * m + int(rng.integers(0, 2)), m))
    np.testing.assert_array_equal(o, expected)


OPERATION_GRAPH = """module @root
graph @root(%o: inout ptr<i64>, %o_bytes: i64, %n: i64) -> () {
  node %k = @k
  bind_in %o -> %k.0
  bind_in %o_bytes -> %k.1
  bind_in %n -> %k.2
}
leaf @k(%o: inout ptr<i64>, %o_bytes: i64, %n: i64) -> () target(any) {
  store %o[0:i64] = cast<i64>(OPERATION)
}
"""


@pytest.mark.parametrize("operation", [
    "sub<i1>(false:i1, cast<i1>(%n))",  # fold: NumPy's TypeError (an internal error)
    "neg<i1>(true:i1)",
    "shl<i1>(cast<i1>(%n), true:i1)",  # folded 1, python 2, cpu and gpu 0
    "add<i1>(true:i1, true:i1)",
    "div<i64>(%n, 2:i64)",  # python and fold computed it (3.5 stored as 3), cpu and gpu refused it
])
def test_operations_the_front_end_never_makes_are_refused_where_the_text_has_them(operation):
    with pytest.raises(VerificationError) as info:
        hpvm.from_text(OPERATION_GRAPH.replace("OPERATION", operation), "ops.hpvm")
    assert info.value.rule == "kernel-types" and info.value.loc.line == 9, info.value


def test_i1_and_or_xor_still_read_and_agree(target, rng):
    ops = ["and<i1>(cast<i1>(%n), true:i1)", "or<i1>(cast<i1>(%n), false:i1)",
           "xor<i1>(cast<i1>(%n), true:i1)"]
    n = int(rng.integers(0, 2))
    for op, expected in zip(ops, [n, n, 1 - n]):
        graph = hpvm.from_text(OPERATION_GRAPH.replace("OPERATION", op))
        o = np.full(1, 7, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(graph, o, o.nbytes, n))
        assert o[0] == expected, op


@hpvm.leaf
def nans(o: InOut[Ptr[f32]], o_bytes: i64):
    o[0] = -math.nan  # a NaN with its sign bit set (the front end folds the negation)
    o[1] = math.nan


@hpvm.graph
def nans_graph(o: InOut[Ptr[f32]], o_bytes: i64):
    hpvm.node(nans, o=o, o_bytes=o_bytes)


@pytest.mark.parametrize("through_text", [False, True])
def test_a_negative_nan_constant_keeps_its_sign(target, through_text):
    # the text printed both as `nan` (read back positive); the python target gave both one name
    graph = hpvm.from_text(hpvm.to_text(nans_graph)) if through_text else nans_graph
    o = np.zeros(2, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, o, o.nbytes))
    expected = np.array([-np.nan, np.nan], np.float32)
    np.testing.assert_array_equal(o.view(np.uint32), expected.view(np.uint32))


FALLING_HELPER = """module @root
graph @root(%o: inout ptr<i64>, %o_bytes: i64) -> () {
  node %k = @k
  bind_in %o -> %k.0
  bind_in %o_bytes -> %k.1
}
leaf @k(%o: inout ptr<i64>, %o_bytes: i64) -> () target(any) {
  local %j: i64
  for %j = range(0:i64, 4:i64, 1:i64) {
    store %o[%j] = call @h<i64>(load<i64>(%o, %j))
  }
}
func @h(%x: i64) -> i64 {
  if gt(%x, 0:i64) {
    return (%x)
  }
}
"""


def test_a_helper_from_text_that_can_end_without_its_result_is_refused(target):
    # inlined, it gave the previous call's result where it fell off its end (as the front end
    # refuses such a helper)
    graph = hpvm.from_text(FALLING_HELPER, "helper.hpvm")
    with pytest.raises(FrontendError, match="can reach its end without a return") as info:
        hpvm.compile(graph, target)
    assert (info.value.loc.file, info.value.loc.line) == ("helper.hpvm", 13), info.value


@hpvm.leaf
def index_then_value(o: InOut[Ptr[i64]], o_bytes: i64, c: InOut[Ptr[i64]], c_bytes: i64):
    o[hpvm.atomic_add(c, 0, 1)] = hpvm.atomic_add(c, 0, 10)


@hpvm.graph
def index_then_value_graph(o: InOut[Ptr[i64]], o_bytes: i64, c: InOut[Ptr[i64]], c_bytes: i64):
    hpvm.node(index_then_value, o=o, o_bytes=o_bytes, c=c, c_bytes=c_bytes)


def test_a_store_evaluates_its_index_before_its_value(target):
    """docs/language.md ("Python in leaves"): in `p[i] = v` the index is evaluated first (Python
    evaluates v first), on every target alike: the first atomic reads 0 and the second 1."""
    o, c = np.full(16, -1, np.int64), np.zeros(1, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(index_then_value_graph, o, o.nbytes, c, c.nbytes))
    assert c[0] == 11
    np.testing.assert_array_equal(o, [1] + [-1] * 15)
