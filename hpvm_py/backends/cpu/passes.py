"""The cpu target's backend passes, in the order build() runs them (passes.Pipeline):

  localize   scalar parameters the body assigns become locals (prepare.py)
  privatise  analysis: buffers updated only by commutative atomics whose old values are unused,
             noted `privatise(buffer=%p, op=KIND)`; the driver variant with private copies per
             partition is built for them (privatise.py, kernel.py)
  clip       a guard on instance ids becomes the instance loops' range (clip.py): the guard's
             conjuncts that became bounds leave the body, each bound noted
             `clip(dim=x, lower=true, bound=EXPR, plus=0|1)`, read by plan.py

Privatisation is an analysis, not a rewrite: the body stays the same and the driver (codegen)
decides per buffer how to update it, so its decision is recorded as notes. `privatise` runs before
`clip`, on the body whose accesses the checked variant numbers (accesses.sites).
"""
from __future__ import annotations

import dataclasses

from ...ir import kernel as K
from ...passes import Pipeline, with_notes
from ...types import i64
from ..base import NodeContext
from .accesses import privatisable
from .clip import Bound, clip_instances
from .prepare import localize_assigned_params

_DIMS = "xyz"


def localize(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Scalar parameters the body assigns become locals (prepare.py)."""
    return localize_assigned_params(leaf)


def privatise(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """Notes the buffers a partition may update in a private copy (accesses.privatisable)."""
    params = {p.name: p.type for p in leaf.params}
    notes = [K.Note(name="privatise", args={"buffer": K.Var(name=name, type=params[name]),
                                            "op": kind})
             for name, kind in privatisable(leaf).items()]
    return with_notes(leaf, "privatise", notes)


def private_buffers(leaf: K.LeafFunc) -> dict[str, str]:
    """The privatise pass's decision: buffer -> merge class (add, min, max, and, or, xor)."""
    found: dict[str, str] = {}
    for note in leaf.noted("privatise"):
        buffer, op = note.args["buffer"], note.args["op"]
        assert isinstance(buffer, K.Var) and isinstance(op, str)
        found[buffer.name] = op
    return found


def clip(leaf: K.LeafFunc, ctx: NodeContext) -> K.LeafFunc:
    """The guard on instance ids as bounds of the instance loops (clip.py), where the leaf runs
    as loops over instances (no barrier or malloc, which make one group of the instances)."""
    if any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body)) or \
            any(isinstance(s, K.Assign) and isinstance(s.value, K.Malloc) for s in leaf.body):
        return leaf
    clipped, bounds = clip_instances(leaf, ctx.input_modes)
    notes = [K.Note(name="clip", args={"dim": _DIMS[b.dim], "lower": b.lower, "bound": b.value,
                                       "plus": b.offset}) for b in bounds]
    return dataclasses.replace(clipped, notes=leaf.notes + notes) if notes else leaf


def clip_bounds(leaf: K.LeafFunc) -> list[Bound]:
    """The clip pass's decision: the bounds of the instance loops."""
    bounds = []
    for note in leaf.noted("clip"):
        dim, lower, value, offset = (note.args[k] for k in ("dim", "lower", "bound", "plus"))
        assert isinstance(dim, str) and isinstance(value, K.Expr) and value.type == i64
        bounds.append(Bound(_DIMS.index(dim), bool(lower), value, int(offset)))
    return bounds


PASSES = Pipeline("cpu", (("localize", localize), ("privatise", privatise), ("clip", clip)))
