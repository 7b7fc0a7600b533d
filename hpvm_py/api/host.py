"""The host API: init/cleanup, memory tracking, launch/wait, push/pop, compile, stats.

Every public function goes through `api_boundary` (rt/boundary.py).
"""
from __future__ import annotations

import collections
import contextlib
import os
import threading
import weakref
from typing import Any, Iterator

from ..backends import registry
from ..distributed.gpu.runner import settle as settle_collectives
from ..errors import HPVMTimeoutError, LaunchError, StreamError
from ..frontend.callsite import caller_loc
from ..frontend.decorators import GraphDef
from ..frontend.graph import check_host_code
from ..ir.kernel import shown_name
from ..rt.compiler import TARGETS, CompiledGraph, compile_graph, default_target
from ..rt.args import bind_arguments, check_overlaps, complete_arguments, note_writes
from ..rt.boundary import api_boundary
from ..rt.executor import Executor
from ..rt.fresh_lane import launch_fresh
from ..rt.launch_devices import launch_devices
from ..rt.recorder import Recorder
from ..rt.replay import replay
from ..rt.stream.streaming import WAITED_TWICE, Stream, launch_stream
from ..rt.stream.waits import check_timeout, deadline_after
from ..rt.tracker import MemoryTracker
from ..support import profile as _profile
from ..support import settings as _settings
from ..support import stats as _stats


class Runtime:
    """State between the first init() and the last cleanup(): the target, the tracker, live
    handles, and how many init() calls are not yet matched by a cleanup()."""

    def __init__(self, target: str):
        self.target = target
        self.tracker = MemoryTracker()
        self.executor = Executor(self.tracker)
        self.handles: "weakref.WeakSet[Any]" = weakref.WeakSet()  # open streams (dropped: no cleanup)
        self.stopped = False  # cleaned up: the non-streaming handles of its launches refuse wait()
        self.users = 1


_runtime: Runtime | None = None
_runtime_lock = threading.Lock()
CLEANUP_TIMEOUT = 60.0  # seconds cleanup() waits for stream stages to finish a running kernel


def _active() -> Runtime:
    rt = _runtime
    if rt is None:
        raise LaunchError("the HPVM runtime is not initialised: call hpvm.init() (or use `with "
                          "hpvm.runtime():`) before tracking memory or launching graphs", caller_loc())
    return rt


@api_boundary
def init(target: str | None = None) -> None:
    """Start the runtime, or join the one already running.

    The runtime is one per process and reference-counted: an init() while it runs (a nested
    `with hpvm.runtime()`, another thread's) joins it when it names the same target or none, and
    is an error when it names another; each init() is matched by one cleanup(), and the last
    cleanup() stops it. A fresh start resets the stats() counters.

    Args:
        target: where launches run: "cpu" (LLVM), "gpu" (Triton), "nvptx" (LLVM NVPTX) or
            "python" (the reference). None: `$HPVM_TARGET`, else "gpu" when a CUDA GPU is
            usable, else "cpu".

    Raises:
        LaunchError: the target cannot run here (its package, driver or device is missing: the
            message says which), or the runtime is already running with another target.
    """
    check_host_code("init")
    global _runtime
    _check_target(target, "init")
    with _runtime_lock:
        rt = _runtime
        if rt is not None:
            if target is not None and target != rt.target:
                raise LaunchError(f"hpvm.init({target!r}): the runtime is already running with target "
                                  f"{rt.target!r} ({rt.users} init() not yet matched by cleanup()); "
                                  "it is shared by the whole process, so a nested or concurrent "
                                  "init() must name the same target or none", caller_loc())
            rt.users += 1
            return
        _settings.warn_misspelled()
        chosen = target or default_target()
        _require_runnable(chosen)
        _stats.reset()
        _runtime = Runtime(chosen)


def _check_target(target: Any, call: str) -> None:
    """A target the user named is one of the table's names (a list or a dict was looked up in it
    as a key: an internal TypeError; compile()'s "" fell back to the default target)."""
    if target is not None and (not isinstance(target, str) or target not in TARGETS):
        raise LaunchError(f"hpvm.{call}(): target {target!r} is not one of {', '.join(TARGETS)}",
                          caller_loc())


def _require_runnable(target: str) -> None:
    """A runtime needs its target's device here (compiling alone may not: see compile())."""
    if not registry.available(target):
        raise LaunchError(f"hpvm.init({target!r}): target {target!r} cannot run here: "
                          f"{registry.why_unavailable(target)}", caller_loc(), rule="target-available")


@api_boundary
def cleanup(timeout: float | None = CLEANUP_TIMEOUT) -> None:
    """Match one init(). The last one stops the runtime.

    Stopping it stops open streams (a stage finishes the kernel it is running), brings tracked
    memory back to the host and lets go of it. Harmless when the runtime is not running.

    Args:
        timeout: seconds to wait for stream stages still running a kernel; None waits for ever.

    Raises:
        HPVMTimeoutError: a stage was still running a kernel after `timeout` (the runtime is
            stopped all the same; that stage may still write its buffers).
    """
    check_host_code("cleanup")
    check_timeout(timeout)  # before the runtime's state changes: a refused call stops nothing
    global _runtime
    with _runtime_lock:
        rt = _runtime
        if rt is None:
            return
        rt.users -= 1
        if rt.users > 0:
            return
        _runtime = None
    _shutdown(rt, timeout)


def _shutdown(rt: Runtime, timeout: float | None) -> None:
    rt.stopped = True
    handles = list(rt.handles)
    for handle in handles:
        handle.stop_on_cleanup()
    deadline = deadline_after(timeout)
    try:
        busy = [name for handle in handles for name in handle.join_stopped(deadline)]
    finally:  # (interrupted, Ctrl-C: no later cleanup() can, the runtime is already gone)
        rt.tracker.release_all()
    if busy:
        raise HPVMTimeoutError(f"cleanup(): stream stage(s) {', '.join(busy)} were still running a "
                               f"kernel after {timeout} s and may still write their buffers; the "
                               "runtime is stopped", caller_loc())


def _after_fork_in_child() -> None:
    """os.fork() copies only the forking thread: the child's copies of open streams have no
    stage threads (they refuse every call rather than wait for ever), and another thread may have
    held the runtime's lock."""
    global _runtime_lock
    _runtime_lock = threading.Lock()
    rt = _runtime
    if rt is not None:
        for handle in list(rt.handles):
            handle.forked()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_after_fork_in_child)


@contextlib.contextmanager
def runtime(target: str | None = None) -> Iterator[None]:
    """`with hpvm.runtime("cpu"):` runs init(target) on entry and cleanup() on exit.

    Nested blocks, a library's own block and other threads' blocks join the running runtime
    (see `init`); only the last block to end stops it.

    Args:
        target: as for `init`.

    Raises:
        LaunchError: as `init` raises it.
    """
    init(target)
    try:
        yield
    finally:
        cleanup()


@api_boundary
def track_memory(buf: Any) -> Any:
    """Track a buffer, so that the runtime keeps its copies on devices valid between launches.

    Buffers passed to `launch` and `push` are tracked implicitly; call this to start earlier.
    While tracked, the runtime owns the buffer's copies: the host reads it after
    `request_memory`, and to write it on the host, untracks it first and tracks it again after.

    Args:
        buf: a NumPy array or a torch tensor (CPU or CUDA); a strided view is tracked too (its
            writes and its aliases' are kept in step: docs/runtime.md, "Buffers").

    Returns:
        `buf` itself.

    Raises:
        LaunchError: no runtime is running.
        MemoryTrackingError: the buffer cannot be tracked (not a buffer, a sparse tensor, a meta
            tensor or one on a device hpvm-py does not run on).
    """
    check_host_code("track_memory")
    _active().tracker.track(buf)
    return buf


@api_boundary
def untrack_memory(buf: Any) -> None:
    """Stop tracking a buffer: its newest data is brought back to it, its device copies let go.

    Untrack a buffer before resizing or freeing it. Launching it again tracks it again.

    Args:
        buf: a buffer tracked by `track_memory` or a launch.

    Raises:
        LaunchError: no runtime is running.
        MemoryTrackingError: the buffer is not tracked.
    """
    check_host_code("untrack_memory")
    _active().tracker.untrack(buf)


@api_boundary
def request_memory(buf: Any) -> Any:
    """Make a buffer hold its newest data, copying it back from a device if a kernel wrote it there.

    Needed on the GPU targets before the host reads an output that a launch has written, unless
    the runtime is stopped first (`cleanup` brings every tracked buffer home). Device copies stay
    valid, so a later launch does not copy the buffer in again: a host write after this is not
    seen by them (`untrack_memory`, write, then `track_memory` again).

    Args:
        buf: a tracked buffer (a NumPy array or torch tensor).

    Returns:
        `buf` itself, up to date.

    Raises:
        LaunchError: no runtime is running.
        MemoryTrackingError: the buffer is not tracked, or was resized or freed while tracked.
    """
    check_host_code("request_memory")
    return _active().tracker.request(buf)


@api_boundary
def compile(root: Any, target: str | None = None) -> CompiledGraph:  # noqa: A001 - the contract's name
    """Compile a graph ahead of its first launch (the launch then finds it in the cache).

    Compiled code is cached in memory and on disk (`HPVM_CACHE_DIR`), keyed by the IR and target.

    Args:
        root: an `@hpvm.graph` function, or a graph from `from_text`/`load`.
        target: "cpu", "gpu", "nvptx" or "python"; None: the running runtime's target, else the
            default one (as for `init`). Compiling needs the target's toolchain, not its device
            (`nvptx` compiles without a GPU).

    Returns:
        The compiled graph; `launch` accepts it in place of `root`.

    Raises:
        FrontendError: a construct hpvm-py does not support, or a type error, at its line.
        VerificationError: a rule of the language broken (the message names the rule).
        CompileError: the target cannot compile a leaf, or its toolchain is missing.
    """
    _check_target(target, "compile")
    if target is None and _runtime is not None:
        target = _runtime.target
    return compile_graph(root, target)


class Handle:
    """A non-streaming launch: its outputs, returned once by wait()."""

    def __init__(self, compiled: CompiledGraph, outputs: list[Any], runtime: Runtime):
        self.compiled = compiled
        self._outputs = outputs
        self._unwaited = True  # taken by the first wait() (dict.pop: one thread gets it)
        self._runtime = runtime

    def result(self) -> Any:
        if self._runtime.stopped:
            raise LaunchError("wait(): the runtime was cleaned up after this launch; wait for a "
                              "launch before hpvm.cleanup()", caller_loc())
        if self.__dict__.pop("_unwaited", None) is None:  # (two threads' waits: one gets None)
            raise LaunchError(WAITED_TWICE, caller_loc())
        settle_collectives()  # GPU ranks: the collectives' own checks report here
        return _shape_outputs(self.compiled, self._outputs)


def _shape_outputs(compiled: CompiledGraph, outputs: list[Any]) -> Any:
    """What the root's return annotation promises: nothing, one value, a tuple or a NamedTuple."""
    shape = compiled.output_shape
    if shape is None:
        shape = compiled.output_shape = _output_shape(compiled)
    if shape == "none":
        return None
    if shape == "one":
        return outputs[0]
    if shape == "tuple":
        return tuple(outputs)
    return shape(*outputs)


def _output_shape(compiled: CompiledGraph) -> Any:
    if not compiled.module.root_func.outputs:
        return "none"
    root = compiled.root
    annotation = getattr(root.pyfunc, "__annotations__", {}).get("return") if isinstance(root, GraphDef) else None
    if isinstance(annotation, str):  # `from __future__ import annotations`
        try:
            annotation = eval(annotation, root.pyfunc.__globals__)  # noqa: S307 - the user's annotation
        except Exception:  # noqa: BLE001 - then the outputs come back as a plain tuple
            annotation = None
    if isinstance(annotation, type) and hasattr(annotation, "_fields"):
        return annotation
    named = _named_outputs(compiled)
    if named is not None:
        return named
    func = compiled.module.root_func
    if len(func.outputs) == 1 and not _is_tuple_annotation(annotation) and not func.tuple_of_one:
        return "one"  # (tuple_of_one: a graph from from_text/load, whose `tuple[T]` is in its IR)
    return "tuple"


def _named_outputs(compiled: CompiledGraph) -> type | None:
    """A NamedTuple of the root's output names, when the IR names every output (a graph from
    from_text or load keeps the names of its NamedTuple, not the class)."""
    func = compiled.module.root_func
    names = [o.name for o in func.outputs]
    if not all(names):
        return None
    typename = func.name if func.name.isidentifier() else "Outputs"
    try:
        return collections.namedtuple(typename, names)  # type: ignore[misc]
    except ValueError:  # a name Python cannot use as a field: a plain tuple
        return None


def _is_tuple_annotation(annotation: Any) -> bool:
    import typing

    return typing.get_origin(annotation) is tuple or (isinstance(annotation, str) and
                                                      annotation.replace(" ", "").startswith("tuple["))


@api_boundary
def launch(root: Any, *args: Any, stream: bool = False, depth: int = 4, **kwargs: Any) -> Any:
    """Run a graph on the runtime's target (and where its nodes are placed).

    Args:
        root: an `@hpvm.graph` function, a graph from `hpvm.from_text` or `hpvm.load`.
        *args: the root's arguments by position: NumPy arrays or torch tensors for pointers,
            numbers for scalars. A pointer's size argument may be left out (it is then the
            buffer's `nbytes`): positionally, by leaving out every size. Buffers not tracked yet
            are tracked for this launch.
        **kwargs: the root's arguments by parameter name (a size left out is the buffer's
            `nbytes`).
        stream: start a stream instead: no arguments here; `push` feeds it, `pop` reads it.
        depth: a stream's items in flight at most (push blocks beyond it).

    Returns:
        A handle: `wait(handle)` gives the root's outputs; for a stream, `push`/`pop`/`wait`.

    Raises:
        LaunchError: no runtime, arguments that do not fit the root's parameters (count, names,
            types, sizes, buffers that cannot take writes or live on another device).
        CompileError: a leaf that cannot compile for its target.
        ExecutionError: a leaf's error (an index out of bounds, a bad malloc size), at its line.
        StreamError: arguments given to a streaming launch.

    On `cpu` and `python` a non-streaming launch runs the graph before it returns; on `gpu` and
    `nvptx` its kernels are queued and `wait` collects the outputs.
    """
    check_host_code("launch")
    rt = _active()
    compiled = compile_graph(root, rt.target)
    if stream:
        if args or kwargs:
            raise StreamError("a streaming launch takes no arguments: push() them", caller_loc())
        return launch_stream(rt, compiled, depth)  # (the runtime's open streams hold it)
    args = complete_arguments(compiled.module.root_func, args, kwargs)
    if _profile.on:
        handle = _profiled_run(rt, compiled, args)
    else:
        handle = Handle(compiled, outputs=_run(rt, compiled, args), runtime=rt)
    note_writes(compiled.module.root_func, args)  # (autograd's count of in-place writes)
    return handle


def _profiled_run(rt: Runtime, compiled: CompiledGraph, args: tuple[Any, ...]) -> Handle:
    """A launch inside `hpvm.profile()`: one "launch" event around it (support/profile.py)."""
    with _profile.launch_span(shown_name(compiled.module.root_func), {"target": rt.target}):
        return Handle(compiled, outputs=_run(rt, compiled, args), runtime=rt)


def _run(rt: Runtime, compiled: CompiledGraph, args: tuple[Any, ...]) -> list[Any]:
    """Run a non-streaming launch: replayed when it repeats a recorded one (rt/replay.py)."""
    func = compiled.module.root_func
    recording = compiled.replays.find(args, rt.tracker)
    if recording is not None:
        outputs = replay(func, recording, args, rt.tracker)  # (which counts it)
        if outputs is not None:
            return outputs
    devices = launch_devices(compiled.plan)
    rebinds = compiled.replayable and _settings.REBIND.on()
    if rebinds:  # buffers never seen: the graph's lane of copied launches (rt/fresh_lane.py)
        outputs = launch_fresh(compiled.replays, func, args, devices, rt.tracker, rt.executor)
        if outputs is not None:
            return outputs
    env = bind_arguments(func, args, rt.tracker, devices)
    check_overlaps(func, env, devices)
    if rebinds:
        # other buffers of a recorded launch's sizes: copies of its launches (rt/recording.py)
        recording = compiled.replays.rebind(args, env, rt.executor)
        if recording is not None:
            outputs = replay(func, recording, args, rt.tracker, acquired=True)
            if outputs is not None:
                return outputs
    recorder = Recorder(func, args, env, compiled.plan, rt.tracker) if compiled.replayable else None
    outputs = rt.executor.run(compiled.plan, env, recorder)
    _stats.bump("launches")
    if recorder is not None:
        new = recorder.finish()
        if new is not None:
            compiled.replays.add(new)
    return outputs


@api_boundary
def wait(handle: Any, timeout: float | None = None) -> Any:
    """Block until a launch is complete, once per handle.

    On `gpu` and `nvptx`, complete means its outputs and errors are known: the root's outputs are
    fetched and the checked kernels' error words read, and the buffers that were not tracked are
    back on the host; the kernels that write tracked buffers may still be running on the device,
    as after a torch call (later launches, `request_memory` and torch work on the stream are
    ordered after them). To time device work, synchronize the device (`torch.cuda.synchronize()`).

    For a stream, closes it: no more pushes, the items in flight drain, the stages end. A stream
    whose wait() timed out keeps draining; wait() may be called on it again.

    Args:
        handle: what `launch` returned.
        timeout: seconds to wait at most (streams); None waits for ever.

    Returns:
        The root's outputs, as its return annotation says: None, one value, a tuple or its
        `NamedTuple` (a graph from `from_text`/`load`: a `NamedTuple` of the same field names).
        None for a stream (its outputs come from `pop`).

    Raises:
        LaunchError: not a handle, a handle waited for twice, or the runtime cleaned up since.
        ExecutionError: a leaf failed while the launch ran (GPU targets report it here).
        DistributedError: on GPU ranks, the ranks disagreed on a communication node of the launch
            (every rank raises it here; wait returns only once the device has finished the
            launch's collectives).
        StreamError: a stage of the stream failed.
        HPVMTimeoutError: the stream did not drain within `timeout`; on GPU ranks, a rank did not
            arrive at a collective of the launch within the world's timeout.
    """
    check_host_code("wait")
    if isinstance(handle, Handle):
        return handle.result()
    if not isinstance(handle, Stream):  # (not any object with a close(): a file, a generator)
        raise LaunchError(f"wait() takes a handle from hpvm.launch, not {type(handle).__name__}",
                          caller_loc())
    return handle.close(timeout)


@api_boundary
def push(handle: Any, *args: Any, timeout: float | None = None, **kwargs: Any) -> None:
    """Send the arguments of one execution (an item) to a streaming launch.

    Blocks while the stream holds `depth` items in flight. Arguments are given as for `launch`: by
    position or by name, pointer sizes optional. A buffer pushed must not be written by the host
    until the item's outputs are popped.

    Args:
        handle: what `launch(graph, stream=True)` returned.
        *args: the root's arguments by position.
        timeout: seconds to wait for room at most; None waits for ever.
        **kwargs: the root's arguments by parameter name.

    Raises:
        StreamError: not a streaming handle, a closed stream, or a stage that failed.
        LaunchError: arguments that do not fit the root's parameters.
        HPVMTimeoutError: no room within `timeout`.
    """
    check_host_code("push")
    stream = _stream_handle(handle, "push")
    func = stream.compiled.module.root_func
    args = complete_arguments(func, args, kwargs)
    stream.push(args, timeout)
    note_writes(func, args)  # (autograd's count of in-place writes)


@api_boundary
def pop(handle: Any, timeout: float | None = None) -> tuple[Any, ...]:
    """The outputs of the next item of a streaming launch, in push order (blocks until ready).

    Threads may pop one stream at once: one pop at a time takes the next item (a pop waiting for
    another thread's counts that wait in its timeout); each item is popped once.

    Args:
        handle: what `launch(graph, stream=True)` returned.
        timeout: seconds to wait at most; None waits for ever.

    Returns:
        A tuple of the root's outputs for that item (empty when the root has none).

    Raises:
        StreamError: not a streaming handle, no item left to pop, or the item failed (the error
            names the stage; later items are not lost).
        HPVMTimeoutError: no item within `timeout` (or another thread's pop held the stream).
    """
    check_host_code("pop")
    return _stream_handle(handle, "pop").pop(timeout)


def _stream_handle(handle: Any, what: str) -> Any:
    if isinstance(handle, Handle):
        raise StreamError(f"{what}() needs a streaming launch (hpvm.launch(graph, stream=True)); this "
                          "handle is non-streaming", caller_loc())
    if not isinstance(handle, Stream):  # (not any object with a pop(): a list, a dict)
        raise StreamError(f"{what}() takes a handle from hpvm.launch(..., stream=True), not "
                          f"{type(handle).__name__}", caller_loc())
    return handle


def stats(reset: bool = False) -> dict[str, Any]:
    """Counters since the runtime started (or the last reset).

    Args:
        reset: set every counter back to zero after reading them.

    Returns:
        A dict of counts: `launches` (and `replayed_launches`, the repeats of a recorded launch,
        of which `cuda_graph_replays` ran as one CUDA graph and `rebound_launches` ran on other
        buffers of the recorded sizes), `nodes_run` and `kernel_launches`
        (per launch or streamed item, each node of the hierarchy once, whatever its instance
        count; kernels are the leaves among them), copies and bytes per direction
        (`h2d_copies`, `h2d_bytes`, `d2h_*`, `d2d_*`), `graph_compiles`, `graph_cache_hits`,
        `cache_disk_hits`, `cache_disk_misses`, `cpu_compiles` and `gpu_compiles`; the choice of
        GPU lowering (docs/runtime.md): `lowering_timed`, `lowering_disk_hits`,
        `lowering_kept_triton`, `lowering_kept_nvptx` and `lowering_fallbacks`; `lane_splits`:
        nvptx launches prepared to split a leaf's loop over the threads of each instance
        (docs/backends.md, "Lanes"; a replay reuses its prepared launch); the counters the
        guides describe: `stream_whole_items`, `stream_slot_repoints`, `stream_item_graphs`,
        `stream_items_host_started` (docs/streaming.md), `quad_launches`, `row_guard_launches`
        (docs/backends.md), `collective_agreements` (docs/distributed.md); and `times`:
        seconds per category (launch, node, kernel, copy, stage, collective, compile, cache,
        gpu_kernel, gpu_copy) recorded while `hpvm.profile()` was open (docs/profiling.md).
    """
    keys = ("launches", "kernel_launches", "nodes_run", "h2d_copies", "h2d_bytes", "d2h_copies",
            "d2h_bytes", "d2d_copies", "d2d_bytes", "graph_compiles", "graph_cache_hits",
            "cache_disk_hits", "cache_disk_misses", "cpu_compiles", "gpu_compiles",
            "replayed_launches", "rebound_launches", "cuda_graph_replays", "lowering_timed", "lowering_disk_hits",
            "lowering_kept_triton", "lowering_kept_nvptx", "lowering_fallbacks", "lane_splits",
            # the counters the guides name (`stats()["stream_whole_items"]`): 0, not missing, until
            # the first one happens
            "stream_whole_items", "stream_slot_repoints", "stream_item_graphs",
            "stream_items_host_started", "quad_launches", "row_guard_launches",
            "collective_agreements")
    if _profile.on:
        _profile.settle()  # the GPU times recorded so far
    if reset:  # read and zeroed at once: other threads' counts between the two are not lost
        snap, times = _stats.take()
    else:
        snap, times = _stats.snapshot(), _stats.times()
    result = {k: 0 for k in keys}
    result.update(snap)
    result["times"] = {c: times.get(c, 0.0) for c in _profile.CATEGORIES}
    return result
