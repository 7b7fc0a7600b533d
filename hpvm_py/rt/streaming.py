"""Streaming launches: every child of the root is a pipeline stage on its own thread.

Stages are joined by bounded FIFOs (depth items each): one per edge between stages and one per
stage for the values the host pushes. Stage k works on item i while stage k+1 works on item i-1.
An item is everything one push sends (numbers and whole buffers, not 8-byte words), and each item
can carry its own buffers, so stages never share an in-flight buffer unless the host passes the same
one twice.

Semantics inside a streaming graph (docs/streaming.md):
- a streaming bind or edge carries a new value for every item;
- a non-streaming bind takes its value from the first push and keeps it (later pushes must still
  give every argument; the values of non-streaming parameters are ignored);
- a non-streaming edge delivers the value its source produced for the first item, and orders only
  that first item;
- output binds deliver one value per item; pop() returns them as a tuple, in push order.
Results wait in an unbounded queue until popped, so a host that pushes everything before popping
never deadlocks; push() blocks only while the first stages are full.

A failing stage records its error and stops the pipeline; the next pop() and wait() raise it with
the node's name. Every blocking step polls a stop flag, so nothing hangs after a failure.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Iterator

from ..errors import ExecutionError, HPVMError, HPVMTimeoutError, StreamError
from ..frontend.callsite import caller_loc
from ..ir import dfg as D
from . import stats
from .args import bind_arguments
from .executor import Executor, Slot, check_grids, device_of

_POLL = 0.05  # seconds between checks of the stop flag while blocked


class _EndOfStream:
    """Marks the end of the items on a FIFO."""


_EOS = _EndOfStream()


@dataclass
class _EdgeItem:
    slot: Slot
    extents: tuple[int, ...]


class _Stop(Exception):
    """Raised inside a stage when the pipeline is shutting down."""


class StreamHandle:
    def __init__(self, runtime: Any, compiled: Any, depth: int):
        if depth < 1:
            raise StreamError(f"depth must be at least 1, got {depth}", caller_loc())
        self.runtime = runtime
        self.compiled = compiled
        self.plan = compiled.plan
        self.depth = depth
        self.executor: Executor = runtime.executor
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._error_lock = threading.Lock()
        self._closed = False
        self._pushed = 0
        self._popped = 0
        self._partial: list[Any] = []  # the stages' records of the result being popped
        nodes = self.plan.nodes
        # a FIFO per stage for the host's values, and one per edge between stages
        self._host_fifos = [queue.Queue(maxsize=depth) for _ in nodes]
        self._edge_fifos: dict[tuple[int, int], queue.Queue] = {}
        for i, node in enumerate(nodes):
            for port, src in enumerate(node.inputs):
                if src.node is not None:
                    self._edge_fifos[(i, port)] = queue.Queue(maxsize=depth)
        self._consumers: dict[tuple[int, int], list[tuple[int, int]]] = {}
        for (dst, port), _ in self._edge_fifos.items():
            src = nodes[dst].inputs[port]
            self._consumers.setdefault((src.node, src.port), []).append((dst, port))
        # per stage, one record per finished item: its slots for the root's outputs (unbounded and
        # C-level: results wait here until popped)
        self._done: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in nodes]
        self._threads = [threading.Thread(target=self._stage, args=(i,), daemon=True,
                                          name=f"hpvm-stage-{node.name}")
                         for i, node in enumerate(nodes)]
        for t in self._threads:
            t.start()

    # -- host side --------------------------------------------------------------------------

    def push(self, args: tuple[Any, ...], timeout: float | None) -> None:
        if self._closed:
            raise StreamError("push() after wait(): the stream is closed", caller_loc())
        self._raise_stage_error()
        func = self.compiled.module.root_func
        env = bind_arguments(func, args, self.runtime.tracker, {device_of(self.compiled.target)})
        deadline = None if timeout is None else time.monotonic() + timeout
        for fifo in self._host_fifos:
            self._put(fifo, env, deadline, host=True)
        self._pushed += 1
        stats.bump("stream_pushes")

    def pop(self, timeout: float | None) -> tuple[Any, ...]:
        if self._popped >= self._pushed:
            self._raise_stage_error()
            state = "closed and every result was popped" if self._closed else \
                "waiting for a push: nothing pushed is left to pop"
            raise StreamError(f"pop(): the stream is {state}", caller_loc())
        deadline = None if timeout is None else time.monotonic() + timeout
        # collect every part of the next result; a timeout keeps what arrived for the next pop()
        records = self._partial
        while len(records) < len(self._done):
            records.append(self._get(self._done[len(records)], deadline, host=True))
        self._partial = []
        self._popped += 1
        values = []
        for node, port in self.plan.outputs:
            value = self.executor._as_parent(records[node][port])
            values.append(value.reshape(-1)[0] if hasattr(value, "reshape") else value)
        return tuple(values)

    def results(self) -> Iterator[tuple[Any, ...]]:
        """Pop every remaining result, until the stream is closed and drained."""
        while True:
            if self._popped >= self._pushed and (self._closed or self._error is not None):
                self._raise_stage_error()
                return
            if self._popped >= self._pushed:
                time.sleep(_POLL)  # another thread may still push
                continue
            yield self.pop(None)

    def close(self, timeout: float | None) -> None:
        """wait(): no more pushes; the stages finish the items in flight and stop."""
        if not self._closed:
            self._closed = True
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                for fifo in self._host_fifos:
                    self._put(fifo, _EOS, deadline, host=True)
            except _Stop:
                pass  # a stage failed: the error is raised below
            for t in self._threads:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                t.join(remaining)
                if t.is_alive():
                    self._stop.set()
                    raise HPVMTimeoutError(f"wait(): stage {t.name} did not finish within {timeout} s",
                                           caller_loc())
            self.runtime.handles.discard(self)
        self._raise_stage_error()

    def close_on_cleanup(self) -> None:
        self._closed = True
        self._stop.set()
        for t in self._threads:
            t.join(5.0)

    def _raise_stage_error(self) -> None:
        if self._error is not None:
            error = self._error
            if isinstance(error, HPVMError):
                raise error
            raise ExecutionError(str(error), caller_loc())

    # -- FIFOs with a stop flag ---------------------------------------------------------------

    def _put(self, fifo: queue.Queue, item: Any, deadline: float | None, host: bool = False) -> None:
        while True:
            if self._stop.is_set():
                if host:
                    self._raise_stage_error()
                raise _Stop()
            try:
                fifo.put(item, timeout=_POLL)
                return
            except queue.Full:
                if deadline is not None and time.monotonic() > deadline:
                    raise HPVMTimeoutError("push(): the pipeline stayed full past the timeout",
                                           caller_loc()) from None

    def _get(self, fifo: queue.Queue, deadline: float | None, host: bool = False) -> Any:
        while True:
            try:
                return fifo.get(timeout=_POLL)
            except queue.Empty:
                if self._stop.is_set():
                    if host:
                        self._raise_stage_error()
                    raise _Stop() from None
                if deadline is not None and time.monotonic() > deadline:
                    raise HPVMTimeoutError("pop(): no result within the timeout", caller_loc()) from None

    # -- stages -----------------------------------------------------------------------------

    def _stage(self, index: int) -> None:
        node = self.plan.nodes[index]
        first_env: list[Any] | None = None
        kept_edges: dict[int, Any] = {}  # non-streaming edges: the first value
        try:
            while True:
                env = self._get(self._host_fifos[index], None)
                if env is _EOS:
                    return
                if first_env is None:
                    first_env = env
                item_env = [env[i] if self._bind_streams(index, i) else first_env[i]
                            for i in range(len(env))]
                args: list[Any] = []
                src_extents: dict[int, tuple[int, ...]] = {}
                for port, src in enumerate(node.inputs):
                    if src.bind_port is not None:
                        args.append(item_env[src.bind_port])
                        continue
                    if src.const is not None:
                        args.append(src.const)
                        continue
                    if port in kept_edges:
                        args.append(kept_edges[port])
                        continue
                    message: _EdgeItem = self._get(self._edge_fifos[(index, port)], None)
                    value = self.executor.deliver(node, port, src, message.slot)
                    src_extents[port] = message.extents
                    if not src.stream:
                        kept_edges[port] = value
                    args.append(value)
                ext, outs = self.executor.fire(self.plan, node, item_env, args, [], 1)
                for port, src in enumerate(node.inputs):
                    if port in src_extents and src.edge_kind == D.ONE_TO_ONE:
                        edge = next(e for e in self.plan.func.edges
                                    if e.dst == node.name and e.dst_port == port)
                        check_grids(edge, src_extents[port], ext)
                for port, slot in enumerate(outs):
                    if slot is None:
                        continue
                    for key in self._consumers.get((index, port), []):
                        self._put(self._edge_fifos[key], _EdgeItem(slot, ext), None)
                self._done[index].put(outs)
        except _Stop:
            return
        except BaseException as exc:  # noqa: BLE001 - handed to pop()/wait()
            with self._error_lock:
                if self._error is None:
                    if isinstance(exc, HPVMError):
                        self._error = type(exc)(f"stage {node.name}: {exc.message}", exc.loc, exc.rule)
                    else:
                        self._error = ExecutionError(f"stage {node.name} failed: {type(exc).__name__}: "
                                                     f"{exc}", node.node.loc)
            self._stop.set()

    def _bind_streams(self, index: int, parent_port: int) -> bool:
        """Whether the bind of root parameter parent_port into this stage is streaming."""
        for port, src in enumerate(self.plan.nodes[index].inputs):
            if src.bind_port == parent_port:
                return src.stream
        return True


def launch_stream(runtime: Any, compiled: Any, depth: int) -> StreamHandle:
    stats.bump("stream_launches")
    return StreamHandle(runtime, compiled, depth)
