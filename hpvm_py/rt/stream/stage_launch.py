"""A streaming stage's leaf, launched item after item without repacking it: the packed launch of
each (kernel, extents, buffer sizes) seen is pointed at the next item's buffers and started without
waiting, on the native pool (cpu) or the stage's CUDA stream (gpu, nvptx); docs/architecture.md,
"Streaming". A stage that is a chain of internal nodes down to one leaf (HPVM-C's wrapper, grid
of thread blocks, leaf) launches that leaf the same way, its levels' instance counts as the
leaf's ancestors' and its outputs bound up through every level."""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from ...device.staging import PinnedPool, StagedCopies
from ...device.streams import ItemEvent, StageStream
from ...ir.kernel import shown_name
from ...support import profile
from ...types import PtrType
from ..buffers import HOST
from ..args import same_scalar
from ..executor import Executor, Slot
from ..placement import device_of
from ..plan import GraphPlan, NodePlan

_KEPT = 4  # packed launches kept per stage (one per combination of kernel, extents and sizes)


class StageLauncher:
    def __init__(self, executor: Executor, plan: GraphPlan, node: NodePlan):
        self.executor = executor
        self.plan = plan
        self.node = node
        chain = node.chain_to_leaf()
        # the internal nodes from the stage's down to the leaf's parent (none: the stage is a leaf)
        self.levels: list[NodePlan] = chain or []
        self.leaf = leaf = node.recorded_leaf if chain is not None else node
        self._packed: dict[tuple, Any] = {}
        self._pointers = [isinstance(p.type, PtrType) for p in leaf.func.params]  # per leaf input
        self.device = device_of(leaf.target, leaf.placement.index)
        # a GPU stage's stream, also when the stage runs on a thread of its own
        self.stream = StageStream(self.device, node.name) if self.device != HOST else None
        self._pinned = PinnedPool()  # the staged copies' host buffers (a GPU stage's)
        # per stage output: the leaf output it is (each level binds its one child's outputs)
        self._outputs = list(range(len(node.func.outputs)))
        for level in self.levels:
            assert level.child is not None
            self._outputs = [level.child.outputs[port][1] for port in self._outputs]
        # every level's inputs are the same for all its instances (no per-instance edge values)
        simple = chain is not None and all(
            m in ("buffer", "uniform") or src.const is not None
            for level in [*self.levels, leaf] for m, src in zip(level.input_modes, level.inputs))
        self.eligible = simple and leaf.kernel is not None and leaf.kernel.prepares

    def fire(self, env: list[Any], args: list[Any]) -> tuple[tuple[int, ...], list[Slot | None]]:
        """Run the stage's node for one item: its extents and its output slots."""
        if not self.eligible:
            return self.executor.fire_stage(self.plan, self.node, env, args)
        return self.start(env, args).finish()

    def start(self, env: list[Any], args: list[Any], after: Sequence[ItemEvent] = ()
              ) -> "StageRun | DeviceStageRun":
        """Begin the stage's leaf for one item (eligible stages only); a GPU stage's stream first
        waits for the events `after` (the item's producers on other streams)."""
        leaf, executor = self.leaf, self.executor
        args, extents, parents = self.descend(env, args)
        count = math.prod(extents[0])
        stream = self.stream
        copied_in = executor.uncovered_outs(leaf, args, extents)
        if stream is None:
            call, outputs = executor.leaf_call(leaf, args, HOST, parents, count, copied_in)
            packed = self._packed_for(call, outputs, extents)
            return StageRun(extents[-1], self.output_slots(outputs, extents, parents), packed,
                            packed.begin())
        stream.use()
        copies = StagedCopies(self._pinned)
        with executor.device_buffers() as acquired, copies.active():  # copies in: queued
            call, outputs = executor.leaf_call(leaf, args, self.device, parents, count, copied_in)
        packed = self._packed_for(call, outputs, extents)
        for event in after:
            stream.wait(event)
        stream.launched(leaf.func.name)
        timer = profile.gpu_begin(self.device, stream.handle) if profile.on else None
        packed.issue(stream.handle)
        if timer is not None:
            profile.gpu_end(timer, "gpu_kernel", shown_name(leaf.func), self.device)
        with copies.active():  # after the kernel: its scalar outputs, the item's buffers it wrote
            packed.outputs.fetch()
            executor.tracker.finish_launch(list(acquired.values()), keep_device=True)
        return DeviceStageRun(extents[-1], self.output_slots(outputs, extents, parents), packed,
                              stream.record(), copies)

    def descend(self, env: list[Any], args: list[Any]
                 ) -> tuple[list[Any], list[tuple[int, ...]], int]:
        """The leaf's arguments, the extents of the leaf and of each level above it up to the
        stage's node (the leaf's first), and the instances of the leaf's parent level in all."""
        executor = self.executor
        node, parent_env, extents, parents = self.node, env, [], 1
        for child in [*self.levels[1:], self.leaf] if self.levels else []:
            ext = executor.extents_of(node, parent_env)
            parents *= executor.check_instance_count(node, ext, parents)
            extents.insert(0, ext)
            parent_env = args  # the level's child graph sees the level's inputs
            args = [executor.gather(child, port, src, parent_env, {})
                    for port, src in enumerate(child.inputs)]
            node = child
        ext = executor.extents_of(node, parent_env)
        executor.check_instance_count(node, ext, parents)
        return args, [ext, *extents], parents

    def _packed_for(self, call: list[Any], outputs: list[Any],
                    extents: list[tuple[int, ...]]) -> Any:
        """The stage's packed launch for this item: a kept one pointed at the item's buffers,
        outputs and scalars (one packed for the same variant of the kernel), or a new one."""
        node, pointers = self.leaf, self._pointers
        kernel = node.kernel_for(call, extents)
        if node.lowering is not None:  # a GPU leaf may run the other GPU target's lowering
            kernel = node.lowering.kernel_for(kernel, kernel is not node.kernel, call, outputs,
                                              extents, self.device)
        key = (kernel, kernel.variant(call, extents), tuple(extents),
               tuple(a.nbytes for a, ptr in zip(call, pointers) if ptr))
        # the item's scalars, to compare with the next item's (its buffers: never kept here)
        scalars = [None if ptr else value for value, ptr in zip(call, pointers)]
        kept = self._packed.get(key)
        if kept is None:
            packed = kernel.prepare(call, outputs, extents)
            if packed.repointable:
                if len(self._packed) >= _KEPT:
                    self._packed.clear()
                self._packed[key] = (packed, scalars)
            return packed
        packed, last = kept
        for i, (value, ptr) in enumerate(zip(call, pointers)):
            if ptr:
                packed.set_buffer(i, value)
            elif node.inputs[i].const is None and not same_scalar(value, last[i]):
                packed.set_uniform(i, value)
        packed.set_outputs(outputs)
        self._packed[key] = (packed, scalars)
        return packed

    def output_slots(self, outputs: list[Any], extents: list[tuple[int, ...]],
               parents: int) -> list[Slot | None]:
        """The stage's output slots: a leaf stage's outputs, or a chain's, each the value of the
        first leaf instance under each instance of the stage's node (what binds up through a
        replicated level carry: docs/language.md)."""
        modes = self.leaf.output_modes
        if not self.levels:
            count = math.prod(extents[0])
            return [Slot(out, modes[port] == "per_instance", count) if out is not None else None
                    for port, out in enumerate(outputs)]
        stage_count = math.prod(extents[-1])
        below = parents // stage_count if stage_count else 0  # leaf parents per stage instance
        slots: list[Slot | None] = []
        for port in self._outputs:
            out = outputs[port]
            if out is None:
                slots.append(None)
                continue
            if not below:  # a level under the stage ran no instance: no leaf value to take, 0
                slots.append(Slot(np.zeros(stage_count, out.dtype), True, stage_count))
                continue
            # a view, not a copy: a GPU stage's outputs are filled when its run finishes
            step = below * (math.prod(extents[0]) if modes[port] == "per_instance" else 1)
            slots.append(Slot(out[::max(step, 1)], True, stage_count))
        return slots


class StageRun:
    """One item's launch of a host stage, running on the native pool's workers."""

    event: ItemEvent | None = None  # where a GPU consumer's stream waits (a host run: nowhere)
    on_host = True  # finish() helps to run it (a device run's finish() only waits)
    checked = False  # (a host stage has one item in flight: nothing is queued behind it)

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


class DeviceStageRun:
    """One item's launch of a GPU stage, queued on the stage's stream up to its event."""

    on_host = False

    def __init__(self, ext: tuple[int, ...], slots: list[Slot | None], packed: Any,
                 event: ItemEvent, copies: StagedCopies):
        self.ext = ext
        self.slots = slots
        self.event = event
        self._packed = packed
        self._copies = copies  # to the host: the scalar outputs and the item's untracked buffers
        # a checked kernel: the item may fail, which the host learns only at finish()
        self.checked = getattr(packed, "error", None) is not None

    def done(self) -> bool:
        return self.event.done()

    def finish(self) -> tuple[tuple[int, ...], list[Slot | None]]:
        """Wait for the item's event, report a checked kernel's errors and fill the host arrays
        of the copies queued after the kernel; its extents and slots."""
        self.event.wait()
        self._packed.check(ran=True)
        self._copies.complete()
        return self.ext, self.slots
