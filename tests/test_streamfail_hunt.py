"""Streams when things go wrong (a hunt's findings): each test failed before its fix."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import StreamError
from programs import stream_graphs as g

N = 8


def test_timeouts_of_numpy_floats_and_huge_integers_are_seconds(target: str, rng) -> None:
    """A timeout is any real number of seconds (docs/streaming.md): a NumPy float32 or float16
    reached Lock.acquire as a float32 deadline (an internal TypeError), and a negative int beyond
    a float's range failed in the deadline's sum (an internal OverflowError)."""
    hpvm.init(target)
    try:
        h = hpvm.launch(g.scaled, stream=True, depth=2)
        with pytest.raises(StreamError, match="nothing pushed is left"):
            hpvm.pop(h, timeout=-10**400)
        items = [(rng.standard_normal(N).astype(np.float32), np.zeros(N, np.float32),
                  np.float32(rng.integers(1, 9))) for _ in range(3)]
        for x, y, k in items:
            hpvm.push(h, x, y, k, N, timeout=np.float32(120))
        assert hpvm.pop(h, timeout=np.float16(60)) == (N,)
        for _ in items[1:]:
            assert hpvm.pop(h, timeout=np.float32(60)) == (N,)
        hpvm.wait(h, timeout=np.float32(60))
        for x, y, k in items:
            np.testing.assert_array_equal(y, x * k)
        h = hpvm.launch(g.scaled, stream=True)
        x, y, k = items[0]
        hpvm.push(h, x, y, k, N, timeout=10**400)
    finally:
        hpvm.cleanup(timeout=np.float32(60))  # stops h
