"""Whether a stream's stages can run as whole items (rt/stream/items.py), and how each stage runs
inside one: its kernel reading earlier stages' outputs on the device, the inputs forwarded on the
host, the outputs pop() reads."""
from __future__ import annotations

from ...backends import registry
from ...errors import HPVMError
from ...support import settings
from ...types import bf16
from .item_slots import StagePlan
from .stages import Stage


def plan_items(stages: list[Stage]) -> list[StagePlan] | None:
    """The stages' plans for whole items, or None when the stream cannot run that way."""
    if not settings.STREAM_ITEMS.on() or not stages:
        return None
    launchers = [stage.launcher for stage in stages]
    if len({launcher.device for launcher in launchers}) != 1 or any(
            not launcher.eligible or launcher.stream is None for launcher in launchers):
        return None
    plan = stages[0].handle.plan
    host_ports: dict[int, set[int]] = {}
    for index, port in plan.outputs:
        host_ports.setdefault(index, set()).add(port)
    plans: list[StagePlan] = []
    for stage in stages:
        node = stage.node
        ports: list[int] = []
        forwarded: dict[int, tuple[int, int]] = {}
        for port, src in enumerate(node.inputs):
            if src.node is None:
                continue
            if src.node >= len(plans):
                return None  # (the stages are in the graph's order: producers first)
            kind = plan.nodes[src.node].func.outputs[src.port].type
            if not src.stream or kind != node.func.params[port].type:
                return None  # a kept edge (the first item's value), or a conversion
            source = plan.nodes[src.node].forwarded.get(src.port)
            if source is not None and source not in plans[src.node].device_ports:
                forwarded[port] = (src.node, source)
            elif kind == bf16 or stage.launcher.levels or plans[src.node].stage.launcher.levels \
                    or not _whole_items(node.target):
                return None  # read on the device: only by a leaf of Backend.whole_items, from a
                # leaf's outputs
            else:
                ports.append(port)
        kernel, proof = None, None
        if ports:
            try:
                kernel, proof = node.reading_on_device(tuple(ports))
            except HPVMError:
                return None
        plans.append(StagePlan(stage, kernel, proof, tuple(ports), forwarded,
                               frozenset(host_ports.get(stage.index, ()))))
    return plans


def _whole_items(target: str) -> bool:
    backend = registry.get(target)
    return backend is not None and backend.whole_items
