"""A streaming stage's leaf, launched item after item without repacking it.

Every item of a stream carries its own buffers, so a stage cannot replay a launch by buffer identity
as `replay.py` does. What stays the same from item to item is everything the packed launch depends
on besides the addresses: the kernel chosen by the bounds proof (asked again for every item, a
cached lookup), the extents, and the size of every buffer. A stage keeps the packed launch of each
such combination it has seen and, for the next item that matches, points it at that item's buffers
and fresh output arrays, writes the item's scalars, and starts it on the native pool (`begin()`
returns at once; the scheduler of stages.py finishes it later).

Only host leaves whose backend can repoint a packed launch (`set_buffer`, `set_output`) take this
path, and only when every input is a buffer or a uniform scalar; anything else (device targets,
per-instance scalar inputs) fires through the executor. A launch with privatised atomics is packed
afresh for every item (its private copies are per launch).
"""
from __future__ import annotations

from typing import Any

from ..types import PtrType
from .buffers import HOST
from .executor import Executor, Slot
from .placement import device_of
from .plan import GraphPlan, NodePlan

_KEPT = 4  # packed launches kept per stage (one per combination of kernel, extents and sizes)


class StageLauncher:
    def __init__(self, executor: Executor, plan: GraphPlan, node: NodePlan):
        self.executor = executor
        self.plan = plan
        self.node = node
        self._packed: dict[tuple, Any] = {}
        self.eligible = (node.kernel is not None and device_of(node.target, node.placement.index) == HOST
                         and hasattr(node.kernel, "prepare") and all(m in ("buffer", "uniform") or src.const is not None
                                 for m, src in zip(node.input_modes, node.inputs)))

    def fire(self, env: list[Any], args: list[Any]) -> tuple[tuple[int, ...], list[Slot | None]]:
        """Run the stage's node for one item: its extents and its output slots."""
        if not self.eligible:
            return self.executor.fire_stage(self.plan, self.node, env, args)
        return self.start(env, args).finish()

    def start(self, env: list[Any], args: list[Any]) -> "StageRun":
        """Begin the stage's leaf for one item on the native pool (eligible stages only)."""
        node, executor = self.node, self.executor
        ext = executor.extents_of(node, self.plan, env)
        count = executor.check_instance_count(node, ext, 1)
        leaf = node.func
        call, outputs = executor.leaf_call(node, args, HOST, 1, count)
        extents = [ext]
        kernel = node.kernel_for(call, extents)
        key = (kernel, ext, tuple(a.nbytes for a, p in zip(call, leaf.params) if isinstance(p.type, PtrType)))
        packed = self._packed.get(key)
        if packed is None:
            packed = kernel.prepare(call, outputs, extents)
            if getattr(packed, "repointable", False):
                if len(self._packed) >= _KEPT:
                    self._packed.clear()
                self._packed[key] = packed
        else:
            for i, (p, value) in enumerate(zip(leaf.params, call)):
                if isinstance(p.type, PtrType):
                    packed.set_buffer(i, value.address)
                elif node.inputs[i].const is None:
                    packed.set_uniform(i, value)
            for j, out in enumerate(outputs):
                if out is not None:
                    packed.set_output(j, out)
        slots = [Slot(out, node.output_modes[port] == "per_instance", count) if out is not None else None
                 for port, out in enumerate(outputs)]
        return StageRun(ext, slots, packed, packed.begin())


class StageRun:
    """One item's launch of a stage, running on the native pool's workers."""

    def __init__(self, ext: tuple[int, ...], slots: list[Slot | None], packed: Any, job: Any):
        self.ext = ext
        self.slots = slots
        self._packed = packed
        self._job = job  # None: it already ran

    def done(self) -> bool:
        return self._job is None or self._packed.done(self._job)

    def finish(self) -> tuple[tuple[int, ...], list[Slot | None]]:
        """Wait for the launch (helping to run it) and report its errors; its extents and slots."""
        job, self._job = self._job, None
        self._packed.finish(job)
        return self.ext, self.slots
