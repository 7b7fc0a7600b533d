"""Autotuning of the gpu target's block shapes (backends/triton/autotune.py): which launches may
be timed, the choice and its disk cache, and a tuned launch computing the same result. Real
timings are taken on a GPU (benchmarks/gpu/bench_gpu.py); here a fake clock decides."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.backends.triton import autotune as T
from hpvm_py.errors import CompileError, ExecutionError
from hpvm_py.rt.compiler import compile_graph

pytestmark = pytest.mark.skipif(not registry.available("gpu"), reason="the gpu target (triton) is not here")


@hpvm.leaf
def scaled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = x[i] * k


@hpvm.leaf
def scaled_in_place(x: InOut[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    x[i] = x[i] * k
    y[i] = x[i]


@hpvm.leaf
def counted(x: InOut[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    hpvm.atomic_add(y, 0, x[i] * k)


def graph_of(leaf):
    @hpvm.graph
    def root(x: InOut[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32, n: i64):
        hpvm.node(leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)
    return root


def _buffer(array: np.ndarray):
    from hpvm_py.backends.base import BufferArg

    return BufferArg(array, array.ctypes.data, array.nbytes, None)


def _args(x: np.ndarray, y: np.ndarray) -> list:
    return [_buffer(x), x.nbytes, _buffer(y), y.nbytes, 2.0]


def _leaf(leaf_def):
    (leaf, _, _), = compile_graph(graph_of(leaf_def), "gpu").leaf_kernels()
    return leaf


@pytest.mark.parametrize("leaf_def, repeatable", [(scaled, True), (scaled_in_place, True), (counted, False)])
def test_only_launches_that_repeat_their_result_are_timed(leaf_def, repeatable: bool) -> None:
    x, y = np.ones(64, np.float32), np.zeros(64, np.float32)
    leaf = _leaf(leaf_def)
    assert T.repeatable_leaf(leaf) == repeatable and T.repeatable(leaf, _args(x, y))


def test_an_input_overlapping_an_output_is_not_timed() -> None:
    memory = np.ones(96, np.float32)
    x, y = memory[:64], memory[32:]  # the kernel would read what an earlier run wrote
    assert T.repeatable_leaf(_leaf(scaled)) and not T.repeatable(_leaf(scaled), _args(x, y))
    assert T.repeatable(_leaf(scaled), _args(memory[:48], memory[48:]))


def test_candidates_fit_the_lanes_a_program_covers() -> None:
    shapes = T.candidates(512)
    assert {s.lanes for s in shapes} == {256, 512} and all(s.warps * 32 <= s.lanes for s in shapes)
    assert T.candidates(128) == []


def test_grid_tiles_are_also_timed_narrower_with_four_lanes_a_thread() -> None:
    import stencil
    from hpvm_py.ir.context import instance_counts

    plain = T.candidates(1024)
    tiles = T.candidates(1024, tiles=True)
    assert all(s.width == 0 for s in plain) and set(plain) <= set(tiles)
    assert set(tiles) - set(plain) == {T.Shape(256, 2, 128), T.Shape(512, 4, 128), T.Shape(1024, 8, 128)}
    (_, _, kernel), = compile_graph(stencil.root, "gpu").leaf_kernels()
    extents = [(16, 8), (32, 64, 256)]  # the stencil's 512 x 512 x 256 grid in 16 x 8 blocks
    P, L = instance_counts(extents)
    source = kernel.source
    for shape, tile in ((T.Shape(512, 4, 128), (128, 4)), (T.Shape(1024, 8, 128), (128, 8)),
                        (T.Shape(512, 4), (512, 1)), (None, (512, 1))):
        layout = kernel._layout(source, extents, P, L, {}, shape)
        assert (layout.options["TX"], layout.options["TY"]) == tile
        assert layout.grid == (512 // tile[0], 512 // tile[1], 256)


@pytest.fixture
def fresh_choices(monkeypatch, tmp_path):
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    monkeypatch.setattr(T, "_chosen", {})


def test_the_fastest_shape_is_chosen_once_and_read_back_from_disk(fresh_choices, monkeypatch, caplog) -> None:
    caplog.set_level(logging.INFO, logger="hpvm_py")  # the tuning note is progress: logged at INFO
    shapes = T.candidates(1024)
    speed = {s: 1.0 + abs(s.lanes - 512) / 1000 + abs(s.warps - 8) / 100 for s in shapes}
    timed = []

    def time_one(shape):
        timed.append(shape)
        if shape == T.Shape(1024, 2):
            raise CompileError("out of resources")  # a shape that cannot compile is never chosen
        return speed[shape]

    assert T.choose("k1", shapes, time_one, "leafy") == T.Shape(512, 8)
    assert sorted(timed, key=str) == sorted(shapes, key=str)
    assert "tuning the block shape of leaf leafy" in caplog.text
    assert T.choose("k1", shapes, time_one, "leafy") == T.Shape(512, 8) and len(timed) == len(shapes)
    monkeypatch.setattr(T, "_chosen", {})  # a new process: the disk cache answers
    assert T.choose("k1", shapes, lambda s: pytest.fail("timed again"), "leafy") == T.Shape(512, 8)
    monkeypatch.setenv("HPVM_NO_CACHE", "1")
    monkeypatch.setattr(T, "_chosen", {})
    assert T.choose("k1", shapes, lambda s: 1.0 if s == T.Shape(256, 2) else 2.0, "leafy") == T.Shape(256, 2)


def test_dot_block_shapes_are_tuned_and_read_back_from_disk(fresh_choices, monkeypatch) -> None:
    """A tl.dot kernel's candidates are DotConfigs (kernel.py): the fastest is kept, written to
    disk and read back as a DotConfig by a new process."""
    from hpvm_py.backends.triton.kernel import GPU_DOT, SMALLER_DOTS

    shapes = [GPU_DOT, *SMALLER_DOTS]
    fastest = SMALLER_DOTS[1]
    assert T.choose("dot-k", shapes, lambda s: 1.0 if s == fastest else 2.0, "mm") == fastest
    monkeypatch.setattr(T, "_chosen", {})
    found = T.choose("dot-k", shapes, lambda s: pytest.fail("timed again"), "mm")
    assert found == fastest and type(found) is type(fastest)


def test_an_error_of_a_run_ends_the_tuning(fresh_choices) -> None:
    def faulting(shape):
        raise ExecutionError("leaf x faulted")

    with pytest.raises(ExecutionError, match="faulted"):
        T.choose("k2", T.candidates(1024), faulting, "x")
    assert "k2" not in T._chosen
    with pytest.raises(CompileError, match="no registers"):
        T.choose("k3", T.candidates(256), lambda s: (_ for _ in ()).throw(CompileError("no registers")), "x")


def test_a_tuned_launch_uses_the_chosen_shape_and_computes_the_same(fresh_choices, monkeypatch, rng) -> None:
    from hpvm_py.backends.triton import kernel as TK

    seen = []

    def fake_clock(launch, restore):  # favours 256 lanes in 2 warps; runs each shape for real
        restore()
        launch.run()
        seen.append((launch.options["BLOCK"], launch.options["num_warps"], launch.grid))
        return 1.0 if (launch.options["BLOCK"], launch.options["num_warps"]) == (256, 2) else 2.0

    monkeypatch.setattr(TK, "on_gpu", lambda: True)
    monkeypatch.setattr(T, "MIN_INSTANCES", 1)
    monkeypatch.setattr(T, "time_launch", fake_clock)
    n = 2000
    x = rng.standard_normal(n).astype(np.float32)
    y = np.zeros(n, np.float32)
    root = graph_of(scaled)
    with hpvm.runtime("gpu"):
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        hpvm.wait(hpvm.launch(root, x, x.nbytes, y, y.nbytes, 1.5, n))
        hpvm.request_memory(y)
        np.testing.assert_array_equal(y, x * np.float32(1.5))
        assert len(seen) == len(T.candidates(1024))  # every shape ran
        assert {grid for _, _, grid in seen} >= {(8, 1, 1), (2, 1, 1)}  # 256 and 1024 lanes
        (recording,) = compile_graph(root, "gpu").replays._recordings
        used = recording.steps[0].prepared
        assert (used.options["BLOCK"], used.options["num_warps"], used.grid) == (256, 2, (8, 1, 1))
        assert used.call[used.blocks_at] == 8  # blocks of 256 lanes for 2000 instances
        hpvm.wait(hpvm.launch(root, x, x.nbytes, y, y.nbytes, -3.0, n))  # the replay, tuned
        hpvm.request_memory(y)
    np.testing.assert_array_equal(y, x * np.float32(-3.0))
    assert len(seen) == len(T.candidates(1024))  # tuned once


def test_programs_narrower_than_every_shape_keep_the_default(fresh_choices, monkeypatch, rng) -> None:
    from hpvm_py.backends.triton import kernel as TK

    monkeypatch.setattr(TK, "on_gpu", lambda: True)
    monkeypatch.setattr(T, "MIN_INSTANCES", 1)
    monkeypatch.setattr(T, "time_launch", lambda launch, restore=None: pytest.fail("timed"))
    x = rng.standard_normal(100).astype(np.float32)
    y = np.zeros(100, np.float32)
    with hpvm.runtime("gpu"):  # one block of 128 lanes: no shape of 256 or more to try
        hpvm.wait(hpvm.launch(graph_of(scaled), x, x.nbytes, y, y.nbytes, 2.0, 100))
    np.testing.assert_array_equal(y, x * np.float32(2.0))


def test_tuning_can_be_turned_off(fresh_choices, monkeypatch, rng) -> None:
    from hpvm_py.backends.triton import kernel as TK

    monkeypatch.setattr(TK, "on_gpu", lambda: True)
    monkeypatch.setattr(T, "MIN_INSTANCES", 1)
    monkeypatch.setattr(T, "time_launch", lambda launch, restore=None: pytest.fail("timed"))
    monkeypatch.setenv("HPVM_AUTOTUNE", "0")
    x = rng.standard_normal(300).astype(np.float32)
    y = np.zeros(300, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(graph_of(scaled), x, x.nbytes, y, y.nbytes, 2.0, 300))
    np.testing.assert_array_equal(y, x * np.float32(2.0))


def test_a_leaf_with_inout_buffers_is_tuned_on_copies(fresh_choices, monkeypatch, rng) -> None:
    """scaled_in_place multiplies x in place: each shape runs three times (as the tuner's clock
    does), on copies put back before every run, and the launch itself then runs once on x."""
    from hpvm_py.backends.triton import kernel as TK

    runs = []

    def fake_clock(launch, restore):
        for _ in range(3):
            restore()
            launch.run()
        runs.append(launch.options["BLOCK"])
        return 1.0 / launch.options["BLOCK"]  # favours the widest

    monkeypatch.setattr(TK, "on_gpu", lambda: True)
    monkeypatch.setattr(T, "MIN_INSTANCES", 1)
    monkeypatch.setattr(T, "time_launch", fake_clock)
    n = 3000
    x = rng.standard_normal(n).astype(np.float32)
    before = x.copy()
    y = np.zeros(n, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(graph_of(scaled_in_place), x, x.nbytes, y, y.nbytes, 2.0, n))
    assert len(runs) == len(T.candidates(1024))
    np.testing.assert_array_equal(x, before * np.float32(2.0))  # once, not 3 x 9 times more
    np.testing.assert_array_equal(y, x)


def test_dot_launches_are_tuned_from_fewer_outputs(fresh_choices, monkeypatch, rng) -> None:
    """Each output of a tl.dot kernel is a whole loop over k: such a launch is tuned from
    MIN_DOT_OUTPUTS outputs, where a plain one of as many instances keeps its default."""
    import sys
    from pathlib import Path

    from hpvm_py.backends.triton import kernel as TK

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from programs import dot_leaves as D

    timed = []

    def fake_clock(launch, restore):  # favours 32 x 32 blocks
        restore()
        launch.run()
        timed.append((launch.options["BM"], launch.options["BN"]))
        return 1.0 if timed[-1] == (32, 32) else 2.0

    monkeypatch.setattr(TK, "on_gpu", lambda: True)
    monkeypatch.setattr(T, "MIN_INSTANCES", 1 << 40)
    monkeypatch.setattr(T, "MIN_DOT_OUTPUTS", 256)
    monkeypatch.setattr(T, "multiprocessors", lambda: 132)
    monkeypatch.setattr(T, "time_launch", fake_clock)
    m, n, k = 16, 24, 8
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    x, y = rng.standard_normal(m * n).astype(np.float32), np.zeros(m * n, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(graph_of(scaled), x, x.nbytes, y, y.nbytes, 2.0, m * n))
        assert timed == []  # a plain launch of 384 instances: not tuned
        for buf in (a, b, c):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(D.naive_root, a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k))
        assert (32, 32) in timed and len(timed) == len(TK.TUNED_DOTS) + 1  # every shape, once
        (recording,) = compile_graph(D.naive_root, "gpu").replays._recordings
        used = recording.steps[0].prepared
        assert (used.options["BM"], used.options["BN"]) == (32, 32)
        hpvm.request_memory(c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(y, x * np.float32(2.0))
