"""Streaming launches: the handle of a stream (push, pop, wait, cleanup), its FIFOs between stages,
failures surfaced at the failing item's pop, and the choice of the scheduler that runs its stages
(SCHEDULERS). docs/architecture.md ("Streaming") and docs/streaming.md say how and why."""
from __future__ import annotations

import atexit
import contextlib
import operator
import queue
import threading
import time
import weakref
from typing import Any, Callable, Iterator

from ...errors import ExecutionError, HPVMError, HPVMTimeoutError, LaunchError, StreamError
from ...frontend.callsite import caller_loc
from ...support import stats
from ...types import PtrType
from ..args import bind_arguments, bind_buffer
from ..buffers import moved
from ..executor import Executor, Stopped
from ..launch_devices import launch_devices
from ..library import first_library_node
from .hazards import Hazards, Use
from .items import ItemRunner
from .overlaps import refuse_shared_memory
from .scheduler import THREAD_PREFIX, StreamScheduler
from .stages import EOS, GPU_SLICE, POLL, SchedulerThread, Stage, StageThreads, WholeRecord, put_now
from .waits import deadline_after, join_threads

WAITED_TWICE = "wait() was already called on this launch handle"
# seconds the interpreter's exit waits for the stages of the streams still running, all together
EXIT_WAIT = 1.0
FORKED = ("started before os.fork(): its stages run in the parent process; launch a stream in this "
          "process to stream here")
# the ways to run a stream's stages (scheduler.py), in order of preference: the first that fits
SCHEDULERS: tuple[type[StreamScheduler], ...] = (ItemRunner, SchedulerThread, StageThreads)


class StreamHandle:
    def __init__(self, runtime: Any, compiled: Any, depth: int):
        if not _is_whole_number(depth) or depth < 1:
            raise StreamError(f"depth must be a whole number of items, at least 1, got {depth!r}",
                              caller_loc())
        collective = first_library_node(compiled.plan)
        if collective is not None:  # stages run concurrently: ranks could not keep one order
            raise StreamError(f"node {collective.name} is a collective; collectives cannot run in a "
                              "streaming launch yet (launch without stream=True)", collective.node.loc)
        self.runtime = runtime
        self.compiled = compiled
        self.plan = compiled.plan
        self.depth = depth
        self.executor: Executor = runtime.executor
        self.stop = threading.Event()
        self.arrived = threading.Event()  # set by push() and wait(): the scheduler has new items
        self._error: BaseException | None = None
        self._failed_at: int | None = None  # the item whose stage failed first in push order
        self._error_lock = threading.Lock()
        self._torn = False  # _tear(): its stages may hold different items, so wait() stops them
        self.hazards = Hazards(runtime.tracker.host_data)
        # the values of non-streaming binds: the first push's, a buffer that moved since bound
        # again (_keep_moved); the stages read it as they take each item
        self.first_env: list[Any] | None = None
        # the last push's devices, arguments and values (bind_arguments takes what is unchanged)
        self._last_push: tuple[frozenset[str], tuple[Any, ...], list[Any]] | None = None
        self._closed = False  # no more pushes: wait() was called, or cleanup()
        self._end_sent = False  # the end-of-stream mark went to every stage (wait() may time out first)
        self._waited = False  # a wait() returned: every stage has ended
        self._cleaned_up = False
        self._forked = False  # this is a child's copy of the stream, made by os.fork()
        self._feed_lock = threading.Lock()
        # one pop() at a time: a pop takes the next item's records one stage at a time (and keeps
        # them across a timeout), so two threads popping at once would take parts of one item
        # each, pop one item twice and lose another
        self._pop_lock = threading.Lock()
        self._pushed = 0
        self._popped = 0
        self._partial: list[Any] = []  # the stages' records of the result being popped
        nodes = self.plan.nodes
        # a FIFO per stage for the host's values, and one per edge between stages
        self.host_fifos = [queue.Queue(maxsize=depth) for _ in nodes]
        # the FIFOs a push feeds: every stage's, until a scheduler that takes each item from the
        # first stage's alone says so (feed_first_stage_only)
        self.feeds: list[queue.Queue] = self.host_fifos
        self.edge_fifos: dict[tuple[int, int], queue.SimpleQueue] = {}
        for i, node in enumerate(nodes):
            for port, src in enumerate(node.inputs):
                if src.node is not None:
                    # unbounded, and C-level: a stage runs at most depth + 1 items ahead of any
                    # other, since the host puts each item into every stage's bounded host FIFO
                    self.edge_fifos[(i, port)] = queue.SimpleQueue()
        self.consumers: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for (dst, port), _ in self.edge_fifos.items():
            src = nodes[dst].inputs[port]
            self.consumers.setdefault((src.node, src.port), []).append((dst, port))
        # per stage, one record per finished item: its slots for the root's outputs (unbounded and
        # C-level: results wait here until popped)
        self.done: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in nodes]
        self._bind_streams = [self._streaming_binds(i) for i in range(len(nodes))]
        # per root pointer (and whether its binds stream): the stages bound to it, each with
        # whether it writes through it
        binds: dict[tuple[int, bool], dict[int, bool]] = {}
        for i in range(len(nodes)):
            for port, streams, writes in self._binds_of_buffers(i):
                stages = binds.setdefault((port, streams), {})
                stages[i] = stages.get(i, False) or writes
        self._buffer_binds = [(port, streams, stages) for (port, streams), stages in binds.items()]
        self._kept_buffers = sorted({port for port, streams in binds if not streams})
        self._stages = stages = [Stage(self, i) for i in range(len(nodes))]
        self._scheduler = choose_scheduler(stages)
        self._threads = self._scheduler.threads()
        _running.add(self)
        for t in self._threads:
            t.start()

    # -- host side --------------------------------------------------------------------------

    def push(self, args: tuple[Any, ...], timeout: float | None) -> None:
        if self._closed:
            raise StreamError(f"push(): the stream is {self._state()}; nothing more can be pushed",
                              caller_loc())
        self._raise_stage_error()  # an item failed: nothing after it runs (docs/streaming.md)
        func = self.compiled.module.root_func
        devices = launch_devices(self.compiled.plan)
        last = self._last_push
        env = bind_arguments(func, args, self.runtime.tracker, devices,
                             last[1:] if last is not None and last[0] == devices else None)
        deadline = deadline_after(timeout)
        with self._host_side(deadline, "push"):
            if self._closed:
                raise StreamError(f"push(): the stream is {self._state()}; nothing more can be "
                                  "pushed", caller_loc())
            item = self._pushed
            first = self.first_env is None
            if first:
                self.first_env = list(env)  # (its own: _keep_moved changes it)
            else:
                self._keep_moved(func, env, devices)
            uses = self._uses(item, env)
            try:
                refuse_shared_memory(uses, self.plan.nodes)
            except LaunchError:
                if first:
                    self.first_env = None  # (the next push is the first again)
                raise
            # device copies are stale only for buffers the user may have written since the
            # stream last used them; the others hold what earlier items in flight write
            self.runtime.tracker.host_data(self.hazards.admit(item, uses))
            sending = False
            try:
                self._room(deadline, "push")
                sending = True
                self._put_all(env)
                self._last_push = (devices, args, env)
                self._pushed += 1
            except BaseException as exc:
                if sending:  # (an interrupt between the puts: some stages have the item)
                    self._tear("push", item)
                    raise
                self.hazards.withdraw(item)  # no stage got the item
                if first:
                    self.first_env = None
                if isinstance(exc, Stopped):  # a stage failed (or cleanup() ran) while it waited
                    self._raise_stopped("push")
                raise
        if not self._scheduler.help():  # (else the host thread started what it could itself)
            self.arrived.set()
        stats.bump("stream_pushes")

    def _keep_moved(self, func: Any, env: list[Any], devices: frozenset[str]) -> None:
        """Bind again each buffer of the first push that a non-streaming bind keeps and that was
        resized, had its storage replaced, or was untracked since, as a launch tracks such a
        buffer afresh (one the user tracked and resized is refused: MemoryTrackingError), so the
        items from this push on use its memory now, not the memory it had (freed by then)."""
        first = self.first_env
        for i in self._kept_buffers:
            kept, pushed = first[i].obj, env[i].obj
            if pushed is kept:
                continue  # (the same memory: bind_arguments looked)
            if pushed.user is kept.user:
                first[i] = env[i]  # pushed again, and bound again by bind_arguments
            elif kept.released or moved(kept.user, kept.address, kept.nbytes):
                first[i] = bind_buffer(func, func.params[i], kept.user, self.runtime.tracker,
                                       devices)

    def _uses(self, item: int, env: list[Any]) -> list[Use]:
        """The item's buffers, each with the stages that use it and whether each writes it."""
        first = self.first_env
        uses: dict[int, Use] = {}
        for port, streams, stages in self._buffer_binds:
            obj = (env if streams else first)[port].obj
            # the buffer, not its tracked object: one untracked while an earlier item uses it
            # is tracked again by a new object, and those items must still be ordered
            key = id(obj.user)
            use = uses.get(key)
            if use is None:
                uses[key] = Use(item, obj, stages, key)  # (shared: Use never changes it in place)
                continue
            merged = dict(use.stages)  # a buffer bound to several pointers
            for stage, writes in stages.items():
                merged[stage] = merged.get(stage, False) or writes
            use.stages = merged
        return list(uses.values())


    def _binds_of_buffers(self, index: int) -> list[tuple[int, bool, bool]]:
        """Stage `index`'s binds of root pointer parameters: (root port, whether the bind streams,
        whether the stage writes through it)."""
        params, streams = self.plan.func.params, self._bind_streams[index]
        node = self.plan.nodes[index]
        return [(src.bind_port, streams[src.bind_port], node.func.params[port].direction in ("out", "inout"))
                for port, src in enumerate(node.inputs)
                if src.bind_port is not None and isinstance(params[src.bind_port].type, PtrType)]

    @contextlib.contextmanager
    def _host_side(self, deadline: float | None, what: str) -> Iterator[None]:
        """One host thread at a time feeds the stages (pushes and wait()'s end mark)."""
        if not self._feed_lock.acquire(timeout=-1 if deadline is None else
                                       max(0.0, deadline - time.monotonic())):
            raise HPVMTimeoutError(f"{what}(): another thread's push() or wait() on this stream held "
                                   "it past the timeout", caller_loc())
        try:
            yield
        finally:
            self._feed_lock.release()

    def feed_first_stage_only(self) -> None:
        """From the next push on, items go into the first stage's FIFO alone (ItemRunner takes
        each item whole from there). Items already pushed are in every FIFO."""
        self.feeds = [self.host_fifos[0]]

    def _room(self, deadline: float | None, what: str) -> None:
        """Wait until every fed FIFO has room for an item, so that a timeout (or an interrupt)
        leaves every stage with the same items; raises Stopped when stopped."""
        for fifo in self.feeds:
            while len(fifo.queue) >= fifo.maxsize:  # (only this thread adds: room seen stays)
                if self.stop.is_set() or self._error is not None:
                    raise Stopped()
                # the host thread starts items itself where it can, then looks again soon
                wait = GPU_SLICE if self._scheduler.help() else POLL
                left = wait if deadline is None else min(wait, deadline - time.monotonic())
                if left <= 0:
                    raise HPVMTimeoutError(f"{what}(): the pipeline stayed full past the timeout",
                                           caller_loc())
                with fifo.not_full:
                    if len(fifo.queue) >= fifo.maxsize:
                        fifo.not_full.wait(left)
        if self.stop.is_set() or self._error is not None:
            raise Stopped()

    def _put_all(self, item: Any) -> None:
        """Put item into every fed FIFO, which _room() saw room in (only this host thread adds).
        The first stage's FIFO gets it last: an item seen there is in the others too."""
        for fifo in reversed(self.feeds):
            put_now(fifo, item)

    def _tear(self, what: str, item: int) -> None:
        """An exception raised inside push() or pop() past their waits (a KeyboardInterrupt, or
        another signal handler's) left the stages with different items, or threw away a result
        taken from a stage: stop the stream at `item`, as a failing stage does, so that every
        later call says so instead of pairing one item's results with another's."""
        with self._error_lock:
            self._error = StreamError(
                f"the stream was interrupted inside {what}() (an exception raised while it handed "
                f"over item {item}), so its items may be out of step: it stopped; the items "
                "before it were popped or can be; launch another stream", caller_loc())
            if self._failed_at is None or item < self._failed_at:
                self._failed_at = item
            self._torn = True
        self.arrived.set()

    def pop(self, timeout: float | None) -> tuple[Any, ...]:
        deadline = deadline_after(timeout)
        if not self._pop_lock.acquire(timeout=-1 if deadline is None else
                                      max(0.0, deadline - time.monotonic())):
            raise HPVMTimeoutError("pop(): another thread's pop() on this stream held it past the "
                                   "timeout", caller_loc())
        try:
            return self._pop(deadline)
        finally:
            self._pop_lock.release()

    def _pop(self, deadline: float | None) -> tuple[Any, ...]:
        """pop() with the pop lock held."""
        if self._cleaned_up:
            self._raise_stopped("pop")
        if self._popped >= self._pushed:
            self._raise_stage_error()
            state = "closed and every result was popped" if self._closed else \
                "waiting for a push: nothing pushed is left to pop"
            raise StreamError(f"pop(): the stream is {state}", caller_loc())
        if self.cut_before(self._popped):
            self._raise_stage_error()
        # collect every part of the next result; a timeout keeps what arrived for the next pop()
        records = self._partial
        try:
            while len(records) < len(self.done):
                # (the host thread completes finished items itself where the scheduler lets it)
                item, record = self.get(self.done[len(records)], deadline, "pop", self._popped,
                                        self._scheduler.help)
                if item != self._popped:  # an interrupted pop() took this stage's result of it
                    self._tear("pop", self._popped)
                    self._raise_stage_error()
                if isinstance(record, WholeRecord):  # (only ever the first stage's)
                    records = record.records
                    break
                records.append(record)
        except Stopped:
            self._raise_stopped("pop")
        self._partial = []
        self._popped += 1
        values = []
        for node, port in self.plan.outputs:
            value = self.executor._as_parent(records[node][port])
            values.append(value.reshape(-1)[0] if hasattr(value, "reshape") else value)
        return tuple(values)

    def results(self) -> Iterator[tuple[Any, ...]]:
        """Pop every remaining result, until the stream is closed and drained. Looking for an
        item and popping it are one step under the pop lock: another thread's pop (or results())
        taking the last item between the two made this pop() raise "nothing pushed is left"."""
        while True:
            with self._pop_lock:
                if self._popped < self._pushed:
                    result: tuple[Any, ...] | None = self._pop(None)
                # (closed, and no push under way: one blocked on a full pipeline when a wait()
                # closed the stream and timed out behind it still brings its item)
                elif (self._closed and not self._feed_lock.locked()) or self.stop.is_set() \
                        or self._error is not None:
                    self._raise_stage_error()
                    return
                else:
                    result = None
            if result is None:
                time.sleep(POLL)  # another thread may still push
                continue
            yield result

    def close(self, timeout: float | None) -> None:
        """wait(): no more pushes; the stages finish the items in flight and end. Returns only once
        every stage thread has ended; a timeout leaves the stream draining, and wait() may be
        called again."""
        deadline = deadline_after(timeout)
        # closed before the feed lock is taken: a wait() that times out behind another thread's
        # push (blocked on a full pipeline) has still closed the stream to later pushes
        self._closed = True
        with self._host_side(deadline, "wait"):
            if self._waited:
                raise LaunchError(WAITED_TWICE, caller_loc())
            if self._cleaned_up:
                self._raise_stopped("wait")
            if self._torn:  # (a stage may wait for an item another never got: none would end)
                self.stop.set()
            try:
                if not self._end_sent:
                    self._room(deadline, "wait")
                    try:
                        self._put_all(EOS)
                        self._end_sent = True
                    except BaseException:
                        self._tear("wait", self._pushed)
                        raise
                    self.arrived.set()
            except Stopped:
                pass  # an item failed: the stages end after the items before it; raised below
            except HPVMTimeoutError:
                raise self._still_running(timeout) from None
            if join_threads(self._threads, deadline):
                raise self._still_running(timeout)
            self._waited = True
            self._release_items()
            self.runtime.handles.discard(self)
        self._raise_stage_error()

    def stop_on_cleanup(self) -> None:
        """hpvm.cleanup(): every stage stops at its next check; nothing more is popped."""
        self._closed = True
        self._cleaned_up = True
        self.stop.set()

    def forked(self) -> None:
        """In a child made by os.fork(): the stage threads stayed in the parent, so this copy is
        stopped as by cleanup() and its calls say why; its locks, which a thread of the parent
        may have held, are new."""
        self._feed_lock = threading.Lock()
        self._pop_lock = threading.Lock()
        self._forked = True
        self.stop_on_cleanup()

    def abandon(self) -> None:
        """The program dropped the stream's handle without wait(): nothing can push to it or pop
        from it any more, so its stages stop at their next check, as at cleanup(), and their
        threads end, letting go of the handle, its FIFOs and the buffers pushed (a long-running
        program that drops streams would otherwise keep a thread and its items per stream)."""
        if self._waited or self._cleaned_up:
            return
        self._closed = True
        self.stop.set()
        self.arrived.set()
        self.runtime.handles.discard(self)

    def join_stopped(self, deadline: float | None) -> list[str]:
        """After stop_on_cleanup(): the names of the stages still running at the deadline."""
        busy = join_threads(self._threads, deadline)
        if not busy:
            self._release_items()
        return self._busy_stages(busy)

    def _busy_stages(self, alive: list[threading.Thread]) -> list[str]:
        """The names of the stages still at work, given the threads still alive."""
        if not alive:
            return []
        return self._scheduler.busy() or [t.name.removeprefix(THREAD_PREFIX) for t in alive]

    def _still_running(self, timeout: float | None) -> HPVMTimeoutError:
        busy = ", ".join(self._busy_stages([t for t in self._threads if t.is_alive()]))
        return HPVMTimeoutError(
            f"wait(): the stream did not drain within {timeout} s (stages still working: {busy}). "
            "The stream is closed to pushes and keeps draining; its stages may still write their "
            "buffers: call wait() again to wait for them, or hpvm.cleanup() to stop them", caller_loc())

    def _release_items(self) -> None:
        """Drop what the FIFOs still hold (pushed buffers, values between stages) once the stages
        have ended, so a kept handle does not keep them alive."""
        for fifo in self.host_fifos:
            with fifo.mutex:
                fifo.queue.clear()
        for edge in self.edge_fifos.values():
            while not edge.empty():
                edge.get_nowait()
        for stage in self._stages:
            stage.forget()
        self.hazards.clear()
        self.first_env = self._last_push = None

    def _state(self) -> str:
        if self._forked:
            return f"the parent's ({FORKED})"
        if self._cleaned_up:
            return "stopped by hpvm.cleanup()"
        if self._error is not None:
            return "stopped by a failing stage"
        return "closed by wait()"

    def _raise_stopped(self, what: str) -> None:
        """The pipeline was stopped: by a failing stage (raise its error), or by cleanup()."""
        self._raise_stage_error()
        if self._forked:
            raise StreamError(f"{what}(): this stream is the parent's ({FORKED})", caller_loc())
        lost = self._pushed - self._popped
        raise StreamError(f"{what}(): hpvm.cleanup() stopped this stream"
                          + (f"; the results of {lost} pushed item(s) that were not popped are lost"
                             if lost else ""), caller_loc())

    def _raise_stage_error(self) -> None:
        if self._error is not None:
            error = self._error
            if isinstance(error, HPVMError):
                raise error
            raise ExecutionError(str(error), caller_loc())

    # -- FIFOs with a stop flag ---------------------------------------------------------------

    def get(self, fifo: Any, deadline: float | None, what: str, item: int,
            helper: Callable[[], bool] | None = None) -> Any:
        """The next value of a FIFO, for `item`. Raises Stopped once the pipeline is stopped or
        an item up to `item` failed, HPVMTimeoutError past the deadline. `helper`: called before
        each wait (a scheduler's help()); when it helped, the next look is GPU_SLICE away."""
        while True:
            self.check(item)
            wait = GPU_SLICE if helper is not None and helper() else POLL
            # never wait past the deadline: a timeout shorter than the poll interval is honoured
            # even while items keep arriving (each get returning within one poll)
            left = wait if deadline is None else min(wait, deadline - time.monotonic())
            try:
                if left <= 0:
                    return fifo.get_nowait()
                return fifo.get(timeout=left)
            except queue.Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise HPVMTimeoutError(f"{what}(): no result within the timeout",
                                           caller_loc()) from None

    # -- what the stages ask of the handle ------------------------------------------------------

    def bind_streams(self, index: int) -> list[bool]:
        """Per root parameter, whether its bind into stage `index` streams."""
        return self._bind_streams[index]

    def _streaming_binds(self, index: int) -> list[bool]:
        streams = [True] * len(self.plan.func.params)
        for src in self.plan.nodes[index].inputs:
            if src.bind_port is not None:
                streams[src.bind_port] = src.stream
        return streams

    def fail(self, node: Any, exc: BaseException, item: int) -> None:
        """A stage failed on `item`: keep its error for the pop() of that item, every later
        pop(), push() and wait(). The earlier items still run; the stages end at this one."""
        with self._error_lock:
            if self._failed_at is None or item < self._failed_at:
                if isinstance(exc, HPVMError):
                    self._error = type(exc)(f"stage {node.name}: {exc.message}", exc.loc, exc.rule)
                else:
                    self._error = ExecutionError(f"stage {node.name} failed: {type(exc).__name__}: "
                                                 f"{exc}", node.node.loc)
                self._failed_at = item
        self.arrived.set()  # the scheduler looks again at which stages still have items to run

    def cut_before(self, item: int) -> bool:
        """Whether `item` comes at or after a failed item (so it never runs or pops)."""
        failed_at = self._failed_at
        return failed_at is not None and item >= failed_at

    def check(self, item: int) -> None:
        """Raises Stopped once cleanup() stopped the stream or an item up to `item` failed."""
        if self.stop.is_set() or self.cut_before(item):
            raise Stopped()




# every stream whose stages may still run, abandoned ones included (a stage thread refers to its
# stream until it ends)
_running: "weakref.WeakSet[StreamHandle]" = weakref.WeakSet()


def _stop_at_exit() -> None:
    """At the interpreter's exit, stop the streams still running, as cleanup() does, and wait
    EXIT_WAIT seconds at most for their stages: a daemon stage thread still inside torch (a GPU
    stage's copies and views) when the interpreter finalizes is ended by pthread_exit through a
    noexcept destructor (pybind11's, taking the interpreter back), and the process aborted
    ("terminate called without an active exception")."""
    streams = list(_running)
    for stream in streams:
        stream.stop.set()
        stream.arrived.set()
    deadline = time.monotonic() + EXIT_WAIT
    for stream in streams:  # (alive: one whose start failed cannot be joined)
        join_threads([t for t in stream._threads if t.is_alive()], deadline)


atexit.register(_stop_at_exit)


def choose_scheduler(stages: list[Stage]) -> StreamScheduler:
    """The first of SCHEDULERS that can run the stages (StageThreads runs any)."""
    for kind in SCHEDULERS:
        scheduler = kind.fit(stages)
        if scheduler is not None:
            return scheduler
    raise AssertionError("StageThreads runs every stream")


def _is_whole_number(value: Any) -> bool:
    """An int or another integer type (NumPy's): not a float, a string or None."""
    try:
        operator.index(value)
    except TypeError:
        return False
    return True


class Stream:
    """What launch(..., stream=True) returns: the program's reference to a StreamHandle. The
    stage threads refer to the StreamHandle, never to this, so once the program drops this the
    stream is abandoned (StreamHandle.abandon) rather than kept running until cleanup()."""

    __slots__ = ("_stream", "__weakref__")

    def __init__(self, stream: StreamHandle):
        self._stream = stream
        weakref.finalize(self, stream.abandon)

    def __getattr__(self, name: str) -> Any:  # push, pop, close, compiled...: the stream's own
        return getattr(self._stream, name)

    def results(self) -> Iterator[tuple[Any, ...]]:
        """The stream's results (StreamHandle.results), keeping this handle alive meanwhile."""
        yield from self._stream.results()


def launch_stream(runtime: Any, compiled: Any, depth: int) -> Stream:
    """Start a stream; the runtime's open streams (cleanup() stops them) hold the StreamHandle."""
    stats.bump("stream_launches")
    stream = StreamHandle(runtime, compiled, depth)
    runtime.handles.add(stream)
    return Stream(stream)
