"""One whole item of a GPU stream and the slot that runs it (rt/stream/items.py's ItemRunner): the
item's stages, buffers and scalars, and a slot's CUDA stream, device memory, pinned staging and
packed launches, built once per item shape and issued item after item."""
from __future__ import annotations

import functools
import itertools
import math
import operator
import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...backends.base import BufferArg
from ...device.devices import allocate, host_bytes, selected
from ...device.staging import PinnedPool, StagedCopies, host_copy, pinned_bytes
from ...device import faults
from ...device.kernel_graph import KernelGraph
from ...device.streams import ItemEvent, StageStream, forget_event
from ...ir.kernel import shown_name
from ...passes.bounds import BoundsProof
from ...support import profile, stats
from ...support.settings import STREAM_GRAPHS
from ..args import same_scalar
from ..buffers import HOST, span
from ..executor import Executor
from ..tracker import MemoryObject, overlap
from .stages import Stage, StageFailed


@dataclass
class StagePlan:
    """How one stage runs inside a whole item."""

    stage: Stage
    kernel: Any  # with device_ports: the kernel reading them from device arrays; else None
    # (each item's bounds proof chooses the leaf's kernel or its checked variant)
    proof: BoundsProof | None  # the device-port kernel's
    device_ports: tuple[int, ...]  # inputs fed by an earlier stage's output, read on the device
    forwarded_ports: dict[int, tuple[int, int]]  # inputs fed by an earlier stage's output that
    # is one of its inputs: port -> (that stage, its input port), known on the host
    host_ports: frozenset[int]  # outputs pop() returns (copied to the host)


@dataclass
class StageItem:
    """One stage's part of an item: the extents of its leaf and of each level above it (the
    leaf's first), its leaf's parent instances, kernel, buffers and host scalars."""

    extents: tuple[tuple[int, ...], ...]
    parents: int
    kernel: Any
    buffers: list[tuple[int, int]]  # (leaf input port, index in Item.objects)
    scalars: list[tuple[int, Any]]  # (leaf input port, value): binds, constants, forwarded edges
    forwarded: dict[int, Any]  # host output port -> its value, known on the host
    variant: Any = None  # the kernel's variant for the item (LeafKernel.variant): its slot's too
    checked: bool = False  # its kernel is the checked variant: the item may fail at this stage,
    # which the host learns only once the item's event has passed

    @property
    def count(self) -> int:
        """Instances of the stage's node."""
        return math.prod(self.extents[-1])


@dataclass
class Item:
    stages: list[StageItem]
    objects: list[MemoryObject]  # the item's distinct buffers
    reads: list[bool]  # per object: the first stage to use it reads it (copied in)
    writes: list[bool]  # per object: some stage writes it (copied out)
    tracked: list[bool]  # per object: the tracker keeps it (the user tracked it, or it lives on
    # the device): its device copy is used in place, never copied through the slot
    # per stage: its leaf's output arrays pop() reads (filled by issue(); [] for none)
    outputs: list[list[np.ndarray | None]] = field(default_factory=list)

    @functools.cached_property
    def key(self) -> tuple:
        """What a slot's launches depend on besides scalars: extents, kernels and their
        variants, sizes, which buffer where."""
        return (tuple(s.extents for s in self.stages),
                tuple((id(s.kernel), s.variant) for s in self.stages),
                tuple(o.nbytes for o in self.objects), tuple(self.tracked),
                tuple(tuple(s.buffers) for s in self.stages))

    @functools.cached_property
    def in_place(self) -> bool:
        """Whether every buffer of the item is used in place on the device (none is copied
        through a slot)."""
        return all(self.tracked)

    @functools.cached_property
    def checked(self) -> bool:
        """Whether a stage runs a checked kernel (the item may fail once its kernels ran)."""
        return any(part.checked for part in self.stages)

    @functools.cached_property
    def writes_in_place(self) -> bool:
        """Whether the item writes a buffer used in place on the device (whose writes stay
        there, even when the item is dropped)."""
        return any(w and t for w, t in zip(self.writes, self.tracked))

    @functools.cached_property
    def copied_in(self) -> tuple[int, ...]:
        """The objects copied in through a slot (read, not used in place)."""
        return tuple(j for j, (r, t) in enumerate(zip(self.reads, self.tracked)) if r and not t)

    @functools.cached_property
    def copied_out(self) -> tuple[int, ...]:
        """The objects copied back out through a slot (written, not used in place)."""
        return tuple(j for j, (w, t) in enumerate(zip(self.writes, self.tracked)) if w and not t)

    @functools.cached_property
    def nbytes(self) -> int:
        """The bytes of its buffers."""
        return sum(obj.nbytes for obj in self.objects)

    def positions(self, env: list[Any], layout: "PushLayout") -> tuple[dict[int, int], list[int]]:
        """Per streamed pointer position of a push, the index in `objects` of the object it binds
        (`env`: the push this item was made for; -1 for none of the item's); and per object, at how
        many positions it is bound. Positions do not move: worked out once, and shared by the
        items made again from this one."""
        known = self.__dict__.get("_positions")
        if known is not None:
            return known
        index = {id(obj): j for j, obj in enumerate(self.objects)}
        positions = {i: index.get(id(env[i].obj), -1) for i, _ in layout.buffers}
        bound = [0] * len(self.objects)
        for j in positions.values():
            if j >= 0:
                bound[j] += 1
        self.__dict__["_positions"] = known = (positions, bound)
        return known

    def again(self, objects: list[MemoryObject] | None = None) -> "Item":
        """The same item pushed again (on `objects` instead of its own, of the same sizes): its
        stages are shared, what issue() fills per item starts afresh; its key and size stay."""
        item = Item(self.stages, self.objects if objects is None else objects, self.reads,
                    self.writes, self.tracked)
        known = self.__dict__
        for name in ("key", "nbytes", "in_place", "checked", "writes_in_place", "copied_in",
                     "copied_out", "_positions"):
            # (the same sizes and uses: the same values)
            if name in known:
                item.__dict__[name] = known[name]
        if objects is None and "spans" in known:
            item.__dict__["spans"] = known["spans"]
        return item

    def conflict(self, other: "Item") -> str:
        """How this item must wait for `other`, pushed before it, when they touch common memory
        and either writes it: "device" when every such buffer is used in place on the device by
        both (the slot's stream waits for the other's event), "host" when one is copied through
        a slot (the other's results must be back first); "" when they share nothing written.
        (An item's buffers are apart: both span lists are walked once, in address order.)"""
        found = ""
        a, b = self.spans, other.spans
        i = j = 0
        while i < len(a) and j < len(b):
            start, end, wa, ta = a[i]
            other_start, other_end, wb, tb = b[j]
            if start < other_end and other_start < end and (wa or wb):
                if not (ta and tb):
                    return "host"
                found = "device"
            if end <= other_end:
                i += 1
            else:
                j += 1
        return found

    @functools.cached_property
    def spans(self) -> list[tuple[int, int, bool, bool]]:
        """Per object, in address order: its first address, its end, whether the item writes
        it, whether tracked."""
        return sorted((o.address, o.address + o.nbytes, w, t)
                      for o, w, t in zip(self.objects, self.writes, self.tracked))


def any_overlap(objects: list[MemoryObject]) -> bool:
    """Whether two of the (distinct) objects share memory."""
    ordered = sorted(objects, key=lambda o: o.address)
    return any(overlap(a, b) for a, b in zip(ordered, ordered[1:]))


def on_device(obj: MemoryObject, device: str) -> bool:
    """Whether a whole item uses the tracker's device copy of `obj` in place (the user tracked
    it, or it lives on that device) rather than copying it through its slot."""
    return not obj.implicit or obj.home == device


_IGNORED, _SCALAR, _STREAMED, _FIXED = 0, 1, 2, 3  # a root parameter's part in rebound()


@dataclass(frozen=True)
class PushLayout:
    """Where a push's values are, for rebound(): per root parameter, a pointer or a scalar, and
    whether its binds stream into every stage ("all"), none (every stage takes the first push's
    value) or some ("mixed")."""

    # per position: _IGNORED (no stage takes it from this push), _SCALAR, _STREAMED (a pointer
    # streaming into every stage), _FIXED (a pointer some stage takes from the first push)
    parts: tuple[int, ...]
    buffers: tuple[tuple[int, bool], ...]  # (position, streams into every stage), "none" left out
    fixed: tuple[int, ...]  # positions of pointers some stage takes from the first push

    @classmethod
    def of(cls, pointers: list[bool], modes: list[str]) -> "PushLayout":
        parts = tuple(_IGNORED if mode == "none" else _SCALAR if not ptr else
                      _STREAMED if mode == "all" else _FIXED for ptr, mode in zip(pointers, modes))
        return cls(parts,
                   tuple((i, part == _STREAMED) for i, part in enumerate(parts)
                         if part in (_STREAMED, _FIXED)),
                   tuple(i for i, (ptr, mode) in enumerate(zip(pointers, modes)) if ptr and mode != "all"))


_RELEASED = operator.attrgetter("released")


def rebound(item: Item, last: list[Any], env: list[Any], first: list[Any], layout: PushLayout,
            device: str) -> Item | None:
    """`item`, made for the push `last`, for the push `env` when the two differ only in the
    buffers of binds that stream into every stage, each replaced by a buffer of the same size
    used the same way: the stages' extents, kernels, proofs and copies depend on nothing else.
    None when they differ otherwise (rt/stream/items.py then plans the item afresh).

    Only the positions whose values are other objects than last time are looked at
    (bind_arguments keeps the last push's value of an argument that is the same object): a
    stream's next frame changes two or three of a dozen."""
    parts = layout.parts
    swap: dict[int, MemoryObject] = {}  # id(last's object) -> env's, for those replaced
    moved: list[tuple[int, MemoryObject]] = []  # (position, env's object) for those
    for i in itertools.compress(range(len(env)), map(operator.is_not, env, last)):
        part = parts[i]
        if part == _SCALAR:
            if not same_scalar(env[i], last[i]):
                return None
        elif part != _IGNORED:
            old, new = last[i].obj, env[i].obj
            if old is new:
                continue
            if part != _STREAMED or new.released or new.nbytes != old.nbytes or \
                    on_device(new, device) != on_device(old, device) or \
                    not (on_device(new, device) or new.home == HOST) or \
                    swap.setdefault(id(old), new) is not new:
                return None  # (the last: one buffer of the last push is two of this one)
            moved.append((i, new))
    if not swap:  # (an object untracked since, or forgotten: _whole says what then)
        return None if any(map(_RELEASED, item.objects)) else item.again()
    positions, bound = item.positions(last, layout)
    objects = list(item.objects)
    replaced: dict[int, int] = {}  # index in objects -> at how many positions
    for i, new in moved:
        j = positions[i]
        if j < 0:
            return None  # (a buffer no stage uses)
        objects[j] = new
        replaced[j] = replaced.get(j, 0) + 1
    if any(bound[j] != count for j, count in replaced.items()):
        return None  # one buffer of the last push is two of this one (kept at another position)
    if len(set(map(id, objects))) < len(objects) or any(map(_RELEASED, objects)) or \
            any(id(first[i].obj) in swap for i in layout.fixed) or \
            _overlaps_any(list(swap.values()), objects):
        return None  # (aliasing that differs; released; an object a first-push bind holds
        # too; memory shared with another)
    return item.again(objects)


def _overlaps_any(new: list[MemoryObject], objects: list[MemoryObject]) -> bool:
    """Whether one of `new` (among the distinct `objects`, whose others were apart before) shares
    memory with another of `objects`."""
    for a in new:  # (overlap() inlined: a rebound item checks a few buffers against a dozen)
        start, end = a.address, a.address + a.nbytes
        for b in objects:
            if b.address < end and start < b.address + b.nbytes and b is not a:
                return True
    return False


class ItemSlot:
    """A stream, device memory, pinned staging and packed launches for one item at a time."""

    def __init__(self, name: str, device: str):
        self.device = device
        self.stream = StageStream(device, name)
        self.fake = self.stream.fake
        self.key: tuple | None = None
        self.memory: list[Any] = []  # per object: its device bytes (a tracked one's device copy)
        self.pinned: list[Any] = []  # per object: its pinned host bytes (a CUDA device's; None
        # for a tracked one)
        self.launches: list[Any] = []  # per stage
        self.uses_of: list[list[tuple[int, int]]] = []  # per object: (stage, leaf port) using it
        self.checked: list[int] = []  # the stages whose launch is a checked kernel's
        self.scalars: list[dict[int, Any]] = []  # per stage: the uniform values it holds
        self.written: list[Any] = []  # per stage: the item's scalars list those values came from
        self.pool = PinnedPool()  # the staged copies of the root's scalar outputs
        self.event: ItemEvent | None = None  # recorded at the end of each item
        self.graph: KernelGraph | None = None  # the launches as one CUDA graph (_graph())
        self.graph_refused = False  # they cannot be one (until built again)
        self.changed: set[int] = set()  # launches whose parameters changed since the graph's
        self.issued = 0  # items issued since built
        self.graphs_on = STREAM_GRAPHS.on()

    def serves(self, item: Item, copies: list[Any]) -> bool:
        """Whether the slot's launches run the item: built for its key and the tracker's device
        copies, and any launch that cannot take new scalars (one with scratch sized by them)
        holds the item's."""
        if self.key is not item.key and self.key != item.key:  # (a rebound item keeps the key)
            return False
        moved = [j for j in itertools.compress(range(len(copies)), map(operator.is_not, self.memory, copies))
                 if copies[j] is not None]
        if moved and not self._repoint(item, moved, copies):
            return False
        return all(launch.patchable or all(same_scalar(value, held[port]) for port, value in part.scalars)
                   for part, launch, held in zip(item.stages, self.launches, self.scalars))

    def _repoint(self, item: Item, moved: list[int], copies: list[Any]) -> bool:
        """Point the launches at the device copies `moved` (indices into item.objects) has now,
        of the sizes they were built for (a frame pushed from device memory after the last);
        False, with nothing changed, when one of those launches cannot take other buffers."""
        uses = [use for j in moved for use in self.uses_of[j]]
        if not all(self.launches[k].movable_buffers for k, _ in uses):
            return False
        for j in moved:
            obj = item.objects[j]  # (a buffer on the device is its own copy: its address known)
            arg = BufferArg(obj=copies[j], address=obj.address, nbytes=obj.nbytes, array=None) \
                if copies[j] is obj.user else _device_arg(copies[j], obj.nbytes)
            for k, port in self.uses_of[j]:
                self.launches[k].set_buffer(port, arg)
                self.changed.add(k)
            self.memory[j] = copies[j]
        stats.bump_one("stream_slot_repoints")
        return True

    def build(self, item: Item, plans: list[StagePlan], copies: list[Any]) -> None:
        """Memory and launches for items of this one's key; `copies`: per object, the tracker's
        device copy of a tracked one (None for the others)."""
        self.release()
        self.stream.use()  # the memory belongs to the slot's stream in torch's caching allocator
        self.memory = [copy if copy is not None else allocate(obj.nbytes, self.device)
                       for obj, copy in zip(item.objects, copies)]
        self.pinned = [] if self.fake else \
            [None if copy is not None else pinned_bytes(obj.nbytes)
             for obj, copy in zip(item.objects, copies)]
        args = [_device_arg(mem, obj.nbytes) for mem, obj in zip(self.memory, item.objects)]
        outputs: list[list[np.ndarray | None]] = []
        with selected(self.device):
            for plan, part in zip(plans, item.stages):
                leaf = plan.stage.launcher.leaf
                call: list[Any] = [None] * len(leaf.func.params)
                for port, j in part.buffers:
                    call[port] = args[j]
                for port, value in part.scalars:
                    call[port] = value
                for port in plan.device_ports:
                    src = leaf.inputs[port]
                    call[port] = self.launches[src.node].outputs.device_twin(outputs[src.node][src.port])
                outs = _output_arrays(plan, part)
                extents = list(part.extents)
                try:
                    kernel = part.kernel
                    if plan.kernel is None and leaf.lowering is not None:
                        kernel = leaf.lowering.kernel_for(kernel, kernel is not leaf.kernel, call,
                                                          outs, extents, self.device)
                    self.launches.append(kernel.prepare(call, outs, extents))
                except BaseException as exc:  # noqa: BLE001 - the stage's error
                    raise StageFailed(plan.stage, exc) from None
                self.scalars.append(dict(part.scalars))
                outputs.append(outs)
        self.written = [part.scalars for part in item.stages]
        self.checked = [k for k, launch in enumerate(self.launches) if launch.error is not None]
        self.uses_of = [[] for _ in item.objects]
        for k, part in enumerate(item.stages):
            for port, j in part.buffers:
                self.uses_of[j].append((k, port))
        self.key = item.key

    def release(self) -> None:
        """Give the slot's memory back to torch's caches (the next stream takes it from there:
        pinned memory costs milliseconds per megabyte to allocate afresh)."""
        self.key = None
        self.memory, self.pinned, self.launches, self.scalars, self.written = [], [], [], [], []
        self.uses_of, self.checked = [], []
        forget_event(self.event)
        self.event = None
        self._drop_graph()
        self.graph_refused, self.issued = False, 0
        self.changed.clear()

    def issue(self, item: Item, plans: list[StagePlan], copies: StagedCopies,
              stop: threading.Event) -> ItemEvent:
        """Queue the item on the slot's stream: copies in, kernels, copies out; its end event.
        Once `stop` is set no further kernel is queued (the item's results are dropped)."""
        stream = self.stream  # (current on this thread: the runner made it so)
        objects = item.objects
        for j in item.copied_in:
            self._copy_in(j, objects[j])
        fetched = []
        written = self.written
        item.outputs = [[] for _ in plans]
        for k, (plan, part, launch, held) in enumerate(zip(plans, item.stages, self.launches,
                                                            self.scalars)):
            if part.scalars is not written[k]:  # (the same list: an item pushed again, its values)
                for port, value in part.scalars:
                    if not same_scalar(value, held[port]):
                        launch.set_uniform(port, value)
                        held[port] = value
                        self.changed.add(k)
                written[k] = part.scalars
            if plan.host_ports and plan.host_ports - part.forwarded.keys():
                item.outputs[k] = _output_arrays(plan, part)
                launch.set_outputs(item.outputs[k])
                fetched.append(launch)
        graph = self._graph()
        if graph is not None and not stop.is_set():
            for launch in self.launches:  # (a fault report names the kernels launched last)
                leaf = launch.kernel.leaf
                faults.launched(leaf.name, leaf.loc)
                launch.before_graph(stream.handle)  # a checked kernel's error word
            try:
                graph.launch(stream.handle)
            except BaseException as exc:  # noqa: BLE001 - the last stage's error
                raise StageFailed(plans[-1].stage, exc) from None
        for plan, launch in zip(plans, self.launches) if graph is None else ():
            if stop.is_set():  # (a fake device runs each kernel as it is queued)
                break
            stream.launched(plan.stage.node.func.name)
            timer = profile.gpu_begin(self.device, stream.handle) if profile.on else None
            try:
                launch.issue(stream.handle)
                if timer is not None:
                    profile.gpu_end(timer, "gpu_kernel", shown_name(plan.stage.node.func), self.device)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(plan.stage, exc) from None
        self.issued += 1
        if stop.is_set():
            self.event = stream.record_again(self.event)
            return self.event
        if fetched:
            with copies.active():
                for launch in fetched:
                    launch.outputs.fetch()
        for j in () if self.fake else item.copied_out:
            nbytes = objects[j].nbytes
            self.pinned[j].copy_(self.memory[j], non_blocking=True)
            stats.copied("d2h", nbytes)
            if profile.on:
                profile.copy("d2h", nbytes, self.device, HOST, profile.now(), queued=True)
        self.event = stream.record_again(self.event)
        return self.event

    def _graph(self) -> KernelGraph | None:
        """The slot's kernels as one CUDA graph, brought up to the launches' parameters; None
        where they launch one by one: on the fake device, inside a profile (it times each
        kernel), at a slot's first item (Triton's dispatch gives its launcher then), with
        HPVM_STREAM_GRAPHS=0, or when a launch cannot be in a graph."""
        if self.fake or profile.on or not self.issued or not self.graphs_on:
            return None
        graph = self.graph
        if graph is None:
            if self.graph_refused:
                return None
            self.changed.clear()
            self.graph = KernelGraph.make(self.launches)
            self.graph_refused = self.graph is None
            if self.graph is not None:
                stats.bump_one("stream_item_graphs")
            return self.graph
        for k in self.changed:
            if not graph.update(k, self.launches[k]):
                self._drop_graph()
                self.graph_refused = True  # (until the slot is built again)
                return None
        self.changed.clear()
        return graph

    def _drop_graph(self) -> None:
        if self.graph is not None:
            self.graph.close()
            self.graph = None

    def complete(self, item: Item, copies: StagedCopies) -> None:
        """Once the item's event has passed: its written buffers and scalar outputs on the host."""
        for j in item.copied_out:
            obj = item.objects[j]
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


def _device_arg(memory: Any, nbytes: int) -> BufferArg:
    """A launch's argument for an item's buffer in a slot's (or the tracker's) device memory."""
    return BufferArg(obj=memory, address=span(memory)[0], nbytes=nbytes, array=None)


def _output_arrays(plan: StagePlan, part: StageItem) -> list[np.ndarray | None]:
    """Fresh host arrays for the used outputs of a stage's leaf."""
    return Executor.output_arrays(plan.stage.launcher.leaf, part.parents, math.prod(part.extents[0]))
