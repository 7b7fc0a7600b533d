"""Row guards (backends/triton/rowguard.py): a trailing guard's loads masked by its conjuncts that do
not depend on x, only for launches whose bounds proof holds without the others. Every launch must
give NumPy's answer; the launches whose dropped conjuncts protect an out-of-bounds load must not
use them (tests/programs/row_guards.py makes both kinds from one leaf, with random bounds)."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

import hpvm_py as hpvm
import stencil
from hpvm_py.backends.triton.rowguard import find_row_guard
from hpvm_py.backends.triton.codegen import generate
from hpvm_py.rt.compiler import compile_graph
from programs import row_guards as R
from programs import stencil_schedules

N, M = 40, 9  # x is cut by the tiles (16 wide): lanes beyond n run too


def _reference(a: np.ndarray, lo: int, nlim: int, jlo: int, mlim: int, dx: int, then: bool) -> np.ndarray:
    out = np.zeros(N * M, np.float32)
    for j in range(jlo, mlim):
        for i in range(lo, nlim):
            at = j * N + i
            out[at] = a[at + dx] + a[at] if then else a[at + dx] * np.float32(2)
    return out


def _launch(root, a: np.ndarray, *scalars: int) -> tuple[np.ndarray, int]:
    out = np.zeros(N * M, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, out, out.nbytes, N, M, *scalars))
        hpvm.request_memory(out)
        used = hpvm.stats().get("row_guard_launches", 0)
    return out, used


needs_gpu_target = pytest.mark.skipif("gpu" not in __import__("conftest").TARGETS,
                                      reason="the gpu target is not usable here")


@needs_gpu_target
@pytest.mark.parametrize("root", [R.shift_root, R.shift_then_root], ids=lambda r: r.name)
def test_random_bounds_give_numpys_answer_and_drop_only_what_is_proven(root) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    a = np.random.default_rng(seed).random(N * M, dtype=np.float32)
    then = root is R.shift_then_root
    for _ in range(12):
        dx = rng.choice([0, 1, -1, 2, -2, N - 1, -(N - 1), N, -N, 2 * N, -2 * N])
        # the guard keeps every access of the original in bounds: within the row, or rows that
        # have the row dx reaches
        lo, nlim = max(0, -dx) + rng.choice([0, 1]), N - max(0, dx) - rng.choice([0, 1])
        if abs(dx) >= N:
            lo, nlim = rng.choice([0, 1]), N - rng.choice([0, 1])
        rows_away = -(-abs(dx) // N) if abs(dx) >= N else 0
        jlo = (rows_away if dx < 0 else 0) + rng.choice([0, 1, 2])
        mlim = M - (rows_away if dx > 0 else 0) - rng.choice([0, 1, 2])
        out, used = _launch(root, a, lo, nlim, jlo, mlim, dx)
        where = f"seed {seed}: lo={lo} nlim={nlim} jlo={jlo} mlim={mlim} dx={dx}"
        np.testing.assert_array_equal(out, _reference(a, lo, nlim, jlo, mlim, dx, then), err_msg=where)
        # without the x conjuncts the loads run over x in [0, 48) (three tiles of 16) on the
        # rows jlo .. mlim - 1: row masks are safe only if all of those stay in the buffer
        low = jlo * N + min(dx, 0) if then else jlo * N + dx
        high = (mlim - 1) * N + 47 + (max(dx, 0) if then else dx)
        if used:
            assert jlo >= mlim or (low >= 0 and high < N * M), f"{where}: row masks where unsafe"


@needs_gpu_target
def test_a_guard_that_protects_the_first_element_keeps_its_mask() -> None:
    """`1 <= i` is all that keeps a[at - 1] from index -1 at j = 0: no row masks there; from row 1
    on (and short of the last rows, which x up to 47 would leave) they are safe."""
    a = np.random.default_rng().random(N * M, dtype=np.float32)
    out, used = _launch(R.shift_root, a, 1, N, 0, M, -1)
    np.testing.assert_array_equal(out, _reference(a, 1, N, 0, M, -1, False))
    assert used == 0
    out, used = _launch(R.shift_root, a, 1, N, 1, M - 1, -1)
    np.testing.assert_array_equal(out, _reference(a, 1, N, 1, M - 1, -1, False))
    assert used == 1


@needs_gpu_target
def test_the_stencil_runs_with_row_masks_and_quads() -> None:
    """Row masks, and quads (backends/triton/quads.py: its blocks are 16 wide)."""
    nx, ny, nz = 70, 20, 5
    a0 = np.random.default_rng().random((nz, ny, nx), dtype=np.float32)
    anext = a0.copy()
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(stencil.root, a0, a0.nbytes, anext, anext.nbytes, nx, ny, nz, 1 / 6, 1 / 36))
        hpvm.request_memory(anext)
        assert hpvm.stats().get("row_guard_launches") == 1 and hpvm.stats().get("quad_launches") == 1
    np.testing.assert_allclose(anext, stencil.reference(a0, 1 / 6, 1 / 36), rtol=1e-5, atol=1e-6)


def _leaf(root):
    (leaf, ctx, kernel), = compile_graph(root, "gpu").leaf_kernels()
    return kernel.leaf, ctx


def test_which_leaves_have_a_row_guard() -> None:
    leaf, ctx = _leaf(stencil.root)
    guard = find_row_guard(leaf, ctx.input_modes)
    assert guard is not None and len(guard.columns) == 2 and len(guard.rows) == 4
    # a leaf that walks z (a loop) or shares a tile (barriers) has none
    for other in (stencil_schedules.walk_root, stencil_schedules.shared_root):
        leaf, ctx = _leaf(other)
        assert find_row_guard(leaf, ctx.input_modes) is None


def test_the_rows_variant_masks_loads_by_rows_and_stores_by_the_whole_guard() -> None:
    leaf, ctx = _leaf(stencil.root)
    rows = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True)
    plain = generate(leaf, ctx, False, interpreted=False, fixed_grid=True)
    assert rows.rows and not plain.rows and rows.row_guard is not None
    assert "v_at = tl.where" in plain.text and "v_at = tl.where" not in rows.text  # on every lane
    lines = rows.text.splitlines()
    defs = dict(line.strip().split(" = ", 1) for line in lines if re.match(r"\s+_[cm]\d+ = ", line))
    columns = next(c for c, d in defs.items() if c.startswith("_c") and "v_i" in d)
    row = next(c for c, d in defs.items() if c.startswith("_c") and "v_j" in d)
    assert "v_i" not in defs[row] and "v_j" not in defs[columns]
    load_masks = [m for line in lines for m in re.findall(r"tl\.load\(v_a0 [^)]*mask=(_m\d+)", line)]
    assert len(load_masks) == 7 and all(defs[m] == f"m0 & {row}" for m in load_masks)
    store = next(line for line in lines if "tl.store(v_anext" in line)
    kept, cut = re.search(r"mask=(_m\d+) & (_c\d+)\)$", store).groups()
    assert defs[kept] == f"m0 & {row}" and cut == columns  # the store keeps the whole guard
    checked = generate(leaf, ctx, True, interpreted=False, fixed_grid=True, rows=True)
    assert not checked.rows  # the checked variant reports accesses as written
