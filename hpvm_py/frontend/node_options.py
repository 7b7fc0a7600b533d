"""hpvm.node's own keywords (grid=, name=, hint=) against node inputs of the same name.

The keywords always configure the node, as launch's stream= does; an input with one of these names
goes by position. A call that leaves such an input unconnected, or gives an option a value that
only makes sense as the input, gets an error that says so instead of a bare "not connected".
"""
from __future__ import annotations

from typing import Any

from ..errors import VerificationError
from .defs import NodeDef

NODE_OPTIONS = ("grid", "name", "hint")


def shadow_note(definition: NodeDef, shadowed: list[str]) -> str:
    names = " and ".join(f"{o}=" for o in shadowed)
    verb = "is the node's own option" if len(shadowed) == 1 else "are the node's own options"
    return (f"{names} in hpvm.node {verb}, not the input of {definition.name} with that name: pass "
            "such an input by position (hpvm.node(f, a, b, ...)), or with hpvm.bind_input / "
            "hpvm.edge")


def check_shadowed(builder: Any) -> None:
    """An input left unconnected because hpvm.node took its name as an option: say so at the node
    (the verifier would only say that the input is not connected)."""
    if not builder.shadowed:
        return
    fed = {(b.dst, b.dst_port) for b in builder.ir.input_binds}
    fed.update((e.dst, e.dst_port) for e in builder.ir.edges)
    fed.update((c.dst, c.dst_port) for c in builder.ir.const_binds)
    fed.update((x.dst, x.dst_port) for x in builder.ir.expr_binds)
    for created, shadowed in builder.shadowed:
        index = created.definition.input_index()
        missing = [o for o in shadowed if (created.ir.name, index[o]) not in fed]
        if missing:
            raise VerificationError(f"input {missing[0]!r} of node {created.ir.name} is not "
                                    f"connected: {shadow_note(created.definition, missing)}",
                                    created.ir.loc, rule="node-inputs")
