"""The stencil's z-walking schedules (tests/programs/stencil_schedules.py) against NumPy on every
target, on grids whose edges cut tiles and whose depth leaves the walk no plane, one or many."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
import stencil
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.rt.compiler import compile_graph
from programs import stencil_schedules as S

ROOTS = [S.shared_root, S.walk_root]
# (nx, ny, nz): a tile cut in x and y; a walk of one plane; none (nz = 2); x narrower than a tile
GRIDS = [(70, 20, 9), (35, 9, 3), (40, 12, 2), (5, 30, 4)]


@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.name)
@pytest.mark.parametrize("nx,ny,nz", GRIDS)
def test_schedule_matches_numpy(root, nx: int, ny: int, nz: int, target: str) -> None:
    a0 = np.random.default_rng().random((nz, ny, nx), dtype=np.float32)
    anext = a0.copy()  # the boundary keeps its value: both buffers start equal, as in examples/stencil
    c0, c1 = 1 / 6, 1 / 36
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a0, a0.nbytes, anext, anext.nbytes, nx, ny, nz, c0, c1))
        hpvm.request_memory(anext)
    np.testing.assert_allclose(anext, stencil.reference(a0, c0, c1), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(toolchain.ptxas_path() is None,
                    reason="ptxas is not installed (it comes with the triton wheel)")
@pytest.mark.parametrize("root", ROOTS, ids=lambda r: r.name)
def test_schedule_assembles_for_nvptx(root) -> None:
    assert all(kernel.cubin for _, _, kernel in compile_graph(root, "nvptx").leaf_kernels())
