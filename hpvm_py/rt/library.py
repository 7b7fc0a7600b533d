"""Library nodes (the collectives of hpvm.comm): the plan compiles them with the compiler that
hpvm_py.distributed registers here, so the runtime never imports the layer above it."""
from __future__ import annotations

from typing import Any, Callable

from ..backends.base import LeafKernel
from ..errors import CompileError
from ..ir import dfg as D

# fn(func, node, target, the parent parameter bound to each input or None, replicated) -> kernel
Compiler = Callable[[D.LibraryFunc, D.Node, str, list[str | None], bool], LeafKernel]
_compiler: Compiler | None = None


def register(compiler: Compiler) -> None:
    """hpvm_py.distributed's compile_library (registered when it is imported)."""
    global _compiler
    _compiler = compiler


def compile_library(func: D.LibraryFunc, node: D.Node, target: str, bound: list[str | None],
                    replicated: bool) -> LeafKernel:
    if _compiler is None:
        raise CompileError(f"communication node {node.name} ({func.kind}) needs hpvm_py.distributed, "
                           "which is not loaded", node.loc, rule="library-target")
    return _compiler(func, node, target, bound, replicated)


def first_library_node(plan: Any) -> Any:
    """The first communication node of an execution plan (nested graphs included), or None."""
    for node in plan.nodes:
        if isinstance(node.func, D.LibraryFunc):
            return node
        found = first_library_node(node.child) if node.child is not None else None
        if found is not None:
            return found
    return None
