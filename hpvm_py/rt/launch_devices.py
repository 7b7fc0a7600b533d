"""The devices one launch of a plan touches, after checking that each GPU node's target runs here
and that its device exists (docs/placement.md)."""
from __future__ import annotations

from typing import Any

from ..backends import registry
from ..device import device_count, gpu_device
from ..errors import CompileError, LaunchError
from ..ir.targets import hint_targets
from .buffers import HOST
from .placement import LEAF, origin_text
from .plan import GraphPlan, NodePlan


_HOST_ONLY = frozenset((HOST,))  # (one object: a tracked buffer keeps the set it was checked for)


def launch_devices(plan: GraphPlan) -> frozenset[str]:
    """Every device a launch of `plan` runs nodes on; first checks that each GPU node's target runs
    here and that its device exists (located errors that say what to do). Cached per default GPU."""
    gpu_nodes = plan.gpu_nodes
    if not gpu_nodes:
        return _HOST_ONLY
    default = gpu_device()
    cached = plan.devices_for.get(default)
    if cached is not None:
        return cached
    devices = {HOST}
    for node in gpu_nodes:
        _check_runnable(node)
        devices.add(_node_device(node, default))
    result = plan.devices_for[default] = frozenset(devices)
    return result


def _check_runnable(node: NodePlan) -> None:
    """A node on a target that cannot run here: a CompileError where the launch would compile its
    kernels for the device (gpu without CUDA or the interpreter), else a LaunchError (nvptx's
    kernels are compiled, only loading them needs the driver); at the line of the placement."""
    target = node.placement.target
    if registry.available(target):
        return
    here = ", ".join(t for t in hint_targets() if t not in ("any", target) and registry.available(t))
    message = (f"node {node.name} runs on target {target!r} (placed there by "
               f"{origin_text(node.placement, node.node, node.func)}), which cannot run here: "
               f"{registry.why_unavailable(target)}. To run this graph here, place the node on a "
               f"target that runs here (hint 'cpu', or 'any' for the runtime's target; available "
               f"here: {here})")
    error = CompileError if registry.compiles_at_launch(target) else LaunchError
    raise error(message, _placement_loc(node), rule="target-available")


def _placement_loc(node: NodePlan) -> Any:
    """Where the placement was written: the leaf's own target=, else the hinted node (the node
    itself, or the internal node whose hint it inherits)."""
    if node.placement.origin == LEAF:
        return node.func.loc
    return node.placement.hinted_at or node.node.loc


def _node_device(node: NodePlan, default: str) -> str:
    index = node.placement.index
    if index is None:
        return default
    kind = default.partition(":")[0]
    count = device_count(kind)
    if index >= count:
        have = ", ".join(f"{kind}:{i}" for i in range(count)) or "none"
        raise LaunchError(f"node {node.name} is placed on {node.placement.spelled!r} (by "
                          f"{origin_text(node.placement, node.node, node.func)}), but there is no "
                          f"GPU number {index} here (GPUs: {have}); use a GPU number below {count}"
                          + (" or set HPVM_FAKE_DEVICES" if kind == "fake" else ""),
                          _placement_loc(node), rule="target-available")
    return f"{kind}:{index}"
