"""CUDA streams: side streams and events of a replayed GPU launch (rt/streams.py decides their
use), and a streaming stage's own stream (stage_stream).

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

FAKE_LOG: list[tuple[Any, ...]] = []  # ("fork" | "join", stream) ("record" | "wait", stream, event)
# ("launch", leaf, stream)


class DeviceStreams:
    def __init__(self, device: str, used: tuple[int, ...], events: int, origin: Any):
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
            stream = self._external[origin] = torch.cuda.ExternalStream(origin)
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


@contextlib.contextmanager
def stage_stream(device: str) -> Iterator[Callable[[], None]]:
    """A streaming stage's own CUDA stream, current in its thread while the stage runs: its
    copies and kernels overlap with the other stages'. Yields what ends an item: waiting for the
    stream, so that the next stage (another stream) finds the item's buffers written. On the host
    and the fake device: nothing to do."""
    if not device.startswith("cuda"):
        yield lambda: None
        return
    import torch  # noqa: PLC0415

    stream = torch.cuda.Stream(device)
    with torch.cuda.stream(stream):
        yield stream.synchronize
