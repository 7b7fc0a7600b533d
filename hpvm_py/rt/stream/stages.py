"""The stages of a streaming launch, and two of the three schedulers that run them: a thread per
stage (StageThreads) and one scheduler thread for leaves started without waiting (SchedulerThread).
The third, whole items of a stream of Triton leaves, is items.py's (docs/architecture.md,
"Streaming")."""
from __future__ import annotations

import functools
import queue
import threading
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from ...device.streams import ItemEvent, stage_stream
from ...errors import HPVMError
from ...ir import dfg as D
from ...support import profile, stats
from ..executor import Executor, Slot, Stopped, check_grids
from ..plan import GraphPlan
from .hazards import Hazards
from .scheduler import THREAD_PREFIX, StreamScheduler
from .stage_launch import DeviceStageRun, StageLauncher, StageRun

POLL = 0.05  # seconds between checks of the stop flag while blocked
GPU_SLICE = 20e-6  # seconds between looks at the events of GPU items in flight
GPU_DEPTH = 2  # items of a GPU stage in flight at once


class EndOfStream:
    """Marks the end of the items on a FIFO."""


EOS = EndOfStream()


def put_now(fifo: queue.Queue, value: Any) -> None:
    """Queue.put_nowait for the one thread that adds to `fifo` and has seen room in it (a few
    calls fewer: a stream puts every item into each stage's FIFO)."""
    with fifo.mutex:
        fifo.queue.append(value)
        fifo.unfinished_tasks += 1
        fifo.not_empty.notify()


def take_now(fifo: queue.Queue) -> Any:
    """Queue.get_nowait for the one thread that takes from `fifo` and has seen a value in it."""
    with fifo.mutex:
        value = fifo.queue.popleft()
        fifo.not_full.notify()
        return value


@dataclass
class WholeRecord:
    """pop()'s records of every stage of an item that ran whole (None: a stage none of whose
    outputs pop() reads), sent once, through the first stage's records."""

    records: list[list[Slot | None] | None]


class StreamState(Protocol):
    """What the stages and their runners read and call on the handle of their stream
    (streaming.py's StreamHandle)."""

    plan: GraphPlan
    executor: Executor
    first_env: list[Any] | None  # the values of non-streaming binds, set before the first item
    stop: threading.Event  # cleanup(): every runner ends
    arrived: threading.Event  # set by push() and wait(): a scheduler has new items
    hazards: Hazards
    host_fifos: list[Any]  # per stage, the host's values
    edge_fifos: dict[tuple[int, int], Any]  # (stage, port) -> the values of an edge
    consumers: dict[tuple[int, int], list[tuple[int, int]]]  # (stage, port) -> its edges' ends
    done: list[Any]  # per stage, its records of finished items

    def bind_streams(self, index: int) -> list[bool]: ...

    def get(self, fifo: Any, deadline: float | None, what: str, item: int) -> Any: ...

    def fail(self, node: Any, exc: BaseException, item: int) -> None: ...

    def cut_before(self, item: int) -> bool: ...

    def check(self, item: int) -> None: ...

    def feed_first_stage_only(self) -> None: ...


@dataclass
class StageFlight:
    """One item of a stage in flight on the scheduler."""

    run: StageRun | DeviceStageRun
    item: int


@dataclass
class EdgeItem:
    slot: Slot
    extents: tuple[int, ...]
    event: ItemEvent | None = None  # the end of the producer's GPU work on the item, if it had any


class Stage:
    def __init__(self, handle: StreamState, index: int):
        self.handle = handle
        self.index = index
        self.node = handle.plan.nodes[index]
        self.launcher = StageLauncher(handle.executor, handle.plan, self.node)
        self.host_fifo = handle.host_fifos[index]
        self.edge_ports = [port for port, src in enumerate(self.node.inputs) if src.node is not None]
        self.kept_edges: dict[int, Any] = {}  # non-streaming edges: the first value
        # what the scheduler has taken of the next item so far
        self.env: list[Any] | None = None
        self.received: dict[int, EdgeItem] = {}
        self.runs: deque[StageFlight] = deque()  # its items in flight, oldest first
        # what one item adds to hpvm.stats() (made once: stats.bump_all keeps the dict)
        self.run_counts = {"kernel_launches": self.node.leaf_count, "nodes_run": self.node.node_count}
        self.taken = 0  # items started (or failed to start): the index of the next item
        # a GPU stage queues its next item behind the one in flight on its stream (they run in
        # order there), so the GPU starts it without waiting for the host to see the first end
        self.depth = 1 if self.launcher.stream is None else GPU_DEPTH
        self.ended = False
        self.began_at: dict[int, int] = {}  # inside `hpvm.profile()`: item -> when it started

    def began(self, item: int) -> None:
        """Inside `hpvm.profile()`: the item starts on this stage (its event ends in finished())."""
        self.began_at[item] = profile.now()

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def closed(self) -> bool:
        """No further item to start: the end of the stream, or a failed item is next."""
        return self.ended or self.handle.cut_before(self.taken)

    def waiting_edges(self) -> list[int]:
        return [p for p in self.edge_ports if p not in self.kept_edges and p not in self.received]

    def item_env(self, env: list[Any]) -> list[Any]:
        """The root's values as this stage sees them for one item: a streaming bind's from the
        item, any other from the first item (a buffer moved since: at its memory now)."""
        first = self.handle.first_env
        streams = self.handle.bind_streams(self.index)
        return [env[i] if streams[i] else first[i] for i in range(len(env))]

    def arguments(self, env: list[Any], received: dict[int, EdgeItem]) -> tuple[list[Any], list[Any]]:
        """The item's environment (streaming binds: this item's values, others: the first
        item's) and the node's arguments, its one-to-one edges' grids checked."""
        item_env = self.item_env(env)
        args: list[Any] = []
        executor = self.handle.executor
        arriving = {port: received[port].extents for port in received if port not in self.kept_edges}
        if arriving:
            # before the node runs (on every target alike): a leaf handed a larger source grid's
            # values than its own, or a smaller one's, fails or writes before a later check
            self.check_grids(executor.extents_of(self.node, item_env), arriving)
        for port, src in enumerate(self.node.inputs):
            if src.bind_port is not None:
                args.append(item_env[src.bind_port])
            elif src.const is not None:
                args.append(src.const)
            elif src.expr is not None:
                args.append(src.expr.value(item_env))
            elif port in self.kept_edges:
                args.append(self.kept_edges[port])
            else:
                message = received[port]
                value = executor.deliver(self.node, port, src, message.slot)
                if not src.stream:
                    self.kept_edges[port] = value
                args.append(value)
        return item_env, args

    def publish(self, ext: tuple[int, ...], outs: list[Slot | None], item: int,
                event: ItemEvent | None = None) -> None:
        """Send the item's outputs downstream and to pop() (arguments() checked its grids)."""
        nodes = self.handle.plan.nodes
        for port, slot in enumerate(outs):
            if slot is None:
                continue
            for key in self.handle.consumers.get((self.index, port), []):
                dst, dst_port = key
                if not nodes[dst].inputs[dst_port].stream and item > 0:
                    continue  # a non-streaming edge: its consumer keeps the first item's value
                    # and never takes another (each would stay in the FIFO until the end)
                self.handle.edge_fifos[key].put(EdgeItem(slot, ext, event))
        self.finished(outs, item)

    def check_grids(self, ext: tuple[int, ...], src_extents: dict[int, tuple[int, ...]]) -> None:
        """The item's one-to-one edges join grids of the same extents."""
        node = self.node
        for port, src in enumerate(node.inputs):
            if port in src_extents and src.edge_kind == D.ONE_TO_ONE:
                edge = next(e for e in self.handle.plan.func.edges
                            if e.dst == node.name and e.dst_port == port)
                check_grids(edge, src_extents[port], ext)

    def finished(self, outs: list[Slot | None], item: int) -> None:
        """The item's record for pop() (the slots of its outputs), counted in stats; later items
        may use its buffers now."""
        stats.bump_all(self.run_counts)
        if profile.on:
            self.profiled(item)
        self.handle.hazards.done(item, self.index)
        self.handle.done[self.index].put((item, outs))  # (pop() checks the item's number)

    def profiled(self, item: int) -> None:
        """Inside `hpvm.profile()`: the item's run of this stage ends."""
        profile.stage_item(self.name, item, self.began_at.pop(item, None), self.node.target)

    def forget(self) -> None:
        """Once the stage has ended: drop the values it kept (they may hold the user's buffers)."""
        self.env = None
        self.kept_edges, self.received = {}, {}

    def failed(self, exc: BaseException, item: int) -> None:
        self.handle.fail(self.node, exc, item)


class StageThreads(StreamScheduler):
    """Runs every stage on a thread of its own: takes any stream."""

    def __init__(self, stages: list[Stage]):
        self.stages = stages
        self._threads: list[threading.Thread] = []

    @classmethod
    def fit(cls, stages: list[Stage]) -> StageThreads:
        return cls(stages)

    def threads(self) -> list[threading.Thread]:
        self._threads = [threading.Thread(target=run_stage_thread, args=(stage,), daemon=True,
                                          name=f"{THREAD_PREFIX}{stage.name}")
                         for stage in self.stages]
        return self._threads

    def busy(self) -> list[str]:
        return [t.name.removeprefix(THREAD_PREFIX) for t in self._threads if t.is_alive()]


def run_stage_thread(stage: Stage) -> None:
    """A stage on a thread of its own: block for each item's inputs (and for earlier items'
    conflicting uses of its buffers), run the node, publish."""
    handle = stage.handle
    handle.executor.watch(handle.stop)  # an internal node's children check it too
    try:
        end_item = stage_stream(stage.launcher.stream)
        while True:
            item = stage.taken
            env = handle.get(stage.host_fifo, None, "stage", item)
            if env is EOS:
                return
            received = {port: handle.get(handle.edge_fifos[(stage.index, port)], None, "stage", item)
                        for port in stage.waiting_edges()}
            handle.hazards.wait(item, stage.index, functools.partial(handle.check, item))
            item_env, args = stage.arguments(env, received)
            handle.check(item)
            if profile.on:
                stage.began(item)
            ext, outs = stage.launcher.fire(item_env, args)
            end_item()  # the item's writes are done before the next stage reads them
            stage.publish(ext, outs, item)
            stage.taken += 1
    except Stopped:
        return
    except BaseException as exc:  # noqa: BLE001 - handed to pop()/wait()
        stage.failed(exc, stage.taken)


def can_schedule(stages: list[Stage]) -> bool:
    """Whether one scheduler thread can run every stage (each a leaf started without waiting).
    A graph of no nodes has no stage to run: StageThreads takes it, with no thread."""
    return bool(stages) and all(stage.launcher.eligible for stage in stages)


class StageFailed(Exception):
    """A stage's error on an item, raised inside a runner's thread (this scheduler's, or
    items.py's) and handed to the stage there; item None: the item items.py is starting."""

    def __init__(self, stage: Stage, error: BaseException, item: int | None = None):
        super().__init__(stage.name)
        self.stage = stage
        self.error = error
        self.item = item


class SchedulerThread(StreamScheduler):
    """Runs every stage of a stream from one thread (see the module's docstring): takes streams
    whose every stage is a leaf started without waiting (can_schedule)."""

    def __init__(self, stages: list[Stage]):
        self.stages = stages
        self.handle = stages[0].handle
        self.running: deque[Stage] = deque()  # the stage of each item in flight, oldest first

    @classmethod
    def fit(cls, stages: list[Stage]) -> SchedulerThread | None:
        return cls(stages) if can_schedule(stages) else None

    def threads(self) -> list[threading.Thread]:
        return self.one_thread()

    def busy(self) -> list[str]:
        """The stages whose kernel is in flight."""
        return list(dict.fromkeys(stage.name for stage in list(self.running)))

    def __call__(self) -> None:
        try:
            while not all(s.closed for s in self.stages) or self.running:
                try:
                    self._step()
                except StageFailed as failure:  # the items before it go on
                    failure.stage.failed(failure.error, failure.item)
        except Stopped:
            pass
        self._drain()

    def _step(self) -> None:
        """Finish what is done, start what can start, else wait a little."""
        handle = self.handle
        handle.arrived.clear()  # a push after this wakes the wait below
        progressed = self._poll()
        for stage in self.stages:
            if self._try_start(stage):
                progressed = True
                self._poll()  # a start takes a while: see what ended meanwhile
        if handle.stop.is_set():
            raise Stopped()
        if progressed:
            return
        on_host = next((stage for stage in self.running if stage.runs[0].run.on_host), None)
        if on_host is not None:
            self._finish(on_host)  # helping the native pool's workers
        else:  # GPU items only (no way to wait for the first of several events): a slice
            handle.arrived.wait(GPU_SLICE if self.running else POLL)

    def _try_start(self, stage: Stage) -> bool:
        """Start the stage's next item if the stage is idle, the item's inputs are there and
        earlier items' conflicting uses of its buffers are done."""
        if stage.closed or len(stage.runs) >= stage.depth:
            return False
        if stage.runs and stage.runs[-1].run.checked:
            # its item in flight may still fail, and then no later item may run: queued behind
            # it on the stage's stream, the next would run all the same (writing its buffers)
            return False
        if stage.env is None:
            if not stage.host_fifo.queue:  # (a look without the exception of an empty get)
                return False
            env = take_now(stage.host_fifo)  # only this thread takes from it
            if env is EOS:
                stage.ended = True
                return True
            stage.env = env
        for port in stage.waiting_edges():
            edge = self.handle.edge_fifos[(stage.index, port)]
            if edge.empty():
                return False
            stage.received[port] = edge.get_nowait()
        item = stage.taken
        if not self.handle.hazards.ready(item, stage.index):
            return False
        if self.handle.stop.is_set():
            raise Stopped()
        env, received = stage.env, stage.received
        stage.env, stage.received = None, {}
        stage.taken += 1
        after = [m.event for m in received.values() if m.event is not None]
        if profile.on:
            stage.began(item)
        try:
            item_env, args = stage.arguments(env, received)
            run = stage.launcher.start(item_env, args, after)
        except BaseException as exc:  # noqa: BLE001 - the stage's error
            raise StageFailed(stage, exc, item) from None
        stage.runs.append(StageFlight(run, item))
        self.running.append(stage)
        return True

    def _poll(self) -> bool:
        """Finish the items in flight that are done; each such stage starts its next item at once
        (the slowest stage, which bounds the stream, is never left waiting for the others'
        starts). Whether any was done."""
        progressed = False
        for stage in dict.fromkeys(self.running):  # each stage's oldest item (they end in order)
            if self._done(stage):
                self._finish(stage)
                self._try_start(stage)
                progressed = True
        return progressed

    def _done(self, stage: Stage) -> bool:
        """Whether the stage's oldest item is done (a GPU fault shows here first: the stage's
        error on that item, which is then no longer in flight)."""
        if not stage.runs:
            return False
        flight = stage.runs[0]
        try:
            return flight.run.done()
        except BaseException as exc:  # noqa: BLE001 - the stage's error
            stage.runs.popleft()
            self.running.remove(stage)
            raise StageFailed(stage, exc, flight.item) from None

    def _finish(self, stage: Stage) -> None:
        """Finish the stage's oldest item in flight and publish it (an item at or after a
        failed one: drop it)."""
        flight = stage.runs.popleft()
        self.running.remove(stage)  # (its first entry: the one of that item)
        try:
            ext, outs = flight.run.finish()
            if not self.handle.cut_before(flight.item):
                stage.publish(ext, outs, flight.item, flight.run.event)
        except BaseException as exc:  # noqa: BLE001 - the stage's error
            raise StageFailed(stage, exc, flight.item) from None

    def _drain(self) -> None:
        """Stopped or failed: let the kernels in flight end (they write the items' buffers), so
        nothing writes a buffer once the scheduler has ended; their results are dropped."""
        while self.running:
            stage = self.running.popleft()
            flight = stage.runs.popleft()
            try:
                flight.run.finish()
            except HPVMError:
                pass  # the pipeline already stopped; this error is moot
            except BaseException as exc:  # noqa: BLE001
                stage.failed(exc, flight.item)
