"""malloc() on target gpu: per-program scratch in global memory.

A leaf that mallocs runs one program per parent instance (like a leaf with barriers), and each
malloc is a slice of a zeroed device array with one slice per parent instance. The size must be
known before the launch, so it is evaluated on the host: the `malloc-uniform` rule makes it the
same for every instance, and here it may use constants, uniform scalar parameters and instance
counts (anything else is a located CompileError suggesting another target).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...errors import CompileError
from ...ir import kernel as K
from ...passes.fold import fold_expr
from ...types import PtrType, ScalarType
from ..base import negative_malloc


@dataclass
class Scratch:
    """One malloc of the leaf body."""

    name: str  # the local holding the pointer
    elem: ScalarType
    nbytes: K.Expr
    loc: Any


def scratches(leaf: K.LeafFunc, input_modes: tuple[str, ...], suggestion: str) -> list[Scratch]:
    """The mallocs of a leaf (top-level assignments, by the verifier), checked to be host-computable."""
    uniform = {p.name for p, mode in zip(leaf.params, input_modes) if mode == "uniform"}
    found = []
    for stmt in leaf.body:
        if isinstance(stmt, K.Assign) and isinstance(stmt.value, K.Malloc):
            for e in K.walk_exprs(stmt.value.nbytes):
                allowed = isinstance(e, (K.Const, K.BinOp, K.UnaryOp, K.Compare, K.Cast, K.Select,
                                         K.Logical, K.NumInstances, K.NumDims))
                if isinstance(e, K.Var):
                    allowed = e.name in uniform
                if not allowed:
                    raise CompileError("on target 'gpu' the size of malloc() must be computed from "
                                       "constants, scalar parameters that are the same for every "
                                       f"instance, and instance counts; {suggestion}", stmt.loc,
                                       rule="gpu-supported")
            t = leaf.locals[stmt.target]
            assert isinstance(t, PtrType)
            found.append(Scratch(stmt.target, t.elem, stmt.value.nbytes, stmt.loc))
    return found


def size_of(scratch: Scratch, leaf: K.LeafFunc, args: list[Any],
            extents: list[tuple[int, ...]], level_dims: tuple[int, ...]) -> int:
    """The byte size of one malloc for this launch."""
    values = {p.name: a for p, a in zip(leaf.params, args) if isinstance(p.type, ScalarType)}

    def bind(e: K.Expr) -> K.Expr:
        if isinstance(e, K.Var) and e.name in values:
            assert isinstance(e.type, ScalarType)
            v = values[e.name]
            return K.Const(value=float(v) if e.type.is_float else int(v), type=e.type, loc=e.loc)
        if isinstance(e, (K.NumInstances, K.NumDims)):
            dims = level_dims[e.level] if e.level < len(level_dims) else 0
            if isinstance(e, K.NumDims):
                value = dims
            else:
                value = extents[e.level][e.dim] if e.dim < dims else 1
            return K.Const(value=value, type=e.type, loc=e.loc)
        return K.rebuild(e, [bind(c) for c in K.child_exprs(e)])

    folded = fold_expr(bind(scratch.nbytes))
    if not isinstance(folded, K.Const):
        raise CompileError("the size of this malloc() could not be computed before the launch",
                           scratch.loc, rule="gpu-supported")
    nbytes = int(folded.value)
    if nbytes < 0:
        raise negative_malloc(leaf, nbytes, scratch.loc)
    return nbytes
