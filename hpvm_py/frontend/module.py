"""Assemble the IR module of everything reachable from a root graph."""
from __future__ import annotations

from ..ir.dfg import Module
from .decorators import GraphDef, LeafDef, LibraryDef, NodeDef


def build_module(root: GraphDef) -> Module:
    module = Module(root=root.name)
    _visit(root, module)
    return module


def _visit(definition: NodeDef, module: Module) -> None:
    if definition.name in module.functions:
        return
    if isinstance(definition, GraphDef):
        module.functions[definition.name] = definition.ir
        for child in definition.children().values():
            _visit(child, module)
    elif isinstance(definition, LeafDef):
        module.functions[definition.name] = definition.ir
        for helper in definition.helpers().values():
            module.functions.setdefault(helper.name, helper.ir)
    elif isinstance(definition, LibraryDef):
        module.functions[definition.name] = definition.ir
