"""The HPVM suite ports and the examples at sizes and inputs the suite's own sizes do not reach,
each checked on every target against a NumPy reference written from the algorithm's definition
(not from the port's code): sparse matrices with empty rows (spmv), tiny and odd grids (lbm,
stencil), tiny frames (edge detection)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import edge_detection
from hpvm_suite import lbm, spmv, stencil

# ----------------------------------------------------------------------------------------------
# spmv: Matrix Market files with empty rows, against a dense product


def write_general_mtx(path: Path, dim: int, entries: list[tuple[int, int, float]]) -> None:
    lines = [f"%%MatrixMarket matrix coordinate real general\n{dim} {dim} {len(entries)}\n"]
    lines += [f"{r + 1} {c + 1} {v!r}\n" for r, c, v in entries]
    path.write_text("".join(lines))


def random_entries(rng: np.random.Generator, dim: int, empty: set[int]) -> list[tuple[int, int, float]]:
    """Up to three distinct columns in every row not in `empty`, values in [-1, 1)."""
    entries = []
    for r in range(dim):
        if r in empty:
            continue
        for c in rng.choice(dim, min(dim, int(rng.integers(1, 4))), replace=False):
            entries.append((r, int(c), float(np.float32(rng.uniform(-1, 1)))))
    return entries


def dense_product(dim: int, entries: list[tuple[int, int, float]], x: np.ndarray) -> np.ndarray:
    a = np.zeros((dim, dim))
    for r, c, v in entries:
        a[r, c] += v
    return a @ x.astype(np.float64)


def check_spmv_file(path: Path, dim: int, entries, target: str) -> None:
    write_general_mtx(path, dim, entries)
    inputs = spmv.make_inputs(0, 0, iterations=2, matrix=str(path))
    y = spmv.run(inputs, target)["y"]
    np.testing.assert_allclose(y, dense_product(dim, entries, inputs["x"]), rtol=1e-5, atol=1e-6)


# (dim, empty rows): a group of 32 sorted rows that are all empty follows the non-empty ones
EMPTY_GROUPS = [(33, {32}), (40, set(range(5, 40))), (64, set(range(32, 64))), (3, {0, 1, 2})]


@pytest.mark.parametrize("dim,empty", EMPTY_GROUPS)
def test_spmv_rows_of_an_empty_group_are_zero(tmp_path: Path, target: str, dim: int, empty: set[int]) -> None:
    """Before the fix, such a group's nzcnt was 0 and the kernel's prefetch of diagonal 0 (made
    before it reads the count) took another row's entry of diagonal 1: y[perm[ix]] got a product
    that belongs to no entry of that row (or an out-of-bounds load, with every row empty)."""
    rng = np.random.default_rng([dim, len(empty)])
    check_spmv_file(tmp_path / "m.mtx", dim, random_entries(rng, dim, empty), target)


def test_spmv_random_matrices_with_empty_rows(tmp_path: Path, target: str) -> None:
    """Seeded random general matrices, some rows empty, sizes around the 32-row groups."""
    rng = np.random.default_rng(20240611)
    for trial in range(4):
        dim = int(rng.choice([1, 2, 31, 33, 47, 65]))
        empty = set(int(r) for r in np.flatnonzero(rng.random(dim) < rng.uniform(0, 0.9)))
        check_spmv_file(tmp_path / f"m{trial}.mtx", dim, random_entries(rng, dim, empty), target)


def test_spmv_matrix_market_without_entries(tmp_path: Path) -> None:
    """A coordinate file whose size line promises 0 entries is a zero matrix, not a bad file."""
    path = tmp_path / "zero.mtx"
    write_general_mtx(path, 5, [])
    dim, rows, cols, vals, mirrored = spmv.read_matrix_market(path)
    assert dim == 5 and rows.size == cols.size == vals.size == 0 and not mirrored
    inputs = spmv.make_inputs(0, 0, iterations=1, matrix=str(path))
    assert np.array_equal(spmv.run(inputs, "python")["y"], np.zeros(5, np.float32))


@pytest.mark.parametrize("dim", [1, 2, 3])
def test_spmv_generated_tiny_matrices(dim: int) -> None:
    """make_inputs(dim=1) raised an IndexError (its repeated-entry filter on an empty array)."""
    inputs = spmv.make_inputs(dim, band=1, iterations=1)
    y = spmv.run(inputs, "python")["y"]
    want = np.bincount(inputs["rows"], weights=inputs["vals"].astype(np.float64) * inputs["x"][inputs["cols"]],
                       minlength=dim)
    np.testing.assert_allclose(y, want, rtol=1e-6)


# ----------------------------------------------------------------------------------------------
# lbm: odd grids against D3Q19 BGK written from its definition (np.roll streaming)

D3Q19 = {"C": (0, 0, 0), "N": (0, 1, 0), "S": (0, -1, 0), "E": (1, 0, 0), "W": (-1, 0, 0),
         "T": (0, 0, 1), "B": (0, 0, -1), "NE": (1, 1, 0), "NW": (-1, 1, 0), "SE": (1, -1, 0),
         "SW": (-1, -1, 0), "NT": (0, 1, 1), "NB": (0, 1, -1), "ST": (0, -1, 1), "SB": (0, -1, -1),
         "ET": (1, 0, 1), "EB": (1, 0, -1), "WT": (-1, 0, 1), "WB": (-1, 0, -1)}  # (x, y, z)


def lattice_boltzmann(f: np.ndarray, obstacle: np.ndarray, accel: np.ndarray, steps: int) -> np.ndarray:
    """`steps` of stream (f_i(x) <- f_i(x - c_i)) and collide (bounce-back at obstacles, else
    BGK towards w_i rho (1 + 3 c.u + 4.5 (c.u)^2 - 1.5 u^2) with omega 1.95; ACCEL cells take
    u = (0.005, 0.002, 0)), in float64 on (19, nz, ny, nx). The roll wraps at the domain's edge,
    where only wall (obstacle) cells read, in directions no fluid cell reads back."""
    c = np.array(list(D3Q19.values()), float)
    weights = np.array([1 / 3 if not v.any() else 1 / 18 if abs(v).sum() == 1 else 1 / 36 for v in c])
    opposite = [next(j for j in range(19) if (c[j] == -c[i]).all()) for i in range(19)]
    for _ in range(steps):
        g = np.array([np.roll(f[i], (int(c[i, 2]), int(c[i, 1]), int(c[i, 0])), axis=(0, 1, 2))
                      for i in range(19)])
        rho = g.sum(0)
        u = np.einsum("ia,izyx->azyx", c, g) / rho
        u[:, accel] = np.array([0.005, 0.002, 0.0])[:, None]
        cu = np.einsum("ia,azyx->izyx", c, u)
        feq = weights[:, None, None, None] * rho * (1 + 3 * cu + 4.5 * cu * cu - 1.5 * (u * u).sum(0))
        f = (1 - 1.95) * g + 1.95 * feq
        f[:, obstacle] = g[opposite][:, obstacle]
    return f


def cell_planes(grid: np.ndarray, nx: int, ny: int, nz: int) -> np.ndarray:
    return grid.reshape(20, nz + 4, ny, nx + 8)[:, 2:nz + 2, :, :nx].astype(np.float64)


@pytest.mark.parametrize("nx,ny,nz,steps", [(5, 4, 6, 3), (7, 7, 5, 4), (4, 9, 4, 2)])
def test_lbm_odd_grids_match_d3q19(target: str, nx: int, ny: int, nz: int, steps: int) -> None:
    inputs = lbm.make_inputs(nx, ny, nz, steps)
    start = cell_planes(inputs["grid"], nx, ny, nz)
    flags = start[19].astype(np.int64)
    obstacle = (flags & lbm.OBSTACLE) > 0
    want = lattice_boltzmann(start[:19], obstacle, (flags & lbm.ACCEL) > 0, steps)
    got = cell_planes(lbm.run(inputs, target)["grid"], nx, ny, nz)[:19]
    fluid = ~obstacle
    assert fluid.any()
    np.testing.assert_allclose(got[:, fluid], want[:, fluid], rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# stencil: grids thinner than a block, with specials, against the 7-point rule


def seven_point(a: np.ndarray, iterations: int) -> np.ndarray:
    c0, c1 = np.float32(1 / 6), np.float32(1 / 36)
    a = a.copy()
    for _ in range(iterations):
        b = a.copy()
        for k in range(1, a.shape[0] - 1):
            for j in range(1, a.shape[1] - 1):
                for i in range(1, a.shape[2] - 1):
                    s = (a[k + 1, j, i] + a[k - 1, j, i] + a[k, j + 1, i] + a[k, j - 1, i]
                         + a[k, j, i + 1] + a[k, j, i - 1])
                    b[k, j, i] = c1 * s - a[k, j, i] * c0
        a = b
    return a


@pytest.mark.parametrize("nx,ny,nz,iterations", [(3, 3, 3, 2), (2, 5, 4, 1), (259, 3, 3, 1), (7, 6, 5, 3)])
def test_stencil_thin_grids(target: str, nx: int, ny: int, nz: int, iterations: int) -> None:
    inputs = stencil.make_inputs(nx, ny, nz, iterations)
    rng = np.random.default_rng(nx * 100 + ny)
    flat = inputs["a0"].reshape(-1)
    flat[rng.choice(flat.size, max(1, flat.size // 10), replace=False)] = rng.choice(
        np.array([np.inf, -np.inf, -0.0, 1e-40, 3e38, -2.5], np.float32), max(1, flat.size // 10))
    with np.errstate(all="ignore"):
        want = seven_point(inputs["a0"], iterations)
    got = stencil.run(inputs, target)["a"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------------------------
# the edge-detection example on frames one or two pixels high


@pytest.mark.parametrize("size", [2, 3])
def test_edge_detection_tiny_frames(target: str, size: int) -> None:
    """size 2 is a 2 x 1 frame: synthetic_frame drew a rectangle's corner from rng.integers(0, 0)."""
    edge_detection.main(target, size=size, frames=2)


# ----------------------------------------------------------------------------------------------
# cava's check: a NaN stage value where NumPy's is NaN too is a match (as parboil_close says)


def test_cava_check_matches_nan_with_nan() -> None:
    from hpvm_suite import cava

    inputs = cava.make_inputs(2, 4)
    inputs["weights"] = inputs["weights"].copy()
    inputs["weights"][7, 1] = np.nan  # one control point's weight: NaN in every pixel's channel 1
    with np.errstate(all="ignore"):
        expected = cava.reference(inputs)
    assert np.isnan(expected["gamut_out"]).any()
    outputs = {k: np.copy(v) for k, v in expected.items()}
    outputs["tone_map_table"] = inputs["tone_map"]
    assert cava.check(outputs, expected) is None
    outputs["gamut_out"][0, 0, 0] += 1.0
    assert "gamut_out" in cava.check(outputs, expected)
