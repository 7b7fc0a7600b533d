"""Splitting a leaf's loop over the threads of each instance on nvptx (passes/lanes.py, the lanes
kernel of backends/nvptx/simt.py): which loops may be split, the launch-time condition, and, on a
GPU, results equal to NumPy's sequential ones whether a launch splits or not: stores that collide
between iterations, a buffer passed twice, a loop-carried sum, short loops."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64
from hpvm_py.api.host import compile_graph
from hpvm_py.backends.nvptx import NvptxBackend, toolchain
from hpvm_py.passes.lanes import atom_values, lane_loop
from hpvm_py.types import PtrType
from programs import lanes_graphs as g

NVPTX = "nvptx" in __import__("conftest").TARGETS


def analysed(leaf):
    func = leaf.ir
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in func.params)
    return lane_loop(func, modes)


def holds(loop, **params) -> bool:
    return loop.holds(atom_values(params, [(1,)]))


def test_a_row_loop_is_split_when_no_two_iterations_store_one_element() -> None:
    loop = analysed(g.window_sums)
    assert loop is not None and [r.var for r in loop.loops] == ["col"] and loop.written == ("y",)
    for shift in (0, 40, 41, -40, -100, 1000):  # same element in one iteration, or out of reach
        assert holds(loop, cols=40, width=200, shift=shift), shift
    for shift in (1, 39, -1, -39, 20):  # iteration col + shift stores col + shift again
        assert not holds(loop, cols=40, width=200, shift=shift), shift
    assert loop.trips(atom_values({"cols": 40, "width": 1, "shift": 0}, [(1,)])) == 40


def test_the_inner_loop_of_a_nest_is_split_when_the_planes_do_not_overlap() -> None:
    loop = analysed(g.planes)
    assert loop is not None and [r.var for r in loop.loops] == ["chan", "col"]
    assert holds(loop, cols=64, plane=64) and holds(loop, cols=64, plane=1000)
    assert not holds(loop, cols=64, plane=63) and not holds(loop, cols=64, plane=1)
    assert not holds(loop, cols=64, plane=0)  # every channel on the same elements
    assert holds(loop, cols=1, plane=0) is False  # (one column: not worth splitting anyway)


def test_a_loop_carried_sum_is_never_split() -> None:
    assert analysed(g.running_sums) is None


@hpvm.leaf
def reads_what_it_writes(y: InOut[Ptr[f32]], y_bytes: i64, cols: i64):
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    for col in range(cols):
        y[row * cols + col] = y[row * cols + cols - 1 - col] + 1.0


@hpvm.leaf
def two_strides(y: InOut[Ptr[f32]], y_bytes: i64, cols: i64):
    for col in range(cols):
        y[col] = 1.0
        y[2 * col] = 2.0


@hpvm.leaf
def leaves_early(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, cols: i64):
    for col in range(cols):
        if x[col] < 0.0:
            break
        y[col] = x[col]


@hpvm.leaf
def returns_the_last_column(y: InOut[Ptr[f32]], y_bytes: i64, cols: i64) -> i64:
    last = 0
    for col in range(cols):
        y[col] = 1.0
        last = col
    return last


@hpvm.leaf
def stores_before_the_loop(y: InOut[Ptr[f32]], y_bytes: i64, cols: i64):
    y[0] = 5.0
    for col in range(cols):
        y[col + 1] = 1.0


@hpvm.leaf
def index_from_a_local(y: InOut[Ptr[f32]], y_bytes: i64, cols: i64):
    at = 0
    for col in range(cols):
        at = at + 1  # carried, so also refused by the scalar rule
        y[at] = 1.0


@hpvm.leaf
def counts_atomically(y: InOut[Ptr[i64]], y_bytes: i64, cols: i64):
    for col in range(cols):
        hpvm.atomic_add(y, 0, col)


@pytest.mark.parametrize("leaf", [reads_what_it_writes, two_strides, leaves_early,
                                  returns_the_last_column, stores_before_the_loop,
                                  index_from_a_local, counts_atomically],
                         ids=lambda leaf: leaf.ir.name)
def test_loops_whose_iterations_may_depend_on_each_other_are_not_split(leaf) -> None:
    assert analysed(leaf) is None


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
def test_the_lanes_kernel_assembles_beside_the_plain_one() -> None:
    compiled = compile_graph(g.windows, "nvptx")
    [(leaf, ctx, kernel)] = compiled.leaf_kernels()
    ptx = NvptxBackend().ptx(leaf, ctx)
    assert ".entry window_sums(" in ptx and ".entry window_sums__lanes(" in ptx
    assert kernel.cubin and kernel.lanes is not None
    checked = NvptxBackend().compile_leaf(leaf, ctx, checked=True)
    assert checked.cubin and checked.lanes is not None


def windows_reference(x, y, rows, cols, width, shift, k):
    """window_sums run sequentially, iteration after iteration."""
    y = y.copy()
    for row in range(rows):
        base = row * width
        for col in range(cols):
            acc = np.float32(0)
            for t in range(8):
                acc = np.float32(acc + np.float32(x[base + (col + t) % width] * np.float32(k)))
            y[base + col] = acc
            y[base + col + shift] = np.float32(acc * np.float32(2))
    return y


@pytest.mark.skipif(not NVPTX, reason="a GPU (the nvptx target)")
def test_split_and_plain_launches_match_sequential_numpy(rng: np.random.Generator) -> None:
    rows, cols, width = 48, 96, 300
    with hpvm.runtime("nvptx"):
        for shift, splits in ((0, True), (cols, True), (5, False), (1, False), (150, True),
                              (cols - 1, False)):
            x = rng.standard_normal(rows * width).astype(np.float32)
            y = rng.standard_normal(rows * width).astype(np.float32)
            expected = windows_reference(x, y, rows, cols, width, shift, 0.5)
            before = hpvm.stats()["lane_splits"]
            hpvm.wait(hpvm.launch(g.windows, x, x.nbytes, y, y.nbytes, rows, cols, width, shift,
                                  0.5))
            assert (hpvm.stats()["lane_splits"] > before) == splits, shift
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5, err_msg=f"shift {shift}")


@pytest.mark.skipif(not NVPTX, reason="a GPU (the nvptx target)")
def test_a_buffer_passed_twice_is_not_split(rng: np.random.Generator) -> None:
    """x and y one buffer: the iterations read what others write; sequential order decides."""
    rows, cols, width = 16, 64, 64
    data = rng.standard_normal(rows * width).astype(np.float32)
    expected = windows_reference(data, data, rows, cols, width, 0, 1.0)  # reads the original...
    seq = data.copy()  # ...but the leaf reads y's own writes: run it truly in place
    for row in range(rows):
        base = row * width
        for col in range(cols):
            acc = np.float32(0)
            for t in range(8):
                acc = np.float32(acc + seq[base + (col + t) % width])
            seq[base + col] = acc
            seq[base + col] = np.float32(acc * np.float32(2))
    assert not np.array_equal(seq, expected)  # the aliasing matters for this data
    with hpvm.runtime("nvptx"):
        before = hpvm.stats()["lane_splits"]
        hpvm.wait(hpvm.launch(g.windows, data, data.nbytes, data, data.nbytes, rows, cols, width,
                              0, 1.0))
        assert hpvm.stats()["lane_splits"] == before
    np.testing.assert_allclose(data, seq, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not NVPTX, reason="a GPU (the nvptx target)")
def test_replays_of_a_split_launch_and_short_loops(rng: np.random.Generator) -> None:
    rows, width = 40, 256  # (each row stores up to column 2 * cols - 1)
    x = rng.standard_normal(rows * width).astype(np.float32)
    with hpvm.runtime("nvptx"):
        for cols in (100, 100, 100, 8, 100):  # recorded, replayed (as a graph), a short loop
            y = np.zeros(rows * width, np.float32)
            hpvm.track_memory(y)
            for k in (1.0, 1.0, -2.0):
                hpvm.wait(hpvm.launch(g.windows, x, x.nbytes, y, y.nbytes, rows, cols, width,
                                      cols, k))
            hpvm.request_memory(y)
            hpvm.untrack_memory(y)
            expected = windows_reference(x, np.zeros_like(y), rows, cols, width, cols, -2.0)
            np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)
        y = np.zeros(rows * width, np.float32)
        hpvm.wait(hpvm.launch(g.prefix, x, x.nbytes, y, y.nbytes, rows, 100, width))
    rows_x = x.reshape(rows, width)[:, :100]
    np.testing.assert_allclose(y.reshape(rows, width)[:, :100], np.cumsum(rows_x, axis=1,
                                                                          dtype=np.float32),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not NVPTX, reason="a GPU (the nvptx target)")
def test_nested_planes_match_sequential_numpy(rng: np.random.Generator) -> None:
    rows, cols = 30, 80
    with hpvm.runtime("nvptx"):
        for plane, splits in ((80, True), (100, True), (79, False), (40, False), (0, False)):
            x = rng.standard_normal(rows * cols).astype(np.float32)
            y = rng.standard_normal(rows * (2 * plane + cols)).astype(np.float32)
            expected = y.copy()
            for row in range(rows):
                for chan in range(3):
                    at = row * (2 * plane + cols) + chan * plane + np.arange(cols)
                    expected[at] = x[row * cols:(row + 1) * cols] * np.float32(1.5) + np.float32(chan)
            before = hpvm.stats()["lane_splits"]
            hpvm.wait(hpvm.launch(g.channels, x, x.nbytes, y, y.nbytes, rows, cols, plane, 1.5))
            assert (hpvm.stats()["lane_splits"] > before) == splits, plane
            np.testing.assert_allclose(y, expected, rtol=1e-6, atol=1e-6, err_msg=f"plane {plane}")


def test_holds_never_admits_two_iterations_on_one_element(rng: np.random.Generator) -> None:
    """Random nests of 1 to 3 loops, strides and store offsets: whenever `holds` admits a split,
    brute force finds no two different iterations storing to one element."""
    from hpvm_py.passes.lanes import LaneLoop, Range

    admitted = refused = 0
    for _ in range(3000):
        depth = int(rng.integers(1, 4))
        loops = tuple(Range(f"v{k}", {(): int(rng.integers(-3, 3))},
                            {(): int(rng.integers(-3, 9))}, int(rng.integers(1, 4)))
                      for k in range(depth))
        coefficients = tuple({(): int(rng.integers(-12, 13))} for _ in range(depth))
        offsets = [int(rng.integers(-40, 41)) for _ in range(int(rng.integers(1, 4)))]
        differences = tuple({(): offsets[i] - offsets[j]}
                            for i in range(len(offsets)) for j in range(i + 1, len(offsets)))
        loop = LaneLoop(index=0, loops=loops, stores=(("y", coefficients, differences),))
        ok = loop.holds(lambda atom: 0)
        ranges = [range(r.start[()] if () in r.start else 0, r.stop[()] if () in r.stop else 0,
                        r.step) for r in loops]
        seen: dict[int, tuple] = {}
        clash = False
        for point in np.ndindex(*[len(r) for r in ranges]):
            values = [r[i] for r, i in zip(ranges, point)]
            base = sum(c[()] * v if () in c else 0 for c, v in zip(coefficients, values))
            for offset in offsets:
                other = seen.setdefault(base + offset, point)
                clash |= other != point
        if ok:
            admitted += 1
            assert not clash, (loops, coefficients, offsets)
        else:
            refused += 1
    assert admitted > 300 and refused > 300  # both sides exercised
