"""Telling LLVM that an instance loop carries no dependence between its iterations.

Leaf instances may run in any order and interleaving; only barriers and edges order them, and a
barrier never falls inside an instance loop. So the memory accesses of different iterations of the
x loop never need ordering, and the loop can be vectorised without runtime overlap checks between
its buffers. The loop is marked with `llvm.loop.parallel_accesses` over an access group that tags
its loads and stores. Plain read-modify-writes of privatised copies stay untagged (two instances
may update the same element), and so do atomics; an untagged access makes LLVM fall back to its
own dependence analysis for that loop, which is always safe.
"""
from __future__ import annotations

from llvmlite import ir

PRIVATE_ACCESS = "hpvm_private_access"  # attribute set on instructions that must stay untagged


class _DistinctNode(ir.values.MDValue):
    """`distinct !{...}`: llvmlite only makes uniqued nodes. Compared by identity."""

    def descr(self, buf: list[str]) -> None:
        buf.append("distinct ")
        super().descr(buf)

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def _distinct(module: ir.Module, operands: list[ir.Value]) -> _DistinctNode:
    return _DistinctNode(module, operands, name=str(len(module.metadata)))


def mark_parallel(fn: ir.Function, first_block: int, latch: ir.Instruction,
                  interleave: bool) -> None:
    """Tag the loads and stores of fn.blocks[first_block:] with a new access group and declare
    the loop whose back edge is `latch` parallel over it. With `interleave` the vectoriser runs
    two vectors per iteration (LLVM's own choice was one; two made the stencil 8% faster), else
    one (for short loops, which interleaving would leave to the scalar remainder)."""
    module = fn.module
    group = _distinct(module, [])
    for block in fn.blocks[first_block:]:
        for instr in block.instructions:
            if isinstance(instr, (ir.LoadInstr, ir.StoreInstr)) and \
                    not getattr(instr, PRIVATE_ACCESS, False) and \
                    not getattr(instr, "ordering", None):
                instr.set_metadata("llvm.access.group", group)
    parallel = module.add_metadata([ir.MetaDataString(module, "llvm.loop.parallel_accesses"),
                                    group])
    properties: list[ir.Value] = [parallel]
    properties.append(module.add_metadata([
        ir.MetaDataString(module, "llvm.loop.interleave.count"),
        ir.Constant(ir.IntType(32), 2 if interleave else 1)]))
    loop_id = _distinct(module, [])
    loop_id.operands = (loop_id, *properties)  # a loop id starts with a reference to itself
    latch.set_metadata("llvm.loop", loop_id)
