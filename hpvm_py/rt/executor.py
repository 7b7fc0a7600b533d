"""Run a GraphPlan: fire nodes in dependency order, deliver values over edges and binds.

Values are laid out per backends/base.py: a uniform value is one NumPy scalar; a per-parent value
is an array with one element per parent instance; a per-instance value has one per instance.
A replicated internal node runs its child graph once for all its instances (its instances may run
in any order, so running each child node for all of them in turn is a valid schedule).
"""
from __future__ import annotations

import contextlib
import functools
import math
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np

from ..backends.base import BufferArg
from ..device import selected
from ..ir.context import MAX_INSTANCES
from ..errors import ExecutionError, HPVMWarning, LaunchError, VerificationError
from ..ir import dfg as D
from ..ir import kernel as K
from ..passes.coverage import OutCoverage, Uncovered, poison, warning_text
from ..support import profile, settings, stats
from ..types import PtrType, ScalarType
from .buffers import HOST, host_view, span
from .placement import device_of
from .plan import GraphPlan, NodePlan
from .tracker import MemoryObject, MemoryTracker, overlap


@dataclass
class BoundBuffer:
    """A pointer argument as it travels through binds: the tracked object it names."""

    obj: MemoryObject


@dataclass
class Slot:
    """A produced value: array of per-instance (or per-parent) values, with the producer's count."""

    value: Any
    per_instance: bool
    instances: int  # instances of the producing node within one parent instance
    # instances of the parent: with no producing instance, the per-parent value cannot be read
    # off `value` (empty), yet each parent instance still sees one value (0, as on every target)
    parents: int = 1


# HPVM_POISON_OUT=1: on the host targets, an Out buffer that a launch may write in part is filled
# with NaN (floats) or 0xAB bytes (integers) first, to show what relying on its old contents reads
POISON_OUT = settings.POISON_OUT.on()


def poisoned_outs(leaf: K.LeafFunc | D.LibraryFunc, args: list[Any], copied_in: frozenset[int]
                  ) -> frozenset[int]:
    """The Out parameters of `copied_in` that HPVM_POISON_OUT fills: not one whose memory the
    launch also reads through an In or InOut parameter (the same array, or a view of it): a device
    copies that in for the read, so the leaf reads real data there, and poison would change it."""
    read = [value.obj for p, value in zip(leaf.params, args)
            if isinstance(p.type, PtrType) and p.direction in ("in", "inout")]
    return frozenset(i for i in copied_in if not any(overlap(args[i].obj, obj) for obj in read))


def warn_uncovered(coverage: OutCoverage, reason: Uncovered) -> None:
    """The warning of a leaf whose launch may leave part of an Out buffer unwritten."""
    warnings.warn_explicit(warning_text(coverage.leaf, reason), HPVMWarning, reason.loc.file,
                           reason.loc.line)


class Stopped(Exception):
    """The stop flag of the running thread was set: a streaming stage is being stopped (by a
    failing stage or by cleanup()); raised between nodes, never inside a kernel."""


def check_grids(edge: D.Edge, src: tuple[int, ...], dst: tuple[int, ...]) -> None:
    """A one-to-one edge with symbolic grids, checked once both ends are known."""
    if src != dst:
        raise VerificationError(f"one-to-one edge {edge.src} -> {edge.dst} joins grids {list(src)} and "
                                f"{list(dst)} at launch; grids must be identical", edge.loc,
                                rule="one-to-one-grids")


@functools.cache
def _viewer(elem: ScalarType) -> Callable[[Any], np.ndarray]:
    """What makes a host buffer's flat view as `elem` when a backend first asks (BufferArg)."""
    return functools.partial(host_view, elem=elem)


# The host arguments kept on a tracked object (MemoryObject.host_args): the BufferArg of its one
# element type, bare, or a dict of them by element type once there are two.

def _host_arg(obj: MemoryObject, elem: ScalarType) -> BufferArg | None:
    kept = obj.host_args
    if type(kept) is dict:
        return kept.get(elem)
    return kept if kept is not None and (kept.elem is elem or kept.elem == elem) else None


def _keep_host_arg(obj: MemoryObject, elem: ScalarType, arg: BufferArg) -> None:
    kept = obj.host_args
    if kept is None or (type(kept) is not dict and (kept.elem is elem or kept.elem == elem)):
        obj.host_args = arg
    elif type(kept) is dict:
        kept[elem] = arg
    else:
        obj.host_args = {kept.elem: kept, elem: arg}


def _selected(device: str) -> contextlib.AbstractContextManager[None]:
    """The node's GPU made current while its kernel launches (a no-op on the host)."""
    if device == HOST:
        return contextlib.nullcontext()
    return selected(device)


class Executor:
    def __init__(self, tracker: MemoryTracker):
        self.tracker = tracker
        self._local = threading.local()  # the recorder of the launch this thread is running

    @property
    def _recorder(self) -> Any:
        return getattr(self._local, "recorder", None)

    def watch(self, stop: threading.Event | None) -> None:
        """The flag that this thread's runs check before each node (a streaming stage's)."""
        self._local.stop = stop

    @contextlib.contextmanager
    def device_buffers(self) -> Iterator[dict[int, MemoryObject]]:
        """Collects the buffers this thread's leaves acquire on a device while the scope lasts
        (the caller gives the tracker's finish_launch() those the user did not track)."""
        self._local.on_device = on_device = {}
        try:
            yield on_device
        finally:
            self._local.on_device = None

    @contextlib.contextmanager
    def _launch_scope(self, keep_device: bool = False) -> Iterator[None]:
        """Buffers the user did not track come back from the device once the scope ends (their
        device copies stay valid with keep_device: a stream item's next stages read them)."""
        with self.device_buffers() as on_device:
            try:
                yield
            finally:
                if on_device:
                    self.tracker.finish_launch(list(on_device.values()), keep_device)

    def run(self, plan: GraphPlan, args: list[Any], recorder: Any = None) -> list[Any]:
        """Run the root graph; a recorder (rt/recorder.py) keeps what a replay needs."""
        self._local.recorder = recorder
        try:
            with self._launch_scope():
                outputs = self._graph(plan, args, [], 1)
        finally:
            self._local.recorder = None
        stats.bump("kernel_launches", plan.leaf_count)
        stats.bump("nodes_run", plan.node_count)
        return [np.asarray(o).reshape(-1)[0] if np.ndim(o) else o for o in outputs]

    # -- graphs -----------------------------------------------------------------------------

    def _graph(self, plan: GraphPlan, env: list[Any], ancestors: list[tuple[int, ...]],
               parents: int) -> list[Any]:
        slots: dict[tuple[int, int], Slot] = {}
        extents: list[tuple[int, ...]] = []
        stop = getattr(self._local, "stop", None)
        fire = self.fire_profiled if profile.on else self.fire
        for i, node in enumerate(plan.nodes):
            if stop is not None and stop.is_set():
                raise Stopped()
            if plan.grid_checks:
                self._check_grids_before(plan, i, node, env, extents)
            args = [self.gather(node, port, src, env, slots)
                    for port, src in enumerate(node.inputs)]
            ext, outs = fire(plan, node, env, args, ancestors, parents, slots)
            extents.append(ext)
            for port, out in enumerate(outs):
                if out is not None:
                    slots[(i, port)] = out
        if self._recorder is not None and not ancestors:
            # at the root, output o is element 0 of its producer's own array
            self._recorder.outputs = [slots[(n, port)].value for n, port in plan.outputs]
        return [self._as_parent(slots[(n, port)]) for n, port in plan.outputs]

    def _check_grids_before(self, plan: GraphPlan, index: int, node: NodePlan, env: list[Any],
                            extents: list[tuple[int, ...]]) -> None:
        """The symbolic one-to-one edges into node `index`, checked before it fires: a compiled
        leaf handed a source's per-instance values for a larger grid than the source's would
        fail on its arguments (or read past them) before a check after the node could run, and
        a node that runs writes its buffers: the rule's error must come first, on every target."""
        ext: tuple[int, ...] | None = None
        for src, dst, edge in plan.grid_checks:
            if dst == index:
                if ext is None:
                    ext = self.extents_of(node, env)
                check_grids(edge, extents[src], ext)

    def fire_stage(self, plan: GraphPlan, node: NodePlan, env: list[Any],
                   args: list[Any]) -> tuple[tuple[int, ...], list[Slot | None]]:
        """One streaming stage's node for one item: the item's untracked buffers are back on the
        host when it returns (pop() hands the item to the user), and stay valid on the device for
        the item's next stages."""
        with self._launch_scope(keep_device=True):
            if profile.on:
                return self.fire_profiled(plan, node, env, args, [], 1)
            return self.fire(plan, node, env, args, [], 1)

    def fire_profiled(self, plan: GraphPlan, node: NodePlan, env: list[Any], args: list[Any],
                      ancestors: list[tuple[int, ...]], parents: int,
                      slots_so_far: dict | None = None) -> tuple[tuple[int, ...], list[Slot | None]]:
        """fire() inside `hpvm.profile()`: a "node" event for the node's instances (the bytes its
        edges deliver, and the bytes copied for its buffers, in the event's args)."""
        kind = "leaf" if isinstance(node.func, K.LeafFunc) else \
            "internal" if node.child is not None else "library"
        info: dict[str, Any] = {"graph": K.shown_name(plan.func), "kind": kind, "target": node.target}
        params = node.func.params
        edges = {params[port].name: int(np.asarray(args[port]).nbytes)
                 for port, src in enumerate(node.inputs) if src.node is not None}
        if edges:
            info["edge_bytes"] = edges
        with profile.node_span(node.name, info):
            ext, slots = self.fire(plan, node, env, args, ancestors, parents, slots_so_far)
            info["instances"] = parents * math.prod(ext)
            info["extents"] = list(ext)
        return ext, slots

    def fire(self, plan: GraphPlan, node: NodePlan, env: list[Any], args: list[Any],
             ancestors: list[tuple[int, ...]], parents: int,
             slots_so_far: dict | None = None) -> tuple[tuple[int, ...], list[Slot | None]]:
        """Run one node for all its instances; returns its extents and its output slots."""
        ext = self.extents_of(node, env)
        count = self.check_instance_count(node, ext, parents)
        if node.kernel is not None:
            outs = self._leaf(node, args, ext, ancestors, parents, count, slots_so_far)
            slots = [Slot(out, node.output_modes[port] == "per_instance", count, parents)
                     if out is not None else None for port, out in enumerate(outs)]
        else:
            assert node.child is not None
            recorder = self._recorder
            if recorder is not None:
                recorder.enter(node, at_root=not ancestors)
            child_env = [self._to_children(a, mode, count) for a, mode in zip(args, node.input_modes)]
            outs = self._graph(node.child, child_env, [ext] + ancestors, parents * count)
            if recorder is not None:
                recorder.leave()
            slots = [Slot(out, True, count, parents) for out in outs]
        return ext, slots

    @staticmethod
    def check_instance_count(node: NodePlan, ext: tuple[int, ...], parents: int) -> int:
        """The node's instance count per parent instance, once the total is known to fit."""
        count = math.prod(ext)
        if parents * count > MAX_INSTANCES:
            raise LaunchError(f"node {node.name} would run {parents * count} instances ({parents} "
                              f"parent instance(s) x {list(ext)}): the instance count overflows 64 "
                              f"bits (at most 2**63 - 1)", node.node.loc, rule="instance-counts")
        return count

    @staticmethod
    def extents_of(node: NodePlan, env: list[Any]) -> tuple[int, ...]:
        if not node.node.dims:
            return ()
        values: dict[str, int] = {}
        for name, port in node.dim_ports:
            v = env[port]
            if type(v) is not int and np.ndim(v):  # (a plain int: the common case, no NumPy call)
                flat = np.asarray(v).reshape(-1)
                if flat.size and not np.all(flat == flat[0]):
                    raise ExecutionError(f"the instance count of node {node.name} uses {name!r}, whose "
                                         "value differs between instances of the parent; every "
                                         "instance of a parent must create the same grid", node.node.loc)
                v = flat[0] if flat.size else 0
            values[name] = int(v)
        ext = tuple(D.eval_dim(d, values) for d in node.node.dims)
        if any(n < 0 for n in ext):
            raise ExecutionError(f"node {node.name} would have {list(ext)} instances; counts must not "
                                 "be negative", node.node.loc, rule="instance-counts")
        return ext

    def gather(self, node: NodePlan, port: int, src: Any, env: list[Any],
               slots: dict[tuple[int, int], Slot]) -> Any:
        """The value of one node input: a parent parameter, a sibling's output slot or a constant."""
        if src.bind_port is not None:
            return env[src.bind_port]
        if src.const is not None:
            return src.const
        if src.expr is not None:
            return src.expr.value(env)
        return self.deliver(node, port, src, slots[(src.node, src.port)])

    def deliver(self, node: NodePlan, port: int, src: Any, slot: Slot) -> Any:
        """A produced value as the consuming input wants it (per instance, per parent, uniform)."""
        value = slot.value if src.edge_kind == D.ONE_TO_ONE else self._as_parent(slot)
        if node.input_modes[port] == "uniform":
            return np.asarray(value).reshape(-1)[0]
        return value

    @staticmethod
    def _as_parent(slot: Slot) -> Any:
        """The value of instance 0 of the producer within each parent instance; 0 where the
        producer ran no instance (an empty grid), as a leaf's unwritten per-parent output is."""
        if slot.per_instance and slot.instances != 1:
            if slot.instances:
                return np.ascontiguousarray(slot.value[::slot.instances])
            return np.zeros(slot.parents, dtype=np.asarray(slot.value).dtype)
        return slot.value

    @staticmethod
    def _to_children(value: Any, mode: str, count: int) -> Any:
        """A node input as the children of that (internal) node see it."""
        if mode == "per_parent":
            return np.repeat(value, count)  # one value per instance of the internal node
        return value

    # -- leaves -----------------------------------------------------------------------------

    def _leaf(self, node: NodePlan, args: list[Any], ext: tuple[int, ...],
              ancestors: list[tuple[int, ...]], parents: int, count: int,
              slots_so_far: dict | None = None) -> list[Any]:
        # a collective takes its buffers where the symmetric heap lives, whatever the target
        device = node.kernel.device or device_of(node.target, node.placement.index)
        extents = [ext] + ancestors
        copied_in = self.uncovered_outs(node, args, extents)
        call, outputs = self.leaf_call(node, args, device, parents, count, copied_in)
        kernel = node.kernel_for(call, extents)
        checked = kernel is not node.kernel
        recorder = self._recorder
        t0 = profile.now() if profile.on else 0
        with _selected(device):
            if node.lowering is not None:  # a GPU leaf may run the other GPU target's lowering
                kernel = node.lowering.kernel_for(kernel, checked, call, outputs, extents, device)
            timer = profile.gpu_begin(device) if t0 else None
            if recorder is not None and kernel.prepares and slots_so_far is not None and \
                    recorder.records(ancestors) and \
                    not (POISON_OUT and copied_in and device == HOST):
                # (a launch that poisons is not recorded: a replay acquires no buffer, so it
                # would not poison)
                prepared = kernel.prepare(call, outputs, extents)
                prepared.run()
                recorder.leaf(node, prepared, slots_so_far, call, outputs, extents, device, copied_in,
                            checked)
            else:
                if recorder is not None:
                    recorder.usable = False
                kernel.launch(call, outputs, extents)
            if t0:
                profile.gpu_end(timer, "gpu_kernel", K.shown_name(node.func), device, {"node": node.name})
        if t0:
            profile.complete("kernel", K.shown_name(node.func), t0, args={
                "node": node.name, "target": node.target, "device": device,
                "instances": parents * count, "checked": checked})
        return outputs

    @staticmethod
    def uncovered_outs(node: NodePlan, args: list[Any], extents: list[tuple[int, ...]]
                       ) -> frozenset[int]:
        """The leaf's Out parameters that this launch may write in part: they are read (copied to
        a device) as InOut ones are, so that the result does not depend on the target; the
        leaf's first such launch warns (docs/language.md, "Out buffers")."""
        coverage = node.coverage
        if coverage is None:
            return frozenset()
        sizes = [value.obj if isinstance(value, BoundBuffer) else value for value in args]
        found = coverage.uncovered(sizes, extents)
        for i, reason in found.items():
            if i not in coverage.warned:
                coverage.warned.add(i)
                warn_uncovered(coverage, reason)
        return frozenset(found)

    def leaf_call(self, node: NodePlan, args: list[Any], device: str, parents: int, count: int,
                  copied_in: frozenset[int] = frozenset()
                  ) -> tuple[list[Any], list[np.ndarray | None]]:
        """A leaf's launch arguments (buffers acquired on `device`; the Out ones in `copied_in`
        read as InOut) and fresh output arrays."""
        leaf = node.func
        assert isinstance(leaf, (K.LeafFunc, D.LibraryFunc))  # a collective runs like a leaf
        call = list(args)
        poisoned = poisoned_outs(leaf, args, copied_in) if POISON_OUT and copied_in and \
            device == HOST else frozenset()
        late = []  # write-only buffers: acquired after those the leaf reads, which may be the
        # same buffer (bound to an In and an Out parameter): acquired first, the Out one would
        # mark its device copy valid without copying the data the In one reads
        for i, (p, value) in enumerate(zip(leaf.params, args)):
            if isinstance(p.type, PtrType):
                if p.direction == "out" and i not in copied_in:
                    late.append(i)
                else:
                    call[i] = self.buffer_arg(value, p, device, i in copied_in, i in poisoned)
        for i in late:
            call[i] = self.buffer_arg(args[i], leaf.params[i], device)
        return call, self.output_arrays(node, parents, count)

    @staticmethod
    def output_arrays(node: NodePlan, parents: int, count: int) -> list[np.ndarray | None]:
        """Fresh host arrays for a leaf's used outputs (None for unused ones)."""
        outputs: list[np.ndarray | None] = []
        for out, mode in zip(node.func.outputs, node.output_modes):
            if mode == "unused":
                outputs.append(None)
                continue
            assert isinstance(out.type, ScalarType)
            size = parents * count if mode == "per_instance" else parents
            outputs.append(np.zeros(size, dtype=out.type.numpy_dtype))
        return outputs

    def buffer_arg(self, value: Any, param: K.Param, device: str, copied_in: bool = False,
                   poisoned: bool = False) -> BufferArg:
        assert isinstance(value, BoundBuffer) and isinstance(param.type, PtrType)
        obj = value.obj
        reads = copied_in or param.direction in ("in", "inout")
        writes = param.direction in ("out", "inout")
        if profile.on:
            profile.note_param(param.name)  # the copies acquire() makes are for it
        buf = self.tracker.acquire(obj, device, reads, writes)
        if poisoned:  # what a device would hold under the strict rule
            poison(host_view(buf, param.type.elem), param.type.elem)
        on_device = getattr(self._local, "on_device", None)
        if device != HOST and on_device is not None:
            on_device[id(obj)] = obj
        if device == HOST and buf is obj.user:
            # the user's own host buffer: its view is made once (a tensor's storage may move)
            elem = param.type.elem
            cached = _host_arg(obj, elem)
            if cached is not None and writes and cached.array is not None and \
                    not cached.array.flags.writeable:
                # its view was made while the buffer was read-only (read by an In parameter
                # then): a view keeps that flag, though the buffer accepts writes again
                cached = None
            if cached is not None and cached.address == obj.address:
                return cached
            address, nbytes = span(buf)  # (a tensor's storage may have moved since it was tracked)
            if cached is not None and cached.address == address:
                return cached
            arg = BufferArg(obj=buf, address=address, nbytes=nbytes, array=None, view=_viewer(elem),
                            elem=elem)
            _keep_host_arg(obj, elem, arg)
            return arg
        # (the user's device buffer: lookup() saw it where it was tracked, this launch)
        address, nbytes = (obj.address, obj.nbytes) if buf is obj.user else span(buf)
        array = host_view(buf, param.type.elem) if device == HOST else None
        return BufferArg(obj=buf, address=address, nbytes=nbytes, array=array)

    @staticmethod
    def fresh_arg(obj: MemoryObject, param: K.Param, device: str) -> BufferArg:
        """buffer_arg() of a buffer just tracked at `device`, its home (rt/fresh_lane.py): the
        user's buffer is its only, valid copy (nothing to acquire or mark), at the address and of
        the size it was tracked with a moment ago."""
        buf = obj.user
        if device != HOST:
            return BufferArg(obj=buf, address=obj.address, nbytes=obj.nbytes, array=None)
        elem = param.type.elem
        arg = _host_arg(obj, elem)  # (another launch of the lane's that uses it)
        if arg is None:
            arg = BufferArg(obj=buf, address=obj.address, nbytes=obj.nbytes, array=None,
                            view=_viewer(elem), elem=elem)
            _keep_host_arg(obj, elem, arg)
        return arg
