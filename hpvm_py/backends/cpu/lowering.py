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


@dataclass(frozen=True)
class Lowering:
    math: MathLibrary
    # memory ordering of the leaf's atomics: atomics order nothing but themselves in the language,
    # and a GPU pays for anything stronger than relaxed
    atomic_ordering: str
    # emits a barrier across the instances of a group; None when the driver splits the body at
    # barriers itself (the cpu plan runs barrier-free regions as loops)
    barrier: Callable[[ir.IRBuilder], None] | None


HOST = Lowering(math=HostMath(), atomic_ordering="seq_cst", barrier=None)
