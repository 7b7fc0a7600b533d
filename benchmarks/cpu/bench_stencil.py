"""7-point stencil on 256x256x64 f32: a 3-D leaf, one instance per point, interior guarded by an if."""
import numba as nb
import numpy as np

from common import launcher, measure, report

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

NX, NY, NZ = 256, 256, 64


@hpvm.leaf
def stencil(A0: In[Ptr[f32]], A0_bytes: i64, Anext: Out[Ptr[f32]], Anext_bytes: i64, c0: f32,
            c1: f32):
    node = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(node)
    j = hpvm.get_node_instance_id_y(node)
    k = hpvm.get_node_instance_id_z(node)
    nx = hpvm.get_num_node_instances_x(node)
    ny = hpvm.get_num_node_instances_y(node)
    nz = hpvm.get_num_node_instances_z(node)
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1 and k > 0 and k < nz - 1:
        idx = i + nx * (j + ny * k)
        plane = nx * ny
        Anext[idx] = (A0[idx + 1] + A0[idx - 1] + A0[idx + nx] + A0[idx - nx] + A0[idx + plane]
                      + A0[idx - plane]) * c1 - A0[idx] * c0


@nb.njit(parallel=True, fastmath=True)
def nb_stencil(A0, An, c0, c1):
    nz, ny, nx = A0.shape
    for k in nb.prange(1, nz - 1):
        for j in range(1, ny - 1):
            for i in range(1, nx - 1):
                An[k, j, i] = (A0[k, j, i + 1] + A0[k, j, i - 1] + A0[k, j + 1, i] + A0[k, j - 1, i]
                               + A0[k + 1, j, i] + A0[k - 1, j, i]) * c1 - A0[k, j, i] * c0


def main() -> dict[str, float]:
    A0 = np.random.default_rng(0).random((NZ, NY, NX), dtype=np.float32)
    An = np.zeros_like(A0)
    Anb = np.zeros_like(A0)
    c0, c1 = np.float32(1 / 6), np.float32(1 / 36)
    ours = launcher(stencil, [(NX, NY, NZ)], A0, A0.nbytes, An, An.nbytes, c0, c1)
    ours()
    nb_stencil(A0, Anb, c0, c1)
    assert np.allclose(An, Anb, rtol=1e-6, atol=1e-6)

    def np_stencil():
        Anb[1:-1, 1:-1, 1:-1] = (A0[1:-1, 1:-1, 2:] + A0[1:-1, 1:-1, :-2] + A0[1:-1, 2:, 1:-1]
                                 + A0[1:-1, :-2, 1:-1] + A0[2:, 1:-1, 1:-1]
                                 + A0[:-2, 1:-1, 1:-1]) * c1 - A0[1:-1, 1:-1, 1:-1] * c0

    results = measure({"hpvm-cpu": ours, "numba-parallel": lambda: nb_stencil(A0, Anb, c0, c1),
                       "numpy": np_stencil})
    return {"stencil": report("7-point stencil 256x256x64 f32", results, "numba-parallel")}


if __name__ == "__main__":
    main()
