"""Recording a launch while the executor runs it (rt/recording.py holds what is kept, rt/replay.py
replays it): per leaf its prepared launch, where each uniform scalar comes from, the buffers as
the tracker gave them; and whether the launch can be replayed at all. docs/architecture.md
("Replay")."""
from __future__ import annotations

import math
import threading
import weakref
from typing import Any, Callable

import numpy as np

from ..backends.base import BufferArg
from ..device.outputs import DeviceLaunch
from ..device.streams import DeviceStreams
from ..ir import dfg as D
from ..ir.kernel import shown_name
from ..types import PtrType, ScalarType
from .args import IMMUTABLE_NUMBERS
from .buffers import HOST
from .executor import BoundBuffer
from .recording import Acquire, Recording, Redecide, Step
from .replay_streams import assign_streams
from .tracker import MemoryTracker


class Recorder:
    """Collects the steps of one launch while the executor runs it normally."""

    def __init__(self, func: D.GraphFunc, args: tuple[Any, ...], env: list[Any], root: Any,
                 tracker: MemoryTracker):
        self.func = func
        self.tracker = tracker  # the runtime's: the recording serves its launches only
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
        self._empty: set[int] = set()  # id() of the root's nodes whose leaf ran no instance
        self.internal_nodes = 0
        self._depth = 0  # internal nodes entered and not left
        self._root_node: Any = None  # the root's internal node being entered

    def enter(self, node: Any, at_root: bool) -> None:
        """An internal node starts. At the root: its leaf is recorded if the node is a chain down
        to one leaf (lifted_sources), its inputs' sources lifted to the root's; otherwise the
        launch is not. Below the root it is a level of that chain (or the launch is unusable)."""
        if at_root:
            self._lifted = lifted_sources(node, self.root, self._ran)
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
        graph, parents, events = shown_name(self.root.func), 1, []
        for level, ext in zip(levels, reversed(extents)):
            kind = "leaf" if level is leaf else "internal"
            instances = parents * math.prod(ext)
            events.append((level.name, {"graph": graph, "kind": kind, "target": level.target,
                                        "instances": instances, "extents": list(ext)}))
            parents = instances
            if level.child is not None:
                graph = shown_name(level.child.func)
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
        if not all(math.prod(ext) for ext in extents):  # (a replay runs the same grids)
            self._empty.add(id(node if self._lifted is None else self._root_node))
        if gpu:
            self._bind_device_values(node, prepared, slots)
        if not prepared.reusable:
            self.usable = False
            return
        sources = self._lifted
        if sources is None:  # a root leaf: an edge that carries a forwarded input is that input
            sources = [self.root.host_source(src, self._ran) if mode == "uniform" else src
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

    def _ran(self, node: Any) -> bool:
        """Whether the root's node `node` (recorded earlier in this launch) ran a leaf instance."""
        return id(node) not in self._empty

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
                              rebindable=rebindable, tracker=self.tracker)
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


def lifted_sources(node: Any, root: Any, ran: Callable[[Any], bool]) -> list[Any] | None:
    """For an internal node of the root that holds a chain of single-node graphs down to one leaf
    (NodePlan.recorded_leaf), with no outputs but forwarded ones: where each of the leaf's inputs comes
    from at the root (a root argument or a constant, or a sibling's output that forwards one:
    GraphPlan.host_source, through producers that `ran`). None when another shape, or when an
    input or an instance count of a level below comes from another output of a sibling or from
    an expression of an inner level.
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
            src = _root_source(level.inputs[port], port, chain[:depth], node, root, ran)
            if src is None or src.node is not None:  # (an expression of root arguments is fixed)
                return None
    lifted = []
    for src in leaf.inputs:
        src = _root_source(src, None, chain, node, root, ran)
        if src is None or src.bind_port is None and src.const is None:
            return None
        lifted.append(src)
    return lifted


def _root_source(src: Any, port: int | None, levels: list[Any], node: Any, root: Any,
                 ran: Callable[[Any], bool]) -> Any:
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
        src = root.host_source(src, ran)  # an edge to the node that forwards a root argument
    return src
