"""The cpu target's error words of a launch: a stop word, then a slot per partition (memory.py's
CPU_SLOT_WORDS). Partitions run at once, so the failure recorded first in time need not be the
first in instance order, the one the python target reports: the smallest key's is."""
from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

from .memory import CPU_KEY_WORD, CPU_SLOT_WORDS, CPU_STOP_WORD

NO_FAILURE = (1 << 63) - 1  # the stop word while no failure is recorded: above every key


@dataclass(frozen=True)
class ErrorLayout:
    """The error words of a launch shape before it runs (ErrorSlots): the stop word, then per
    partition a zeroed slot with its key (memory.py); `offsets`: each slot's, in bytes."""

    words: np.ndarray
    offsets: np.ndarray

    @staticmethod
    def of(keys: list[int]) -> "ErrorLayout":
        words = np.zeros(1 + len(keys) * CPU_SLOT_WORDS, np.int64)
        words[0] = NO_FAILURE
        slots = words[1:].reshape(-1, CPU_SLOT_WORDS)
        slots[:, CPU_KEY_WORD] = keys
        offsets = 8 * np.arange(1, len(words), CPU_SLOT_WORDS, dtype=np.int64)
        slots[:, CPU_STOP_WORD] = -offsets  # the stop word, from the slot: the same every launch
        return ErrorLayout(words, offsets)


class ErrorSlots:
    """A launch's error words (ErrorLayout), which records[:, 7] point at. Partitions run at once,
    so the first failure recorded in time need not be the first in instance order, the one python
    reports: the smallest key's is."""

    def __init__(self, layout: ErrorLayout, records: np.ndarray):
        self.layout = layout
        self.words = (ctypes.c_int64 * len(layout.words)).from_buffer_copy(layout.words)
        records[:, 7] = ctypes.addressof(self.words) + layout.offsets

    def take(self) -> list[int] | None:
        """The failure first in instance order as (site + 1, index, limit), or None; clears the
        words for the next run."""
        if self.words[0] == NO_FAILURE:
            return None
        slots = np.frombuffer(self.words, np.int64)[1:].reshape(-1, CPU_SLOT_WORDS)
        failed = np.flatnonzero(slots[:, 0])
        error = slots[failed[np.argmin(slots[failed, CPU_KEY_WORD])], :3].tolist()
        ctypes.memmove(self.words, self.layout.words.ctypes.data, self.layout.words.nbytes)
        return error
