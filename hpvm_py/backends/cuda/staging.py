"""Copies between host and GPU that do not block the host: a streaming GPU stage's (rt/stage_launch.py).

A plain copy between a NumPy array (pageable memory) and the GPU makes the calling thread wait
until the copy is done, and a copy to the host also waits for every kernel queued before it. A
stage queues its item's copies on its own stream instead, through pinned host memory that the
DMA engine reads and writes by itself:

- to the device: the host data goes into a pinned buffer (a memcpy on the host), and the
  copy from there is queued on the current stream;
- to the host: the copy into a pinned buffer is queued on the current stream (after the item's
  kernel), and complete(), called once the item's event has passed, moves the bytes into the
  destination (a memcpy).

While `StagedCopies.active(...)` lasts, the tracker's transfer functions and the fetch of kernel
outputs (devices.py, outputs.py) take this path. Torch's pinned-memory allocator keeps a pinned
buffer from being reused before the copies queued on it are done, so the buffers are let go right
after queueing (to the device) or completing (to the host).

A stream's scheduler thread hands the large host copies of complete() to a `HostCopier`, a thread
of its own (a frame-sized memcpy costs as much host time as starting a stage's kernel, and torch's
copy runs without the GIL); the stream waits for them before pop() returns the item and before its
scheduler thread ends.
"""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from typing import Any, Iterator

import numpy as np

_local = threading.local()
_PARALLEL_BYTES = 1 << 16  # host copies from this size on go through torch


class StagedCopies:
    """The copies to the host of one stage item, waiting for complete()."""

    def __init__(self) -> None:
        self._pending: list[tuple[Any, np.ndarray]] = []  # (pinned source, host bytes)

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Copies on this thread go through this object until the scope ends."""
        _local.staged = self
        try:
            yield
        finally:
            _local.staged = None

    @staticmethod
    def to_device(src: np.ndarray, dst: Any) -> None:
        """Queue the copy of host bytes `src` into CUDA bytes `dst` on the current stream."""
        import torch  # noqa: PLC0415 - the device layer's CUDA runtime

        pinned = torch.empty(src.size, dtype=torch.uint8, pin_memory=True)
        _host_copy(pinned.numpy(), src)
        dst.copy_(pinned, non_blocking=True)

    def to_host(self, src: Any, dst: np.ndarray) -> None:
        """Queue the copy of device bytes `src` (a uint8 tensor, or the fake device's NumPy
        bytes) into host bytes `dst`, which complete() fills."""
        if isinstance(src, np.ndarray) or src.device.type == "cpu":
            self._pending.append((src, dst))  # the fake device's memory: read at complete()
            return
        import torch  # noqa: PLC0415

        pinned = torch.empty(src.numel(), dtype=torch.uint8, pin_memory=True)
        pinned.copy_(src, non_blocking=True)
        self._pending.append((pinned, dst))

    def complete(self, copier: "HostCopier | None" = None) -> None:
        """Once the queued copies are done: fill their host destinations (the large ones on
        `copier`'s thread, when given)."""
        pending, self._pending = self._pending, []
        later = []
        for src, dst in pending:
            data = src if isinstance(src, np.ndarray) else src.numpy()
            if copier is not None and dst.nbytes >= _PARALLEL_BYTES:
                later.append((dst, data, src))  # (src: the pinned buffer stays alive until copied)
            else:
                _host_copy(dst, data)
        if later:
            copier.submit(later)


class HostCopier:
    """Host copies on a thread of its own, in submission order; flush() waits for those
    submitted so far."""

    def __init__(self, name: str):
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._changed = threading.Condition()
        self._submitted = 0
        self._copied = 0
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def submit(self, copies: list[tuple[np.ndarray, np.ndarray, Any]]) -> None:
        """Copy each (destination, source, owner of the source) later."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True, name=self._name)
            self._thread.start()
        with self._changed:
            self._submitted += 1
        self._queue.put(copies)

    def flush(self, deadline: float | None, poll: float = 0.05) -> bool:
        """Wait until every copy submitted so far is done (False: the deadline, a time.monotonic()
        value, passed first); raises the error of a failed copy."""
        with self._changed:
            target = self._submitted
            while self._copied < target:
                left = poll if deadline is None else min(poll, deadline - time.monotonic())
                if left <= 0:
                    return False
                self._changed.wait(left)
            if self._error is not None:
                raise self._error
        return True

    def close(self) -> None:
        """End the thread once the copies submitted so far are done."""
        if self._thread is not None:
            self._queue.put(None)
            self._thread = None

    def _run(self) -> None:
        while True:
            copies = self._queue.get()
            if copies is None:
                return
            try:
                for dst, src, _ in copies:
                    _host_copy(dst, src)
            except BaseException as exc:  # noqa: BLE001 - reported by flush()
                self._error = self._error or exc
            with self._changed:
                self._copied += 1
                self._changed.notify_all()


def _host_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src; a large one through torch, which copies in parallel without the GIL."""
    if src.nbytes < _PARALLEL_BYTES or not src.flags.writeable:  # (torch warns of read-only arrays)
        dst[...] = src
        return
    import torch  # noqa: PLC0415

    torch.from_numpy(dst).copy_(torch.from_numpy(src))


def staged() -> StagedCopies | None:
    """The StagedCopies active on this thread, if any."""
    return getattr(_local, "staged", None)
