"""The backends' named passes (hpvm_py/passes Pipeline; backends/*/passes.py), each run alone on
textual IR: parse the text, run the pass, print, and look at the result. Decisions that change only
the generated code are notes (`note NAME(key=value)`) that print and read back; `HPVM_DUMP_IR=<pass>`
and `hpvmc compile --emit ir --after <pass>` show the IR after one."""
from __future__ import annotations

import logging
import warnings

import pytest

from hpvm_py.backends.cpu.passes import PASSES as CPU
from hpvm_py.backends.cpu.passes import clip_bounds, private_buffers
from hpvm_py.backends.nvptx.backend import PASSES as NVPTX
from hpvm_py.backends.triton.passes import PASSES as GPU
from hpvm_py.backends.triton.passes import OPTIMISATIONS, dot_loop
from hpvm_py.ir import kernel as K
from hpvm_py.ir.context import NodeContext
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module
from hpvm_py.errors import HPVMWarning
from hpvm_py.ir.targets import TARGETS
from hpvm_py.passes import PIPELINES, dump_stages, leaf_module

HEADER = "; hpvm-py textual IR\nmodule @{name}\n\n"

GUARDED = """leaf @guarded(%a: inout ptr<f32>, %n: i64) -> () target(any) {
  local %i: i64
  %i = instance_id.x(0)
  if land(gt(%i, 0:i64), lt(%i, sub<i64>(%n, 1:i64))) {
    store %a[%i] = 0.0:f32
  }
}
"""

HISTOGRAM = """leaf @histogram(%data: in ptr<i32>, %bins: inout ptr<i32>, %nbins: i32) -> () target(any) {
  local %i: i64
  %i = instance_id.x(0)
  do atomic.add<i32>(%bins, mod<i32>(load<i32>(%data, %i), %nbins), 1:i32)
}
"""

NAIVE_SGEMM = """leaf @naive(%a: in ptr<f32>, %b: in ptr<f32>, %c: inout ptr<f32>, %n: i64, %k: i64) -> () target(any) {
  local %j: i64
  local %i: i64
  local %acc: f32
  local %t: i64
  %j = instance_id.x(0)
  %i = instance_id.y(0)
  %acc = 0.0:f32
  for %t = range(0:i64, %k, 1:i64) {
    %acc = add<f32>(%acc, mul<f32>(load<f32>(%a, add<i64>(mul<i64>(%i, %k), %t)), load<f32>(%b, add<i64>(mul<i64>(%t, %n), %j))))
  }
  store %c[add<i64>(mul<i64>(%i, %n), %j)] = %acc
}
"""

SUM = """leaf @total(%x: in ptr<i32>, %n: i64) -> (i32) target(any) {
  local %s: i32
  local %i: i64
  %s = 0:i32
  for %i = range(0:i64, %n, 1:i64) {
    %s = add<i32>(%s, load<i32>(%x, %i))
  }
  return (%s)
}
"""

STENCIL = """leaf @blur(%a: in ptr<f32>, %b: out ptr<f32>, %w: i64) -> () target(any) {
  local %x: i64
  local %y: i64
  %x = add<i64>(mul<i64>(instance_id.x(1), num_instances.x(0)), instance_id.x(0))
  %y = add<i64>(mul<i64>(instance_id.y(1), num_instances.y(0)), instance_id.y(0))
  store %b[add<i64>(mul<i64>(%y, %w), %x)] = load<f32>(%a, add<i64>(mul<i64>(%y, %w), %x))
}
"""


def _leaf(text: str) -> K.LeafFunc:
    name = text.split("@", 1)[1].split("(", 1)[0]
    module = parse_module(HEADER.format(name=name) + text)
    return module.functions[name]


def _ctx(leaf: K.LeafFunc, dims: tuple[int, ...], scalars: str = "uniform") -> NodeContext:
    modes = tuple("buffer" if isinstance(p.type, K.PtrType) else scalars for p in leaf.params)
    return NodeContext(dims, modes, tuple("per_instance" for _ in leaf.outputs))


def _text(leaf: K.LeafFunc) -> str:
    text = print_module(leaf_module(leaf))
    assert parse_module(text).functions[leaf.name] == leaf  # notes print and read back
    return text


# -- the pipelines ------------------------------------------------------------------------------


def test_every_target_lists_its_passes_in_order():
    assert PIPELINES["cpu"] is CPU and CPU.names == ("localize", "privatise", "clip")
    assert PIPELINES["gpu"] is GPU and GPU.names == ("localize", "dotmatch", "privatise",
                                                     "gridtiles", "rowguard", "spread")
    assert GPU.optional == OPTIMISATIONS == {"dotmatch", "privatise", "gridtiles", "rowguard"}
    assert PIPELINES["nvptx"] is NVPTX and NVPTX.names == ("localize",)
    with pytest.raises(KeyError, match="no pass 'dot'"):
        GPU.get("dot")
    # the targets table names them too (HPVM_DUMP_IR checks names without importing a target)
    assert {t: row.passes for t, row in TARGETS.items()} == \
        {**{t: p.names for t, p in PIPELINES.items()}, "python": ()}


def test_notes_print_after_the_locals_and_read_back():
    leaf = _leaf(GUARDED)
    noted = K.LeafFunc(name=leaf.name, params=leaf.params, outputs=leaf.outputs,
                       locals=leaf.locals, body=leaf.body, notes=[
                           K.Note(name="clip", args={"dim": "x", "lower": True, "plus": -1,
                                                     "bound": K.Var(name="n", type=leaf.params[1].type),
                                                     "word": "a b", "keyword": "note"}),
                           K.Note(name="gridtiles")])
    text = _text(noted)
    assert '  local %i: i64\n  note clip(dim=x, lower=true, plus=-1, bound=%n, word="a b", ' \
           'keyword="note")\n  note gridtiles()\n  %i = instance_id.x(0)' in text


# -- cpu ----------------------------------------------------------------------------------------


def test_cpu_localize_gives_an_assigned_parameter_a_local():
    leaf = _leaf("""leaf @shift(%a: inout ptr<i64>, %n: i64) -> () target(any) {
  %n = add<i64>(%n, 1:i64)
  store %a[0:i64] = %n
}
""")
    text = _text(CPU.get("localize")(leaf, _ctx(leaf, (1,))))
    assert "local %n_local: i64" in text
    assert "%n_local = %n" in text and "store %a[0:i64] = %n_local" in text


def test_cpu_clip_moves_the_guard_into_the_loop_bounds():
    leaf = _leaf(GUARDED)
    clipped = CPU.get("clip")(leaf, _ctx(leaf, (1,)))
    text = _text(clipped)
    assert "note clip(dim=x, lower=true, bound=0:i64, plus=1)" in text
    assert "note clip(dim=x, lower=false, bound=sub<i64>(%n, 1:i64), plus=0)" in text
    assert "if " not in text and "  store %a[%i] = 0.0:f32" in text
    assert [(b.dim, b.lower, b.offset) for b in clip_bounds(clipped)] == [(0, True, 1), (0, False, 0)]
    # the plan reads the bounds from the notes, also of IR read back from text
    from hpvm_py.backends.cpu.loop_plan import make_plan
    plan = make_plan(parse_module(text).functions["guarded"], _ctx(leaf, (1,)))
    assert [(b.dim, b.lower, b.offset) for b in plan.bounds] == [(0, True, 1), (0, False, 0)]


def test_cpu_clip_leaves_a_guard_it_cannot_use():
    per_instance_bound = _leaf(GUARDED)  # %n differs between instances: no bound of the loop
    ctx = _ctx(per_instance_bound, (1,), "per_instance")
    text = _text(CPU.get("clip")(per_instance_bound, ctx))
    assert text.count("note clip(") == 1 and "note clip(dim=x, lower=true, bound=0:i64, plus=1)" in text
    assert "  if lt(%i, sub<i64>(%n, 1:i64)) {\n    store %a[%i] = 0.0:f32" in text
    barrier = _leaf(GUARDED.replace("  %i = instance_id.x(0)\n",
                                    "  %i = instance_id.x(0)\n  barrier\n"))
    assert CPU.get("clip")(barrier, _ctx(barrier, (1,))) is barrier  # one group: no instance loop


def test_cpu_privatise_notes_the_counted_buffers():
    leaf = _leaf(HISTOGRAM)
    noted = CPU.get("privatise")(leaf, _ctx(leaf, (1,)))
    assert "note privatise(buffer=%bins, op=add)" in _text(noted)
    assert noted.body is leaf.body and private_buffers(noted) == {"bins": "add"}
    read_too = _leaf(HISTOGRAM.replace("  do atomic", "  store %data[0:i64] = load<i32>(%bins, 0:i64)\n  do atomic"))
    assert CPU.get("privatise")(read_too, _ctx(read_too, (1,))).notes == []
    # running it twice notes the decision once
    assert CPU.get("privatise")(noted, _ctx(leaf, (1,))).notes == noted.notes


def test_cpu_pipeline_runs_in_order_and_keeps_the_unclipped_body():
    leaf = _leaf(GUARDED)
    after = CPU.run(leaf, _ctx(leaf, (1,)))
    assert list(after) == ["localize", "privatise", "clip"]
    assert isinstance(after["privatise"].body[1], K.If) and not isinstance(after["clip"].body[1], K.If)


# -- gpu ----------------------------------------------------------------------------------------


def test_gpu_dotmatch_notes_the_matrix_product_loop():
    leaf = _leaf(NAIVE_SGEMM)
    ctx = _ctx(leaf, (2,))
    noted = GPU.get("dotmatch")(leaf, ctx)
    text = _text(noted)
    assert "note dotmatch(loop=3, acc=%acc, rows=y, cols=x, levels=1, start=0:i64, stop=%k, " in text
    assert 'a="load<f32>(%a, add<i64>(' in text and "%__kk" in text
    assert dot_loop(noted, ctx).loop is leaf.body[3]
    assert GPU.get("dotmatch")(leaf, _ctx(leaf, (1,))).notes == []  # a 1-D grid has no tiles


def test_gpu_privatise_notes_constant_counts():
    leaf = _leaf(HISTOGRAM)
    ctx = _ctx(leaf, (1,))
    assert "note privatise(buffer=%bins)" in _text(GPU.get("privatise")(leaf, ctx))
    by_value = _leaf(HISTOGRAM.replace("1:i32)", "%nbins)"))  # not a constant amount
    assert GPU.get("privatise")(by_value, ctx).notes == []


def test_gpu_gridtiles_notes_a_leaf_under_a_replicated_parent():
    leaf = _leaf(STENCIL)
    assert _text(GPU.get("gridtiles")(leaf, _ctx(leaf, (2, 2)))).count("note gridtiles()") == 1
    assert GPU.get("gridtiles")(leaf, _ctx(leaf, (2,))).notes == []


def test_gpu_spread_notes_reduction_loops_of_a_one_instance_leaf():
    leaf = _leaf(SUM)
    noted = GPU.get("spread")(leaf, _ctx(leaf, ()))
    assert "note spread(loop=1, split=true)" in _text(noted)
    assert GPU.get("spread")(leaf, _ctx(leaf, (1,))).notes == []  # its lanes are instances
    float_sum = _leaf(SUM.replace("i32", "f32").replace("0:f32", "0.0:f32"))
    assert GPU.get("spread")(float_sum, _ctx(float_sum, ())).notes == []  # + on floats: in order


def test_gpu_optimisations_exclude_each_other_in_pipeline_order():
    leaf = _leaf(HISTOGRAM)
    under_parent = _ctx(leaf, (1, 1))
    final = GPU.final(leaf, under_parent)
    assert [n.name for n in final.notes] == ["privatise"]  # no grid tiles on top
    literal = GPU.final(leaf, under_parent, skip=OPTIMISATIONS)
    assert literal.notes == []


def test_generated_source_follows_the_notes():
    from hpvm_py.backends.triton.codegen import generate
    leaf = _leaf(NAIVE_SGEMM)
    ctx = _ctx(leaf, (2,))
    assert generate(leaf, ctx, False, interpreted=True).dot is not None
    assert generate(leaf, ctx, False, interpreted=True, optimised=False).dot is None
    assert generate(leaf, ctx, True, interpreted=True).dot is None


# -- dumps --------------------------------------------------------------------------------------


@pytest.mark.parametrize("wanted", ["clip", "cpu.clip", "all"])
def test_dump_ir_names_a_backend_pass(monkeypatch, caplog, wanted):
    monkeypatch.setenv("HPVM_DUMP_IR", wanted)
    leaf = _leaf(GUARDED)
    with caplog.at_level(logging.INFO, logger="hpvm_py.dump"):
        CPU.run(leaf, _ctx(leaf, (1,)), label="unchecked")
    dumps = [r.getMessage() for r in caplog.records if "IR after cpu.clip" in r.getMessage()]
    assert len(dumps) == 1
    head, text = dumps[0].split("\n", 1)
    assert head == ("; ---- IR after cpu.clip (leaf @guarded, dims=(1,);in=buffer,uniform;out=, "
                    "unchecked) ----")
    assert "note clip(dim=x" in text and parse_module(text).functions["guarded"].noted("clip")


def test_dump_ir_of_another_target_prints_nothing(monkeypatch, caplog):
    monkeypatch.setenv("HPVM_DUMP_IR", "gpu.privatise")
    leaf = _leaf(HISTOGRAM)
    with caplog.at_level(logging.INFO, logger="hpvm_py.dump"):
        CPU.run(leaf, _ctx(leaf, (1,)))
    assert not [r for r in caplog.records if "IR after" in r.getMessage()]


@pytest.mark.parametrize("wanted, unknown", [("cpu.clpi", "'cpu.clpi'"), ("inlne,fold", "'inlne'"),
                                             ("gpu.clip", "'gpu.clip'"), ("privatise, rowgaurd,x",
                                                                          "'rowgaurd', 'x'")])
def test_dump_ir_warns_once_of_names_no_stage_has(monkeypatch, caplog, wanted, unknown):
    monkeypatch.setenv("HPVM_DUMP_IR", wanted)
    leaf = _leaf(GUARDED)
    with pytest.warns(HPVMWarning, match=f"HPVM_DUMP_IR names no stage called {unknown}: nothing is "
                                         "printed for it"):
        CPU.run(leaf, _ctx(leaf, (1,)))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per value
        CPU.run(leaf, _ctx(leaf, (1,)))


@pytest.mark.parametrize("wanted", ["all", "frontend,inline,fold", "clip,gpu.rowguard,nvptx.localize",
                                    " spread , cpu.privatise"])
def test_dump_ir_takes_every_stage_name_without_a_warning(monkeypatch, wanted):
    monkeypatch.setenv("HPVM_DUMP_IR", wanted)
    leaf = _leaf(GUARDED)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        CPU.run(leaf, _ctx(leaf, (1,)))
    assert "gpu.dotmatch" in dump_stages() and "dotmatch" in dump_stages()


def test_hpvmc_compile_emits_the_ir_after_a_pass(capsys):
    from hpvm_py.cli import main
    assert main(["compile", "examples/histogram.py", "--target", "cpu", "--emit", "ir",
                 "--after", "privatise"]) == 0
    out = capsys.readouterr().out
    assert "note privatise(buffer=%bins, op=add)" in out
    parse_module(out)
    assert main(["compile", "examples/histogram.py", "--target", "cpu", "--emit", "ir",
                 "--after", "dotmatch"]) == 2
    assert "the cpu target has no backend pass 'dotmatch'" in capsys.readouterr().err
