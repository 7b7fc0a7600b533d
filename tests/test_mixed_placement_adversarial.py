"""Hunt of mixed placements: one buffer used by nodes on different targets across launches, with
the runtime's fast paths (replays, rebinds, the fresh lane) in between (docs/placement.md,
"Moving data"; docs/runtime.md, "Buffers").

Without a GPU the gpu target runs on fake devices (fake:0, fake:1) through Triton's interpreter."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.errors import LaunchError
from test_placement_adversarial import needs_fake

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


@hpvm.leaf
def mp_stage_add(a: InOut[Ptr[f32]], a_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                 turn: InOut[Ptr[f32]], turn_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    a[i] = a[i] + x[i]
    turn[i] = turn[i] + 1.0
    return i


@hpvm.leaf
def mp_stage_read(t: i64, v: In[Ptr[f32]], v_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
                  turn: InOut[Ptr[f32]], turn_bytes: i64):
    i = hpvm.instance_id(0)
    out[i] = v[i] * 2.0
    turn[i] = turn[i] + 1.0


def view_stream(first: str | None, second: str | None):
    """Stage 1 adds x into `a`; stage 2 (after it, by a streaming edge) reads `v`, a view of `a`
    pushed with the same item. Both stages write `turn`, pushed with every item, so the items run
    one after another (docs/streaming.md, "Items that share a buffer"): no race anywhere."""

    @hpvm.graph
    def mp_view_stream(a: InOut[Ptr[f32]], a_bytes: i64, x: In[Ptr[f32]], x_bytes: i64,
                       v: In[Ptr[f32]], v_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
                       turn: InOut[Ptr[f32]], turn_bytes: i64, n: i64, m: i64):
        p = hpvm.node(mp_stage_add, grid=n, a=hpvm.streaming(a), a_bytes=a_bytes,
                      x=hpvm.streaming(x), x_bytes=x_bytes, turn=hpvm.streaming(turn),
                      turn_bytes=turn_bytes, hint=first)
        hpvm.node(mp_stage_read, grid=m, t=hpvm.streaming(hpvm.all_to_all(p.out[0])),
                  v=hpvm.streaming(v), v_bytes=v_bytes, out=hpvm.streaming(out), out_bytes=out_bytes,
                  turn=hpvm.streaming(turn), turn_bytes=turn_bytes, hint=second)

    return mp_view_stream


@pytest.mark.parametrize("target,first,second", [("cpu", "gpu:0", "gpu:1"), ("cpu", "cpu", "gpu"),
                                                 ("gpu", None, None), ("gpu", "gpu:1", None),
                                                 ("cpu", None, None)])
def test_a_streamed_view_sees_what_its_items_earlier_stage_wrote_through_its_base(
        target: str, first: str | None, second: str | None) -> None:
    """docs/runtime.md, "Buffers": buffers that share memory, tracked or not, see one another's
    writes, and a write through one makes the others' device copies stale. A view pushed with
    items still in flight keeps its device copy between items: a later item's write through the
    array must make that copy stale, or the item's second stage reads an earlier item's data."""
    rng = np.random.default_rng()
    n, m, items = 8, 4, 6
    a = rng.integers(-8, 8, n).astype(np.float32)
    turn = np.zeros(n, np.float32)
    view = a[2:6]
    expected, outs, wanted = a.copy(), [], []
    with hpvm.runtime(target):
        h = hpvm.launch(view_stream(first, second), stream=True, depth=4)
        for _ in range(items):
            x = rng.integers(-8, 8, n).astype(np.float32)
            out = np.zeros(m, np.float32)
            hpvm.push(h, a, a.nbytes, x, x.nbytes, view, view.nbytes, out, out.nbytes, turn,
                      turn.nbytes, n, m)
            expected += x
            wanted.append(expected[2:6] * 2.0)
            outs.append(out)
        hpvm.wait(h)
    for out, want in zip(outs, wanted):
        np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(a, expected)
    np.testing.assert_array_equal(turn, [2.0 * items] * m + [items] * (n - m))


@hpvm.leaf
def mp_write_then_read(a: InOut[Ptr[f32]], a_bytes: i64, v: In[Ptr[f32]], v_bytes: i64,
                       out: Out[Ptr[f32]], out_bytes: i64):
    i = hpvm.instance_id(0)
    a[i + 2] = a[i + 2] + 1.0  # the element this instance reads through v next
    out[i] = v[i] * 2.0


def one_stage(hint: str | None):
    @hpvm.graph
    def mp_one_stage(a: InOut[Ptr[f32]], a_bytes: i64, v: In[Ptr[f32]], v_bytes: i64,
                     out: Out[Ptr[f32]], out_bytes: i64, m: i64):
        hpvm.node(mp_write_then_read, grid=m, a=hpvm.streaming(a), a_bytes=a_bytes,
                  v=hpvm.streaming(v), v_bytes=v_bytes, out=hpvm.streaming(out), out_bytes=out_bytes,
                  hint=hint)

    return mp_one_stage


@pytest.mark.parametrize("target,hint", [("gpu", None), ("cpu", "gpu:1"), ("gpu", "cpu"), ("cpu", None)])
def test_one_stage_using_an_array_and_its_view_away_from_home_is_refused_as_a_launch_is(
        target: str, hint: str | None) -> None:
    """The launch of this leaf on `a` and `a[2:6]` on a device is refused (buffer-overlap): each
    gets a device copy of its own, so the leaf reads 2 * (a + 1) on the host and 2 * a there. A
    stream stage must not run it either (it did, and its results depended on the target)."""
    rng = np.random.default_rng()
    a = rng.integers(-8, 8, N).astype(np.float32)
    expected = a.copy()
    out = np.zeros(4, np.float32)
    with hpvm.runtime(target):
        h = hpvm.launch(one_stage(hint), stream=True)
        if (hint or target) == "cpu":
            hpvm.push(h, a, a.nbytes, a[2:6], 16, out, out.nbytes, 4)
            hpvm.pop(h)
            expected[2:6] += 1.0
            np.testing.assert_array_equal(out, expected[2:6] * 2.0)
        else:
            with pytest.raises(LaunchError) as info:
                hpvm.push(h, a, a.nbytes, a[2:6], 16, out, out.nbytes, 4)
            assert info.value.rule == "buffer-overlap"
            assert info.value.loc.file == __file__
            b = a.copy()  # copies are accepted, and the stream goes on
            hpvm.push(h, a, a.nbytes, b[2:6], 16, out, out.nbytes, 4)
            hpvm.pop(h)
            expected[2:6] += 1.0
            np.testing.assert_array_equal(out, b[2:6] * 2.0)
        hpvm.wait(h)
    np.testing.assert_array_equal(a, expected)
