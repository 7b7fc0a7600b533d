"""Buffers the user tracked that share memory (`c` and its view `c[2:]` both tracked, an array
and torch.from_numpy of it): each one's copies see what launches wrote through the others, on
every target, compared with NumPy."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from programs.alias_graphs import add_one, scale, scale_streamed


def test_two_tracked_buffers_sharing_memory_see_each_others_writes(target: str, rng) -> None:
    """`c` and `v = c[k:]` both tracked, both with device copies (a GPU target): a launch writing
    through one left the other's device copy taken as valid (a later launch on it read stale
    data and request_memory(c) wrote it back over the view's writes), and request_memory(c)
    with c's host copy valid did not bring the view's newest data home."""
    torch = pytest.importorskip("torch")
    n = 41
    k = int(rng.integers(1, n - 1))
    a = rng.random(n, dtype=np.float32)
    expected = a.copy()
    with hpvm.runtime(target):
        c = a.copy()
        v, t = c[k:], torch.from_numpy(c)
        for buf in (c, v, t):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(add_one, c, n))
        expected += 1
        hpvm.wait(hpvm.launch(add_one, v, n - k))  # v's copy after c's write, then written
        expected[k:] += 1
        d = np.zeros(n, np.float32)
        hpvm.wait(hpvm.launch(scale, c, d, 2.0, n))  # c's copy after v's write
        np.testing.assert_array_equal(d, expected * np.float32(2))
        hpvm.wait(hpvm.launch(add_one, t, n))  # written through t: c's and v's copies stale
        expected += 1
        hpvm.wait(hpvm.launch(add_one, v, n - k))  # v's newest data on the device alone
        expected[k:] += 1
        hpvm.request_memory(c)  # (c's host copy valid: v's data must still come home)
        np.testing.assert_array_equal(c, expected)
        dv = np.zeros(n - k, np.float32)
        hpvm.wait(hpvm.launch(scale, v, dv, 1.0, n - k))
        np.testing.assert_array_equal(dv, expected[k:])
        hpvm.wait(hpvm.launch(add_one, c, n))
        expected += 1
        hpvm.untrack_memory(v)  # v's host copy valid, c's newest data on the device
        np.testing.assert_array_equal(v, expected[k:])
    np.testing.assert_array_equal(c, expected)


@pytest.mark.parametrize("track_c", [False, True])
def test_a_stream_item_sees_and_leaves_a_tracked_views_newest_data(target: str, rng,
                                                                    track_c: bool) -> None:
    """`v = c[k:]` tracked, its newest data on the device (a GPU target): a stream's item reading
    `c` (tracked or not) copied c's stale host memory in (v's copy home was staged behind the
    item's, or not made at all), and an item writing `c` left v's device copy taken as valid."""
    n = 33
    k = int(rng.integers(1, n - 1))
    a = rng.random(n, dtype=np.float32)
    expected = a.copy()
    with hpvm.runtime(target):
        c = a.copy()
        v = c[k:]
        hpvm.track_memory(v)
        if track_c:
            hpvm.track_memory(c)
        hpvm.wait(hpvm.launch(add_one, v, n - k))
        expected[k:] += 1
        handle = hpvm.launch(scale_streamed, stream=True)
        d = np.zeros(n, np.float32)
        hpvm.push(handle, c, d, 2.0, n)
        hpvm.pop(handle)
        np.testing.assert_array_equal(d, expected * np.float32(2))
        e = rng.random(n, dtype=np.float32)
        hpvm.push(handle, e, c, 3.0, n)  # written by an item: v's device copy is stale
        hpvm.pop(handle)
        hpvm.wait(handle)
        expected = e * np.float32(3)
        dv = np.zeros(n - k, np.float32)
        hpvm.wait(hpvm.launch(scale, v, dv, 1.0, n - k))
        np.testing.assert_array_equal(dv, expected[k:])
        hpvm.untrack_memory(v)
    np.testing.assert_array_equal(c, expected)


@pytest.mark.parametrize("view", ["strided", "reversed", "torch strided", "torch transposed"])
def test_requesting_a_strided_view_brings_a_tracked_aliass_data_home(target: str, rng,
                                                                     view: str) -> None:
    """A tracked view whose elements span more memory than its nbytes from its address (`c[::2]`,
    `c[::-1]`, a transposed tensor), requested or untracked while another tracked view of that
    memory has its newest data on a device (a GPU target): the alias was taken as not
    overlapping it, so the view kept its stale host data."""
    torch = pytest.importorskip("torch")
    n = 24
    a = rng.random(n, dtype=np.float32)
    expected = a.copy()
    with hpvm.runtime(target):
        c = a.copy()
        t = torch.from_numpy(c)
        # each view's highest or lowest elements lie outside [address, address + nbytes), in
        # the alias's memory
        s, alias, lo = {"strided": (c[4:][::2], c[17:20], 17),
                        "reversed": (c[::-1][12:16], c[8:10], 8),
                        "torch strided": (t[4::2], t[17:20], 17),
                        "torch transposed": (t[4:16].reshape(3, 4)[:, :2].T, t[12:14], 12)}[view]
        hpvm.track_memory(alias)
        hpvm.wait(hpvm.launch(add_one, alias, len(alias)))
        expected[lo:lo + len(alias)] += 1
        hpvm.track_memory(s)
        hpvm.request_memory(s)
        want = {"strided": expected[4:][::2], "reversed": expected[::-1][12:16],
                "torch strided": expected[4::2],
                "torch transposed": expected[4:16].reshape(3, 4)[:, :2].T}
        np.testing.assert_array_equal(np.asarray(s), want[view])
        hpvm.untrack_memory(s)
