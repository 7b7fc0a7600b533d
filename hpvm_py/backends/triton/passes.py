"""The gpu target's backend passes, in the order codegen.generate() runs them (passes.Pipeline):

  localize   scalar parameters the body assigns become locals (cpu/prepare.py)
  dotmatch   a matrix-product k-loop (dotmatch.py), noted `dotmatch(loop=N, acc=%acc, ...)`:
             the kernel computes it with tl.dot (dottiles.py)
  privatise  buffers updated only by constant integer atomic adds whose results are unused
             (privatise.py), noted `privatise(buffer=%p)`: per-program histograms
  gridtiles  a leaf under a replicated parent, noted `gridtiles()`: programs over tiles of the
             combined grid (gridtiles.py)
  rowguard   in such a leaf, a trailing guard with conjuncts on the x coordinate (rowguard.py),
             noted `rowguard(at=N)`: a launch whose bounds proof holds without those conjuncts
             masks the loads by the others only (16-byte loads of a row)
  spread     reduction loops of a one-instance leaf (reductions.py), noted `spread(loop=N,
             split=true|false)`: the loop runs over the program's lanes (spread.py)

Each is an analysis: what it decides changes how the Triton source is generated, not the kernel
IR (a tl.dot, a histogram, a lane layout have no kernel-IR form), so the decision is recorded as
a note and the generator (codegen.py) reads it; `loop=N` is the position of the loop among the
body's top-level statements. dotmatch, privatise, gridtiles and rowguard are the optimisations:
the checked and literal variants skip them (`OPTIMISATIONS`). Each pass sees the notes of the ones before it
(one optimisation per kernel, the first that applies, as codegen.generate() describes).
"""
from __future__ import annotations


from ...ir import kernel as K
from ...ir.printer import expr as expr_text
from ...passes import Pipeline, with_notes
from ...passes.uniform import Uniformity
from ...types import PtrType
from ..base import NodeContext
from ..cpu.passes import localize
from .dotmatch import DotLoop, find_dot_loop, replicated_levels
from .privatise import PrivateCount, private_counts
from .reductions import ReductionLoop, reduction_loops, splittable
from .rowguard import RowGuard, find_row_guard

OPTIMISATIONS = frozenset({"dotmatch", "privatise", "gridtiles", "rowguard"})
_DIMS = "xyz"


def dotmatch(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes the first top-level loop that is exactly a matrix product (dotmatch.py)."""
    dot = find_dot_loop(leaf, ctx.input_modes, ctx.level_dims)
    if dot is None:
        return with_notes(leaf, "dotmatch", [])
    args: dict[str, K.NoteValue] = {
        "loop": _position(leaf, dot.loop), "acc": K.Var(name=dot.acc, type=leaf.locals[dot.acc]),
        "rows": _DIMS[dot.row_dim], "cols": _DIMS[dot.col_dim], "levels": dot.levels,
        "start": dot.start, "stop": dot.stop}
    if dot.tile is not None:
        args["tile"] = dot.tile
    # the operands as functions of __kk (the k index) and __idL_D (the instance's ids): text
    args["a"], args["b"] = expr_text(dot.a_elem), expr_text(dot.b_elem)
    return with_notes(leaf, "dotmatch", [K.Note(name="dotmatch", args=args)])


def dot_loop(leaf: K.LeafFunc, ctx: NodeContext) -> DotLoop | None:
    """The dotmatch pass's decision, with what dottiles.py needs of the loop (matched again)."""
    notes = leaf.noted("dotmatch")
    if not notes:
        return None
    position = notes[0].args["loop"]
    assert isinstance(position, int)
    dot = find_dot_loop(leaf, ctx.input_modes, ctx.level_dims, only=position)
    assert dot is not None, "the noted loop is no longer a matrix product"
    return dot


def privatise(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes the buffers counted per program (privatise.py), in a kernel of the plain layout (no
    tl.dot, no barrier or malloc)."""
    found = [] if leaf.noted("dotmatch") or grouped(leaf) else private_counts(leaf)
    params = {p.name: p.type for p in leaf.params}
    return with_notes(leaf, "privatise", [
        K.Note(name="privatise", args={"buffer": K.Var(name=p.name, type=params[p.name])})
        for p in found])


def private_buffers(leaf: K.LeafFunc) -> list[PrivateCount]:
    """The privatise pass's decision."""
    found = []
    for note in leaf.noted("privatise"):
        buffer = note.args["buffer"]
        assert isinstance(buffer, K.Var) and isinstance(buffer.type, PtrType)
        found.append(PrivateCount(buffer.name, buffer.type.elem))
    return found


def gridtiles(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes that programs cover tiles of the combined grid of the leaf and its replicated parent
    (gridtiles.py): a kernel of the plain layout under a parent with dims."""
    dims = replicated_levels(ctx.level_dims)
    tiles = not (leaf.noted("dotmatch") or leaf.noted("privatise") or grouped(leaf)) and \
        len(dims) == 2 and dims[1] > 0
    return with_notes(leaf, "gridtiles", [K.Note(name="gridtiles")] if tiles else [])


def rowguard(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes a grid-tiles leaf's trailing guard whose x conjuncts its loads may leave out where a
    launch proves them in bounds without (rowguard.py)."""
    guard = find_row_guard(leaf, ctx.input_modes) if leaf.noted("gridtiles") else None
    return with_notes(leaf, "rowguard", [K.Note(name="rowguard", args={"at": guard.position})]
                      if guard is not None else [])


def row_guard(leaf: K.LeafFunc, ctx: NodeContext) -> RowGuard | None:
    """The rowguard pass's decision (the guard split again)."""
    notes = leaf.noted("rowguard")
    if not notes:
        return None
    guard = find_row_guard(leaf, ctx.input_modes)
    assert guard is not None and guard.position == notes[0].args["at"], "the noted guard changed"
    return guard


def spread(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes the reduction loops that run over the program's lanes (spread.py): in a leaf without
    replication dims whose program's lanes would be idle (no other layout chosen, no early
    return)."""
    dims = ctx.level_dims
    idle = not (grouped(leaf) or leaf.noted("dotmatch") or leaf.noted("privatise") or
                leaf.noted("gridtiles") or needs_live(leaf) or (dims and dims[0]))
    loops = reduction_loops(leaf, spread_uniformity(leaf, ctx)) if idle else []
    split = splittable(leaf, loops)
    return with_notes(leaf, "spread", [
        K.Note(name="spread", args={"loop": _position(leaf, r.loop), "split": split})
        for r in loops])


def spread_loops(leaf: K.LeafFunc, uniform: Uniformity) -> tuple[list[ReductionLoop], bool]:
    """The spread pass's decision: the loops (their accumulators found again) and whether the
    leaf's loop may be split over several programs."""
    notes = leaf.noted("spread")
    if not notes:
        return [], False
    positions = {n.args["loop"] for n in notes}
    loops = [r for r in reduction_loops(leaf, uniform) if _position(leaf, r.loop) in positions]
    assert len(loops) == len(notes), "a noted loop is no longer a reduction"
    return loops, all(bool(n.args["split"]) for n in notes)


def spread_uniformity(leaf: K.LeafFunc, ctx: NodeContext) -> Uniformity:
    """Uniformity in a kernel of the plain layout (what the reduction loops are found with)."""
    return Uniformity(leaf, ctx.input_modes, frozenset(), masked_in_loops(leaf.body))


# -- facts the passes and the generator share ----------------------------------------------------


def grouped(leaf: K.LeafFunc) -> bool:
    """Barriers or malloc: one program runs every instance of a parent (unless tl.dot replaces the
    loop that used them)."""
    return any(isinstance(s, K.Assign) and isinstance(s.value, K.Malloc) for s in leaf.body) or \
        any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body))


def needs_live(leaf: K.LeafFunc) -> bool:
    """Whether some instance may return before the end (a `live` mask is then kept)."""
    body = leaf.body
    returns = [s for s in K.walk_stmts(body) if isinstance(s, K.Return)]
    return bool(returns) and not (len(returns) == 1 and body and body[-1] is returns[0])


def masked_in_loops(block: K.Block) -> frozenset[str]:
    """Locals assigned in a loop that breaks or continues: those lanes keep their values while
    the loop runs on (Triton loops cannot exit early), so the values are per lane."""
    found: set[str] = set()
    for stmt in K.walk_stmts(block):
        if isinstance(stmt, (K.For, K.While)) and \
                any(isinstance(s, (K.Break, K.Continue)) for s in K.walk_stmts(stmt.body)):
            found.update(K.assignments([stmt]))
    return frozenset(found)


def _position(leaf: K.LeafFunc, stmt: K.Stmt) -> int:
    return next(i for i, s in enumerate(leaf.body) if s is stmt)


PASSES = Pipeline("gpu", (("localize", localize), ("dotmatch", dotmatch), ("privatise", privatise),
                          ("gridtiles", gridtiles), ("rowguard", rowguard), ("spread", spread)),
                  optional=OPTIMISATIONS)
