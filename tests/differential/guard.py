"""Guard zones: buffers passed as views into the middle of larger arrays whose ends hold canary
bytes, so that a write outside a buffer (however it got past the checks) is seen afterwards."""
from __future__ import annotations

import numpy as np

GUARD_BYTES = 1 << 15  # on each side: more than any stray index of the tests reaches
CANARY = 0xA5


class Guarded:
    """`view` is the buffer to pass; `intact()` tells whether the canaries survived."""

    def __init__(self, values: np.ndarray):
        values = np.ascontiguousarray(values).reshape(-1)
        item = values.dtype.itemsize
        self._pad = GUARD_BYTES // item
        self._full = np.empty(values.size + 2 * self._pad, values.dtype)
        self._full.view(np.uint8)[:] = CANARY
        self.view = self._full[self._pad:self._pad + values.size]
        self.view[:] = values

    def intact(self) -> bool:
        raw = self._full.view(np.uint8)
        front = GUARD_BYTES // self._full.dtype.itemsize * self._full.dtype.itemsize
        back = front + self.view.nbytes
        return bool((raw[:front] == CANARY).all() and (raw[back:] == CANARY).all())
