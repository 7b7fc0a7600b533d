"""Pointer offsets and shapes (docs/language.md, "Pointer offsets and shapes") at the edges the
hunt found: each program runs on every target against NumPy on fresh random inputs."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends.nvptx import NvptxBackend, toolchain
from hpvm_py.errors import FrontendError
from hpvm_py.rt.compiler import compile_graph

from errcheck import check_error, program_path
from programs import common
from programs import view_programs as P


def test_constant_extents_whose_product_overflows_i64(target, rng):
    """The stride of a view's leading index is the product of the later extents, an i64 that wraps
    like a computed one (2**80 is 0 in i64); folding it as a constant raised an internal
    OverflowError at the launch instead."""
    n = 16
    a = rng.standard_normal(n).astype(np.float32)
    b = np.zeros(2, np.float32)
    i, k = (int(v) for v in rng.integers(0, n, 2))
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.huge_view_root, a, a.nbytes, b, b.nbytes, i, 0, k))
    np.testing.assert_array_equal(b, [a[k], a[k]])  # i * 2**80 + 0 * 2**40 + k wraps to k


def test_a_constant_extent_past_i64_is_located():
    with pytest.raises(FrontendError) as info:
        hpvm.compile(common.root_for(P.extent_past_i64), target="python")
    check_error(info.value, FrontendError, program_path(P), "extent-past-i64", None)


@pytest.mark.parametrize("name,tag", [("offset_to_a_helper", "offset-to-helper"),
                                      ("pointer_times_two", "pointer-times-two")])
def test_a_pointer_as_a_value_names_the_rule(name, tag):
    """An offset pointer given to a helper, or a pointer in arithmetic, is a pointer used as a
    value: the error named no rule."""
    with pytest.raises(FrontendError) as info:
        hpvm.compile(common.root_for(getattr(P, name)), target="python")
    check_error(info.value, FrontendError, program_path(P), tag, "pointer-views")


def test_an_offset_one_dimensional_view_is_flat(target, rng):
    """`t - 4` of a 16-element shaped t, and `A[1] - 1` of a 4 x 4 view, kept the old extent, so
    the in-bounds `(t - 4)[19]` was refused at compile time as outside dimension 0 (extent 16)."""
    a = rng.standard_normal(16).astype(np.float32)
    b = np.zeros(3, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.offset_rows_root, a, a.nbytes, b, b.nbytes))
    A = a.reshape(4, 4)
    np.testing.assert_array_equal(b, [a[15], A[1, 3], A[1, 2]])


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("root", [P.huge_view_root, P.offset_rows_root], ids=lambda r: r.name)
def test_the_programs_assemble_for_nvptx(root):
    for leaf, ctx, kernel in compile_graph(root, "nvptx").leaf_kernels():
        checked = NvptxBackend().compile_leaf(leaf, ctx, checked=True)
        assert kernel.cubin and checked.cubin and checked.checked
