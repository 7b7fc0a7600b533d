"""The symmetric heap on the cpu target: one POSIX shared-memory segment per rank, mapped by every
rank on the same host, with a bump allocator that every rank runs identically.
(docs/architecture.md, "Module notes": distributed/heap.py)"""
from __future__ import annotations

import ctypes
import mmap
import os
from typing import Any

import numpy as np

from ..errors import DistributedError
from ..support import settings
from .allocator import ALIGN, SymmetricAllocator

HEADER_BYTES = 4096
DEFAULT_HEAP_BYTES = 128 << 20
FLAG_OFFSET = 0  # i64 arrival counter
DESC_OFFSETS = (64, 64 + 256)  # two slots of DESC_WORDS i64 each, used alternately
DESC_WORDS = 32
# after the control block of a CPU rank's data heap: two staging slots of at most this many bytes
# (the small one-shot all-reduce copies its input there: local.py)
STAGE_SLOT_BYTES = 64 << 10


def heap_bytes_from_env() -> int:
    """HPVM_HEAP_BYTES (a number of bytes, K/M/G suffix allowed), else 128 MiB."""
    size = settings.byte_count(settings.HEAP_BYTES, DistributedError)
    if size is None:
        return DEFAULT_HEAP_BYTES
    if size < HEADER_BYTES + ALIGN:
        raise DistributedError(f"HPVM_HEAP_BYTES={settings.HEAP_BYTES.get()!r} must be a number "
                               f"of bytes of at least {HEADER_BYTES + ALIGN}")
    return size


def heap_dir() -> str:
    return settings.HEAP_DIR.get()


def segment_path(job: str, rank: int) -> str:
    return os.path.join(heap_dir(), f"hpvm-heap-{job}-r{rank}")


def create_segment(path: str, size: int) -> mmap.mmap:
    """This rank's own segment, its memory reserved now."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        raise DistributedError(f"cannot create the symmetric heap segment {path}: {exc.strerror}") from None
    try:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as exc:
            os.unlink(path)
            free = _free_bytes(os.path.dirname(path))
            raise DistributedError(f"cannot reserve a symmetric heap of {size} bytes in "
                                   f"{os.path.dirname(path)} ({free} bytes free there): {exc.strerror}; "
                                   "set HPVM_HEAP_BYTES smaller (or HPVM_HEAP_DIR)") from None
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def map_segment(path: str, size: int) -> mmap.mmap:
    """A peer's segment on this host."""
    try:
        fd = os.open(path, os.O_RDWR)
    except OSError as exc:
        raise DistributedError(f"cannot open a peer's symmetric heap segment {path}: {exc.strerror} "
                               "(are the ranks on one host?)") from None
    try:
        if os.fstat(fd).st_size < size:
            raise DistributedError(f"the peer's heap segment {path} is smaller than {size} bytes")
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


def _free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def _address(m: mmap.mmap) -> int:
    return ctypes.addressof(ctypes.c_char.from_buffer(m))


class SymmetricHeap(SymmetricAllocator):
    """This rank's heap and its mappings of the heaps of the other ranks on this host."""

    device = "host"  # where the heap's memory lives (the GPU heap's is the rank's device)

    def __init__(self, rank: int, size: int, mappings: dict[int, mmap.mmap], world_size: int,
                 staging: bool = False):
        self.rank = rank
        self.size = size
        # staging slots (the same on every rank: every rank has the same size), none in small heaps
        slot = min(STAGE_SLOT_BYTES, size // 64 // ALIGN * ALIGN) if staging else 0
        self.stage_slot_bytes = slot if slot >= 4096 else 0
        self.header = HEADER_BYTES + 2 * self.stage_slot_bytes
        self._maps = mappings  # rank -> mapping, for this rank and its peers on the same host
        self.bases = np.zeros(world_size, dtype=np.int64)  # 0: not mapped here (another host)
        for q, m in mappings.items():
            self.bases[q] = _address(m)
        self.bases_array = self.bases  # the heap protocol's name for the host int64 array
        self.my_base = int(self.bases[rank])
        self._start_allocations()
        self._views: dict[tuple, Any] = {}
        # the control blocks as i64 arrays, by rank
        self.control = {q: np.frombuffer(m, dtype=np.int64, count=HEADER_BYTES // 8)
                        for q, m in mappings.items()}

    def tensor(self, rank: int, offset: int, count: int, dtype: Any) -> Any:
        """A torch tensor of `count` elements at `offset` of rank's heap (mapped here); the
        collectives ask for the same views call after call, so they are kept."""
        key = (rank, offset, count, dtype)
        view = self._views.get(key)
        if view is None:
            import torch

            view = torch.frombuffer(self._maps[rank], dtype=dtype, count=max(count, 1), offset=offset)
            view = self._views[key] = view[:count]
            if len(self._views) > 4096:  # bounded: views of buffers no longer used go
                self._views.pop(next(iter(self._views)))
        return view

    def stage_offset(self, parity: int) -> int:
        """The heap offset of staging slot `parity` (0 or 1)."""
        return HEADER_BYTES + parity * self.stage_slot_bytes

    def array(self, rank: int, offset: int, count: int, dtype: Any) -> np.ndarray:
        """A NumPy view of `count` elements at `offset` of rank's heap (mapped here)."""
        return np.frombuffer(self._maps[rank], dtype=dtype, count=count, offset=offset)

    # -- addresses --------------------------------------------------------------------------

    def flag_address(self, rank: int) -> int:
        return int(self.bases[rank]) + FLAG_OFFSET

    def descriptor(self, rank: int, slot: int) -> np.ndarray:
        start = DESC_OFFSETS[slot] // 8
        return self.control[rank][start:start + DESC_WORDS]
