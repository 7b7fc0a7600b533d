"""Copies between host and GPU that do not block the host: a streaming GPU stage's (rt/stream/stage_launch.py).
(docs/architecture.md, "Module notes": device/staging.py)"""
from __future__ import annotations

import contextlib
import threading
from typing import Any, Iterator

import numpy as np

from . import faults
from .libcuda import copy_to_host_async

_local = threading.local()
_PARALLEL_BYTES = 1 << 16  # host copies from this size on go through torch


class PinnedPool:
    """Pinned host buffers of one stream stage by size, reused item after item."""

    def __init__(self, keep: int = 8):
        self._keep = keep  # buffers kept per size (a stage's items in flight use a few)
        self._free: dict[int, list[Any]] = {}

    def take(self, nbytes: int) -> Any:
        free = self._free.get(nbytes)
        if free:
            return free.pop()
        return pinned_bytes(nbytes)

    def give(self, buffers: list[Any]) -> None:
        """Buffers whose copies are all done."""
        for buf in buffers:
            free = self._free.setdefault(buf.numel(), [])
            if len(free) < self._keep:
                free.append(buf)


class StagedCopies:
    """The copies of one stage item through pinned memory; those to the host wait for
    complete()."""

    def __init__(self, pool: PinnedPool, stream: int | None = None) -> None:
        self._pool = pool
        self._stream = stream  # the CUDA stream handle that is current for the copies, if known:
        # copies to the host then go through libcuda (torch's copy_ costs microseconds more)
        self._pending: list[tuple[Any, np.ndarray]] = []  # (pinned source, host bytes)
        self._taken: list[Any] = []  # the pinned buffers of its copies, both ways

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """Copies on this thread go through this object until the scope ends."""
        _local.staged = self
        try:
            yield
        finally:
            _local.staged = None

    def to_device(self, src: np.ndarray, dst: Any) -> None:
        """Queue the copy of host bytes `src` into CUDA bytes `dst` on the current stream."""
        pinned = self._pool.take(src.size)
        host_copy(pinned.numpy(), src)
        dst.copy_(pinned, non_blocking=True)
        self._taken.append(pinned)

    def to_host(self, src: Any, dst: np.ndarray) -> None:
        """Queue the copy of device bytes `src` (a uint8 tensor, or the fake device's NumPy
        bytes) into host bytes `dst`, which complete() fills."""
        if isinstance(src, np.ndarray) or src.device.type == "cpu":
            # the fake device's memory, as it is now: the fake device ran the work queued before
            # this copy, and a stage may queue its next item's kernel before complete()
            self._pending.append((src.copy() if isinstance(src, np.ndarray) else src.clone(), dst))
            return
        pinned = self._pool.take(src.numel())
        code = -1 if self._stream is None else \
            copy_to_host_async(pinned.data_ptr(), src.data_ptr(), src.numel(), self._stream)
        if code == -1:
            pinned.copy_(src, non_blocking=True)
        faults.raise_for(max(code, 0), "copying a result to the host")
        self._taken.append(pinned)
        self._pending.append((pinned, dst))

    def complete(self) -> None:
        """Once the queued copies are done: fill their host destinations; the pinned buffers go
        back to the pool."""
        pending, self._pending = self._pending, []
        for src, dst in pending:
            host_copy(dst, src if isinstance(src, np.ndarray) else src.numpy())
        taken, self._taken = self._taken, []
        self._pool.give(taken)


def pinned_bytes(nbytes: int) -> Any:
    """Flat bytes of pinned host memory (a torch uint8 tensor), which the DMA engine reads and
    writes without the host."""
    import torch  # noqa: PLC0415 - the device layer's CUDA runtime

    return torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)


def host_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """dst[...] = src; a large one through torch, which copies in parallel without the GIL."""
    if src.nbytes < _PARALLEL_BYTES or not src.flags.writeable:  # (torch warns of read-only arrays)
        dst[...] = src
        return
    import torch  # noqa: PLC0415

    torch.from_numpy(dst).copy_(torch.from_numpy(src))


def staged() -> StagedCopies | None:
    """The StagedCopies active on this thread, if any."""
    return getattr(_local, "staged", None)


@contextlib.contextmanager
def unstaged() -> Iterator[None]:
    """Copies on this thread done at once, not through the active StagedCopies, until the scope
    ends: a copy home whose destination the host reads before the item's copies complete."""
    held = staged()
    _local.staged = None
    try:
        yield
    finally:
        _local.staged = held
