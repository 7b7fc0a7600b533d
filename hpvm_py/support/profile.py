"""The profiler behind `with hpvm.profile("trace.json"):`: what ran, as Chrome-trace JSON.

Every layer calls it, so it lives in support/ and imports nothing of hpvm_py above it. Each hook
in the code that runs launches is one check of the module-level flag `on`:

    if profile.on:
        profile.complete("copy", "h2d", t0, track=..., args=...)

so that with no profile open a hook costs one attribute load and a branch (docs/profiling.md
has the measurement). While a profile is open the hooks append events to one list (appends are
atomic under the GIL; the few dictionaries shared between threads take a lock):

- `span(cat, name, ...)` (a context manager) or `complete(cat, name, t0, ...)` (t0 from `now()`)
  make a Chrome-trace "X" (complete) event on a track: the calling thread's unless `track`
  names one (a stream stage, a copy engine and direction, a GPU);
- `gpu_begin(device, stream)` / `gpu_end(...)` time GPU work with a pair of CUDA events (torch's),
  read once the profile ends, on a track per device; on the host (and the fake device) they do
  nothing;
- the seconds of each category go to `stats.py` (`hpvm.stats()["times"]`): an event nested in an
  open span of its own category on the same thread is not counted twice.

A profile's events are written when it ends: `{"traceEvents": [...]}`, with "M" metadata events
naming the process (one per rank) and every track (ui.perfetto.dev and chrome://tracing open it).
Several ranks each write `PATH.rank<R>` (renamed into place once whole), and rank 0 waits for
the others' (up to HPVM_COMM_TIMEOUT seconds), merges them into PATH, one process track per rank,
and removes them. Timestamps come from CLOCK_MONOTONIC (`time.perf_counter_ns`), shared by the
processes of one host; ranks on several hosts need a shared file system and their tracks may be
offset by the hosts' clock difference.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Iterator

from ..errors import HPVMError, HPVMWarning
from . import settings, stats, world
from .loc import Loc
from .torch_streams import torch_stream

on = False  # the flag every hook checks: a profile is open

CATEGORIES = ("launch", "node", "kernel", "copy", "stage", "collective", "compile", "cache",
              "gpu_kernel", "gpu_copy")

_lock = threading.Lock()
_local = threading.local()  # .stack: the categories of the spans open on this thread
_current: "Profile | None" = None
RULE = "profile"
_PACKAGE = str(Path(__file__).resolve().parent.parent) + os.sep  # (not a user's hpvm_py_x/)


def now() -> int:
    """A timestamp for complete(): nanoseconds of the monotonic clock."""
    return time.perf_counter_ns()


def _user_loc() -> Loc | None:
    """The innermost frame outside hpvm_py and contextlib: the user's `with hpvm.profile(...)`.
    (frontend/callsite.py has the same walk, but support/ imports nothing above it.)"""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE) or
                                 frame.f_code.co_filename == contextlib.__file__):
        frame = frame.f_back
    return None if frame is None else Loc(frame.f_code.co_filename, frame.f_lineno, 0)


def _trace_path(path: Any, loc: Loc | None) -> Path | None:
    """The file a profile writes, checked when the block starts: a trace that could not be
    written would otherwise fail only when the block ends, after all its work (and, were the block
    raising, in place of its error). Relative paths are taken from the working directory now."""
    if path is None:
        return None
    try:
        target = Path(os.fsdecode(path)).absolute()
    except TypeError:
        raise HPVMError(f"hpvm.profile(): the trace's path is a {type(path).__name__}; give a "
                        "file name (a str or os.PathLike), or None for no file", loc,
                        rule=RULE) from None
    problem = why_unwritable(target)
    if problem is not None:
        raise HPVMError(f"hpvm.profile(): {problem}", loc, rule=RULE)
    return target


def why_unwritable(target: Path) -> str | None:
    """Why a trace cannot be written at target (None: it can); makes its directory."""
    if target.is_dir():
        return f"{target} is a directory; give the trace's file name (e.g. {target / 'trace.json'})"
    # a probe, not os.access(): root passes access() where the write fails (/proc, read-only
    # mounts); the directories made here are where the trace goes anyway
    probe = target.with_name(f".{target.name}.{os.getpid()}.probe")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        return f"cannot write the trace {target}: {exc.strerror or exc}"
    return None


class Profile:
    """The events of one `hpvm.profile()` block; `path` None: times only, no file. `loc`: the
    user's `with` line, for errors."""

    def __init__(self, path: Path | None, loc: Loc | None = None):
        self.path = path
        self.loc = loc
        self.events: list[dict[str, Any]] = []
        self.tracks: dict[str, int] = {}
        self.times: dict[str, float] = {}
        self.pending: list[tuple[Any, ...]] = []  # GPU event pairs not read yet
        self.references: dict[str, tuple[Any, int]] = {}  # device -> (its reference event, host ns)
        self.started = now()
        self.ended: int | None = None
        self.trace: dict[str, Any] | None = None  # what was written (rank 0's merged trace)

    def track(self, name: str) -> int:
        tid = self.tracks.get(name)
        if tid is None:
            with _lock:
                tid = self.tracks.setdefault(name, len(self.tracks) + 1)
        return tid

    def track_names(self) -> list[tuple[str, int]]:
        """(name, tid) of every track, taken under the lock: a thread whose launch began while
        the profile was on may still add a track while stop() writes it."""
        with _lock:
            return list(self.tracks.items())

    def add(self, cat: str, name: str, t0: int, t1: int, track: str | None,
            args: dict[str, Any] | None, counted: bool = True) -> None:
        event: dict[str, Any] = {"name": name, "cat": cat, "ph": "X", "ts": t0 / 1000,
                                 "dur": max(0, t1 - t0) / 1000, "pid": 0,  # the rank: _trace()
                                 "tid": self.track(track or threading.current_thread().name)}
        if args:
            event["args"] = args
        self.events.append(event)
        if counted:
            seconds = max(0, t1 - t0) / 1e9
            with _lock:
                self.times[cat] = self.times.get(cat, 0.0) + seconds
            stats.add_time(cat, seconds)


def _stack() -> list[str]:
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    return stack


def complete(cat: str, name: str, t0: int, track: str | None = None,
             args: dict[str, Any] | None = None, t1: int | None = None) -> None:
    """An event of category `cat` from t0 (now() when it began) to t1 (default: now)."""
    prof = _current
    if prof is not None:
        prof.add(cat, name, t0, now() if t1 is None else t1, track, args, cat not in _stack())


@contextlib.contextmanager
def span(cat: str, name: str, track: str | None = None,
         args: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """An event around the block; the block may add to the dict it gets (the event's args)."""
    args = {} if args is None else args
    stack = _stack()
    counted = cat not in stack
    stack.append(cat)
    t0 = now()
    try:
        yield args
    finally:
        t1 = now()
        stack.pop()
        prof = _current
        if prof is not None:
            prof.add(cat, name, t0, t1, track, args, counted)


@contextlib.contextmanager
def _open_span(cat: str, name: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """An event of `cat` whose args this thread's code inside it may add to (`_local.<cat>`: the
    innermost open one; replayed() and the copies' bytes write there)."""
    outer = getattr(_local, cat, None)
    setattr(_local, cat, args)
    try:
        with span(cat, name, args=args) as info:
            yield info
    finally:
        setattr(_local, cat, outer)


@contextlib.contextmanager
def launch_span(name: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A "launch" event; its `replayed` is set by replayed() when the replay fast path runs it.
    (Read from this thread's launch, not from the replay counter, which other threads' replays
    raise meanwhile.)"""
    args["replayed"] = False
    with _open_span("launch", name, args) as info:
        yield info


def replayed() -> None:
    """The launch this thread runs (launch_span) is a replay of a recorded one (rt/replay.py)."""
    launch = getattr(_local, "launch", None)
    if launch is not None:
        launch["replayed"] = True


@contextlib.contextmanager
def node_span(name: str, args: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A "node" event; the copies made inside it (for its buffers) add their bytes to its args'
    `copied_bytes`, per parameter (see note_param())."""
    try:
        with _open_span("node", name, args) as info:
            yield info
    finally:
        _local.param = None


def note_param(name: str) -> None:
    """The parameter whose buffer the next copies of this thread are for."""
    _local.param = name


def stage_item(stage: str, item: int, t0: int | None, target: str) -> None:
    """One item of a stream stage, on the stage's track (t0 None: started before the profile)."""
    if t0 is not None:
        complete("stage", f"{stage} #{item}", t0, track=f"stage {stage}",
                 args={"item": item, "stage": stage, "target": target})


def copy_track(direction: str, src: str, dst: str) -> str:
    """The track of a copy: one per copy engine and direction (the device end names it)."""
    device = dst if direction == "h2d" else src if direction == "d2h" else f"{src}->{dst}"
    return f"copy {direction} {device}"


def copy(direction: str, nbytes: int, src: str, dst: str, t0: int, **more: Any) -> None:
    """One copy between memories, from t0 to now."""
    info = {"bytes": int(nbytes), "direction": direction, "src": src, "dst": dst, **more}
    node, param = getattr(_local, "node", None), getattr(_local, "param", None)
    if node is not None and param is not None:
        info["param"] = param
        copied = node.setdefault("copied_bytes", {})
        copied[param] = copied.get(param, 0) + int(nbytes)
    complete("copy", direction, t0, copy_track(direction, src, dst), info)


# -- GPU times -------------------------------------------------------------------------------


def gpu_begin(device: str, stream: Any = None) -> Any:
    """A CUDA event recorded on `stream` (a torch stream or a raw handle; None: the current
    one) of a real GPU, for gpu_end(); None elsewhere or when it cannot be made."""
    prof = _current
    if prof is None or not device.startswith("cuda"):
        return None
    try:
        import torch  # noqa: PLC0415 - only on a GPU

        if torch.cuda.is_current_stream_capturing():
            return None  # a CUDA graph's capture (rt/replay.py): no timing events inside it
        if device not in prof.references:
            torch.cuda.synchronize(device)  # the reference marks a moment the host knows
            ref = torch.cuda.Event(enable_timing=True)
            ref.record(torch.cuda.current_stream(device))
            ref.synchronize()
            prof.references[device] = (ref, now())
        if stream is None or isinstance(stream, int):  # (else a torch stream already)
            stream = torch_stream(stream, device)
        start = torch.cuda.Event(enable_timing=True)
        start.record(stream)
        return (start, stream)
    except Exception:  # noqa: BLE001 - the profile goes on without this GPU time
        return None


def gpu_end(token: Any, cat: str, name: str, device: str, args: dict[str, Any] | None = None) -> None:
    """Record the end of what gpu_begin started; the pair is read when the profile ends."""
    prof = _current
    if prof is None or token is None:
        return
    try:
        import torch  # noqa: PLC0415

        start, stream = token
        end = torch.cuda.Event(enable_timing=True)
        end.record(stream)
        prof.pending.append((cat, name, device, start, end, args))
    except Exception:  # noqa: BLE001
        return


def settle() -> None:
    """Read the GPU event pairs recorded so far (waits for them) into events and times."""
    prof = _current
    if prof is not None:
        _settle(prof)


def _settle(prof: Profile) -> None:
    pending, prof.pending = prof.pending, []
    for cat, name, device, start, end, args in pending:
        try:
            end.synchronize()
            ref, host = prof.references[device]
            t0 = host + int(ref.elapsed_time(start) * 1e6)
            t1 = t0 + int(start.elapsed_time(end) * 1e6)
        except Exception:  # noqa: BLE001 - a GPU time that cannot be read is left out
            continue
        track = f"gpu {device}" + (" copies" if cat == "gpu_copy" else "")
        prof.add(cat, name, t0, t1, track, args)


# -- the profile's life ----------------------------------------------------------------------


def start(path: str | os.PathLike[str] | None) -> Profile:
    global _current, on
    loc = _user_loc()
    with _lock:
        if _current is not None:
            where = f" (opened at {_current.loc})" if _current.loc is not None else ""
            raise HPVMError(f"hpvm.profile(): a profile is already being recorded in this "
                            f"process{where}; profiles do not nest", loc, rule=RULE)
    target = _trace_path(path, loc)  # (outside the lock: it touches the file system)
    with _lock:
        if _current is not None:  # another thread's opened meanwhile
            raise HPVMError("hpvm.profile(): a profile is already being recorded in this process; "
                            "profiles do not nest", loc, rule=RULE)
        _current = prof = Profile(target, loc)
        on = True
    return prof


def stop(prof: Profile) -> None:
    """End the profile and write its file (on several ranks: rank 0 merges)."""
    global _current, on
    _settle(prof)
    with _lock:
        on = False
        _current = None
    prof.ended = now()
    if prof.path is not None:
        try:
            prof.trace = _write(prof)
        except OSError as exc:  # checked at start(), but the disk may fill or the directory go
            raise HPVMError(f"hpvm.profile(): could not write the trace {prof.path}: "
                            f"{exc.strerror or exc}", prof.loc, rule=RULE) from None


def _untangle(prof: Profile) -> None:
    """Events of one track must nest (Chrome's and Perfetto's rule for a thread's slices): an
    event that overlaps another in part (a GPU stage's next item started before the last ended,
    copies of two threads on one engine's track) moves to a second lane of its track, "NAME (2)"."""
    by_track: dict[int, list[dict[str, Any]]] = {}
    for event in prof.events:
        by_track.setdefault(event["tid"], []).append(event)
    names = {tid: name for name, tid in prof.track_names()}
    for tid, events in by_track.items():
        events.sort(key=lambda e: (e["ts"], -e["dur"]))
        lanes: list[list[float]] = []  # per lane, the ends of its open events (a stack)
        for event in events:
            start, end = event["ts"], event["ts"] + event["dur"]
            for k, stack in enumerate(lanes):
                while stack and stack[-1] <= start:
                    stack.pop()
                if not stack or end <= stack[-1]:
                    stack.append(end)
                    break
            else:
                k = len(lanes)
                lanes.append([end])
            if k:
                event["tid"] = prof.track(f"{names[tid]} ({k + 1})")


def _trace(prof: Profile, rank: int, size: int) -> dict[str, Any]:
    """This process's trace: its events (every one this rank's, also those recorded before
    hpvm.distributed.init() joined the ranks), its process and track names."""
    _untangle(prof)
    for event in prof.events:
        event["pid"] = rank
    name = f"rank {rank}" if size > 1 else f"hpvm-py (pid {os.getpid()})"
    meta = [{"name": "process_name", "ph": "M", "ts": 0, "pid": rank, "tid": 0, "args": {"name": name}},
            {"name": "process_sort_index", "ph": "M", "ts": 0, "pid": rank, "tid": 0,
             "args": {"sort_index": rank}}]
    for track, tid in sorted(prof.track_names(), key=lambda kv: kv[1]):
        meta.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": rank, "tid": tid,
                     "args": {"name": track}})
        meta.append({"name": "thread_sort_index", "ph": "M", "ts": 0, "pid": rank, "tid": tid,
                     "args": {"sort_index": _sort_key(track) * 1000 + tid}})
    return {"traceEvents": meta + prof.events, "displayTimeUnit": "ms",
            "otherData": {"hpvm_times": dict(prof.times),
                          "rank": rank, "ranks": size}}


def _sort_key(track: str) -> int:
    """Host threads first, then stream stages, copies, GPUs."""
    for i, prefix in enumerate(("stage ", "copy ", "gpu ")):
        if track.startswith(prefix):
            return i + 1
    return 0


def _rebased(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Timestamps from the earliest event on (microseconds); metadata at 0."""
    timed = [e["ts"] for e in events if e["ph"] != "M"]
    base = min(timed) if timed else 0
    for e in events:
        if e["ph"] != "M":
            e["ts"] = round(e["ts"] - base, 3)
            e["dur"] = round(e["dur"], 3)
    return events


def _write(prof: Profile) -> dict[str, Any]:
    assert prof.path is not None
    joined = world.current()
    rank, size = (joined.rank, joined.size) if joined is not None else (0, 1)
    trace = _trace(prof, rank, size)
    if size == 1:
        trace["traceEvents"] = _rebased(trace["traceEvents"])
        _dump(prof.path, trace)
        return trace
    part = prof.path.with_name(f"{prof.path.name}.rank{rank}")
    _dump(part, trace)
    if rank != 0:
        return trace
    parts = [prof.path.with_name(f"{prof.path.name}.rank{r}") for r in range(size)]
    deadline = time.monotonic() + settings.positive_seconds(settings.COMM_TIMEOUT)
    while not all(p.exists() for p in parts):
        if time.monotonic() > deadline:
            missing = [str(p) for p in parts if not p.exists()]
            raise HPVMError(f"hpvm.profile(): rank 0 waited {settings.COMM_TIMEOUT.get()} s for the "
                            f"other ranks' traces ({', '.join(missing)}); each rank must profile "
                            "the same block with the same path, on a file system all of them see",
                            prof.loc, rule=RULE)
        time.sleep(0.02)
    merged: dict[str, Any] = {"traceEvents": [], "displayTimeUnit": "ms",
                              "otherData": {"ranks": size, "hpvm_times": {}}}
    for r, p in enumerate(parts):
        one = json.loads(p.read_text())
        merged["traceEvents"].extend(one["traceEvents"])
        merged["otherData"]["hpvm_times"][str(r)] = one.get("otherData", {}).get("hpvm_times", {})
    merged["traceEvents"] = _rebased(merged["traceEvents"])
    _dump(prof.path, merged)
    for p in parts:
        with contextlib.suppress(OSError):
            p.unlink()
    return merged


def _dump(path: Path, trace: dict[str, Any]) -> None:
    """Write whole, then rename into place (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(trace))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # no half-written file left next to the trace
            tmp.unlink()
        raise


# -- reading a trace back (hpvmc viz --profile) -----------------------------------------------


def summary(trace: dict[str, Any]) -> dict[str, Any]:
    """What a trace says per node: `times` {(graph, node): seconds in its "node" events}, `runs`
    {(graph, node): events}, `bytes` {(graph, node, parameter): bytes its edges delivered and
    bytes copied for its buffers}."""
    times: dict[tuple[str, str], float] = {}
    runs: dict[tuple[str, str], int] = {}
    moved: dict[tuple[str, str, str], int] = {}
    for event in trace.get("traceEvents", []) if isinstance(trace, dict) else trace:
        if event.get("cat") != "node" or event.get("ph") != "X":
            continue
        args = event.get("args", {})
        key = (str(args.get("graph", "")), str(event.get("name", "")))
        times[key] = times.get(key, 0.0) + float(event.get("dur", 0)) / 1e6
        runs[key] = runs.get(key, 0) + 1
        for field in ("edge_bytes", "copied_bytes"):
            for param, nbytes in args.get(field, {}).items():
                moved[key + (param,)] = moved.get(key + (param,), 0) + int(nbytes)
    return {"times": times, "runs": runs, "bytes": moved}


def load_summary(path: str | os.PathLike[str]) -> dict[str, Any]:
    """summary() of a trace file; an HPVMError names what is wrong with it."""
    try:
        trace = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise HPVMError(f"{path}: not a readable Chrome-trace JSON file ({exc})") from None
    if not isinstance(trace, (dict, list)):
        raise HPVMError(f"{path}: not a Chrome-trace JSON file (no traceEvents)")
    try:
        return summary(trace)
    except (AttributeError, TypeError, ValueError, OverflowError) as exc:  # (JSON's Infinity bytes)
        raise HPVMError(f"{path}: not a Chrome-trace JSON file (an event is malformed: {exc})") from None


@contextlib.contextmanager
def profile(path: str | os.PathLike[str] | None = None) -> Iterator[Profile]:
    """`with hpvm.profile("trace.json") as prof:` records what runs in the block (every thread
    of the process: launches, nodes per instance group, kernels, copies with their direction,
    bytes and devices, stream stage items, collectives, compiles and cache hits; GPU times from
    CUDA events on the GPU targets) and writes it as Chrome-trace JSON when the block ends, for
    ui.perfetto.dev or chrome://tracing. path None: no file; the times still go to
    `hpvm.stats()["times"]` (seconds per category) and `prof.times`. On several ranks every rank
    profiles with the same path, and rank 0 writes the merged file, one process track per rank.
    The path is checked before the block runs (an HPVMError at the `with` line when no trace can
    be written there). See docs/profiling.md."""
    prof = start(path)
    try:
        yield prof
    except BaseException:
        # the block's own error goes on: a trace that cannot be written then is a warning, not an
        # error that would take the block's place
        try:
            stop(prof)
        except HPVMError as exc:
            warnings.warn(str(exc), HPVMWarning, stacklevel=3)
        raise
    stop(prof)
