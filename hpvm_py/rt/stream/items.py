"""Whole items of a GPU stream (ItemRunner, the third scheduler): every stage of one item queued at
once on a slot's CUDA stream, with no host work between stages; an item that cannot run whole runs
alone, and a first such item sends the stream to stages.py's scheduler thread
(docs/architecture.md, "Streaming"). A stage may be a leaf or a chain down to one (HPVM-C's
wrapper, grid, leaf); a scalar an edge carries is known on the host when its producer forwards one
of its inputs (passes/passthrough.py), else a `gpu` or `nvptx` leaf reads it on the device.
Buffers the user tracked stay where the tracker keeps them; the others are copied through the
slot's memory.
HPVM_STREAM_ITEMS=0 turns it off."""
from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any

import numpy as np

from ...backends.base import BufferArg
from ...device.staging import StagedCopies
from ...device.streams import kept_current_stream
from ...errors import HPVMError
from ...support import profile, stats
from ...types import PtrType, ScalarType, bf16, bf16_to_bits
from ..buffers import HOST
from ..executor import BoundBuffer, Slot, Stopped
from ..tracker import MemoryObject
from .item_order import Flight, waits_for
from .item_plans import plan_items
from .item_slots import (Item, ItemSlot, PushLayout, StageItem, StagePlan, any_overlap, on_device,
                         rebound)
from .scheduler import StreamScheduler
from .stages import (EOS, GPU_SLICE, POLL, EdgeItem, SchedulerThread, Stage, StageFailed,
                     WholeRecord, take_now)

SLOTS = 4  # items in flight: one copied in, one computing, one copied out, one spare while the
# host moves a completed item's results
HOST_HELPS = 2e-3  # seconds: while the host thread helped within it, the runner thread looks
# this often (rather than every GPU_SLICE)
SLOT_BYTES = 1 << 30  # the most memory (on the device, and pinned) the slots in use may hold for
# their items' buffers: an item of more than a quarter of it gets fewer slots


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an allocation failed for want of device or pinned memory (torch's and CUDA's words)."""
    return isinstance(exc, MemoryError) or "out of memory" in str(exc)


class ItemRunner(StreamScheduler):
    """Runs a stream item by item (see the module's docstring), from one thread: takes streams
    whose every stage is a `gpu` or `nvptx` leaf on one device (plan_items)."""

    def __init__(self, stages: list[Stage], plans: list[StagePlan]):
        self.stages = stages
        self.plans = plans
        self.handle = stages[0].handle
        self.executor = self.handle.executor
        self.device = device = stages[0].launcher.device
        self.slots = [ItemSlot(f"items-{k}", device) for k in range(SLOTS)]
        streams = [self.handle.bind_streams(stage.index) for stage in stages]
        modes = ["all" if all(col) else "none" if not any(col) else "mixed" for col in zip(*streams)]
        pointers = [isinstance(p.type, PtrType) for p in self.handle.plan.func.params]
        self._layout = PushLayout.of(pointers, modes)
        self.flight: deque[Flight] = deque()
        self.started = 0  # items started whole (the next looks at slot started % limit first)
        self.index = 0  # the place in push order of the item being taken or started
        self.scheduler: SchedulerThread | None = None  # stages.py's, once the stream went there
        self._last: tuple[list[Any], Item] | None = None  # the last item made whole, and its env
        # The host thread helps (help(), from push and pop): one of it and the runner thread at a
        # time holds `lock` while it takes, starts or completes items
        self.lock = threading.Lock()
        self.kept = False  # the runner keeps the stream (its first item did not go to stages.py)
        self.ended = False  # the runner takes no more items: the host thread must not either
        self.host_at = 0.0  # when the host thread last came to help (time.monotonic())
        # an item the host thread took but left to the runner thread (it would have waited, or it
        # runs alone), with its plan; and a failure met while helping, for the runner to raise
        self._pending: tuple[list[Any], Item | None] | None = None
        self._failure: StageFailed | None = None
        # what one whole item adds to hpvm.stats() (made once: stats.bump_all keeps the dict)
        self._item_counts: dict[str, int] = {}
        for stage in stages:
            for name, count in stage.run_counts.items():
                self._item_counts[name] = self._item_counts.get(name, 0) + count

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
            with self.lock:
                self._failed(failure)
        except BaseException as exc:  # noqa: BLE001 - no one stage's (a copy, an event): the first's
            with self.lock:
                self._failed(StageFailed(self.stages[0], exc))
        with self.lock:
            self.ended = True
            self._drain()
            self._last = None  # it holds the last item's buffers
            for slot in self.slots:
                slot.release()

    def _run(self) -> None:
        """Take, start and complete items until the end of the stream."""
        handle = self.handle
        while True:
            handle.arrived.clear()  # a push after this wakes the wait below
            # (the host thread holding the runner's lock is helping: this thread must not wait
            # for the lock and take the next turn as soon as the host lets it go)
            if self._host_drives() or not self.lock.acquire(blocking=False):
                handle.arrived.wait(HOST_HELPS)
                continue
            try:
                step = self._step()
            except BaseException:
                self.ended = True  # (before the lock goes: no help() in between)
                raise
            finally:
                self.lock.release()
            if step == "handed over":
                return
            if step == "end":
                break
            if step == "idle":
                handle.arrived.wait(self._idle_wait())
        with self.lock:
            while self.flight:
                self._complete_oldest()

    def _step(self) -> str:
        """One turn of the runner: "busy" (it did something), "idle", "end" (the stream's end
        mark was taken) or "handed over" (stages.py's scheduler ran the stream)."""
        handle = self.handle
        if handle.stop.is_set():  # cleanup(): the items in flight are dropped, never copied out
            raise Stopped()
        if self._failure is not None:  # met while the host thread helped
            failure, self._failure = self._failure, None
            raise failure
        # one completion, then one start: a slot freed is filled before the next
        # completion's host copies, so the GPU is not left without queued work
        progressed = bool(self.flight) and self._done(self.flight[0])
        if progressed:
            self._complete_oldest()
        if self._pending is not None:
            env, item = self._pending
            self._pending = None
            self._begin(env, item)
            return "busy"
        env = self._take() if len(self.flight) < SLOTS else None
        if env is EOS:
            return "end"
        if env is None:
            return "busy" if progressed else "idle"
        item = self._item(env)
        if not self.kept:
            if item is None:  # not a stream for whole items: stages.py's way
                self._hand_over(env)
                return "handed over"
            handle.feed_first_stage_only()  # (the stream stays here: one FIFO is enough)
            self.kept = True
        self._begin(env, item)
        return "busy"

    def _begin(self, env: list[Any], item: Item | None) -> None:
        """Start the item taken (whole, or alone when it cannot be); the next is the next in
        push order."""
        if item is None or not self._start(item):
            self._run_alone(env)
        self.index += 1

    def _host_drives(self) -> bool:
        """Whether the runner thread leaves the stream to the host thread for now: the host came
        to help within HOST_HELPS and left it nothing (an item to run alone or to wait for, a
        failure), and nothing stopped it. Each look of the runner thread takes the interpreter's
        lock and the runner's from the host thread; a runner thread at work would make the
        host's help() find the runner's lock taken, again and again."""
        return (self.kept and self._pending is None and self._failure is None and
                not self.handle.stop.is_set() and time.monotonic() - self.host_at < HOST_HELPS)

    def _idle_wait(self) -> float:
        """How long the runner thread waits for a push before it looks again: every GPU_SLICE
        while items are in flight."""
        return GPU_SLICE if self.flight or self._pending is not None else POLL

    def help(self) -> bool:
        """From the host thread's push() and pop(): what the runner thread would do now, when
        it is not doing it itself: complete the items the GPU has finished, and take and start
        pushed items while a slot is free for each and no item in flight must complete first
        (such an item, or one that cannot run whole, is left to the runner thread). The host
        thread then hands the runner nothing, which on two cores costs a wake-up of the other
        core each time (docs/streaming.md, "Two threads, one interpreter lock"), and the runner
        thread stays away while the host comes to help (_host_drives). True when the host thread
        helps this stream (it did now, or the runner thread is at it and leaves the next turn to
        it); False when the stream is not the host's to help (before the runner's first item,
        after its end, a failure or cleanup()): then the runner thread must be woken."""
        if not self.kept or self.ended or self._failure is not None or self.handle.stop.is_set():
            return False
        self.host_at = time.monotonic()
        if not self.lock.acquire(blocking=False):
            return True  # (the runner thread is at work: it sees what was pushed)
        try:
            if self.ended or self._failure is not None or self.handle.stop.is_set():
                return False
            try:
                self._help()
            except Stopped:  # cleanup() meanwhile: the runner thread ends the stream
                self.handle.arrived.set()
            except StageFailed as failure:
                self._failure = failure
                self.handle.arrived.set()
            except Exception as exc:  # noqa: BLE001 - as the runner thread's (__call__)
                self._failure = StageFailed(self.stages[0], exc)
                self.handle.arrived.set()
            self.host_at = time.monotonic()  # (a first item's kernels may take long to compile)
            return True
        finally:
            self.lock.release()

    def _help(self) -> None:
        while self.flight and self._done(self.flight[0]):
            self._complete_oldest()
        fifo = self.stages[0].host_fifo
        while self._pending is None and len(self.flight) < SLOTS and fifo.queue and \
                fifo.queue[0] is not EOS:
            env = self._take()
            item = self._item(env)
            after, covers = (None, False) if item is None else waits_for(item, self.flight)
            slot = None if after is None else self._free_slot(item, wait=False)
            if slot is None:
                self._pending = (env, item)  # (the runner thread waits where it must)
                self.handle.arrived.set()
                return
            with kept_current_stream(self.device):  # _launch makes the slot's stream current
                started = self._launch(item, slot, after, covers)
            if not started:
                self._pending = (env, None)  # no memory for it on a slot: it runs alone
                self.handle.arrived.set()
                return
            self.index += 1
            stats.bump_one("stream_items_host_started")

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
        """The next pushed item (its environment), EOS, or None when none is there. push() puts
        an item into the first stage's FIFO last, and after the runner's first item into that one
        alone: the other FIFOs hold copies of the items pushed before, in the same order, dropped
        here as their items are taken."""
        first = self.stages[0].host_fifo
        if not first.queue:
            return None
        env = take_now(first)
        for stage in self.stages[1:]:
            if stage.host_fifo.queue:
                take_now(stage.host_fifo)
        return env

    def _item(self, env: list[Any]) -> Item | None:
        """The item as a whole, or None when it cannot run whole. A push of the same scalars as
        the last item's, and of the same buffers or others of the same sizes (a host loop
        refilling its buffers, or pushing the next frame's), makes the last item again on those
        buffers: its extents, kernels and copies depend on nothing else."""
        last = self._last
        if last is not None:
            item = rebound(last[1], last[0], env, self.handle.first_env, self._layout, self.device)
            if item is not None:
                self._last = (env, item)
                return item
        item = self._whole(env)
        self._last = None if item is None else (env, item)
        return item

    def _whole(self, env: list[Any]) -> Item | None:
        objects: list[MemoryObject] = []
        where: dict[int, int] = {}
        reads: list[bool] = []
        writes: list[bool] = []
        tracked: list[bool] = []
        first: list[int] = []  # per object: the first stage that uses it
        parts = []
        stage_args: list[list[Any]] = []  # per stage: its node's arguments (None: on the device)
        device = self.stages[0].launcher.device
        checked = False  # an earlier stage of the item runs a checked kernel
        for plan in self.plans:
            stage, node, launcher = plan.stage, plan.stage.node, plan.stage.launcher
            try:
                item_env = stage.item_env(env)
                args = [self._argument(plan, port, src, item_env, stage_args)
                        for port, src in enumerate(node.inputs)]
                leaf_args, extents, parents = launcher.descend(item_env, args)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(stage, exc) from None
            stage_args.append(args)
            if any(math.prod(ext) == 0 for ext in extents):
                return None  # no kernel to hold its outputs on the device
            leaf = launcher.leaf
            forwarded = {port: args[source] for port, source in node.forwarded.items()
                         if port in plan.host_ports and source not in plan.device_ports}
            part = StageItem(tuple(extents), parents, None, [], [], forwarded)
            proof_args: list[Any] = []
            writes_in_place = False  # the stage writes a buffer used in place on the device
            for port, (value, param) in enumerate(zip(leaf_args, leaf.func.params)):
                if port in plan.device_ports:  # (a leaf stage's: its ports are its leaf's)
                    proof_args.append(np.empty(0, param.type.numpy_dtype))  # unknown: on the device
                    continue
                if not isinstance(param.type, PtrType):
                    part.scalars.append((port, value))
                    proof_args.append(value)
                    continue
                assert isinstance(value, BoundBuffer)
                obj = value.obj
                in_place = on_device(obj, device)  # the tracker's to keep
                if obj.released or not (in_place or obj.home == HOST):
                    return None
                j = where.get(id(obj))
                if j is None:
                    j = where[id(obj)] = len(objects)
                    objects.append(obj)
                    first.append(stage.index)
                    reads.append(False)
                    writes.append(False)
                    tracked.append(in_place)
                writes[j] = writes[j] or param.direction in ("out", "inout")
                writes_in_place = writes_in_place or (in_place and
                                                      param.direction in ("out", "inout"))
                part.buffers.append((port, j))
                proof_args.append(BufferArg(obj=None, address=obj.address, nbytes=obj.nbytes,
                                            array=None))
            if plan.kernel is None:  # the leaf's kernel where the proof holds, else the checked one
                part.kernel = leaf.kernel_for(proof_args, extents)
                part.checked = leaf.bounds is not None and part.kernel is not leaf.kernel
            elif plan.proof is not None and not plan.proof.holds(proof_args, extents):
                return None
            else:
                part.kernel = plan.kernel
            if checked and writes_in_place:
                return None  # an earlier stage may fail: this one must not write in place then
                # (its writes there would stay), so the item runs stage by stage
            checked = checked or part.checked
            part.variant = part.kernel.variant(proof_args, extents)
            copied_in = self.executor.uncovered_outs(leaf, proof_args, extents)
            for port, j in part.buffers:
                # copied in when the first stage to use it reads it (later ones see its writes),
                # an Out buffer it may write in part included
                direction = leaf.func.params[port].direction
                reads[j] = reads[j] or (first[j] == stage.index and
                                        (direction in ("in", "inout") or port in copied_in))
            parts.append(part)
        if any_overlap(objects):
            return None  # distinct buffers over common memory: the tracker's semantics
        return Item(parts, objects, reads, writes, tracked)

    def _argument(self, plan: StagePlan, port: int, src: Any, item_env: list[Any],
                  stage_args: list[list[Any]]) -> Any:
        """A stage input's value for the item: an earlier stage's forwarded input, None when it is
        read on the device, else what the executor gathers (a bind's, a constant, an expression's)."""
        if src.node is None:
            return self.executor.gather(plan.stage.node, port, src, item_env, {})
        forwarded = plan.forwarded_ports.get(port)
        if forwarded is None:
            return None
        producer, source = forwarded
        return stage_args[producer][source]

    def _start(self, item: Item) -> bool:
        """Queue the item on a slot; False when no slot could get its memory. An item that shares
        written memory with items in flight goes after them: on the GPU (its stream waits for
        their events) when that memory stays on the device, else once they have completed."""
        after, covers = waits_for(item, self.flight)
        if after is None:
            while self.flight:  # its data is another item's in flight
                self._complete_oldest()
            after, covers = [], item.in_place
        slot = self._free_slot(item)
        assert slot is not None  # (it waits for one)
        return self._launch(item, slot, after, covers)

    def _launch(self, item: Item, slot: ItemSlot, after: list[Flight], covers: bool) -> bool:
        """_start() once the item has its slot and knows the items to wait for."""
        copies = StagedCopies(slot.pool, slot.stream.handle)
        slot.stream.use()  # a tracked buffer's copy to the device goes before the kernels (the
        # slot's device made current with its stream)
        for flight in after:
            slot.stream.wait(flight.event)
        try:
            with copies.active():
                copies_in_place = self._acquire(item, slot.device)
        except BaseException as exc:  # noqa: BLE001 - the tracker's error
            raise StageFailed(self.stages[0], exc) from None
        if not slot.serves(item, copies_in_place):
            self._check_grids(item)
            try:
                slot.build(item, self.plans, copies_in_place)
            except StageFailed:
                raise
            except Exception as exc:  # noqa: BLE001 - device or pinned memory, else the stream's error
                if not _out_of_memory(exc):
                    raise StageFailed(self.stages[0], exc) from None
                busy = [f.slot for f in self.flight]
                for other in self.slots:
                    if other not in busy:
                        other.release()
                copies.complete()
                return False
        if profile.on:
            for stage in self.stages:
                stage.began(self.index)
        event = slot.issue(item, self.plans, copies, self.handle.stop)
        self.flight.append(Flight(item, slot, copies, event, self.index, covers))
        stats.bump_one("stream_whole_items")
        return True

    def _acquire(self, item: Item, device: str) -> list[Any]:
        """The tracker's device copies of the item's tracked buffers, brought up to date and
        marked as the item uses them (None for the others)."""
        return self.executor.tracker.acquire_all(item.objects, device, item.reads, item.writes,
                                                 item.tracked)

    def _free_slot(self, item: Item, wait: bool = True) -> ItemSlot | None:
        """The next slot in turn that no item in flight holds, among as many as the item's size
        allows (completing the oldest items in flight until one is free; without `wait`, None
        when none is free now)."""
        size = max(1, item.nbytes)
        limit = max(1, min(SLOTS, SLOT_BYTES // size))
        first = self.started
        while True:
            busy = [f.slot for f in self.flight]
            for k in range(limit):
                slot = self.slots[(first + k) % limit]
                if slot not in busy:
                    self.started += 1
                    return slot
            if not wait:
                return None
            self._complete_oldest()

    def _check_grids(self, item: Item) -> None:
        # a one-to-one edge joins the stages' own nodes: compare their grids (a part's last
        # extents), not the levels of a chain down to a leaf below them
        for stage, part in zip(self.stages, item.stages):
            sources = {port: item.stages[src.node].extents[-1]
                       for port, src in enumerate(stage.node.inputs) if src.node is not None}
            try:
                stage.check_grids(part.extents[-1], sources)
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                raise StageFailed(stage, exc) from None

    def _done(self, flight: Flight) -> bool:
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
        self.flight.popleft()  # (its event has passed: a fault of its kernels showed at done())
        for k in flight.slot.checked:
            try:
                flight.slot.launches[k].check(ran=True)  # its first out-of-bounds access
            except BaseException as exc:  # noqa: BLE001 - the stage's error
                flight.copies.complete()
                raise StageFailed(self.stages[k], exc, flight.index) from None
        try:
            flight.slot.complete(flight.item, flight.copies)
        except BaseException as exc:  # noqa: BLE001
            raise StageFailed(self.stages[-1], exc, flight.index) from None
        try:
            # the user's buffers hold the item's results, which its kernels wrote through the
            # item's own device slots: the tracker's device copies are stale, whether or not a
            # later item in flight uses the buffer (that item pushed its contents in its slots)
            self.executor.tracker.host_data(flight.item.objects)
            records = [self._host_slots(stage, plan, part, outputs) if plan.host_ports else None
                       for stage, plan, part, outputs in zip(self.stages, self.plans,
                                                             flight.item.stages, flight.item.outputs)]
        except BaseException as exc:  # noqa: BLE001 - the item's, never the runner thread's end
            raise StageFailed(self.stages[-1], exc, flight.index) from None
        self.handle.hazards.done_stages(flight.index)
        stats.bump_all(self._item_counts)
        if profile.on:
            for stage in self.stages:
                stage.profiled(flight.index)
        self.handle.done[0].put((flight.index, WholeRecord(records)))

    @staticmethod
    def _host_slots(stage: Stage, plan: StagePlan, part: StageItem,
                    outputs: list[np.ndarray | None]) -> list[Slot | None]:
        """The stage's slots of the outputs pop() reads: forwarded values, or what its leaf's
        `outputs` bind up to the stage (stage_launch.py's)."""
        fetched = stage.launcher.output_slots(outputs, list(part.extents), part.parents) \
            if outputs else []
        slots: list[Slot | None] = []
        for port, out in enumerate(stage.node.func.outputs):
            if port in part.forwarded:
                value = np.full(part.count, _output_value(part.forwarded[port], out.type),
                                dtype=out.type.numpy_dtype)
                slots.append(Slot(value, True, part.count))
            else:
                slots.append(fetched[port] if port in plan.host_ports else None)
        return slots

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
                item_env, args = stage.arguments(env, received)
                if profile.on:
                    stage.began(self.index)
                ext, outs = stage.launcher.fire(item_env, args)
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


def _output_value(value: Any, t: ScalarType) -> Any:
    """A forwarded input's host value as its output array holds it: a bf16 input lives in float32
    on the host, while output arrays (what pop() returns, as from a kernel) hold bf16 bits;
    np.full would convert the float's value to uint16, not its bits."""
    if t == bf16 and np.asarray(value).dtype != np.uint16:
        return bf16_to_bits(np.float32(value))
    return value
