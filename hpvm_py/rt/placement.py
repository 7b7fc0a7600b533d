"""Where each node runs: the placement policy.
(docs/architecture.md, "Module notes": rt/placement.py)"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..backends import registry
from ..device import gpu_device
from ..errors import CompileError
from ..ir import dfg as D
from ..ir import kernel as K
from ..ir.targets import TARGETS, is_gpu, split_target
from .buffers import HOST

HINT, LEAF, RUNTIME, FALLBACK = "hint", "leaf", "runtime", "fallback"  # why a node runs where it does


@dataclass(frozen=True)
class Placement:
    target: str  # cpu | gpu | nvptx | python
    index: int | None  # GPU number asked for; None: the default GPU
    origin: str  # HINT | LEAF | RUNTIME | FALLBACK
    hinted_by: str | None = None  # HINT: the node whose hint it is (the node itself or an ancestor)
    hinted_at: Any = field(default=None, compare=False)  # HINT: that node's line, for errors

    @property
    def spelled(self) -> str:
        return self.target if self.index is None else f"{self.target}:{self.index}"


def place(node: D.Node, func: Any, runtime_target: str, inherited: Placement | None = None) -> Placement:
    """Where `node` runs when its graph is compiled for `runtime_target`, inside internal nodes
    whose nearest hint is `inherited` (steps 1-3, and 4 before any fallback)."""
    row = TARGETS.get(runtime_target)
    if row is not None and row.reference:
        return Placement(runtime_target, None, RUNTIME)
    if node.hint is not None and node.hint != "any":
        return Placement(*split_target(node.hint), HINT, node.name, node.loc)
    if inherited is not None:
        return inherited
    leaf_target = getattr(func, "target", "any") if isinstance(func, K.LeafFunc) else "any"
    if leaf_target != "any":
        return Placement(*split_target(leaf_target), LEAF)
    return Placement(runtime_target, None, RUNTIME)


def fallback(placement: Placement, error: CompileError) -> Placement | None:
    """Step 4's move: a leaf its target cannot express (the fallback's rule) runs on the target's
    fallback, if nothing pinned it to its target and the fallback runs here."""
    row = TARGETS.get(placement.target)
    if placement.origin != RUNTIME or row is None or row.fallback is None:
        return None
    target, rule = row.fallback
    if error.rule != rule or not registry.available(target):
        return None
    return Placement(target, placement.index, FALLBACK)


def origin_text(placement: Placement, node: D.Node, func: Any) -> str:
    """How the user put the node there, for error messages."""
    if placement.origin == HINT:
        return f"hint {placement.spelled!r} on node {placement.hinted_by}"
    if placement.origin == LEAF:
        return f"@hpvm.leaf(target={func.target!r}) of {K.shown_name(func)}"
    if placement.origin == FALLBACK:
        source = next(name for name, row in TARGETS.items()
                      if row.fallback is not None and row.fallback[0] == placement.target)
        return (f"the fallback of {K.shown_name(func)} from {source} (which cannot express it) to "
                f"{placement.target}")
    return "the runtime's target"


def require_compilable(placement: Placement, node: D.Node, func: Any) -> None:
    """A hinted node whose target cannot even be compiled here: say where the hint is and what to
    do (the leaf-target and runtime cases are reported by the pipeline's compile step). An
    internal node compiles nothing: the children that inherit its hint are checked."""
    if placement.origin != HINT or isinstance(func, D.GraphFunc) or \
            registry.compilable(placement.target):
        return
    raise CompileError(f"node {node.name} is placed on {placement.spelled!r} by "
                       f"{origin_text(placement, node, func)}, but target "
                       f"{placement.target!r} is not available here: "
                       f"{registry.why_unavailable(placement.target)}. Hint it 'cpu', or 'any' to "
                       "run it on the runtime's target", placement.hinted_at or node.loc,
                       rule="target-available")


def device_of(target: str, index: int | None = None) -> str:
    """Where a node's kernels run: the host, or a GPU device (hpvm_py/device) for GPU targets."""
    if not is_gpu(target):
        return HOST
    return gpu_device(index)
