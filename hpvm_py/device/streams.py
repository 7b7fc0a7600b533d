"""CUDA streams: side streams and events of a replayed GPU launch (rt/replay_streams.py decides their
use), and a streaming stage's own stream with one event per item (StageStream).

Stream 0 is the launch's own stream (the one it was recorded on, or a CUDA graph's capture
stream); streams 1.. are side streams, forked from it (each waits for what stream 0 queued so far)
and joined back at the end (stream 0 waits for each), so that the host's later copies and the
user's later work on stream 0 see every kernel. Events are made once and recorded again at each
replay (a wait already queued keeps the state it saw).

On the fake device the same calls append what they would do to FAKE_LOG, so CI checks the
ordering without a GPU.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

from ..support.torch_streams import torch_stream
from . import faults
from .libcuda import CUDA_ERROR_NOT_READY, DriverEvents, driver_events

FAKE_LOG: list[tuple[Any, ...]] = []  # ("fork" | "join", stream) ("record" | "wait", stream, event)
# ("launch", leaf, stream)


class DeviceStreams:
    def __init__(self, device: str, used: tuple[int, ...], events: int, origin: Any):
        self.device = device
        self.fake = not device.startswith("cuda")
        self.origin = origin  # stream 0's handle, as recorded
        self.used = used
        self._external: dict[Any, Any] = {}  # stream 0's handles as torch streams
        if self.fake:
            self._streams: dict[int, Any] = {k: k for k in used}
            self._events: list[Any] = list(range(events))
            self._forks = {k: ("fork", k) for k in used}
            self._joins = {k: ("join", k) for k in used}
            return
        import torch  # noqa: PLC0415 - the device layer's CUDA runtime

        self._streams = {k: torch.cuda.Stream(device) for k in used}
        self._events = [torch.cuda.Event() for _ in range(events)]
        self._forks = {k: torch.cuda.Event() for k in used}
        self._joins = {k: torch.cuda.Event() for k in used}

    def handle(self, k: int, origin: Any) -> Any:
        """The CUDA stream handle of stream k (stream 0: `origin`, the launch's own)."""
        return origin if k == 0 else (k if self.fake else self._streams[k].cuda_stream)

    def fork(self, origin: Any) -> None:
        for k in self.used:
            self._record(0, self._forks[k], origin)
            self._wait(k, self._forks[k], origin)

    def join(self, origin: Any) -> None:
        for k in self.used:
            self._record(k, self._joins[k], origin)
            self._wait(0, self._joins[k], origin)

    def record(self, k: int, event: int, origin: Any) -> None:
        self._record(k, self._events[event], origin)

    def wait(self, k: int, event: int, origin: Any) -> None:
        self._wait(k, self._events[event], origin)

    def launched(self, leaf: str, k: int) -> None:
        if self.fake:
            FAKE_LOG.append(("launch", leaf, k))

    def _stream(self, k: int, origin: Any) -> Any:
        import torch  # noqa: PLC0415

        if k:
            return self._streams[k]
        stream = self._external.get(origin)
        if stream is None:
            stream = self._external[origin] = torch_stream(origin)
        return stream

    def _record(self, k: int, event: Any, origin: Any) -> None:
        if self.fake:
            FAKE_LOG.append(("record", k, event))
        else:
            event.record(self._stream(k, origin))

    def _wait(self, k: int, event: Any, origin: Any) -> None:
        if self.fake:
            FAKE_LOG.append(("wait", k, event))
        else:
            self._stream(k, origin).wait_event(event)


class ItemEvent:
    """The end of one stream item's work on a stage's stream: done() asks without waiting,
    wait() waits (a fault of a kernel before it is reported as such); on the fake device, where
    everything ran when it was queued, both are immediate. `event` is a torch.cuda.Event, or
    `handle` a CUDA event of libcuda's (StageStream.record_again)."""

    def __init__(self, event: Any = None, handle: int = 0):
        self.event = event
        self.handle = handle

    def done(self) -> bool:
        if self.handle:
            code = _driver().query(self.handle)
            if code == CUDA_ERROR_NOT_READY:
                return False
            faults.raise_for(code, "waiting for a stream item")
            return True
        if self.event is None:
            return True
        try:
            return bool(self.event.query())
        except Exception as exc:  # noqa: BLE001 - a kernel fault surfaces at the query
            raise faults.reported(exc) from None

    def wait(self) -> None:
        if self.handle:
            faults.raise_for(_driver().synchronize(self.handle), "waiting for a stream item")
            return
        if self.event is None:
            return
        try:
            self.event.synchronize()
        except Exception as exc:  # noqa: BLE001
            raise faults.reported(exc) from None


def _driver() -> DriverEvents:
    events = driver_events()
    assert events is not None  # (an event has a handle only where libcuda was loaded)
    return events


class StageStream:
    """A streaming stage's own CUDA stream on its device: the copies, kernels and allocations of
    the stage's items go there (use(): the device and the stream made current on the calling
    thread, a stage's own; every GPU stage calls it before its work, so none restores the last),
    so they overlap with the other stages' work; record() marks the end of an item with an event,
    and wait() makes the stream wait for another stage's event without the host waiting."""

    def __init__(self, device: str, name: str):
        self.name = name  # the stage's node, as FAKE_LOG names the stream
        self.fake = not device.startswith("cuda")
        self._stream: Any = None
        self.handle: Any = None  # the CUDA stream handle kernels are launched on (None: fake)
        if not self.fake:
            import torch  # noqa: PLC0415 - the device layer's CUDA runtime

            self._stream = torch.cuda.Stream(torch.device(device))
            self.handle = self._stream.cuda_stream
            self._ids = (self._stream.stream_id, self._stream.device_index, self._stream.device_type)

    def use(self) -> None:
        if self._stream is not None:
            _set_current(self._ids)  # its device too

    def record(self) -> ItemEvent:
        if self.fake:
            event = ItemEvent()
            FAKE_LOG.append(("record", self.name, event))
            return event
        import torch  # noqa: PLC0415

        event = torch.cuda.Event()
        event.record(self._stream)
        return ItemEvent(event)

    def record_again(self, event: ItemEvent | None) -> ItemEvent:
        """record(), into `event` (made here when None): one event per slot of whole items,
        recorded again for each item. Sound because a slot takes its next item only once the
        last completed, and a wait already queued keeps the state it saw."""
        events = None if self.fake else driver_events()
        if events is None:
            return self.record()
        if event is None or not event.handle:
            handle = events.create()
            if not handle:
                return self.record()
            event = ItemEvent(handle=handle)
        faults.raise_for(events.record(event.handle, self.handle), "recording a stream item's end")
        return event

    def wait(self, event: ItemEvent) -> None:
        if self.fake:
            FAKE_LOG.append(("wait", self.name, event))
        elif event.handle:
            faults.raise_for(_driver().stream_wait(self.handle, event.handle, 0), "ordering stream items")
        elif event.event is not None:
            self._stream.wait_event(event.event)

    def launched(self, leaf: str) -> None:
        if self.fake:
            FAKE_LOG.append(("launch", leaf, self.name))

    def synchronize(self) -> None:
        if self._stream is not None:
            self._stream.synchronize()


def stage_stream(stream: StageStream | None) -> Callable[[], None]:
    """Make a stage thread's stream (rt/stream/stages.py) current; returns what ends an item: waiting for
    the stream, so that the next stage (another stream) finds the item's buffers written. On the
    host: nothing to do."""
    if stream is None:
        return lambda: None
    stream.use()
    return stream.synchronize


@contextlib.contextmanager
def kept_current_stream(device: str) -> Iterator[None]:
    """The calling thread's current CUDA device and streams as they were, after work that makes a
    stage's stream current (StageStream.use) on `device`: a user's thread that helps a stream's
    runner (rt/stream/items.py) keeps its own. Nothing to keep on the fake device. (By the
    streams' ids: torch.cuda.current_stream parses a device and builds a Stream object each call,
    and this runs for every item the host thread starts.)"""
    if not device.startswith("cuda"):
        yield
        return
    import torch  # noqa: PLC0415

    here = torch._C._cuda_getDevice()
    user = torch._C._cuda_getCurrentStream(here)  # (stream id, device index, device type)
    theirs = _device_index(device, here)
    ours = user if theirs == here else torch._C._cuda_getCurrentStream(theirs)
    try:
        yield
    finally:
        if ours is not user:
            _set_current(ours)
        _set_current(user)  # its device too


def _device_index(device: str, current: int) -> int:
    """The index of "cuda" or "cuda:N" (plain "cuda": the current device, as torch reads it)."""
    return int(device[5:]) if device.startswith("cuda:") else current


def _set_current(ids: tuple[int, int, int]) -> None:
    """Make the stream of these ids (stream id, device index, device type) current on its device,
    as torch.cuda.set_stream does."""
    import torch  # noqa: PLC0415

    torch._C._cuda_setStream(stream_id=ids[0], device_index=ids[1], device_type=ids[2])


def forget_event(event: ItemEvent | None) -> None:
    """Destroy a libcuda event of record_again() no one waits for any more."""
    if event is not None and event.handle:
        _driver().destroy(event.handle)
        event.handle = 0
