"""Objects users pass to launch as scalars: NumPy scalars of every kind, 0-d arrays and tensors.
Each is the number it holds, or a LaunchError at the user's line: never an internal error, a
refusal of a number as "not a number", or a value the object does not hold."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import Out, Ptr, bf16, f16, f32, f64, i64
from hpvm_py.errors import LaunchError
from programs.alias_graphs import add_one, add_one_on_host, scale, scale_on_host, scale_streamed

HERE = __file__


@hpvm.leaf
def take_f32_leaf(c: Out[Ptr[f64]], c_bytes: i64, k: f32):
    c[0] = f64(k)


@hpvm.graph
def take_f32(c: Out[Ptr[f64]], c_bytes: i64, k: f32):
    hpvm.node(take_f32_leaf, c=c, c_bytes=c_bytes, k=k)


@hpvm.leaf
def take_f64_leaf(c: Out[Ptr[f64]], c_bytes: i64, k: f64):
    c[0] = k


@hpvm.graph
def take_f64(c: Out[Ptr[f64]], c_bytes: i64, k: f64):
    hpvm.node(take_f64_leaf, c=c, c_bytes=c_bytes, k=k)


@hpvm.leaf
def take_f16_leaf(c: Out[Ptr[f64]], c_bytes: i64, k: f16):
    c[0] = f64(k)


@hpvm.graph
def take_f16(c: Out[Ptr[f64]], c_bytes: i64, k: f16):
    hpvm.node(take_f16_leaf, c=c, c_bytes=c_bytes, k=k)


@hpvm.leaf
def take_bf16_leaf(c: Out[Ptr[f64]], c_bytes: i64, k: bf16):
    c[0] = f64(k)


@hpvm.graph
def take_bf16(c: Out[Ptr[f64]], c_bytes: i64, k: bf16):
    hpvm.node(take_bf16_leaf, c=c, c_bytes=c_bytes, k=k)


@hpvm.leaf
def take_i64_leaf(c: Out[Ptr[f64]], c_bytes: i64, k: i64):
    c[0] = f64(k)


@hpvm.graph
def take_i64(c: Out[Ptr[f64]], c_bytes: i64, k: i64):
    hpvm.node(take_i64_leaf, c=c, c_bytes=c_bytes, k=k)


def _passed(graph, value) -> float:
    c = np.full(1, np.nan)
    hpvm.wait(hpvm.launch(graph, c, value))
    return float(c[0])


def _at_this_file(error: LaunchError) -> None:
    assert error.loc is not None and error.loc.file == HERE, error.loc



@pytest.mark.parametrize("graph", [take_f32, take_f64, take_f16, take_bf16],
                         ids=lambda g: g.__name__)
def test_a_longdouble_is_a_number_for_a_float(target: str, rng, graph) -> None:
    """np.longdouble's item() is itself (no Python float holds it): it was refused as "pass a
    number, not longdouble". It converts as the float of its value does."""
    with hpvm.runtime(target):
        for v in (*rng.normal(0.0, 1e3, 4), 0.0, -0.0, 1e300):
            got, expected = _passed(graph, np.longdouble(v)), _passed(graph, float(v))
            assert got == expected or (np.isnan(got) and np.isnan(expected)), (v, got, expected)
        with pytest.raises(LaunchError, match="pass an int, not longdouble") as info:
            hpvm.launch(take_i64, np.zeros(1), np.longdouble(3))
        _at_this_file(info.value)


def test_a_meta_tensor_for_a_scalar_is_refused_at_the_call(target: str) -> None:
    """A 0-d meta tensor has no value: its item() raised torch's RuntimeError, an internal error
    of the launch."""
    torch = pytest.importorskip("torch")
    with hpvm.runtime(target):
        assert _passed(take_i64, torch.tensor(5)) == 5.0
        for graph, value in ((take_i64, torch.tensor(5, device="meta")),
                             (take_f32, torch.tensor(2.5, device="meta"))):
            with pytest.raises(LaunchError, match="is a meta tensor, which has a shape but no "
                               "value") as info:
                hpvm.launch(graph, np.zeros(1), value)
            _at_this_file(info.value)


def test_a_masked_value_for_a_scalar_is_refused_at_the_call(target: str, rng) -> None:
    """A masked 0-d array holds no value (NumPy's int() of it raises MaskError): the launch
    passed the data hidden under the mask (np.ma.masked as 0.0), a value the user masked out."""
    v = float(rng.normal())
    with hpvm.runtime(target):
        assert _passed(take_f64, np.ma.array(v, mask=False)) == v
        for graph, value in ((take_f64, np.ma.array(v, mask=True)), (take_f32, np.ma.masked),
                             (take_i64, np.ma.array(7, mask=True))):
            with pytest.raises(LaunchError, match="is masked") as info:
                hpvm.launch(graph, np.zeros(1), value)
            _at_this_file(info.value)


def test_a_view_of_a_tracked_buffer_sees_and_leaves_its_newest_data(target: str, rng) -> None:
    """`c` tracked, its newest data on the device (a GPU target); a launch on a view of it (`c[2:]`,
    torch.from_numpy(c)) is another memory object: its copy read c's stale host data, and
    request_memory(c) then wrote the device's data back over what the view's launch wrote; and
    after a view's launch wrote c's memory at home, c's device copy was still taken as valid."""
    torch = pytest.importorskip("torch")
    n = 37
    a = rng.random(n, dtype=np.float32)
    with hpvm.runtime(target):
        c, d = np.zeros(n, np.float32), np.zeros(n, np.float32)
        hpvm.track_memory(c)
        hpvm.wait(hpvm.launch(scale, a, c, 3.0, n))
        hpvm.wait(hpvm.launch(scale, c[2:], d[2:], 2.0, n - 2))  # read through a view
        np.testing.assert_array_equal(d[2:], a[2:] * np.float32(3) * np.float32(2))
        hpvm.wait(hpvm.launch(add_one, c[5:], n - 5))  # written through a view
        expected = a * np.float32(3)
        expected[5:] += 1
        hpvm.request_memory(c)
        np.testing.assert_array_equal(c, expected)
        hpvm.wait(hpvm.launch(add_one, torch.from_numpy(c)[:4], 4))  # (c's host copy is valid too)
        expected[:4] += 1
        hpvm.wait(hpvm.launch(scale, c, d, 1.0, n))  # c's device copy, after the view's write
        np.testing.assert_array_equal(d, expected)
        hpvm.untrack_memory(c)
        np.testing.assert_array_equal(c, expected)


def test_a_node_on_the_host_sees_and_leaves_a_tracked_buffers_newest_data(target: str, rng) -> None:
    """As above, with the view used in place by a node placed on the host (hint "cpu" in a GPU
    target's graph): it read c's stale host memory, and c's device copy missed its write."""
    n = 29
    a = rng.random(n, dtype=np.float32)
    with hpvm.runtime(target):
        c, d = np.zeros(n, np.float32), np.zeros(n, np.float32)
        hpvm.track_memory(c)
        hpvm.wait(hpvm.launch(scale, a, c, 3.0, n))
        hpvm.wait(hpvm.launch(scale_on_host, c[1:], d[1:], 2.0, n - 1))
        np.testing.assert_array_equal(d[1:], a[1:] * np.float32(3) * np.float32(2))
        hpvm.wait(hpvm.launch(add_one_on_host, c[:], n))
        hpvm.wait(hpvm.launch(scale, c, d, 1.0, n))
        np.testing.assert_array_equal(d, a * np.float32(3) + 1)


def test_a_tensor_written_by_a_launch_is_an_in_place_write_to_autograd(target: str) -> None:
    """x saved by `w * x`, then written by a launch (Out), a push, or InOut under no_grad (an
    optimizer's step): torch's version counter did not move, so backward computed w's gradient
    from the new values of x silently, where torch's own in-place write makes it refuse."""
    torch = pytest.importorskip("torch")
    gen = torch.Generator().manual_seed(11)
    n = 16

    def saved_then_written(write) -> None:
        w = torch.rand(n, generator=gen, requires_grad=True)
        x = torch.rand(n, generator=gen)
        y = (w * x).sum()
        write(x)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()

    a = torch.rand(n, generator=gen)
    with hpvm.runtime(target):
        saved_then_written(lambda x: x.copy_(a))  # (torch's own write: the reference)
        saved_then_written(lambda x: hpvm.wait(hpvm.launch(scale, a, x, 2.0, n)))
        w = torch.rand(n, generator=gen, requires_grad=True)
        y = (w * w).sum()
        with torch.no_grad():  # (an optimizer's step on a parameter autograd saved)
            hpvm.wait(hpvm.launch(add_one, w, n))
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.backward()

        def pushed(x) -> None:
            h = hpvm.launch(scale_streamed, stream=True)
            hpvm.push(h, a, x, 2.0, n)
            hpvm.pop(h)
            hpvm.wait(h)
            torch.testing.assert_close(x, a * 2.0)

        saved_then_written(pushed)
        # a tensor only read keeps its version; the written one has the graph's values
        x, c = torch.rand(n, generator=gen), torch.zeros(n)
        hpvm.wait(hpvm.launch(scale, x, c, 2.0, n))
        assert x._version == 0 and c._version > 0
        torch.testing.assert_close(c, x * 2.0)
