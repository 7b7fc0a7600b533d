"""What the shared kernel-IR lowering asks of the target it generates code for.

Expressions, statements, arithmetic, math and memory accesses (codegen.py, arith.py, mathfns.py,
memory.py) are lowered to LLVM IR once, for the cpu and the nvptx targets. A driver supplies the
rest: instance ids, instance counts and scratch pointers through the Emitter's environment, where a
`return` goes through its `Frame`, and the target's parts below.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from .mathfns import HostMath, MathLibrary


def host_remote_base(b: ir.IRBuilder, base: ir.Value, offset: ir.Value) -> ir.Value:
    """A buffer's twin on another rank: its base moved by the distance between the two ranks'
    heaps (a byte GEP keeps LLVM's view of where the pointer comes from)."""
    return b.gep(base, [offset], source_etype=ir.IntType(8), name=f"{base.name}.peer")


@dataclass(frozen=True)
class Lowering:
    math: MathLibrary
    # memory ordering of the leaf's atomics: atomics order nothing but themselves in the language,
    # and a GPU pays for anything stronger than relaxed
    atomic_ordering: str
    # emits a barrier across the instances of a group; None when the driver splits the body at
    # barriers itself (the cpu plan runs barrier-free regions as loops)
    barrier: Callable[[ir.IRBuilder], None] | None
    # (builder, buffer base, byte offset to a peer's heap) -> the base of the peer's twin
    remote_base: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value] = host_remote_base
    # (builder, a, b) -> the top 32 bits of the unsigned product of two i32, for division by a
    # reciprocal (arith.reciprocal_divmod); None: 64-bit products, which the host vectorises
    high_product: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value] | None = None


HOST = Lowering(math=HostMath(), atomic_ordering="seq_cst", barrier=None)
