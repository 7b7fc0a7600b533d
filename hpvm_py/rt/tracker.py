"""The memory tracker: one host copy and device copies of each memory object, with valid bits.

A read on a device copies only when that device's copy is invalid, from a valid copy (a peer
device first, the host last); a write makes the writer's copy the only valid one. The host copy is
refreshed on request_memory() (or by the executor once after the last writer of a launch), never
per node. Every copy is counted in stats() so tests can assert the minimum.

Copies between devices are done by the device layer's functions per (source, destination) kind
(device/devices.py's TRANSFERS), so this module knows nothing of CUDA.
"""
from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np

from ..device.devices import TRANSFERS
from ..device.staging import unstaged
from ..errors import MemoryTrackingError
from ..frontend.callsite import caller_loc
from ..support import profile, stats
from .buffers import HOST, BufferInfo, describe, extent, foreign_device, is_buffer, moved, not_dense

def _kind(device: str) -> str:
    return device.split(":")[0]


def valid_on(*devices: str) -> frozenset[str]:
    """The set of devices as valid bits: one shared frozenset per distinct set, so that an object
    holds no set of its own (see MemoryObject)."""
    if len(devices) == 1:  # (every buffer a launch tracks: valid at its home)
        known = _VALID_ONE.get(devices[0])
        if known is not None:
            return known
    key = frozenset(devices)
    key = _VALID_SETS.setdefault(key, key)
    if len(devices) == 1:
        _VALID_ONE[devices[0]] = key
    return key


_VALID_SETS: dict[frozenset[str], frozenset[str]] = {}
_VALID_ONE: dict[str, frozenset[str]] = {}  # device -> valid_on(device)


def valid_plus(valid: frozenset[str], device: str) -> frozenset[str]:
    return valid if device in valid else valid_on(device, *valid)


# One per buffer a launch meets, so kept to one container the garbage collector tracks: a launch
# on a fresh tensor leaves one of these alive per buffer, and in a process of a few hundred
# thousand objects (torch imported) the full collections that survivors trigger cost more than
# the rest of such a launch when each object held five containers of its own (benchmarks/RESULTS.md,
# "Launching on tensors never seen: one container per buffer"). Hence the valid bits as shared
# frozensets, no copies dict while the user's buffer is the only copy, and single entries
# (`host_args`, `checked_for`) held bare until there is a second.
@dataclass(slots=True, weakref_slot=True)
class MemoryObject:
    user: Any  # the buffer the user tracked: the key of the object
    nbytes: int
    home: str  # where the user's buffer lives
    address: int = 0  # of the user's buffer when tracked
    copies: dict[str, Any] | None = None  # device -> its copy; None: only the user's, at home
    valid: frozenset[str] = frozenset()  # (shared: valid_on, valid_plus)
    # the BufferArg of `user` on the host (made on first use; a dict by element type once
    # two parameters of other element types view it)
    host_args: Any = None
    checked_for: Any = None  # launch checks passed: one entry, or a dict of them (rt/args.py)
    released: bool = False  # untracked, or its runtime cleaned up: recordings of it are stale
    # the recorded launches that use it, by id, weakly held (an evicted one leaves by itself), dropped
    # on release, so none keeps a device view of the buffer alive (a dict of references: a WeakSet
    # costs several objects per buffer, and a launch on fresh buffers makes one per launch)
    recordings: dict[int, weakref.ref] | None = None
    implicit: bool = False  # tracked by a launch, not by the user: device copies last one launch
    noted: int = 0  # recordings added since the dead references were last cleared

    def add_recording(self, recording: Any) -> None:
        # (threads launching on one shared buffer record and retarget at once: an unlocked prune
        # iterating the dict while another thread adds to it raised, half way through a retarget)
        with _recordings_lock:
            if self.released:
                return  # it can never match again (Recording.matches), nothing to drop it for
            refs = self.recordings
            if refs is None:
                self.recordings = {id(recording): weakref.ref(recording)}
                return
            self.noted += 1
            # once the adds since the last prune are as many as the references it kept (so at
            # most twice the live ones are held): comparing with all it holds, the adds included,
            # never pruned again once a prune kept one live recording (a buffer launched by a
            # graph made per step held a dead reference per graph: recordings that go with their
            # graph are not evicted, which would discard them)
            if self.noted >= max(len(refs) - self.noted, _PRUNE_AT):
                self.noted = 0
                for key in [key for key, ref in refs.items() if ref() is None]:
                    del refs[key]  # recordings evicted since
            refs[id(recording)] = weakref.ref(recording)

    def copy_on(self, device: str) -> Any:
        """Its copy on `device`, or None."""
        copies = self.copies
        if copies is None:
            return self.user if device == self.home else None
        return copies.get(device)

    def copy_devices(self) -> list[str]:
        return [self.home] if self.copies is None else list(self.copies)

    def copies_dict(self) -> dict[str, Any]:
        """The copies dict, made when a second copy comes."""
        if self.copies is None:
            self.copies = {self.home: self.user}
        return self.copies

    def used_by(self, recording: Any) -> bool:
        ref = (self.recordings or {}).get(id(recording))
        return ref is not None and ref() is recording

    def discard_recording(self, recording: Any) -> None:
        with _recordings_lock:
            if self.used_by(recording):
                del self.recordings[id(recording)]


def overlap(a: MemoryObject, b: MemoryObject) -> bool:
    """Whether two objects' user buffers share memory (views of one array)."""
    return a.address < b.address + b.nbytes and b.address < a.address + a.nbytes


_PRUNE_AT = 16  # recordings added to one object at least before its dead references are cleared
# guards every object's `recordings` (never held while calling out: Recording.drop runs after;
# reentrant, since a collection inside the prune may finalize objects that note recordings)
_recordings_lock = threading.RLock()


def _release(obj: MemoryObject) -> None:
    with _recordings_lock:
        obj.released = True
        refs, obj.recordings = obj.recordings, None
    for ref in (refs or {}).values():
        recording = ref()
        if recording is not None:
            recording.drop()


SWEEP_AT_LEAST = 64  # implicit objects before the first sweep (then twice those left by the last)


def held_only_here(obj: MemoryObject) -> bool:
    """Whether nothing but the tracker refers to the user's buffer: its object, its home copy,
    the cached host arguments (and their views, whose base it is). A launch in flight, a stream's
    item, a kept recording's packed arguments or the user holding it count more references."""
    buf = obj.user
    ours = 1 + (obj.copies is not None and obj.copies.get(obj.home) is buf)
    args = obj.host_args
    for arg in (args.values() if isinstance(args, dict) else (args,) if args is not None else ()):
        ours += (arg.obj is buf) + (getattr(arg.array, "base", None) is buf)
    return sys.getrefcount(buf) - 2 <= ours  # (getrefcount's argument and `buf`)


class MemoryTracker:
    def __init__(self) -> None:
        self._objects: dict[int, MemoryObject] = {}
        # the objects the user tracked that have held a valid copy away from home, by id(buffer):
        # the only ones whose newest data stays on a device between launches (_settle_aliases),
        # and untracked ones a stream stage left valid on a device for its item's next stages
        self._away: dict[int, MemoryObject] = {}
        self._lock = threading.RLock()
        self._implicit = 0  # implicit objects tracked since the last sweep
        self._sweep_at = SWEEP_AT_LEAST
        # per graph parameter (by id), the kind of buffer that last passed its launch checks, with
        # the parameter, the devices checked against and the buffer's home (rt/args.py)
        self.checked_kinds: dict[int, tuple[Any, ...]] = {}

    def track(self, buf: Any, implicit: bool = False, info: BufferInfo | None = None) -> MemoryObject:
        """The buffer's tracked object, made if new (`info`: describe(buf), when the caller has
        it already)."""
        if not is_buffer(buf):
            raise MemoryTrackingError(f"track_memory() takes a NumPy array or a torch tensor, not "
                                      f"{type(buf).__name__}", caller_loc())
        sparse = not_dense(buf)
        if sparse is not None:
            raise MemoryTrackingError(f"track_memory(): the buffer {sparse}; pass tensor.to_dense()",
                                      caller_loc())
        with self._lock:
            obj = self._find(buf)
            if obj is not None and moved(buf, obj.address, obj.nbytes):
                self._forget(obj)  # tracking it again after a resize: a new object
            elif obj is not None:
                obj.implicit = obj.implicit and implicit
                if not obj.implicit and obj.valid != valid_on(obj.home):
                    self._away[id(buf)] = obj
                return obj
            info = info or describe(buf)
            foreign = foreign_device(info)
            if foreign is not None:
                raise MemoryTrackingError(f"track_memory(): the buffer {foreign}; track a CPU or "
                                          "CUDA tensor", caller_loc())
            return self._adopt(buf, info.device, info.nbytes, info.address, implicit)

    def track_launched(self, buf: Any, home: str, nbytes: int, address: int,
                       checked: Any) -> MemoryObject:
        """A new implicit object for a buffer a launch passes, not tracked yet (rt/args.py knows
        its home, size and address, and the checks it passes: `checked`); the buffer's object
        when another thread tracked it since the launch looked (replacing it would turn the
        user's track_memory into an implicit tracking, or orphan the other launch's object)."""
        with self._lock:
            obj = self._find(buf)
            if obj is not None and not moved(buf, obj.address, obj.nbytes):
                return obj
            if obj is not None:
                self._forget(obj)
            return self._adopt(buf, home, nbytes, address, True, checked)

    def tracks(self, buf: Any) -> bool:
        """Whether buf has a tracked object (read without the lock: a hint, track_fresh decides)."""
        obj = self._objects.get(id(buf))
        return obj is not None and obj.user is buf

    def track_fresh(self, spans: list[tuple[Any, int, int]], home: str, checked: list[Any]
                    ) -> list[MemoryObject] | None:
        """New implicit objects for buffers a launch passes, each (buffer, address, nbytes), all
        at `home`, with the checks each passed (`checked_for`, rt/fresh_lane.py); None, tracking
        none, when one is tracked by now, or shares memory with a buffer the user tracked whose
        newest data is on a device (a fresh view of it: the lane acquires nothing, so would read
        its stale host data and leave its device copy valid; acquire() settles them)."""
        objects = self._objects
        with self._lock:
            for buf, address, nbytes in spans:
                obj = objects.get(id(buf))
                if obj is not None and obj.user is buf:
                    return None
                if self._away and self._shares_away(home, address, address + nbytes):
                    return None
            return [self._adopt(buf, home, nbytes, address, True, entry)
                    for (buf, address, nbytes), entry in zip(spans, checked)]

    def _adopt(self, buf: Any, home: str, nbytes: int, address: int, implicit: bool,
               checked: Any = None) -> MemoryObject:
        """Make and keep buf's object (the lock held)."""
        obj = MemoryObject(buf, nbytes, home, address, None, valid_on(home), checked_for=checked,
                           implicit=implicit)
        self._objects[id(buf)] = obj
        stats.bump_one("tracked_objects")
        if implicit:
            self._implicit += 1
            if self._implicit >= self._sweep_at:
                self._sweep()
        return obj

    def _sweep(self) -> None:
        """Forget the buffers a launch tracked that the user has dropped since: their data is home
        after every launch (finish_launch), so forgetting loses nothing, and a program that
        launches on fresh buffers does not keep them all alive (nor their device copies)."""
        left = 0
        for obj in list(self._objects.values()):
            if not obj.implicit:
                continue
            if obj.valid == {obj.home} and held_only_here(obj):
                self._forget(obj)
            else:
                left += 1
        self._implicit = 0
        self._sweep_at = max(SWEEP_AT_LEAST, 2 * left)

    def lookup(self, buf: Any) -> MemoryObject | None:
        """The tracked object of buf. A buffer the user tracked that was resized or freed since is
        an error; one a launch tracked is forgotten (the next launch tracks it afresh)."""
        with self._lock:
            obj = self._find(buf)
            if obj is None or not moved(buf, obj.address, obj.nbytes):
                return obj
            self._forget(obj)
            if obj.implicit:
                return None
            raise MemoryTrackingError(
                f"a tracked buffer was resized or its memory freed or replaced while tracked (it "
                f"had {obj.nbytes} bytes when tracked); the runtime's copies of it are stale and "
                "its newest data may be lost. Call hpvm.untrack_memory(buf) (or "
                "hpvm.request_memory(buf) first, to keep the data) before resizing or freeing a "
                "tracked buffer, then track it again", caller_loc())

    def _find(self, buf: Any) -> MemoryObject | None:
        obj = self._objects.get(id(buf))
        return obj if obj is not None and obj.user is buf else None

    def _forget(self, obj: MemoryObject) -> None:
        _release(obj)
        del self._objects[id(obj.user)]
        self._away.pop(id(obj.user), None)

    def untrack(self, buf: Any) -> None:
        with self._lock:
            obj = self._find(buf)
            if obj is None:
                raise MemoryTrackingError("untrack_memory(): this buffer is not tracked", caller_loc())
            if not moved(buf, obj.address, obj.nbytes):  # a moved buffer cannot take the data
                self._home_for_user(obj)
            self._forget(obj)

    def request(self, buf: Any) -> Any:
        """Make the user's buffer hold the newest data; returns it."""
        with self._lock:
            obj = self.lookup(buf)
            if obj is None:
                raise MemoryTrackingError("request_memory(): this buffer is not tracked (track it with "
                                          "hpvm.track_memory or pass it to a launch first)", caller_loc())
            self._home_for_user(obj)
            return buf

    def bring_home(self, buf: Any) -> None:
        """Make buf's memory hold the newest data, whether buf is tracked or not: its own, and
        that of the tracked buffers sharing the memory (a base's, a view's) whose newest data a
        launch left on a device. For code that reads buf other than through a launch (a strided
        tensor's contiguous copy, made by torch: hpvm_py/torch/op.py)."""
        with self._lock:
            obj = self.lookup(buf)
            if obj is not None:
                self._home_for_user(obj)
            elif self._away:
                low, high = extent(buf)
                self._settle_span(describe(buf).device, low, high, False, None)

    def acquire(self, obj: MemoryObject, device: str, reads: bool, writes: bool) -> Any:
        """The object's buffer on `device`, valid for reading if `reads`; marks writes."""
        if device == obj.home and obj.copies is None and not self._away:
            return obj.user  # never copied anywhere: the user's buffer is the only, valid copy
        with self._lock:
            return self._acquire_held(obj, device, reads, writes)

    def acquire_all(self, objects: list[MemoryObject], device: str, reads: list[bool],
                    writes: list[bool], wanted: list[bool]) -> list[Any]:
        """acquire() of each wanted object, None for the others, under one hold of the lock (a
        stream's item acquires a dozen)."""
        with self._lock:
            if self._away:  # the others are staged from and back to the user's memory itself
                for obj, w, want in zip(objects, writes, wanted):
                    if not want:
                        self._settle_aliases(obj, w)
            return [self._acquire_held(obj, device, r, w) if want else None
                    for obj, r, w, want in zip(objects, reads, writes, wanted)]

    def acquire_recorded(self, needs: Iterable[Any]) -> bool:
        """A replay's acquire() of each buffer its launches were recorded on, under one hold of
        the lock: `needs` have `obj` and `buf` (weak references to the tracked object and to the
        copy the kernels use), `device`, `reads` and `writes`. False at the first whose object is
        gone or whose copy is another now (the normal path runs then)."""
        with self._lock:
            for need in needs:
                obj = need.obj()
                if obj is None or \
                        self._acquire_held(obj, need.device, need.reads, need.writes) is not need.buf():
                    return False
        return True

    def _acquire_held(self, obj: MemoryObject, device: str, reads: bool, writes: bool) -> Any:
        """acquire() with the lock held."""
        valid = obj.valid
        if device == obj.home:
            if self._away:  # (a node on the host: it reads and writes the user's memory)
                self._settle_aliases(obj, writes)
            if obj.copies is None:
                return obj.user
        if device in valid and (len(valid) == 1 or not writes):
            return obj.copy_on(device)  # valid there, and stays so: nothing to copy or mark
        if writes and device != obj.home and self._away:
            # the user's objects sharing its memory (`c` and `c[2:]` both tracked) come home and
            # lose their device copies, which miss this write (their next use settles obj)
            self._settle_aliases(obj, True)
        if reads and device not in valid:
            self._copy_to(obj, device)
        elif obj.copy_on(device) is None:
            obj.copies_dict()[device] = self._allocate_like(obj, device)
        if writes:
            obj.valid = valid_on(device)
        elif reads:
            obj.valid = valid_plus(obj.valid, device)
        if device != obj.home and not obj.implicit:
            self._away[id(obj.user)] = obj
        return obj.copy_on(device)

    def finish_launch(self, objects: list[MemoryObject], keep_device: bool = False) -> None:
        """After a launch: buffers the user did not track get their newest data back, and their
        device copies stop being valid (the user may change the buffer before the next launch),
        unless keep_device (a stream stage: the item's later stages read them; its next push
        starts afresh, see host_data())."""
        with self._lock:
            for obj in objects:
                if obj.implicit:
                    self._bring_home(obj)
                    if not keep_device:
                        obj.valid = valid_on(obj.home)
                    elif obj.valid != valid_on(obj.home):
                        # its device copies outlive this stage: a write through another buffer
                        # over its memory (the item's array and its view, both pushed) must make
                        # them stale, as for one the user tracked (_settle_aliases)
                        self._away[id(obj.user)] = obj

    def host_data(self, objects: list[MemoryObject]) -> None:
        """The user's buffers hold the data: device copies of untracked ones are stale. A stream
        says so for a pushed buffer only when no earlier item in flight uses it (rt/stream/hazards.py):
        else its valid copies hold what that item writes, and its host copy may still be on its
        way back."""
        with self._lock:
            for obj in objects:
                if obj.implicit:
                    obj.valid = valid_on(obj.home)

    def release_all(self) -> None:
        """Bring every buffer's newest data home and let go of all. One that cannot take its data
        (made read-only meanwhile) is reported once the others have theirs."""
        with self._lock:
            refused = None
            for obj in self._objects.values():
                if not moved(obj.user, obj.address, obj.nbytes):
                    try:
                        self._bring_home(obj)
                    except MemoryTrackingError as exc:
                        refused = refused or exc
                _release(obj)
            self._objects.clear()
            self._away.clear()
        if refused is not None:
            raise refused

    # -- copies -----------------------------------------------------------------------------

    def _bring_home(self, obj: MemoryObject) -> None:
        if obj.home not in obj.valid:
            self._copy_to(obj, obj.home)

    def _home_for_user(self, obj: MemoryObject) -> None:
        """_bring_home() for request/untrack: its memory's newest data may be another object's too
        (a tracked view's, on a device), even where obj's host copy is valid. (Not at every
        launch's end: a buffer that a launch only read had its aliases settled when copied.)"""
        if obj.home not in obj.valid:
            self._copy_to(obj, obj.home)
        elif self._away:  # (the memory of its elements: a strided view's spans more than nbytes)
            self._settle_aliases(obj, False, extent(obj.user))

    def _copy_to(self, obj: MemoryObject, device: str) -> None:
        if self._away:
            self._settle_aliases(obj, device == obj.home)
        self._copy(obj, device)

    def _settle_aliases(self, obj: MemoryObject, writes: bool,
                        bounds: tuple[int, int] | None = None) -> None:
        """Before obj's memory at home is read (copied to a device, brought home, or used by a
        node on the host) or obj is written (`writes`: its copy brought home, a node on the host
        writes it, or a device writes its copy there): the buffers the user tracked that share
        that memory with it (`c` tracked, its view `c[2:]` launched or tracked too), other
        objects, bring their newest data home first, or obj read their stale host data (and
        request_memory(c) wrote it back over what the view's launch wrote); and once obj is
        written, their device copies are stale (their home copies too, until obj comes home:
        their next copy or use settles obj, which is away then). `bounds`: the memory obj's
        elements occupy, where not [address, address + nbytes)."""
        low, high = bounds or (obj.address, obj.address + obj.nbytes)
        self._settle_span(obj.home, low, high, writes, obj)

    def _settle_span(self, home: str, low: int, high: int, writes: bool,
                     reader: MemoryObject | None) -> None:
        """_settle_aliases for memory [low, high) at `home`, read or written by `reader`'s
        buffer, or by one not tracked (None)."""
        back = []  # valid at home alone: no longer away (until a device acquires it again)
        for key, other in self._away.items():
            if other.valid == valid_on(other.home):
                back.append(key)
                continue
            if other is reader or other.home != home or \
                    not (other.address < high and low < other.address + other.nbytes):
                continue
            if other.implicit:
                # a stream stage's (finish_launch): home after each stage that writes it, so only
                # its device copies go stale; one not home is being written by another item's
                # stage, which no item is ordered with, and which brings it home when done
                if writes and home in other.valid:
                    other.valid = valid_on(home)
                continue
            if home not in other.valid:
                with unstaged():  # (a stream item's copy in, staged next, reads it at once)
                    self._copy(other, home)
            if writes:
                other.valid = valid_on(home)
        for key in back:  # (so that acquire's fast path serves host buffers again)
            del self._away[key]

    def _shares_away(self, home: str, low: int, high: int) -> bool:
        """Whether memory [low, high) at `home` is shared with a buffer the user tracked whose
        newest data is not (only) there (the lock held)."""
        return any(other.home == home and other.valid != valid_on(home) and
                   other.address < high and low < other.address + other.nbytes
                   for other in self._away.values())

    def _copy(self, obj: MemoryObject, device: str) -> None:
        if not obj.valid:
            obj.valid = valid_on(obj.home)  # never written: the user's contents are the data
            if device == obj.home:
                return
        if device == obj.home and isinstance(obj.user, np.ndarray) and not obj.user.flags.writeable:
            raise MemoryTrackingError(
                "a tracked array was made read-only while its newest data was on a device, so it "
                "cannot take that data back; make it writeable again (array.flags.writeable = "
                "True), then call hpvm.request_memory or hpvm.untrack_memory on it", caller_loc())
        # prefer a peer device over the host as the source
        sources = sorted(obj.valid, key=lambda d: d == HOST)
        src = sources[0]
        t0 = profile.now() if profile.on else 0
        fn = TRANSFERS.get((_kind(src), _kind(device)))
        if fn is None:
            raise MemoryTrackingError(f"no way to copy memory from {src} to {device}", caller_loc())
        timer = profile.gpu_begin(device if src == HOST else src) if t0 else None
        copies = obj.copies_dict()
        copies[device] = fn(copies[src], device, copies.get(device))
        obj.valid = valid_plus(obj.valid, device)
        direction = "h2d" if src == HOST else ("d2h" if device == HOST else "d2d")
        stats.copied(direction, obj.nbytes)
        if t0:
            profile.gpu_end(timer, "gpu_copy", direction, device if src == HOST else src,
                            {"bytes": obj.nbytes, "src": src, "dst": device})
            profile.copy(direction, obj.nbytes, src, device, t0)

    def _allocate_like(self, obj: MemoryObject, device: str) -> Any:
        fn = TRANSFERS.get(("alloc", _kind(device)))
        if fn is None:
            raise MemoryTrackingError(f"no allocator for device {device}", caller_loc())
        return fn(obj.copy_on(obj.home), device, None)
