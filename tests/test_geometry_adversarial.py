"""Replication geometry, hunted: extents of 0, 1 and past the GPU's grid limits, on every target.

Generated launches of 1-D to 3-D leaves and of leaves inside replicated parents and grandparents
(tests/programs/geometry_leaves.py) count every instance by its linear id, built from the instance
intrinsics of every level, and compare with NumPy on python, cpu and gpu. The GPU targets' grid
arithmetic is tested directly: nvptx's blocks and chunked grids cover every instance exactly once
within CUDA's limits (x at most 2**31 - 1 blocks, y and z 65535, 1024 threads and z 64 a block),
and a Triton launch whose grid would pass them (more than 2**31 - 1 programs: many parent
instances) is a LaunchError at the leaf, not Triton's OverflowError reported as a compile failure
(seen on an H200: "Triton could not compile the generated kernel (OverflowError: signed integer
is greater than maximum)" for a leaf under 50000 x 50000 parent instances).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.nvptx.launch import BLOCK_THREADS, NvptxKernel, flat_block
from hpvm_py.backends.triton.kernel import TritonKernel
from hpvm_py.backends.triton.prepared import TritonLaunch
from hpvm_py.errors import LaunchError
from conftest import TARGETS
from programs import geometry_leaves as G

HOST_TARGETS = [t for t in ("python", "cpu", "gpu") if t in TARGETS]
CUDA_GRID = (2**31 - 1, 65535, 65535)
CUDA_BLOCK = (1024, 1024, 64)


class Issued(BaseException):
    """Raised by a stand-in for TritonLaunch.issue: stops a launch before the interpreter would
    run its programs."""


def launch(target: str, case: str, extents: tuple[int, ...], n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    hist, out = np.zeros(G.H, np.int64), np.full(n, -1, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(G.CASES[case], hist, hist.nbytes, out, out.nbytes,
                              min(n, math.prod(extents)), *extents, *([1] * (case == "tiled"))))
    return hist, out


def random_extents(case: str, rng: np.random.Generator) -> tuple[int, ...]:
    dims = {"1d": 1, "2d": 2, "3d": 3, "h2": 3, "h3": 3, "grouped": 2, "tiled": 2}[case]
    return tuple(int(rng.choice([0, 1, 1, 2, 3, 5, 7, 33])) for _ in range(dims))


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_generated_geometries_count_every_instance_once(target: str) -> None:
    rng = np.random.default_rng()
    for _ in range(4 if target == "gpu" else 12):
        for case in G.CASES:
            extents = random_extents(case, rng)
            hist, out = launch(target, case, extents)
            want_hist, want_out = G.expected(math.prod(extents), len(out))
            assert np.array_equal(hist, want_hist), (case, extents)
            assert np.array_equal(out, want_out), (case, extents, out)


def nvptx_kernel(case: str) -> NvptxKernel:
    (_, _, kernel), = hpvm.compile(G.CASES[case], target="nvptx").leaf_kernels()
    return kernel


@pytest.mark.skipif("nvptx" not in TARGETS and "gpu" not in TARGETS, reason="no GPU backend")
@pytest.mark.parametrize("case, extents", [
    ("2d", (4, 100000)), ("2d", (100000, 70000)), ("2d", (1, 70000)), ("2d", (3, 100_000_000)),
    ("3d", (2, 2, 100000)), ("3d", (1, 1, 70000)), ("3d", (300, 300, 70000)),
    ("h2", (1, 100000, 3)), ("h2", (3, 3, 100_000_000)), ("h2", (70000, 70000, 1)),
    ("h3", (5000, 50000, 1)), ("1d", (2**31 + 5,))])
def test_nvptx_chunks_cover_large_grids_within_cuda_limits(case: str, extents: tuple[int, ...]) -> None:
    """The flat mapping's block and its launches: y and the (z, parent) pairs in chunks of at
    most 65535 blocks, whose offsets tile [0, ny) and [0, nz * parents) exactly."""
    kernel = nvptx_kernel(case)
    leaf_dims = kernel.ctx.level_dims[0]
    levels = [tuple(extents[len(extents) - leaf_dims:])]
    rest = list(extents[:len(extents) - leaf_dims])
    for dims in kernel.ctx.level_dims[1:]:  # parent levels, innermost first
        levels.append(tuple(rest[len(rest) - dims:]))
        del rest[len(rest) - dims:]
    checked, parents, leaves, block, chunks = kernel._shape(levels)
    assert parents * leaves == math.prod(extents)
    assert all(b <= limit for b, limit in zip(block, CUDA_BLOCK)) and math.prod(block) <= 1024
    nx, ny, nz = tuple(checked[0]) + (1,) * (3 - len(checked[0]))
    ys, zps = set(), set()
    for (gx, gy, gz), y0, zp0 in chunks:
        assert all(0 < g <= limit for g, limit in zip((gx, gy, gz), CUDA_GRID))
        assert gx * block[0] >= nx
        ys.add((y0, y0 + gy * block[1]))
        zps.add((zp0, zp0 + gz * block[2]))
    for spans, total in ((ys, ny), (zps, nz * parents)):
        spans = sorted(spans)
        assert spans[0][0] == 0 and spans[-1][1] >= total and spans[-1][0] < total
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.skipif("gpu" not in TARGETS, reason="target 'gpu' is not available")
@pytest.mark.parametrize("case, extents", [("h3", (50000, 50000, 1)), ("h2", (70000, 70000, 1)),
                                           ("grouped", (2**31, 1))])
def test_a_triton_grid_past_cuda_limits_is_a_launch_error_at_the_leaf(case: str, extents: tuple[int, ...],
                                                                      monkeypatch) -> None:
    """More than 2**31 - 1 programs along x (one or more per parent instance where no grid tiles
    apply): refused before anything is issued, with the leaf's line (nvptx runs such launches)."""
    def issued(self, *args, **kwargs):
        raise Issued(self.grid)

    monkeypatch.setattr(TritonLaunch, "issue", issued)
    with pytest.raises(LaunchError, match="more than a GPU runs") as info:
        launch("gpu", case, extents)
    assert "geometry_leaves.py" in str(info.value)


@pytest.mark.skipif("gpu" not in TARGETS, reason="target 'gpu' is not available")
@pytest.mark.parametrize("case, extents", [
    ("2d", (4, 100000)), ("2d", (100000, 70000)), ("3d", (1, 1, 70000)), ("3d", (1, 70000, 70000)),
    ("h2", (1, 100000, 3)), ("h2", (3, 3, 100_000_000)), ("h3", (1000, 1000, 1000)),
    ("1d", (2**40,)), ("grouped", (2**31 - 1, 1))])
def test_triton_grids_of_large_legal_extents_fit_cuda(case: str, extents: tuple[int, ...],
                                                      monkeypatch) -> None:
    """Large extents that stay within the grid (tiles in y and z only below 65536, x programs
    below 2**31) are issued with a grid CUDA accepts."""
    grids = []

    def issued(self, *args, **kwargs):
        grids.append(self.grid)
        raise Issued(self.grid)

    monkeypatch.setattr(TritonLaunch, "issue", issued)
    with pytest.raises(Issued):
        launch("gpu", case, extents)
    grid, = grids
    assert all(0 < g <= limit for g, limit in zip(grid, CUDA_GRID)), grid


@pytest.mark.skipif("gpu" not in TARGETS, reason="target 'gpu' is not available")
@pytest.mark.parametrize("parents, leaves", [(2**23 + 1, 256), (2**24, 128), (2**24 + 1, 256)])
def test_grid_tiles_of_a_combined_extent_past_2_31_run_their_lanes(parents: int, leaves: int,
                                                                    monkeypatch) -> None:
    """A 1-D leaf of fewer than 512 instances under a 1-D parent runs as tiles of the combined
    grid (parents x leaves instances along x). Its extent was the product of two i32 kernel
    arguments: past 2**31 it wrapped (negative: no lane ran, seen on an H200; 2**32 + 256: only
    256 did). Only the grid's first program runs here (the interpreter could not run 2**31
    instances): it covers instances 0 .. TX - 1, each counted once."""
    layout = TritonKernel._layout
    tiles = []

    def first_program(self, *args, **kwargs):
        found = layout(self, *args, **kwargs)
        tiles.append(found.options["TX"])
        return dataclasses.replace(found, grid=(1, 1, 1))

    monkeypatch.setattr(TritonKernel, "_layout", first_program)
    hist, out = launch("gpu", "tiled", (parents, leaves))
    tx, = tiles
    np.testing.assert_array_equal(hist, (np.arange(G.H) < tx).astype(np.int64))
    assert (out == -1).all()


@pytest.mark.parametrize("nx", [1, 2, 3, 4, 7, 16, 31])
@pytest.mark.parametrize("parents", [1, 5, 10**6])
def test_nvptx_blocks_of_a_narrow_leaf_hold_several_parents_instances(nx: int, parents: int) -> None:
    """A 1-D leaf narrower than a warp takes a block x of its power of two, not 32, and the
    (z, parent) pairs fill the rest of the block: no thread idles for want of an instance but at
    the ends (at a warp, a leaf of 4 under a million parents idled 28 threads of each 32)."""
    bx, by, bz = flat_block(1, (nx, 1, 1), parents)
    assert bx == 1 << (nx - 1).bit_length() and by == 1
    assert bz == min(64, BLOCK_THREADS // bx, 1 << (parents - 1).bit_length())
    # a 2-D leaf one wide: its rows fill the block
    assert flat_block(2, (1, 1000, 1), parents) == (1, BLOCK_THREADS, 1)


@pytest.mark.parametrize("own, parents, block", [((32, 1, 1), 1, (32, 1, 1)), ((33, 1, 1), 1, (64, 1, 1)),
                                                 ((1000, 1, 1), 9, (256, 1, 1)),
                                                 ((1000, 1000, 1), 1, (128, 2, 1))])
def test_nvptx_blocks_of_leaves_a_warp_wide_or_more_are_whole_warps(own: tuple[int, int, int], parents: int,
                                                                     block: tuple[int, int, int]) -> None:
    assert flat_block(1 if own[1] == 1 else 2, own, parents) == block
