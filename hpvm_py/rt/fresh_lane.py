"""Launching on buffers the tracker has never seen, the fast way (issue 25.5): a program that
launches a compiled graph on a fresh tensor each time (a new output per step, frames from a pool the
runtime has not met) needs neither the full argument checks nor a recording of its own per launch.
Each compiled graph keeps one copy of a kept recording's launches, its lane; a launch whose buffers
are all new, each of the kind that last passed its parameter's checks, of the recorded sizes and at
home where the kernels run, is tracked from addresses and sizes alone, points the lane's launches
at them and runs them, under the lane's lock. The next launch on one of those buffers finds it
tracked and takes the normal path, which records it (Replays.rebind): a loop on one buffer set
replays as before. docs/architecture.md, "Replay"."""
from __future__ import annotations

from typing import Any

from ..ir import dfg as D
from .args import kind_checked
from .buffers import span
from .recording import Recording
from .replay import Replays, check_unkeyed, hold, run_held, unhold
from .tracker import MemoryTracker


class FreshLane:
    """A copy of one recording's launches (Recording.twin) that serves buffers never seen."""

    def __init__(self, source: Recording, twin: Recording | None, devices: frozenset[str],
                 device: str, sizes: tuple[int, ...], points: list[tuple[Any, int, int, Any]]):
        self.source = source  # the recording it copies: a lane is made again from a newer one
        self.twin = twin  # None: the source cannot serve such launches
        self.devices = devices  # the launch's devices (rt/launch_devices.py) when it was made
        self.device = device  # where the kernels run: every buffer's home
        self.sizes = sizes  # nbytes of each buffer argument (Recording.buffer_positions)
        # per buffer its launches use: (the twin's step, its parameter, which buffer argument,
        # its spec): what run() points at each launch's buffers
        self.points = points

    @classmethod
    def of(cls, source: Recording, devices: frozenset[str]) -> "FreshLane":
        """The lane of `source`: unusable (no twin) unless the source may be copied for other
        buffers, and its buffers are distinct and at home on the one device its kernels run on."""
        objects = source.buffer_objects()
        device = source.acquires[0].device if source.acquires else ""
        usable = source.rebindable and not source.aliased and None not in objects and \
            all(need.device == device for need in source.acquires) and \
            all(obj.home == device for obj in objects)
        sizes = tuple(obj.nbytes for obj in objects) if usable else ()
        twin = source.twin() if usable else None
        points: list[tuple[Any, int, int, Any]] = []
        if twin is not None:
            # re-pointed at every launch: a CUDA graph would hold one launch's addresses
            twin.graph_device = twin.graph = twin.graph_key = twin.last_key = None
            # its lock held: once registered, another thread's release of a buffer drops it, and
            # would empty its steps while they are read here (Recording.drop leaves them to us)
            with twin.lock:
                twin.register()  # released with the source's buffers (a runtime's cleanup)
                if twin.dropped or any(obj.released for obj in objects):
                    twin = None  # (released meanwhile: nothing would drop it, or it is dropped)
                else:
                    points = [(twin.steps[need.step], need.param,
                               twin.buffer_positions.index(need.port), need.spec)
                              for need in twin.acquires]
        return cls(source, twin, devices, device, sizes, points)

    def serves(self, args: tuple[Any, ...], devices: frozenset[str], spans: list[tuple[Any, int, int]],
               checked: list[tuple[Any, ...]], tracker: MemoryTracker) -> bool:
        """Whether it can run a launch on these new buffers (new_buffers) on `tracker`'s runtime:
        at home where its kernels run, of its source's sizes, with its source's integer
        arguments, runtime, place and devices."""
        twin = self.twin
        if twin is None or twin.dropped or devices != self.devices:
            return False
        for (_, _, nbytes), size, entry in zip(spans, self.sizes, checked):
            if nbytes != size or entry[3] != self.device:
                return False
        return twin.same_key(args, tracker)

    def run(self, func: D.GraphFunc, args: tuple[Any, ...], spans: list[tuple[Any, int, int]],
            checked: list[tuple[Any, ...]], tracker: MemoryTracker, executor: Any) -> list[Any] | None:
        """Track the new buffers (new_buffers' spans and the checks they pass) and run the lane's
        launches on them; None when another thread holds the lane or tracked one of them meanwhile
        (the normal path runs)."""
        twin = self.twin
        check_unkeyed(func, twin, args)
        # (the entries shared, as rt/args.py's _buffer shares them)
        objects = tracker.track_fresh(spans, self.device, checked)
        if objects is None or not hold(twin):
            return None
        try:
            if twin.dropped:  # (its steps let go of: the points name them)
                return None
            fresh_arg, device = executor.fresh_arg, self.device
            for step, param, k, spec in self.points:
                step.set_buffer(param, fresh_arg(objects[k], spec, device))
            return run_held(func, twin, args, acquired=True)
        finally:
            unhold(twin)


def new_buffers(func: D.GraphFunc, args: tuple[Any, ...], positions: tuple[int, ...],
                devices: frozenset[str], tracker: MemoryTracker
                ) -> tuple[list[tuple[Any, int, int]], list[tuple[Any, ...]]] | None:
    """Each buffer argument's (buffer, address, nbytes) and the checks it passes, when all are
    distinct, none is tracked and each is of the kind that last passed its parameter's checks
    against these devices (rt/args.py, `checked_kinds`: its last entry holds the home too); else
    None."""
    params = func.params
    spans, checked = [], []
    for i in positions:
        arg = args[i]
        entry = None if tracker.tracks(arg) else kind_checked(tracker, params[i], arg, devices)
        if entry is None:
            return None
        address, nbytes = span(arg)
        spans.append((arg, address, nbytes))
        checked.append(entry)
    if len(spans) > 1 and len({id(buf) for buf, _, _ in spans}) < len(spans):
        return None  # one buffer passed twice: a lane's source has distinct ones
    return spans, checked


def launch_fresh(replays: Replays, func: D.GraphFunc, args: tuple[Any, ...],
                 devices: frozenset[str], tracker: MemoryTracker, executor: Any) -> list[Any] | None:
    """Run a launch whose buffers the tracker has never seen on the graph's lane (made, or made
    again from the newest recording when the lane cannot serve it); the root's outputs, or None
    for the normal path."""
    newest = replays.newest()
    if newest is None:
        return None
    found = new_buffers(func, args, newest.buffer_positions, devices, tracker)
    if found is None:
        return None
    spans, checked = found
    lane = replays.lane
    if lane is None or not lane.serves(args, devices, spans, checked, tracker):
        if lane is not None and lane.source is newest:
            return None
        lane = replays.lane = FreshLane.of(newest, devices)
        if not lane.serves(args, devices, spans, checked, tracker):
            return None
    return lane.run(func, args, spans, checked, tracker, executor)
