"""What a recorded launch keeps (rt/replay.py records and replays it): per leaf its prepared
launch and where its scalars come from, the buffers as the tracker gave them, the CUDA graph of a
repeat; and the same launch pointed at other buffers of the same sizes (Recording.rebound, a
copy; Recording.retarget, in place).
docs/architecture.md, "Replay"."""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..backends.base import BufferArg
from ..device.streams import DeviceStreams
from ..support import settings
from ..support.world import current as current_world
from ..types import ScalarType
from .buffers import moved, why_not_writable
from .replay_streams import StreamPlan
from .tracker import MemoryTracker, held_only_here


@dataclass
class Redecide:
    """What a step needs to choose checked or unchecked code again, as a fresh launch would: the
    leaf's bounds proof depends on integers computed by earlier nodes, which a replay changes."""

    node: Any  # the NodePlan: its kernel_for() asks the (cached) proof
    call: list[Any]  # the launch's arguments, buffers by size only (no reference to the user's)
    extents: list[tuple[int, ...]]
    prepared: dict[Any, Any]  # kernel (unchecked, checked) -> its prepared launch


@dataclass
class Step:
    prepared: Any  # a backend's prepared launch: run() and set_uniform(i, value)
    from_args: list[tuple[int, int, ScalarType]]  # (param index, root argument index, type)
    from_outputs: list[tuple[int, np.ndarray]]  # (param index, producer's output array)
    redecide: Redecide | None = None
    fetch_before: list[Any] = field(default_factory=list)  # GPU outputs the host reads first
    has_outputs: bool = False  # the leaf's outputs are used (by the host or a later kernel)
    last_args: tuple[Any, ...] | None = None  # the from_args values of the last run
    event: dict[str, Any] | None = None  # its kernel event's args under hpvm.profile (replay.py)
    # its "node" events under hpvm.profile, outermost first: (node name, args) (replay.py)
    node_events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)

    def launches(self) -> list[Any]:
        """Its prepared launches: the recorded one, and the other kernel's where it may choose."""
        return [self.prepared] if self.redecide is None else list(self.redecide.prepared.values())

    @property
    def copyable(self) -> bool:
        """Whether its launches can be copied and pointed at other buffers (set_buffer)."""
        return all(p.copyable for p in self.launches())

    def copy(self) -> "Step | None":
        """The same step on copies of its launches (of a rebindable recording); None when one
        can no longer be copied."""
        if not self.copyable:
            return None
        launches = self.launches()
        twins = {id(p): p.copy() for p in launches}
        redecide = self.redecide
        if redecide is not None:
            redecide = Redecide(redecide.node, redecide.call, redecide.extents,
                                 {k: twins[id(p)] for k, p in redecide.prepared.items()})
        return Step(twins[id(self.prepared)], list(self.from_args), [], redecide, event=self.event,
                    node_events=self.node_events)

    def set_buffer(self, i: int, arg: BufferArg) -> None:
        for prepared in self.launches():
            prepared.set_buffer(i, arg)

    def launch_for(self, uniforms: dict[int, Any]) -> Any:
        """The prepared launch to run with these uniform values: the recorded one, or, when the
        proof depends on computed values, the one for the kernel a fresh launch would choose."""
        again = self.redecide
        if again is None:
            return self.prepared
        call = list(again.call)
        for i, value in uniforms.items():
            call[i] = value
        return again.prepared[again.node.kernel_for(call, again.extents)]


@dataclass
class Acquire:
    """A buffer the step's kernel uses, as the tracker gave it when recorded."""

    obj: weakref.ref  # the tracked MemoryObject
    device: str
    reads: bool
    writes: bool
    buf: weakref.ref  # the copy the kernel was prepared on
    step: int  # which step's kernel, its pointer parameter, and the root argument bound to it
    param: int
    port: int
    spec: Any  # the leaf's parameter (K.Param)
    copied_in: bool  # an Out buffer read as InOut (rt/executor.py's uncovered_outs)


def _held_settings() -> tuple[str | None, ...]:
    """The settings a recording's launches hold, as the user wrote them: HPVM_GPU_DEVICE (the
    device they run on), HPVM_CPU_NONTEMPORAL (the cpu store driver), HPVM_TRITON_LAUNCHER (the gpu
    launcher)."""
    return (settings.GPU_DEVICE.text(), settings.CPU_NONTEMPORAL.text(),
            settings.TRITON_LAUNCHER.text())


@dataclass(eq=False)  # one recording is equal only to itself (Replays finds it by identity)
class Recording:
    args: tuple[Any, ...]  # the root arguments; a buffer as a weak reference to its tracked object
    key_positions: list[int]  # root arguments that must be identical (buffers) or equal (integers)
    steps: list[Step] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    written: list[int] = field(default_factory=list)  # root arguments the graph writes
    acquires: list[Acquire] = field(default_factory=list)  # in launch order
    fetch_at_end: list[Any] = field(default_factory=list)  # GPU outputs that are root outputs
    graph_device: str | None = None  # set when the kernels may be captured in a CUDA graph
    collectives: list[Any] = field(default_factory=list)  # communication nodes in that graph
    checked: list[Any] = field(default_factory=list)  # its launches with an error word
    graph: Any = None  # the CUDA graph of the launches with the scalars `graph_key`
    graph_key: Any = None
    graph_zeros: Any = None  # the signs of graph_key's float zeros (-0.0 == 0.0 as numbers)
    last_key: Any = None  # the scalars of the last replay: a repeat captures a graph
    scalar_ports: list[int] = field(default_factory=list)  # root arguments the kernels take
    origin: Any = None  # the CUDA stream handle the launch was recorded on
    streams: Any = None  # DeviceStreams when independent kernels run on several streams
    stream_plan: StreamPlan | None = None
    events: dict[int, int] = field(default_factory=dict)  # step -> its event, where waited for
    dropped: bool = False  # a buffer it used was released: it matches nothing
    internal_nodes: int = 0  # root nodes that hold the recorded leaves (counted as nodes run)
    rebindable: bool = False  # rebound() may serve other buffers with copies of its launches
    # held by a replay of it or of a copy of it (rebound) while they share device arrays on edges
    # (copy(): the producers' outputs): replays in two threads would write each other's
    edges: threading.Lock | None = None
    # the distributed world it was recorded in, weakly held: a remote access's packed heap bases
    # point into that world's heaps (unmapped once it is left), so it serves that world only
    world: Any = field(default_factory=lambda: _world_key())
    # the settings its launches hold (the device, the cpu store driver, the gpu launcher) when it
    # was recorded; read per launch: a launch after one changed takes the normal path, which
    # reads them again
    held_settings: tuple[str | None, ...] = field(default_factory=_held_settings)
    # the tracker (of the runtime) it was recorded with: its objects are that tracker's, so it
    # serves launches of that runtime only (one stopping while another thread starts the next)
    tracker: MemoryTracker | None = None

    def __post_init__(self) -> None:
        steps = len(self.steps)  # one kernel per leaf
        # what a replay counts, without and with its CUDA graph (made once: stats.bump_all)
        self.counts = tuple({"launches": 1, "kernel_launches": steps,
                             "nodes_run": steps + self.internal_nodes, "replayed_launches": 1,
                             "cuda_graph_replays": graphed} for graphed in (0, 1))
        # the same for a replay just pointed at other buffers (rebound() or retarget())
        self.rebound_counts = tuple(dict(counts, rebound_launches=1) for counts in self.counts)
        keys = [(i, self.args[i]) for i in self.key_positions]
        self._buffers = [(i, b) for i, b in keys if isinstance(b, weakref.ref)]
        self._values = [(i, b) for i, b in keys if not isinstance(b, weakref.ref)]
        objects = [b() for _, b in self._buffers]
        self._aliases = _aliases(objects)
        # where the buffer arguments are (the same in every recording of a graph) and what they
        # are: Replays.find passes over recordings of other buffers by comparing these alone
        self.buffer_positions = tuple(i for i, _ in self._buffers)
        self.buffer_ids = tuple(id(obj.user) for obj in objects)
        self._dtypes = tuple(obj.user.dtype for obj in objects)  # (as checked when recorded)
        # the other scalar arguments (floats): checked before a replay runs anything
        keyed = set(self.key_positions)
        self.unkeyed = tuple(i for i in range(len(self.args)) if i not in keyed)

    def drop(self) -> None:
        """A buffer it uses was released: let go of its launches (and their device memory).

        Another thread's untrack_memory (or cleanup) may release the buffer while a replay of
        this recording runs: that replay holds `lock` and still reads the steps and outputs, so
        it is left to let go of them as it ends (rt/replay.py, `replay`). Flagged first: a replay
        that sees the flag unset after taking the lock runs on launches nobody clears under it.
        (Never waits for the lock: the tracker calls this holding its own lock, which a replay
        takes while holding this one.)"""
        self.dropped = True
        if not self.lock.acquire(blocking=False):
            return  # a replay (or rebound/retarget) holds it: its owner calls let_go()
        try:
            self.let_go()
        finally:
            self.lock.release()

    def let_go(self) -> None:
        """Clear a dropped recording's launches (its lock held, or inside retarget)."""
        self.steps, self.acquires, self.outputs, self.fetch_at_end = [], [], [], []
        self.graph = self.streams = None

    def matches(self, args: tuple[Any, ...], tracker: MemoryTracker) -> bool:
        if self.dropped or len(args) != len(self.args):
            return False
        for (i, ref), dtype in zip(self._buffers, self._dtypes):
            a, obj = args[i], ref()
            # (its dtype and contiguity too: they can be changed in place, `a.dtype = np.int32`,
            # `t.data = t.view(torch.int32)`, `t.as_strided_(...)`, and the checks refuse them;
            # an ndarray subclass, np.matrix, is an array: it has no is_contiguous())
            if obj is None or obj.released or obj.user is not a or a.dtype != dtype or \
                    (a.nbytes != obj.nbytes or not a.flags.c_contiguous  # (inline: a loop's
                     if type(a) is np.ndarray or isinstance(a, np.ndarray) else  # launch passes
                     moved(a, obj.address, obj.nbytes) or not a.is_contiguous()):  # a dozen again)
                return False  # the normal path tracks it again, or says what went wrong
        return self._same_place(tracker) and self._same_values(args)

    def buffer_objects(self) -> list[Any]:
        """The tracked objects of its buffer arguments, in order (None: one let go)."""
        return [ref() for _, ref in self._buffers]

    @property
    def aliased(self) -> bool:
        """Whether two of its buffer arguments name one buffer."""
        return self._aliases is not None

    def same_key(self, args: tuple[Any, ...], tracker: MemoryTracker) -> bool:
        """Whether a launch with `args` on `tracker`'s runtime has its integer arguments, runtime,
        held settings and world (its buffers aside)."""
        return len(args) == len(self.args) and self._same_place(tracker) and \
            self._same_values(args)

    def _same_place(self, tracker: MemoryTracker) -> bool:
        """Whether it was recorded with `tracker` (the launch's runtime), under the current held
        settings, in the current world (None: no world, both times)."""
        if tracker is not self.tracker or _held_settings() != self.held_settings:
            return False
        key, now = self.world, current_world()
        if key is None or now is None:
            return key is None and now is None
        return (key() if isinstance(key, weakref.ref) else key) is now

    def _same_values(self, args: tuple[Any, ...]) -> bool:
        """The integer arguments are the recorded ones (of the same Python type)."""
        for i, b in self._values:
            a = args[i]
            if type(a) is not type(b) or a != b:
                return False
        return True

    def rebound(self, args: tuple[Any, ...], env: list[Any], executor: Any) -> "Recording | None":
        """This recording for other buffers (`env`: the launch's bound arguments) of the same sizes,
        homes and aliasing, with the same integer arguments: its launches copied and pointed at
        them, each buffer acquired from the tracker as the normal path would. None when it
        cannot serve them (then the normal path runs and records them)."""
        if not self._fits(args, env, executor.tracker):
            return None
        twin = self.twin()
        if twin is None:
            return None
        twin.acquires = twin._point_at(env, executor, in_place=False)
        twin._name_buffers(args, env)
        twin.register()
        return twin

    def twin(self) -> "Recording | None":
        """A copy of it on copies of its launches, still pointed at its buffers, with a lock (and
        streams' events) of its own; its fields shared but those. None when it was released or a
        launch can no longer be copied."""
        with self.lock:
            try:
                if self.dropped:
                    return None
                steps = [step.copy() for step in self.steps]
                # (taken with the steps: a release after the lock is let go empties the lists,
                # and a copy not pointed at other buffers would run on freed ones)
                acquires = list(self.acquires)
                streams = self.streams  # (a release sets it to None)
            finally:
                if self.dropped:  # (released meanwhile: drop() left the clearing to this holder)
                    self.let_go()
        if None in steps:
            return None
        # (a shallow copy: a dataclass's constructor costs several times more)
        twin = object.__new__(Recording)
        twin.__dict__.update(self.__dict__)
        twin.steps, twin.acquires, twin.lock = steps, acquires, threading.Lock()
        if streams is not None:  # its own events: replays of the two may interleave
            # (on the streams' device: graph_device is None once a capture found no CUDA graph)
            twin.streams = DeviceStreams(streams.device, self.stream_plan.used,
                                         len(self.events), self.origin)
        return twin

    def retarget(self, args: tuple[Any, ...], env: list[Any], executor: Any) -> bool:
        """What rebound() makes, in this recording itself: its launches pointed at the other
        buffers, for a recording that can serve no launch again (Replays.rebind picks it: one
        whose buffer the user let go, or the one a full set would let go). False, unchanged, when
        it cannot serve them or another thread holds it."""
        if not self._fits(args, env, executor.tracker) or \
                not all(step.copyable for step in self.steps):
            return False
        if not self.lock.acquire(blocking=False):
            return False
        try:
            if self.dropped:
                return False
            for need in self.acquires:  # it stops using these
                obj = need.obj()
                if obj is not None:
                    obj.discard_recording(self)
            try:
                self._point_at(env, executor, in_place=True)
            except BaseException:
                self.dropped = True  # (pointed in part at the new buffers: it serves neither set)
                raise
            self._name_buffers(args, env)
            self.register()
        finally:
            if self.dropped:  # (by a release while this held the lock, or the failure above)
                self.let_go()
            self.lock.release()
        return True

    def abandoned(self) -> bool:
        """Whether the user has let go of one of its buffers (only the runtime still refers to it,
        as after a step that writes a fresh output and drops the last one): it cannot match a
        launch again, and may serve other buffers (retarget)."""
        for _, ref in self._buffers:
            obj = ref()
            if obj is not None and not obj.released and held_only_here(obj):
                return True
        return False

    def _fits(self, args: tuple[Any, ...], env: list[Any], tracker: MemoryTracker) -> bool:
        """Whether rebound() / retarget() can serve these buffers (bound by `tracker`): the same
        integer arguments and runtime, and buffers of the same sizes, homes and aliasing as the
        recorded ones."""
        if not self.rebindable or self.dropped or not self.same_key(args, tracker):
            return False
        for i, ref in self._buffers:
            old, new = ref(), env[i].obj
            if old is None or new.nbytes != old.nbytes or new.home != old.home:
                return False
        if _aliases([env[i].obj for i, _ in self._buffers]) != self._aliases:
            return False
        for need in self.acquires:
            obj = env[need.port].obj
            if obj.implicit and obj.home != need.device:
                return False  # it goes back to the host after each launch: the normal path
        return True

    def _point_at(self, env: list[Any], executor: Any, in_place: bool) -> list[Acquire]:
        """Its steps' launches pointed at the bound buffers, each acquired from the tracker as the
        normal path would; the acquires that say so (its own, changed, when `in_place`:
        retarget; new ones for a twin, rebound)."""
        acquires, steps = [], self.steps
        for need in self.acquires:
            bound = env[need.port]
            arg = executor.buffer_arg(bound, need.spec, need.device, need.copied_in)
            steps[need.step].set_buffer(need.param, arg)
            if in_place:
                need.obj, need.buf = weakref.ref(bound.obj), weakref.ref(arg.obj)
                continue
            acquires.append(Acquire(weakref.ref(bound.obj), need.device, need.reads, need.writes,
                                     weakref.ref(arg.obj), need.step, need.param, need.port,
                                     need.spec, need.copied_in))
        return self.acquires if in_place else acquires

    def _name_buffers(self, args: tuple[Any, ...], env: list[Any]) -> None:
        """The fields that name the buffers, for these; no CUDA graph (it holds the old addresses)."""
        new_args, buffers = list(args), []
        for i in self.buffer_positions:
            new_args[i] = ref = weakref.ref(env[i].obj)
            buffers.append((i, ref))
        self.args, self._buffers = tuple(new_args), buffers
        self.buffer_ids = tuple([id(args[i]) for i in self.buffer_positions])
        self._dtypes = tuple([args[i].dtype for i in self.buffer_positions])
        self.graph = self.graph_key = self.graph_zeros = self.last_key = None

    def register(self) -> None:
        """Let each tracked object it uses drop it when released."""
        for need in self.acquires:
            obj = need.obj()
            if obj is not None:
                obj.add_recording(self)

    def still_writable(self, args: tuple[Any, ...]) -> bool:
        """The buffers the graph writes still accept writes (not made read-only, no
        requires_grad_() since): else the normal path says why."""
        return all(why_not_writable(args[i]) is None for i in self.written)


def _world_key() -> Any:
    """The current world, weakly held (None: none); a stand-in without weak references, held."""
    world = current_world()
    if world is None:
        return None
    try:
        return weakref.ref(world)
    except TypeError:
        return world


def _aliases(objects: list[Any]) -> tuple[int, ...] | None:
    """Which buffer arguments name one buffer (a launch's copies and valid bits depend on it):
    for each, the position of the first that is the same object; None when all differ."""
    if len({id(obj) for obj in objects}) == len(objects):
        return None
    return tuple(next(k for k, other in enumerate(objects) if other is obj) for obj in objects)
