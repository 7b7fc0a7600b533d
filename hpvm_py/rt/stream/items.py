"""Whole items of a GPU stream (ItemRunner, the third scheduler): every stage of one item queued at
once on a slot's CUDA stream, with no host work between stages; an item that cannot run whole runs
alone, and a first such item sends the stream to stages.py's scheduler thread
(docs/architecture.md, "Streaming"). HPVM_STREAM_ITEMS=0 turns it off."""
from __future__ import annotations

import functools
import math
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...backends import registry
from ...backends.base import BufferArg
from ...device.devices import allocate, host_bytes, selected
from ...device.staging import PinnedPool, StagedCopies, host_copy, pinned_bytes
from ...device.streams import ItemEvent, StageStream
from ...errors import HPVMError
from ...passes.bounds import BoundsProof
from ...support import profile, settings, stats
from ...types import PtrType, bf16
from ..buffers import HOST, span
from ..executor import BoundBuffer, Executor, Slot, Stopped
from ..tracker import MemoryObject
from ..args import same_scalar
from .scheduler import StreamScheduler
from .stages import EOS, GPU_SLICE, POLL, EdgeItem, SchedulerThread, Stage, StageFailed

SLOTS = 4  # items in flight: one copied in, one computing, one copied out, one spare while the
# host moves a completed item's results
SLOT_BYTES = 1 << 30  # the most memory (on the device, and pinned) the slots in use may hold for
# their items' buffers: an item of more than a quarter of it gets fewer slots


@dataclass
class StagePlan:
    """How one stage runs inside a whole item."""

    stage: Stage
    kernel: Any  # the stage's Triton kernel, reading `device_ports` from device arrays
    proof: BoundsProof | None
    device_ports: tuple[int, ...]  # inputs fed by an earlier stage's output, read on the device
    host_ports: frozenset[int]  # outputs pop() returns (copied to the host)


def plan_items(stages: list[Stage]) -> list[StagePlan] | None:
    """The stages' plans for whole items, or None when the stream cannot run that way."""
    if not settings.STREAM_ITEMS.on() or not stages:
        return None
    launchers = [stage.launcher for stage in stages]
    if len({launcher.device for launcher in launchers}) != 1 or any(
            not launcher.eligible or launcher.levels or launcher.stream is None
            or not _whole_items(launcher.node.target) for launcher in launchers):
        return None
    plan = stages[0].handle.plan
    host_ports: dict[int, set[int]] = {}
    for index, port in plan.outputs:
        host_ports.setdefault(index, set()).add(port)
    plans = []
    for stage in stages:
        node = stage.node
        ports = []
        for port, src in enumerate(node.inputs):
            if src.node is None:
                continue
            kind = plan.nodes[src.node].func.outputs[src.port].type
            if not src.stream or kind != node.func.params[port].type or kind == bf16:
                return None  # a kept edge (the first item's value), or bf16 (stored widened)
            ports.append(port)
        kernel, proof = node.kernel, node.bounds
        if ports:
            try:
                kernel, proof = node.reading_on_device(tuple(ports))
            except HPVMError:
                return None
        plans.append(StagePlan(stage, kernel, proof, tuple(ports),
                               frozenset(host_ports.get(stage.index, ()))))
    return plans


def _whole_items(target: str) -> bool:
    backend = registry.get(target)
    return backend is not None and backend.whole_items


@dataclass
class StageItem:
    """One stage's part of an item: its extents, buffers and host scalars."""

    extents: tuple[int, ...]
    buffers: list[tuple[int, int]]  # (input port, index in Item.objects)
    scalars: list[tuple[int, Any]]  # (input port, value): binds and constants
    outputs: list[np.ndarray | None] = field(default_factory=list)  # host arrays pop() reads


@dataclass
class Item:
    stages: list[StageItem]
    objects: list[MemoryObject]  # the item's distinct buffers
    reads: list[bool]  # per object: the first stage to use it reads it (copied in)
    writes: list[bool]  # per object: some stage writes it (copied out)

    @functools.cached_property
    def key(self) -> tuple:
        """What a slot's launches depend on besides scalars: extents, sizes, which buffer where."""
        return (tuple(s.extents for s in self.stages), tuple(o.nbytes for o in self.objects),
                tuple(tuple(s.buffers) for s in self.stages))

    def shares_memory(self, other: "Item") -> bool:
        """Whether the two items touch common memory and either writes it."""
        for a, wa in zip(self.objects, self.writes):
            for b, wb in zip(other.objects, other.writes):
                if (wa or wb) and _overlap(a, b):
                    return True
        return False


def _overlap(a: MemoryObject, b: MemoryObject) -> bool:
    return a.address < b.address + b.nbytes and b.address < a.address + a.nbytes


class ItemSlot:
    """A stream, device memory, pinned staging and packed launches for one item at a time."""

    def __init__(self, name: str, device: str):
        self.device = device
        self.stream = StageStream(device, name)
        self.fake = self.stream.fake
        self.key: tuple | None = None
        self.memory: list[Any] = []  # per object: its device bytes
        self.pinned: list[Any] = []  # per object: its pinned host bytes (a CUDA device's)
        self.launches: list[Any] = []  # per stage
        self.scalars: list[dict[int, Any]] = []  # per stage: the uniform values it holds
        self.pool = PinnedPool()  # the staged copies of the root's scalar outputs

    def build(self, item: Item, plans: list[StagePlan]) -> None:
        """Memory and launches for items of this one's key."""
        self.release()
        self.stream.use()  # the memory belongs to the slot's stream in torch's caching allocator
        self.memory = [allocate(obj.nbytes, self.device) for obj in item.objects]
        self.pinned = [] if self.fake else \
            [pinned_bytes(obj.nbytes) for obj in item.objects]
        args = [BufferArg(obj=mem, address=span(mem)[0], nbytes=obj.nbytes, array=None)
                for mem, obj in zip(self.memory, item.objects)]
        outputs: list[list[np.ndarray | None]] = []
        with selected(self.device):
            for plan, part in zip(plans, item.stages):
                node = plan.stage.node
                call: list[Any] = [None] * len(node.func.params)
                for port, j in part.buffers:
                    call[port] = args[j]
                for port, value in part.scalars:
                    call[port] = value
                for port in plan.device_ports:
                    src = node.inputs[port]
                    call[port] = self.launches[src.node].outputs.device_twin(outputs[src.node][src.port])
                outs = _output_arrays(plan, part.extents)
                try:
                    self.launches.append(plan.kernel.prepare(call, outs, [part.extents]))
                except BaseException as exc:  # noqa: BLE001 - the stage's error
                    raise StageFailed(plan.stage, exc) from None
                self.scalars.append(dict(part.scalars))
                outputs.append(outs)
        self.key = item.key

    def release(self) -> None:
        """Give the slot's memory back to torch's caches (the next stream takes it from there:
        pinned memory costs milliseconds per megabyte to allocate afresh)."""
        self.key = None
        self.memory, self.pinned, self.launches, self.scalars = [], [], [], []

    def issue(self, item: Item, plans: list[StagePlan], copies: StagedCopies,
              stop: threading.Event) -> ItemEvent:
        """Queue the item on the slot's stream: copies in, kernels, copies out; its end event.
        Once `stop` is set no further kernel is queued (the item's results are dropped)."""
        stream = self.stream
        stream.use()
        for j, obj in enumerate(item.objects):
            if item.reads[j]:
                self._copy_in(j, obj)
        for plan, part, launch, held in zip(plans, item.stages, self.launches, self.scalars):
            if stop.is_set():  # (a fake device runs each kernel as it is queued)
                return stream.record()
            for port, value in part.scalars:
                if not same_scalar(value, held[port]):
                    launch.set_uniform(port, value)
                    held[port] = value
            if plan.host_ports:
                part.outputs = _output_arrays(plan, part.extents)
                launch.set_outputs(part.outputs)
            stream.launched(plan.stage.node.func.name)
            timer = profile.gpu_begin(self.device, stream.handle) if profile.on else None
            try:
                launch.issue(stream.handle)
                if timer is not None:
                    profile.gpu_end(timer, "gpu_kernel", plan.stage.node.func.name, self.device)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(plan.stage, exc) from None
        with copies.active():
            for plan, launch in zip(plans, self.launches):
                if plan.host_ports:
                    launch.outputs.fetch()
        for j, obj in enumerate(item.objects):
            if item.writes[j] and not self.fake:
                self.pinned[j].copy_(self.memory[j], non_blocking=True)
                stats.copied("d2h", obj.nbytes)
                if profile.on:
                    profile.copy("d2h", obj.nbytes, self.device, HOST, profile.now(), queued=True)
        return stream.record()

    def complete(self, item: Item, copies: StagedCopies) -> None:
        """Once the item's event has passed: its written buffers and scalar outputs on the host."""
        for j, obj in enumerate(item.objects):
            if item.writes[j]:
                if self.fake:
                    stats.copied("d2h", obj.nbytes)
                    if profile.on:
                        profile.copy("d2h", obj.nbytes, self.device, HOST, profile.now())
                host_copy(host_bytes(obj.user), self.memory[j] if self.fake else self.pinned[j].numpy())
        copies.complete()

    def _copy_in(self, j: int, obj: MemoryObject) -> None:
        t0 = profile.now() if profile.on else 0
        data = host_bytes(obj.user)
        if self.fake:
            self.memory[j][...] = data
        else:
            host_copy(self.pinned[j].numpy(), data)
            self.memory[j].copy_(self.pinned[j], non_blocking=True)
        stats.copied("h2d", obj.nbytes)
        if t0:
            profile.copy("h2d", obj.nbytes, HOST, self.device, t0, queued=not self.fake)


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an allocation failed for want of device or pinned memory (torch's and CUDA's words)."""
    return isinstance(exc, MemoryError) or "out of memory" in str(exc)


def _output_arrays(plan: StagePlan, extents: tuple[int, ...]) -> list[np.ndarray | None]:
    """Fresh host arrays for a stage's used outputs (a stage at the root: one parent)."""
    return Executor.output_arrays(plan.stage.node, 1, math.prod(extents))


@dataclass
class _Flight:
    item: Item
    slot: ItemSlot
    copies: StagedCopies
    event: ItemEvent
    index: int  # the item's place in push order


class ItemRunner(StreamScheduler):
    """Runs a stream item by item (see the module's docstring), from one thread: takes streams
    whose every stage is a `gpu` leaf on one device (plan_items)."""

    def __init__(self, stages: list[Stage], plans: list[StagePlan]):
        self.stages = stages
        self.plans = plans
        self.handle = stages[0].handle
        self.executor = self.handle.executor
        device = stages[0].launcher.device
        self.slots = [ItemSlot(f"items-{k}", device) for k in range(SLOTS)]
        self.flight: deque[_Flight] = deque()
        self.started = 0  # items started whole (the next looks at slot started % limit first)
        self.index = 0  # the place in push order of the item being taken or started
        self.scheduler: SchedulerThread | None = None  # stages.py's, once the stream went there

    @classmethod
    def fit(cls, stages: list[Stage]) -> ItemRunner | None:
        plans = plan_items(stages)
        return None if plans is None else cls(stages, plans)

    def threads(self) -> list[threading.Thread]:
        return self.one_thread()

    def busy(self) -> list[str]:
        """The stages whose kernels are in flight."""
        if self.scheduler is not None:
            return self.scheduler.busy()
        return [stage.name for stage in self.stages] if self.flight else []

    def __call__(self) -> None:
        try:
            self._run()
        except Stopped:
            pass
        except StageFailed as failure:
            self._failed(failure)
        except BaseException as exc:  # noqa: BLE001 - no one stage's (a copy, an event): the first's
            self._failed(StageFailed(self.stages[0], exc))
        self._drain()
        for slot in self.slots:
            slot.release()

    def _run(self) -> None:
        """Take, start and complete items until the end of the stream."""
        handle = self.handle
        first = True
        while True:
            handle.arrived.clear()  # a push after this wakes the wait below
            if handle.stop.is_set():  # cleanup(): the items in flight are dropped, never copied out
                raise Stopped()
            # one completion, then one start: a slot freed is filled before the next
            # completion's host copies, so the GPU is not left without queued work
            progressed = bool(self.flight) and self._done(self.flight[0])
            if progressed:
                self._complete_oldest()
            env = self._take() if len(self.flight) < SLOTS else None
            if env is EOS:
                break
            if env is not None:
                item = self._item(env)
                if first and item is None:  # not a stream for whole items: stages.py's way
                    self._hand_over(env)
                    return
                first = False
                if item is None or not self._start(item):
                    self._run_alone(env)
                self.index += 1
            elif not progressed:
                handle.arrived.wait(GPU_SLICE if self.flight else POLL)
        while self.flight:
            self._complete_oldest()

    def _failed(self, failure: StageFailed) -> None:
        """A stage failed on an item (None: the one being started): the items in flight before
        it still complete (one of them may fail in turn: an earlier item's error comes first)."""
        while True:
            item = self.index if failure.item is None else failure.item
            failure.stage.failed(failure.error, item)
            try:
                while self.flight and not self.handle.cut_before(self.flight[0].index):
                    self._complete_oldest()
                return
            except Stopped:
                return
            except StageFailed as later:
                failure = later

    # -- items ----------------------------------------------------------------------------------

    def _take(self) -> Any:
        """The next pushed item (its environment), EOS, or None when none is there. push() fills
        the stages' FIFOs in order, so an item in the last one is in all of them."""
        if not self.stages[-1].host_fifo.queue:
            return None
        envs = [stage.host_fifo.get_nowait() for stage in self.stages]
        return envs[0]

    def _item(self, env: list[Any]) -> Item | None:
        """The item as a whole, or None when it cannot run whole."""
        objects: list[MemoryObject] = []
        where: dict[int, int] = {}
        reads: list[bool] = []
        writes: list[bool] = []
        first: list[int] = []  # per object: the first stage that uses it
        parts = []
        for plan in self.plans:
            stage, node = plan.stage, plan.stage.node
            try:
                item_env = stage.item_env(env)
                ext = self.executor.extents_of(node, item_env)
                self.executor.check_instance_count(node, ext, 1)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(stage, exc) from None
            if math.prod(ext) == 0:
                return None  # no kernel to hold its outputs on the device
            part = StageItem(ext, [], [])
            proof_args: list[Any] = []
            for port, (src, param) in enumerate(zip(node.inputs, node.func.params)):
                if src.node is not None:
                    proof_args.append(np.empty(0, param.type.numpy_dtype))  # unknown: on the device
                    continue
                value = src.const if src.const is not None else \
                    src.expr.value(item_env) if src.expr is not None else item_env[src.bind_port]
                if not isinstance(param.type, PtrType):
                    part.scalars.append((port, value))
                    proof_args.append(value)
                    continue
                assert isinstance(value, BoundBuffer)
                obj = value.obj
                if not obj.implicit or obj.home != HOST or obj.released:
                    return None  # the tracker's to move: tracked by the user, or on a device
                j = where.get(id(obj))
                if j is None:
                    j = where[id(obj)] = len(objects)
                    objects.append(obj)
                    first.append(stage.index)
                    reads.append(False)
                    writes.append(False)
                writes[j] = writes[j] or param.direction in ("out", "inout")
                part.buffers.append((port, j))
                proof_args.append(BufferArg(obj=None, address=obj.address, nbytes=obj.nbytes,
                                            array=None))
            if plan.proof is not None and not plan.proof.holds(proof_args, [ext]):
                return None
            copied_in = self.executor.uncovered_outs(node, proof_args, [ext])
            for port, j in part.buffers:
                # copied in when the first stage to use it reads it (later ones see its writes),
                # an Out buffer it may write in part included
                direction = node.func.params[port].direction
                reads[j] = reads[j] or (first[j] == stage.index and
                                        (direction in ("in", "inout") or port in copied_in))
            parts.append(part)
        ordered = sorted(objects, key=lambda o: o.address)
        if any(_overlap(a, b) for a, b in zip(ordered, ordered[1:])):
            return None  # distinct buffers over common memory: the tracker's semantics
        return Item(parts, objects, reads, writes)

    def _start(self, item: Item) -> bool:
        """Queue the item on a slot; False when no slot could get its memory."""
        if any(item.shares_memory(f.item) for f in self.flight):
            while self.flight:  # its data is another item's in flight
                self._complete_oldest()
        slot = self._free_slot(item)
        if slot.key != item.key:
            self._check_grids(item)
            try:
                slot.build(item, self.plans)
            except StageFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - device or pinned memory, else the stream's error
                if not _out_of_memory(exc):
                    raise StageFailed(self.stages[0], exc) from None
                busy = [f.slot for f in self.flight]
                for other in self.slots:
                    if other not in busy:
                        other.release()
                return False
        copies = StagedCopies(slot.pool)
        if profile.on:
            for stage in self.stages:
                stage.began(self.index)
        event = slot.issue(item, self.plans, copies, self.handle.stop)
        self.flight.append(_Flight(item, slot, copies, event, self.index))
        stats.bump("stream_whole_items")
        return True

    def _free_slot(self, item: Item) -> ItemSlot:
        """The next slot in turn that no item in flight holds, among as many as the item's size
        allows (completing the oldest items in flight until one is free)."""
        size = max(1, sum(obj.nbytes for obj in item.objects))
        limit = max(1, min(SLOTS, SLOT_BYTES // size))
        first = self.started
        self.started += 1
        while True:
            busy = [f.slot for f in self.flight]
            for k in range(limit):
                slot = self.slots[(first + k) % limit]
                if slot not in busy:
                    return slot
            self._complete_oldest()

    def _check_grids(self, item: Item) -> None:
        for stage, part in zip(self.stages, item.stages):
            sources = {port: item.stages[src.node].extents
                       for port, src in enumerate(stage.node.inputs) if src.node is not None}
            try:
                stage.check_grids(part.extents, sources)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(stage, exc) from None

    def _done(self, flight: _Flight) -> bool:
        try:
            return flight.event.done()
        except BaseException as exc:  # noqa: BLE001 - a fault of one of its kernels
            raise StageFailed(self.stages[-1], exc, flight.index) from None

    def _complete_oldest(self) -> None:
        """Wait for the oldest item in flight (polling the stop flag), then hand it to pop(); a
        stopped stream writes no more results."""
        flight = self.flight[0]
        while not self._done(flight):
            if self.handle.stop.is_set():
                raise Stopped()
            self.handle.arrived.wait(GPU_SLICE)
        if self.handle.stop.is_set():
            raise Stopped()
        self.flight.popleft()
        try:
            flight.event.wait()
            flight.slot.complete(flight.item, flight.copies)
        except BaseException as exc:  # noqa: BLE001
            raise StageFailed(self.stages[-1], exc, flight.index) from None
        # the user's buffers hold the item's results: the tracker's device copies are stale
        self.executor.tracker.host_data(flight.item.objects)
        for stage, plan, part in zip(self.stages, self.plans, flight.item.stages):
            modes = stage.node.output_modes
            count = math.prod(part.extents)
            outputs = part.outputs or [None] * len(modes)
            stage.finished([Slot(out, modes[port] == "per_instance", count)
                            if port in plan.host_ports else None for port, out in enumerate(outputs)],
                           flight.index)

    def _run_alone(self, env: list[Any]) -> None:
        """An item that cannot run whole: once the items in flight are done, its stages one after
        the other, each waited for, through stage_launch.py."""
        while self.flight:
            self._complete_oldest()
        produced: dict[int, tuple[tuple[int, ...], list[Slot | None]]] = {}
        for stage in self.stages:
            if self.handle.stop.is_set():
                raise Stopped()
            try:
                received = {port: EdgeItem(produced[src.node][1][src.port], produced[src.node][0])
                            for port, src in enumerate(stage.node.inputs) if src.node is not None}
                item_env, args, src_extents = stage.arguments(env, received)
                if profile.on:
                    stage.began(self.index)
                ext, outs = stage.launcher.fire(item_env, args)
                stage.check_grids(ext, src_extents)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(stage, exc) from None
            produced[stage.index] = (ext, outs)
            stage.finished(outs, self.index)

    def _hand_over(self, env: list[Any]) -> None:
        """Run the rest of the stream, from its first item on, with stages.py's scheduler."""
        for stage in self.stages:
            stage.env = env
        self.scheduler = SchedulerThread(self.stages)
        self.scheduler()

    def _drain(self) -> None:
        """Stopped or failed: let the items in flight end (they write the slots' memory); their
        results are dropped."""
        while self.flight:
            flight = self.flight.popleft()
            try:
                flight.event.wait()
            except HPVMError:
                pass  # the stream already stopped for an earlier error
            except BaseException as exc:  # noqa: BLE001
                self.stages[-1].failed(exc, flight.index)
