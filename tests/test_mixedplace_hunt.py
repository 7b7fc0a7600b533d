"""Hunt of mixed placements: one buffer used by nodes on different targets across launches, with
the runtime's fast paths (replays, rebinds, the fresh lane) in between (docs/placement.md,
"Moving data"; docs/runtime.md, "Buffers").

Without a GPU the gpu target runs on fake devices (fake:0, fake:1) through Triton's interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.backends import registry

needs_fake = pytest.mark.skipif(not registry.available("gpu") or registry.available("nvptx"),
                                reason="fake devices stand in only where there is no CUDA GPU (CI)")
pytestmark = needs_fake

N = 8


@hpvm.leaf
def mp_bump(y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] * 0.5 + 3.0


@hpvm.leaf
def mp_twice(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] * 2.0


@hpvm.leaf
def mp_add_one(y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = y[i] + 1.0


@hpvm.graph
def mp_on_gpu(y: InOut[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(mp_bump, grid=n, y=y, y_bytes=y_bytes, hint="gpu")


@hpvm.graph
def mp_read_on_host(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(mp_twice, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


@hpvm.graph
def mp_write_on_host(y: InOut[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(mp_add_one, grid=n, y=y, y_bytes=y_bytes)


@pytest.mark.parametrize("write", [False, True])
def test_fresh_views_of_a_tracked_buffer_whose_data_is_on_a_gpu(write: bool) -> None:
    """A host-only graph launched on a fresh view of a tracked buffer each step (the graph's fresh
    lane serves buffers never seen) must see what a gpu node wrote into the buffer, and its own
    writes through the view must not be lost to the buffer's older device copy."""
    rng = np.random.default_rng()
    base = rng.integers(-8, 8, N).astype(np.float32)
    expected = base.copy()
    with hpvm.runtime("cpu"):
        hpvm.track_memory(base)
        for _ in range(4):
            hpvm.wait(hpvm.launch(mp_on_gpu, base, base.nbytes, N))  # newest data on fake:0
            expected = expected * 0.5 + 3.0
            view = base[:]  # a new view each step
            if write:
                hpvm.wait(hpvm.launch(mp_write_on_host, view, view.nbytes, N))
                expected = expected + 1.0
            else:
                out = np.zeros(N, np.float32)
                hpvm.wait(hpvm.launch(mp_read_on_host, view, view.nbytes, out, out.nbytes, N))
                np.testing.assert_array_equal(out, expected * 2.0)
        hpvm.request_memory(base)
        np.testing.assert_array_equal(base, expected)
