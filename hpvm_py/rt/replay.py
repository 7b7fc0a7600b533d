"""Replaying a launch: the fast path for a graph launched again with the same buffers and integers
(the recorded prepared launches re-run with patched scalars; on the GPU targets, edges stay on the
device and a repeat with the same scalars runs as one CUDA graph), or with other buffers of the
same sizes (copies of them, rebound). Recorder records a launch while the executor runs it;
rt/recording.py holds what it keeps. docs/architecture.md ("Replay") says what is recorded and when
a replay falls back to the normal path."""
from __future__ import annotations

import contextlib
import math
import threading
import weakref
from typing import Any

import numpy as np

from ..backends.base import BufferArg
from ..device.graphs import capture
from ..device.outputs import DeviceLaunch
from ..device.streams import DeviceStreams
from ..ir import dfg as D
from ..support import profile, stats
from ..types import PtrType, ScalarType
from .args import IMMUTABLE_NUMBERS, same_scalar, scalar_argument
from .buffers import HOST
from .executor import BoundBuffer
from .recording import Acquire, Recording, Redecide, Step
from .replay_streams import assign_streams
from .tracker import MemoryTracker

# recordings kept per compiled graph: a host loop that turns over a ring of buffer sets (double
# buffering, a pool of frames) replays each set as long as the ring has at most this many
_KEPT = 64


class Recorder:
    """Collects the steps of one launch while the executor runs it normally."""

    def __init__(self, func: D.GraphFunc, args: tuple[Any, ...], env: list[Any], root: Any):
        self.func = func
        self.root = root  # the root's GraphPlan: edges whose values are known on the host
        self.args = args
        self.env = env  # the bound arguments: a buffer's tracked object
        self.steps: list[Step] = []
        self.outputs: list[Any] = []  # per root output: its producer's array (element 0 is it)
        self.usable = True
        self.acquires: list[Acquire] = []
        self.devices: set[str] = set()  # where the steps ran: a replay needs one device
        self.nodes: list[Any] = []  # the NodePlan of each step
        self._on_device: dict[int, tuple[np.ndarray, Any, Any]] = {}  # id(host output) -> (it,
        # its device array, the GPU outputs holding it)
        self._lifted: list[Any] | None = None  # inside a root internal node: its leaf's inputs'
        # sources at the root
        self._produced: set[int] = set()  # the output arrays of the recorded leaves
        self.internal_nodes = 0
        self._depth = 0  # internal nodes entered and not left
        self._root_node: Any = None  # the root's internal node being entered

    def enter(self, node: Any, at_root: bool) -> None:
        """An internal node starts. At the root: its leaf is recorded if the node is a chain down
        to one leaf (lifted_sources), its inputs' sources lifted to the root's; otherwise the
        launch is not. Below the root it is a level of that chain (or the launch is unusable)."""
        if at_root:
            self._lifted = lifted_sources(node, self.root)
            self._root_node = node
            if self._lifted is None:
                self.usable = False
        self._depth += 1
        self.internal_nodes += 1

    def leave(self) -> None:
        self._depth -= 1
        if not self._depth:
            self._lifted = None

    def _node_events(self, leaf: Any, extents: list[tuple[int, ...]]) -> list[tuple[str, dict[str, Any]]]:
        """The "node" events a profiled replay of this leaf writes, outermost first, as the
        normal path's (rt/executor.py, fire_profiled): the root's node, the internal nodes of its
        chain, the leaf; `extents` are the leaf's and its ancestors', innermost first."""
        top = leaf if self._lifted is None else self._root_node
        levels = (top.chain_to_leaf() or []) + [leaf]
        graph, parents, events = self.root.func.name, 1, []
        for level, ext in zip(levels, reversed(extents)):
            kind = "leaf" if level is leaf else "internal"
            instances = parents * math.prod(ext)
            events.append((level.name, {"graph": graph, "kind": kind, "target": level.target,
                                        "instances": instances, "extents": list(ext)}))
            parents = instances
            if level.child is not None:
                graph = level.child.func.name
        return events

    def records(self, ancestors: list[tuple[int, ...]]) -> bool:
        """Whether the leaf about to run is recorded: a root leaf, or the leaf at the bottom of a
        root internal node that enter() accepted."""
        return not ancestors or self._lifted is not None

    def leaf(self, node: Any, prepared: Any, slots: dict, call: list[Any], outputs: list[Any],
             extents: list[tuple[int, ...]], device: str, copied_in: frozenset[int],
             checked: bool = False) -> None:
        """Record one leaf launch; `slots` maps (node index, port) to produced values, `copied_in`
        names the Out buffers read as InOut (rt/executor.py's uncovered_outs), `checked` whether
        the bounds-checked kernel ran."""
        gpu = isinstance(prepared, DeviceLaunch)
        self.devices.add(device)
        if gpu:
            self._bind_device_values(node, prepared, slots)
        if not prepared.reusable:
            self.usable = False
            return
        sources = self._lifted
        if sources is None:  # a root leaf: an edge that carries a forwarded input is that input
            sources = [self.root.host_source(src) if mode == "uniform" else src
                       for src, mode in zip(node.inputs, node.input_modes)]
            if any(src.node is not None and self.root.nodes[src.node].kernel is None
                   for i, src in enumerate(sources) if i not in node.unread_inputs):
                self.usable = False  # an internal node's output: a replay would not refresh it
                return
        self._produced.update(id(out) for out in outputs if out is not None)
        from_args, from_outputs, fetch_before = [], [], []
        for i, (src, mode) in enumerate(zip(sources, node.input_modes)):
            if mode == "buffer":
                if not self._acquired(node, i, src, call[i], device, i in copied_in):
                    return
                continue
            if src.const is not None:
                continue  # a constant is already in the prepared launch, and never changes
            if src.expr is not None:  # of root integer arguments (lifted sources have none): the
                # recording's key fixes them, so its value is in the prepared launch too
                if self._lifted is not None or mode != "uniform":
                    self.usable = False
                    return
                continue
            if src.bind_port is not None:
                if mode != "uniform":
                    self.usable = False
                    return
                from_args.append((i, src.bind_port, node.func.params[i].type))
                continue
            if i in node.unread_inputs:
                continue  # it only orders the leaf after its producer: the value is not needed
            value = slots[(src.node, src.port)].value
            if mode == "uniform":
                from_outputs.append((i, value))
                producer = self._on_device.get(id(value))
                if producer is not None and producer[2] not in fetch_before:
                    fetch_before.append(producer[2])
            elif src.edge_kind != D.ONE_TO_ONE:
                self.usable = False  # a per-parent copy made on the host would go stale
                return
        step = Step(prepared, from_args, from_outputs, fetch_before=fetch_before,
                     has_outputs=any(out is not None for out in outputs),
                     event={"node": node.name, "target": node.target, "device": device,
                            "instances": math.prod(math.prod(e) for e in extents),
                            "checked": checked},
                     node_events=self._node_events(node, extents))
        # the root's node (a chain's, not its leaf's): its edges order the steps (_spread)
        self.nodes.append(node if self._lifted is None else self._root_node)
        coverage = node.coverage
        if coverage is not None and any(sources[i].bind_port is None and sources[i].const is None and
                                        sources[i].expr is None and
                                        node.input_modes[i] == "uniform" for i in coverage.relevant):
            self.usable = False  # which Out buffers are copied in depends on computed integers
            return
        bounds = node.bounds
        if bounds is not None and any(sources[i].bind_port is None and sources[i].expr is None and
                                      node.input_modes[i] != "buffer" for i in bounds.relevant):
            if gpu:  # the other kernel's device outputs would not be those bound downstream
                self.usable = False
                return
            # both variants are prepared now, with the real arguments: a replay only chooses
            used = node.kernel_for(call, extents)  # the one that ran: the proof is cached
            other = node.checked_kernel() if used is node.kernel else node.kernel
            alternative = other.prepare(call, outputs, extents)
            if not alternative.reusable:
                self.usable = False
                return
            sizes = [BufferArg(None, 0, a.nbytes, None) if isinstance(a, BufferArg) else a for a in call]
            step.redecide = Redecide(node, sizes, extents, {used: prepared, other: alternative})
        self.steps.append(step)
        if gpu:
            for host, dev in prepared.outputs.pairs:
                self._on_device[id(host)] = (host, dev, prepared.outputs)

    def _bind_device_values(self, node: Any, prepared: Any, slots: dict) -> None:
        """Point a GPU kernel's per-instance inputs at their producers' device arrays."""
        for i, (src, mode) in enumerate(zip(node.inputs, node.input_modes)):
            if mode not in ("per_instance", "per_parent") or src.node is None or \
                    src.edge_kind != D.ONE_TO_ONE:
                continue
            produced = self._on_device.get(id(slots[(src.node, src.port)].value))
            if produced is not None and produced[0] is slots[(src.node, src.port)].value:
                prepared.bind_values(i, produced[1])

    def _acquired(self, node: Any, i: int, src: Any, arg: Any, device: str, copied_in: bool) -> bool:
        """Note how pointer input i (from `src`) got its buffer; False (and unusable) when a replay
        could not reproduce it."""
        bound = self.env[src.bind_port] if src.bind_port is not None else None
        obj = getattr(bound, "obj", None)
        if obj is None or (obj.implicit and obj.home != device):
            # an untracked host buffer goes back to the host after each launch: the normal path
            self.usable = False
            return False
        spec = node.func.params[i]
        direction = spec.direction
        self.acquires.append(Acquire(weakref.ref(obj), device, copied_in or direction in ("in", "inout"),
                                      direction in ("out", "inout"), weakref.ref(arg.obj),
                                      len(self.steps), i, src.bind_port, spec, copied_in))
        return True

    def finish(self) -> Recording | None:
        outputs = self.outputs
        # (nodes on several devices: the tracker's copies between them must happen between the
        # kernels, and the host would read device outputs it was not given)
        if not self.usable or len(self.devices) > 1 or \
                not all(isinstance(o, np.ndarray) and id(o) in self._produced for o in outputs):
            return None  # (a root output of an internal node is made anew by each launch)
        # each step's buffers as the executor acquires them: those its kernel reads first (a
        # write-only one may be the same buffer, and would skip the copy the read needs)
        self.acquires.sort(key=lambda need: (need.step, not need.reads))
        device = next(iter(self.devices), HOST)
        positions = [i for i, p in enumerate(self.func.params)
                     if isinstance(p.type, PtrType) or (isinstance(p.type, ScalarType) and p.type.is_int)]
        buffers = [i for i, v in enumerate(self.env) if isinstance(v, BoundBuffer)]
        if not all(isinstance(self.args[i], IMMUTABLE_NUMBERS) for i in positions if i not in buffers):
            return None  # an integer given as a 0-d array or tensor: its value may change in place,
            # and the key compares the very object (equal to itself)
        args = tuple(weakref.ref(self.env[i].obj) if i in buffers else a for i, a in enumerate(self.args))
        written = [i for i, p in enumerate(self.func.params) if p.direction in ("out", "inout")]
        fetch_at_end = []
        for array in outputs:
            produced = self._on_device.get(id(array))
            if produced is not None and produced[2] not in fetch_at_end:
                fetch_at_end.append(produced[2])
        # one CUDA graph can hold the kernels when the host reads nothing and checks nothing
        # between them
        keyed = set(positions)
        for step in self.steps:  # integer arguments match the recorded ones: already packed
            step.from_args = [(i, port, t) for i, port, t in step.from_args if port not in keyed]
        # (a communication node's kernel too, on GPU ranks: it checks its peers itself, and wait
        # settles it as after any launch)
        collectives = [s.prepared for s in self.steps if getattr(s.prepared, "capturable", False)]
        graphable = all((isinstance(s.prepared, DeviceLaunch) and s.prepared.on_any_stream or
                         s.prepared in collectives) and not s.from_outputs and not s.fetch_before
                        and s.redecide is None for s in self.steps)
        # other buffers of the same sizes can take copies of the launches when nothing but the
        # buffers' addresses ties them to this launch: the host reads no output, and outputs
        # stay on a device (copies share them there: their replays run in order on one stream,
        # one thread's at a time, `edges`; host arrays would be shared by concurrent launches)
        rebindable = not outputs and all(
            not s.from_outputs and not s.fetch_before and
            all(p.copyable and (not s.has_outputs or isinstance(p, DeviceLaunch))
                for p in s.launches()) for s in self.steps)
        recording = Recording(args, positions, self.steps, list(outputs), written=written,
                              acquires=self.acquires, fetch_at_end=fetch_at_end,
                              internal_nodes=self.internal_nodes,
                              graph_device=device if graphable and self.steps else None,
                              scalar_ports=[port for s in self.steps for _, port, _ in s.from_args],
                              rebindable=rebindable)
        if rebindable and any(s.has_outputs for s in self.steps):
            recording.edges = threading.Lock()  # (its copies share it: rebound())
        if recording.graph_device is not None:
            recording.collectives = collectives
            recording.checked = [s.prepared for s in self.steps
                                 if isinstance(s.prepared, DeviceLaunch) and s.prepared.error is not None]
            if not collectives:  # (a collective runs on the current stream)
                self._spread(recording, recording.graph_device)
        recording.register()
        return recording

    def _spread(self, recording: Recording, device: str) -> None:
        """Independent kernels on separate streams, with events on the edges between them."""
        plan = assign_streams(self.nodes)
        if not plan.used:
            return
        if device.startswith("cuda"):
            import torch  # noqa: PLC0415 - the stream the prepared launches were made on

            recording.origin = torch.cuda.current_stream().cuda_stream
        recording.events = {node: i for i, node in enumerate(sorted(plan.recorded))}
        recording.streams = DeviceStreams(device, plan.used, len(recording.events), recording.origin)
        recording.stream_plan = plan


def lifted_sources(node: Any, root: Any) -> list[Any] | None:
    """For an internal node of the root that holds a chain of single-node graphs down to one leaf
    (NodePlan.recorded_leaf), with no outputs but forwarded ones: where each of the leaf's inputs comes
    from at the root (a root argument or a constant, or a sibling's output that forwards one:
    GraphPlan.host_source). None when another shape, or when an input or an instance count of a
    level below comes from another output of a sibling or from an expression of an inner level.
    (What the chain's levels bind from the root stays uniform all the way down: only edges make
    values per parent instance.)"""
    chain = node.chain_to_leaf()
    if not chain or (any(level.child.outputs for level in chain) and
                     len(node.forwarded) < len(node.func.outputs)):
        return None  # an output computed below would not be refreshed by a replay
    leaf = node.recorded_leaf
    # the instance counts below the root's node come from the level above each: a replay runs
    # the recorded grids, so a count computed by a sibling (an edge) cannot be recorded
    for depth, level in enumerate(chain):
        child = chain[depth + 1] if depth + 1 < len(chain) else leaf
        for _, port in child.dim_ports:
            src = _root_source(level.inputs[port], port, chain[:depth], node, root)
            if src is None or src.node is not None:  # (an expression of root arguments is fixed)
                return None
    lifted = []
    for src in leaf.inputs:
        src = _root_source(src, None, chain, node, root)
        if src is None or src.bind_port is None and src.const is None:
            return None
        lifted.append(src)
    return lifted


def _root_source(src: Any, port: int | None, levels: list[Any], node: Any, root: Any) -> Any:
    """Where a value bound at the bottom of `levels` (the chain from the root's node down; `src`
    is the source of input `port` of the root's node when levels is empty) comes from at the
    root's level; None where a level below computes it (an edge or an expression there)."""
    for level in reversed(levels):  # from the innermost level up to the root's node
        if src.const is not None:
            break
        if src.bind_port is None:
            return None
        port = src.bind_port
        src = level.inputs[port]
    if src.node is not None and port is not None and node.input_modes[port] == "uniform":
        src = root.host_source(src)  # an edge to the node that forwards a root argument
    return src


class Replays:
    """The recordings of one compiled graph (up to _KEPT, most recent first), indexed by the
    identities of their buffer arguments."""

    def __init__(self) -> None:
        self._recordings: list[Recording] = []
        self._by_buffers: dict[tuple[int, ...], list[Recording]] = {}
        self._lock = threading.Lock()

    def find(self, args: tuple[Any, ...]) -> Recording | None:
        recordings = self._recordings
        if recordings:  # a loop over one launch: its recording is first (read without the lock)
            first = recordings[0]
            if first.matches(args):
                return first if first.still_writable(args) else None
        with self._lock:
            if not self._recordings:
                return None
            # (every recording of one graph has its buffers at the same argument positions)
            ids = tuple(id(args[k]) for k in self._recordings[0].buffer_positions)
            for recording in self._by_buffers.get(ids, ()):
                if recording.matches(args):
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
    params = func.params
    for i in recording.unkeyed:  # refused before any kernel runs, as the normal path refuses it
        if type(args[i]) is not float:  # (a loop's floats: nothing to check)
            scalar_argument(func, params[i].name, params[i].type, args[i])
    if not recording.lock.acquire(blocking=False):
        return None  # another thread is replaying it: take the normal path
    edges = recording.edges
    if edges is not None and not edges.acquire(blocking=False):
        recording.lock.release()
        return None  # another thread is replaying a copy of it, on the same edge arrays
    try:
        # released (another thread's untrack_memory) since Replays.find matched it: its steps
        # are gone or going, and running none would return no outputs (the normal path tracks
        # the buffers again). A release from now on leaves the steps to this replay (drop()).
        if recording.dropped or not acquired and not tracker.acquire_recorded(recording.acquires):
            return None
        graphed = False
        if recording.graph_device is not None:
            graphed = _run_graphed(func, recording, args)
        else:
            _launch_all(func, recording, args)
        for outputs in recording.fetch_at_end:
            outputs.fetch()
        stats.bump_all((recording.rebound_counts if acquired else recording.counts)[graphed])
        return [o[0] for o in recording.outputs]
    finally:
        if recording.dropped:  # released while this ran: drop() left its launches to us
            recording.let_go()
        if edges is not None:
            edges.release()
        recording.lock.release()


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
    name = getattr(leaf, "name", "kernel")
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
