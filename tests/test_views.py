"""Pointer offsets (`row = data + k`) and shapes (`hpvm.view(p, (rows, cols))`,
`hpvm.malloc(nbytes, T, shape=(16, 16))`, indexed `t[i, j]` or `t[i][j]`): lowered by the front end
to flat accesses of the base pointer, so every target and the bounds proof see ordinary indices.
Each program runs on every target against NumPy on fresh random inputs."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.errors import ExecutionError, FrontendError, HPVMError, VerificationError
from hpvm_py.ir.parser import parse_module
from hpvm_py.ir.printer import print_module

from errcheck import check_error, program_path
from programs import common
from programs import view_errors as E
from programs import views as P
from test_bounds import proofs_for


def _row_sums(x: np.ndarray) -> np.ndarray:
    rows, cols = x.shape
    out = x.sum(axis=1, dtype=np.float32)
    return out + x[:, cols - 1] * 2 + x[:, 0] * 3


@pytest.mark.parametrize("rows,cols", [(1, 1), (6, 9), (13, 4)])
def test_offset_pointers(target, rows, cols, rng):
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    y = np.zeros(rows, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.row_sums_root, x, x.nbytes, y, y.nbytes, rows, cols))
    np.testing.assert_allclose(y, _row_sums(x), rtol=1e-5, atol=1e-5)


def test_row_pointers(target, rng):
    x = rng.standard_normal((6, 5)).astype(np.float32)
    y = np.zeros_like(x)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.row_scale_root, x, x.nbytes, y, y.nbytes, 6, 5))
    np.testing.assert_array_equal(y, x * np.arange(6, dtype=np.float32)[:, None])


@pytest.mark.parametrize("n,k,m", [(1, 1, 1), (5, 7, 3), (16, 9, 12)])
def test_shaped_views_of_parameters(target, n, k, m, rng):
    a = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal((k, m)).astype(np.float32)
    c = np.zeros((n, m), np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.matmul_root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n, k, m))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [8, 24])
def test_a_shaped_scratch_tile(target, n, rng):
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.tile_root, a, a.nbytes, b, b.nbytes, n))
    np.testing.assert_array_equal(b, a.T)


def test_a_three_dimensional_view_of_an_offset_pointer(target, rng):
    nz, ny, nx, skip = 3, 4, 5, 7
    v = rng.standard_normal(skip + nz * ny * nx).astype(np.float32)
    out = np.zeros((nz, ny), np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.planes_root, v, v.nbytes, out, out.nbytes, nz, ny, nx, skip))
    cube = v[skip:].reshape(nz, ny, nx)
    np.testing.assert_allclose(out, cube.sum(axis=2) + cube[:, :, 0], rtol=1e-5, atol=1e-5)


def test_atomics_through_an_offset_pointer(target, rng):
    rows, cols, bins = 5, 40, 6
    data = rng.integers(0, 1000, (rows, cols)).astype(np.int32)
    hist = np.zeros((rows, bins), np.int32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.histogram_root, data, data.nbytes, hist, hist.nbytes, rows, cols, bins))
    expected = np.stack([np.bincount(r % bins, minlength=bins) for r in data]).astype(np.int32)
    np.testing.assert_array_equal(hist, expected)


def test_an_offset_into_scratch(target, rng):
    x = rng.standard_normal(P.TILE).astype(np.float32)
    y = np.zeros_like(x)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.scratch_root, x, x.nbytes, y, y.nbytes))
    np.testing.assert_allclose(y, x[::-1] * 3, rtol=1e-6)


def test_the_bounds_proof_sees_flat_accesses():
    x = np.zeros((5, 7), np.float32)
    assert proofs_for(P.row_scale_root, [x, x.nbytes, x, x.nbytes, 5, 7]) == {P.row_scale.name: True}
    assert proofs_for(P.row_scale_root, [x, x.nbytes, x, x.nbytes, 5, 8]) == {P.row_scale.name: False}
    # a pointer moved in a loop (`p += cols`) is beyond the interval analysis: checked code runs
    y = np.zeros(5, np.float32)
    assert proofs_for(P.row_sums_root, [x, x.nbytes, y, y.nbytes, 5, 7]) == {P.row_sums.name: False}
    a = np.zeros((16, 16), np.float32)
    assert proofs_for(P.tile_root, [a, a.nbytes, a, a.nbytes, 16]) == {P.tile_transpose.name: True}
    assert proofs_for(P.tile_root, [a, a.nbytes, a, a.nbytes, 24]) == {P.tile_transpose.name: False}
    a, b, c = np.zeros((4, 3), np.float32), np.zeros((3, 5), np.float32), np.zeros((4, 5), np.float32)
    buffers = [a, a.nbytes, b, b.nbytes, c, c.nbytes]
    assert proofs_for(P.matmul_root, buffers + [4, 3, 5]) == {P.matmul.name: True}
    assert proofs_for(P.matmul_root, buffers + [4, 4, 5]) == {P.matmul.name: False}


def test_an_access_past_the_end_through_an_offset_is_located(target):
    x = np.arange(8, dtype=np.float32)
    y = np.zeros(8, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.shifted_root, x, x.nbytes, y, y.nbytes, 6, 2))
        np.testing.assert_array_equal(y[:6], x[2:8])
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(P.shifted_root, x, x.nbytes, y, y.nbytes, 7, 2))
    check_error(info.value, ExecutionError, program_path(P), "view-oob", "memory-in-bounds")
    assert "from x[8]" in str(info.value)  # the base pointer, and the flat index


def test_the_textual_ir_holds_ordinary_accesses(target, rng):
    text = hpvm.to_text(P.tile_root)
    assert "load<f32>(%a, " in text and "store %tile[" in text
    assert print_module(parse_module(text, "tile.hpvm")) == text
    n = 16
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(hpvm.from_text(text, "tile.hpvm"), a, a.nbytes, b, b.nbytes, n))
    np.testing.assert_array_equal(b, a.T)


ERRORS = [
    ("rank_too_low", "rank-low", "pointer-views"),
    ("rank_too_high", "rank-high", "pointer-views"),
    ("flat_two_indices", "flat-two", "pointer-views"),
    ("zero_extent", "zero-extent", "pointer-views"),
    ("four_dims", "four-dims", "pointer-views"),
    ("float_extent", "float-extent", "pointer-views"),
    ("shape_too_big", "shape-big", "pointer-views"),
    ("constant_out_of_range", "const-range", "memory-in-bounds"),
    ("negative_constant", "const-negative", "memory-in-bounds"),
    ("two_bases", "two-bases", "pointer-views"),
    ("pointer_plus_pointer", "ptr-ptr", "pointer-views"),
    ("offset_of_a_shape", "offset-shape", "pointer-views"),
    ("reshape_a_view", "reshape", "pointer-views"),
    ("pointer_as_value", "as-value", "pointer-views"),
    ("reassign_parameter", "param", "pointer-views"),
    ("view_as_value", "view-value", "pointer-views"),
    ("atomic_on_a_shape", "atomic-shape", "pointer-views"),
    ("store_through_in", "store-in", "pointer-direction"),
]


@pytest.mark.parametrize("name,tag,rule", ERRORS, ids=[c[0] for c in ERRORS])
def test_view_errors_are_located(name, tag, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(getattr(E, name)), target="python")
    cls = VerificationError if rule == "pointer-direction" else FrontendError
    check_error(info.value, cls, program_path(E), tag, rule)


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("root", [P.row_sums_root, P.row_scale_root, P.matmul_root, P.tile_root,
                                  P.planes_root, P.histogram_root, P.scratch_root],
                         ids=lambda r: r.name)
def test_views_assemble_for_nvptx(root):
    """Without a GPU the nvptx target still compiles each leaf, checked and unchecked, and ptxas
    assembles it for sm_90 (with a GPU the tests above run it)."""
    from hpvm_py.backends.nvptx import NvptxBackend

    for leaf, ctx, kernel in compile_graph(root, "nvptx").leaf_kernels():
        checked = NvptxBackend().compile_leaf(leaf, ctx, checked=True)
        assert kernel.cubin and checked.cubin and checked.checked
