"""Assemble the IR module of everything reachable from a root graph."""
from __future__ import annotations

from ..ir.dfg import Module
from .defs import NodeDef


def build_module(root: NodeDef) -> Module:
    module = Module(root=root.name)
    _visit(root, module)
    return module


def _visit(definition: NodeDef, module: Module) -> None:
    if definition.name in module.functions:
        return
    module.functions[definition.name] = definition.ir
    for helper in definition.helpers().values():
        module.functions.setdefault(helper.name, helper.ir)
    for child in definition.children().values():
        _visit(child, module)
