"""malloc() scratch on nvptx: shared memory of the group's thread block.

Every malloc of the body gets a part of one block of shared memory, each part starting at a
multiple of SCRATCH_ALIGN bytes. When every size is a constant the block is a static array;
otherwise it is dynamic shared memory, whose size the launcher must pass, so the sizes must be
computable on the host before the launch: from constants, uniform scalar parameters and instance
counts (`host_bytes`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import CompileError, LaunchError
from ...ir import kernel as K
from ...ir import semantics
from ...types import PtrType, ScalarType
from ..base import MAX_SCRATCH_BYTES, NodeContext, negative_malloc, scratch_past_limit

SCRATCH_ALIGN = 16
STATIC_LIMIT = 48 * 1024  # CUDA's limit on static shared memory; beyond it, dynamic memory opts in


@dataclass(frozen=True)
class Scratch:
    """The shared memory of a group: one part per malloc, in body order."""

    mallocs: tuple[K.Assign, ...]
    static_bytes: int | None  # the total when every size is a constant, else None (dynamic)

    @property
    def dynamic(self) -> bool:
        return bool(self.mallocs) and self.static_bytes is None


def aligned(nbytes: int) -> int:
    return (nbytes + SCRATCH_ALIGN - 1) // SCRATCH_ALIGN * SCRATCH_ALIGN


def scratch_of(leaf: K.LeafFunc, ctx: NodeContext) -> Scratch:
    mallocs = tuple(s for s in leaf.body if isinstance(s, K.Assign) and isinstance(s.value, K.Malloc))
    for e in K.walk_all_exprs(leaf.body):
        if isinstance(e, K.Malloc) and not any(m.value is e for m in mallocs):
            raise CompileError("malloc() must be assigned to a variable at the top level of the "
                               "leaf body", e.loc, rule="malloc-uniform")
    sizes = [m.value.nbytes for m in mallocs]  # type: ignore[attr-defined]
    if all(isinstance(n, K.Const) for n in sizes):
        total = sum(aligned(max(0, int(n.value))) for n in sizes)  # type: ignore[attr-defined]
        return Scratch(mallocs, total if total <= STATIC_LIMIT else None)
    uniform = {p.name for p, mode in zip(leaf.params, ctx.input_modes)
               if mode == "uniform" and not isinstance(p.type, PtrType)}
    for n in sizes:
        for sub in K.walk_exprs(n):
            if not (isinstance(sub, (K.Const, K.NumInstances, K.NumDims, K.Cast, K.BinOp,
                                     K.UnaryOp, K.Compare, K.Logical, K.Select)) or (isinstance(sub, K.Var) and sub.name in uniform)):
                raise CompileError(
                    "on target 'nvptx' the size of malloc() must be known before the launch (it "
                    "sets the block's shared memory): compute it from constants, uniform scalar "
                    "parameters and instance counts only", n.loc, rule="malloc-uniform")
    return Scratch(mallocs, None)


def host_bytes(scratch: Scratch, leaf: K.LeafFunc, args: list[Any],
               extents: list[tuple[int, ...]]) -> int:
    """The shared memory a launch's scratch takes: the sizes evaluated as the kernel will. A
    negative size, or sizes adding up past MAX_SCRATCH_BYTES, fail the launch at a malloc, as
    on the other targets (the kernel would take a negative size as 0)."""
    values = {p.name: args[i] for i, p in enumerate(leaf.params) if not isinstance(p.type, PtrType)}
    total = 0
    for m in scratch.mallocs:
        assert isinstance(m.value, K.Malloc)
        nbytes = int(_evaluate(m.value.nbytes, values, extents))
        if nbytes < 0:
            raise negative_malloc(leaf, nbytes, m.loc)
        total += aligned(nbytes)
        if total > MAX_SCRATCH_BYTES:  # before the device's limit: every target says this
            raise scratch_past_limit(leaf, m.loc)
    return total


def _evaluate(e: K.Expr, values: dict[str, Any], extents: list[tuple[int, ...]]) -> Any:
    if isinstance(e, (K.Const, K.Var)):
        assert isinstance(e.type, ScalarType)
        value = e.value if isinstance(e, K.Const) else values[e.name]
        return np.asarray(value).astype(semantics.value_dtype(e.type))[()]
    if isinstance(e, K.NumInstances):
        level = extents[e.level] if e.level < len(extents) else ()
        return np.int64(level[e.dim] if e.dim < len(level) else 1)
    if isinstance(e, K.NumDims):
        return np.int64(len(extents[e.level]) if e.level < len(extents) else 0)
    if isinstance(e, K.Cast):
        assert isinstance(e.value.type, ScalarType) and isinstance(e.type, ScalarType)
        return semantics.cast(_evaluate(e.value, values, extents), e.value.type, e.type)
    if isinstance(e, K.UnaryOp):
        assert isinstance(e.type, ScalarType)
        return semantics.unary(e.op, _evaluate(e.operand, values, extents), e.type)
    if isinstance(e, K.BinOp):
        assert isinstance(e.type, ScalarType)
        return semantics.binop(e.op, _evaluate(e.lhs, values, extents),
                               _evaluate(e.rhs, values, extents), e.type)
    if isinstance(e, K.Compare):  # the front end turns a uniform `if` before a malloc into these
        return bool(semantics.compare(e.op, _evaluate(e.lhs, values, extents),
                                      _evaluate(e.rhs, values, extents)))
    if isinstance(e, K.Logical):
        lhs = bool(_evaluate(e.lhs, values, extents))
        if lhs == (e.op == "lor"):
            return lhs
        return bool(_evaluate(e.rhs, values, extents))
    if isinstance(e, K.Select):
        chosen = e.if_true if _evaluate(e.cond, values, extents) else e.if_false
        return _evaluate(chosen, values, extents)
    raise LaunchError(f"internal: cannot evaluate {type(e).__name__} on the host", e.loc)
