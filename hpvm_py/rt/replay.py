"""Replaying a launch: the fast path for a graph launched again with the same buffers and integers
(the recorded prepared launches re-run with patched scalars; on the GPU targets, edges stay on the
device and a repeat with the same scalars runs as one CUDA graph), or with other buffers of the
same sizes (copies of them, rebound). rt/recorder.py records a launch while the executor runs
it; rt/recording.py holds what it keeps. docs/architecture.md ("Replay") says what is recorded and when
a replay falls back to the normal path."""
from __future__ import annotations

import contextlib
import math
import threading
from typing import Any

import numpy as np

from ..device.graphs import capture
from ..device.outputs import DeviceLaunch
from ..ir import dfg as D
from ..ir.kernel import shown_name
from ..support import profile, stats
from .args import IMMUTABLE_NUMBERS, same_scalar, scalar_argument
from .recording import Recording, Step
from .tracker import MemoryTracker

# recordings kept per compiled graph: a host loop that turns over a ring of buffer sets (double
# buffering, a pool of frames) replays each set as long as the ring has at most this many
_KEPT = 64


class Replays:
    """The recordings of one compiled graph (up to _KEPT, most recent first), indexed by the
    identities of their buffer arguments."""

    def __init__(self) -> None:
        self._recordings: list[Recording] = []
        self._by_buffers: dict[tuple[int, ...], list[Recording]] = {}
        self._lock = threading.Lock()
        self.lane: Any = None  # rt/fresh_lane.py's FreshLane: launches on buffers never seen

    def newest(self) -> Recording | None:
        """The most recently used recording (read without the lock)."""
        return next(iter(self._recordings), None)  # (never an IndexError mid-_first)

    def find(self, args: tuple[Any, ...], tracker: MemoryTracker) -> Recording | None:
        """The kept recording of a launch with these arguments on `tracker`'s runtime, or None."""
        try:  # a loop over one launch: its recording is first (read without the lock)
            first = self._recordings[0]
        except IndexError:  # (none, or emptied for a moment by another thread's _first)
            return None
        if first.matches(args, tracker):
            return first if first.still_writable(args) else None
        # (every recording of one graph has its buffers at the same argument positions)
        ids = tuple([id(args[k]) for k in first.buffer_positions])
        if ids not in self._by_buffers:  # (read without the lock: buffers never recorded, as a
            return None  # launch on a fresh tensor has, miss here)
        with self._lock:
            for recording in self._by_buffers.get(ids, ()):
                if recording.matches(args, tracker):
                    self._first(recording)
                    # a buffer made read-only since (or set to require grad): the normal path says so
                    return recording if recording.still_writable(args) else None
        return None

    def rebind(self, args: tuple[Any, ...], env: list[Any], executor: Any) -> Recording | None:
        """A recording for these (bound) arguments, made from a kept one that differs only in its
        buffers, and kept first; None when none fits. A recording that can serve no launch again
        is pointed at them itself (Recording.retarget): the most recent one when the user let go
        of one of its buffers (a fresh output each step), else, with every place taken, the least
        recently used, which keeping another would let go. Otherwise a copy is made
        (Recording.rebound)."""
        with self._lock:  # (no thread evicts or finds them meanwhile)
            kept = self._recordings
            spare = [kept[0]] if kept and kept[0].abandoned() else []
            if len(kept) >= _KEPT and kept[-1] not in spare:
                spare.append(kept[-1])
            for old in spare:
                ids = old.buffer_ids
                if old.retarget(args, env, executor):
                    self._unindex(old, ids)
                    self._index(old)  # under its new buffers
                    self._first(old)
                    return old
        for recording in list(self._recordings):
            new = recording.rebound(args, env, executor)
            if new is not None:
                self.add(new)
                return new
        return None

    def _first(self, recording: Recording) -> None:
        """Most recently used first (the lock held): a loop over one launch finds it at once."""
        self._recordings.remove(recording)
        self._recordings.insert(0, recording)

    def _index(self, recording: Recording) -> None:
        self._by_buffers.setdefault(recording.buffer_ids, []).insert(0, recording)

    def _unindex(self, recording: Recording, ids: tuple[int, ...]) -> None:
        same = self._by_buffers[ids]
        same.remove(recording)
        if not same:
            del self._by_buffers[ids]

    def add(self, recording: Recording) -> None:
        """Keep a new recording first; the least recently used beyond _KEPT is let go (a dropped
        one, which matches nothing and holds no launches, waits for its turn)."""
        with self._lock:
            kept = self._recordings
            kept.insert(0, recording)
            self._index(recording)
            while len(kept) > _KEPT:
                old = kept.pop()
                self._unindex(old, old.buffer_ids)


def replay(func: D.GraphFunc, recording: Recording, args: tuple[Any, ...],
           tracker: MemoryTracker, acquired: bool = False) -> list[Any] | None:
    """Run a recorded launch again with new scalar arguments; None when it is in use elsewhere or
    its buffers have moved (the normal path runs it). `acquired`: the recording was just pointed
    at these buffers (Replays.rebind), which acquired them from the tracker."""
    check_unkeyed(func, recording, args)
    if not hold(recording):
        return None
    try:
        # released (another thread's untrack_memory) since Replays.find matched it: its steps
        # are gone or going, and running none would return no outputs (the normal path tracks
        # the buffers again). A release from now on leaves the steps to this replay (drop()).
        # (and another thread's rebind may have pointed it at its own buffers since it was found
        # or pointed at these: Recording.retarget takes a recording no thread holds)
        if recording.dropped or \
                recording.buffer_ids != tuple([id(args[i]) for i in recording.buffer_positions]) or \
                not acquired and not tracker.acquire_recorded(recording.acquires):
            return None
        return run_held(func, recording, args, acquired)
    finally:
        unhold(recording)


def check_unkeyed(func: D.GraphFunc, recording: Recording, args: tuple[Any, ...]) -> None:
    """Refuse a bad scalar the recording's key does not fix, before any kernel runs, as the
    normal path refuses it."""
    params = func.params
    for i in recording.unkeyed:
        if type(args[i]) is not float:  # (a loop's floats: nothing to check)
            scalar_argument(func, params[i].name, params[i].type, args[i])


def hold(recording: Recording) -> bool:
    """Take the recording's lock and its edges' without waiting: False (neither held) when another
    thread replays it, or a copy of it on the same edge arrays (the normal path runs then)."""
    if not recording.lock.acquire(blocking=False):
        return False
    edges = recording.edges
    if edges is not None and not edges.acquire(blocking=False):
        recording.lock.release()
        return False
    return True


def unhold(recording: Recording) -> None:
    """Release what hold() took; a recording released meanwhile lets go of its launches now
    (drop() left them to the holder)."""
    if recording.dropped:
        recording.let_go()
    if recording.edges is not None:
        recording.edges.release()
    recording.lock.release()


def run_held(func: D.GraphFunc, recording: Recording, args: tuple[Any, ...], acquired: bool
             ) -> list[Any]:
    """Launch a held recording's kernels (as its CUDA graph when it has one for these scalars) and
    count the launch; the root's outputs."""
    graphed = False
    if recording.graph_device is not None:
        graphed = _run_graphed(func, recording, args)
    else:
        _launch_all(func, recording, args)
    for outputs in recording.fetch_at_end:
        outputs.fetch()
    stats.bump_all((recording.rebound_counts if acquired else recording.counts)[graphed])
    return [o[0] for o in recording.outputs]


def _launch_all(func: D.GraphFunc, recording: Recording, args: tuple[Any, ...],
                origin: Any = None, capturing: bool = False) -> None:
    """Every step's kernel, on stream `origin` (a handle; None: the recorded one) or spread over
    the recording's streams; `capturing`: into a CUDA graph (queued only, nothing checked)."""
    streams, plan = recording.streams, recording.stream_plan
    launch_step = _launch_step
    if profile.on:
        profile.replayed()  # (the launch's event says so)
        launch_step = _profiled_step
    if streams is None or plan is None:
        for step in recording.steps:
            for outputs in step.fetch_before:
                outputs.fetch()
            launch_step(func, step, args, origin, capturing)
        return
    origin = recording.origin if origin is None else origin
    events = recording.events
    streams.fork(origin)
    for i, step in enumerate(recording.steps):
        k = plan.stream_of[i]
        for producer in plan.waits[i]:
            streams.wait(k, events[producer], origin)
        streams.launched(step.prepared.kernel.leaf.name, k)
        launch_step(func, step, args, streams.handle(k, origin), capturing)
        if i in events:
            streams.record(k, events[i], origin)
    streams.join(origin)


def _launch_step(func: D.GraphFunc, step: Step, args: tuple[Any, ...], stream: Any = None,
                 capturing: bool = False) -> Any:
    """Launch the step's kernel; returns the prepared launch that ran."""
    prepared = step.prepared
    if step.from_args and not step.from_outputs and step.redecide is None:
        # a loop's scalars are often those of its last run: only the others are converted and
        # written (the recording's lock is held, so `last_args` is this replay's)
        last = step.last_args
        changed = last is None
        for k, (i, port, t) in enumerate(step.from_args):
            value = args[port]
            if last is None or not same_scalar(value, last[k]):
                prepared.set_uniform(i, scalar_argument(func, func.params[port].name, t, value))
                changed = True
        if changed:  # (values that are the same have the same type and bits: the old ones serve)
            step.last_args = tuple(args[port] for _, port, _ in step.from_args)
    elif step.from_args or step.from_outputs or step.redecide is not None:
        params = func.params
        uniforms = {i: scalar_argument(func, params[port].name, t, args[port])
                    for i, port, t in step.from_args}
        for i, array in step.from_outputs:
            uniforms[i] = array[0]
        prepared = step.launch_for(uniforms)
        for i, value in uniforms.items():
            prepared.set_uniform(i, value)
    if not isinstance(prepared, DeviceLaunch):
        prepared.run()  # (a communication node's call: it knows a capture by itself)
    elif capturing:
        prepared.capture_into(stream)
    else:
        prepared.start(stream)  # GPU outputs: fetched where the host reads them
    return prepared


def _profiled_step(func: D.GraphFunc, step: Step, args: tuple[Any, ...], stream: Any = None,
                   capturing: bool = False) -> Any:
    """A replayed step inside `hpvm.profile()`: the "node" events of the nodes it runs and a
    "kernel" event, with the args of the launch it repeats, as the normal path writes them (and
    its GPU time)."""
    with contextlib.ExitStack() as nodes:
        for name, info in step.node_events:
            nodes.enter_context(profile.span("node", name, args=dict(info, replayed=True)))
        return _profiled_kernel(func, step, args, stream, capturing)


def _profiled_kernel(func: D.GraphFunc, step: Step, args: tuple[Any, ...], stream: Any,
                     capturing: bool) -> Any:
    leaf = getattr(getattr(step.prepared, "kernel", None), "leaf", None)
    name = "kernel" if leaf is None else shown_name(leaf)
    gpu = isinstance(step.prepared, DeviceLaunch)
    event = dict(step.event or {}, replayed=True)
    t0 = profile.now()
    timer = profile.gpu_begin(str(getattr(step.prepared, "device", "cuda")), stream) if gpu else None
    ran = _launch_step(func, step, args, stream, capturing)
    again = step.redecide
    if again is not None:  # (the proof chose the kernel again, for this replay's values)
        event["checked"] = ran is not again.prepared.get(again.node.kernel)
    if gpu:
        profile.gpu_end(timer, "gpu_kernel", name, str(getattr(step.prepared, "device", "cuda")),
                        {"node": event.get("node"), "replayed": True})
    profile.complete("kernel", name, t0, args=event)
    return ran


def _zero_signs(key: tuple[Any, ...]) -> tuple[float, ...]:
    """The signs of a key's float zeros: what equality of numbers does not compare."""
    return tuple(math.copysign(1.0, v) for v in key if isinstance(v, (float, np.floating)) and v == 0)


def _run_graphed(func: D.GraphFunc, recording: Recording, args: tuple[Any, ...]) -> bool:
    """Launch the recording's kernels as its CUDA graph when the scalars are those captured (True);
    else launch them one by one, and capture a graph when the scalars repeat the last replay's.
    Inside `hpvm.profile()` they run one by one, each with its own GPU time (events around a graph
    launch measured far less than its kernels took on an H100)."""
    if profile.on:
        _launch_all(func, recording, args)
        return False
    key = tuple(map(args.__getitem__, recording.scalar_ports))
    if recording.collectives and not all(c.capturable for c in recording.collectives):
        recording.graph = None  # another world (or timeout) since the capture: launched anew
    if recording.graph is not None and key == recording.graph_key and \
            (not recording.graph_zeros or _zero_signs(key) == recording.graph_zeros):
        graph = recording.graph
        for launch in recording.checked:
            launch.before_graph(graph.stream)
        graph.replay()
        for collective in recording.collectives:
            collective.replayed()
        for i, launch in enumerate(recording.checked):  # (the first waits for the graph)
            launch.check(ran=i > 0)
        return True
    _launch_all(func, recording, args)
    if key != recording.last_key or not all(isinstance(v, IMMUTABLE_NUMBERS) for v in key):
        recording.last_key = key  # (a 0-d array or tensor equals itself, whatever it holds now)
        return False
    graph = capture(lambda stream: _launch_all(func, recording, args, stream, capturing=True),
                    recording.graph_device)
    if graph is None:
        recording.graph_device = None  # no graphs here: prepared launches from now on
    recording.graph, recording.graph_key, recording.graph_zeros = graph, key, _zero_signs(key)
    return False
