"""Parboil-style 3-D 7-point stencil: Anext = c1 * (sum of the 6 neighbours) - c0 * A0.

The root creates a 3-D grid of block nodes (x and y split in 16 x 8 blocks, one block per z
plane); each block is an internal node holding a 2-D leaf of 16 x 8 instances, as the CUDA
version maps blocks of threads. Boundary points keep their value.
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

BX, BY = 16, 8


@hpvm.leaf
def stencil_block(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
                  nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * BX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block) * BY + hpvm.get_node_instance_id_y(me)
    k = hpvm.get_node_instance_id_z(block)
    if 0 < i < nx - 1 and 0 < j < ny - 1 and 0 < k < nz - 1:
        at = (k * ny + j) * nx + i
        neighbours = (a0[at + 1] + a0[at - 1] + a0[at + nx] + a0[at - nx]
                      + a0[at + nx * ny] + a0[at - nx * ny])
        anext[at] = neighbours * c1 - a0[at] * c0


@hpvm.graph
def block_graph(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
                nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(stencil_block, grid=(BX, BY), a0=a0, a0_bytes=a0_bytes, anext=anext,
              anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz, c0=c0, c1=c1)


@hpvm.graph
def root(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
         nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(block_graph, grid=((nx + BX - 1) // BX, (ny + BY - 1) // BY, nz), a0=a0,
              a0_bytes=a0_bytes, anext=anext, anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz,
              c0=c0, c1=c1)


def reference(a0: np.ndarray, c0: float, c1: float) -> np.ndarray:
    out = a0.copy()
    c0, c1 = np.float32(c0), np.float32(c1)
    out[1:-1, 1:-1, 1:-1] = (a0[1:-1, 1:-1, 2:] + a0[1:-1, 1:-1, :-2] + a0[1:-1, 2:, 1:-1]
                             + a0[1:-1, :-2, 1:-1] + a0[2:, 1:-1, 1:-1] + a0[:-2, 1:-1, 1:-1]) * c1 \
        - a0[1:-1, 1:-1, 1:-1] * c0
    return out


def main(target: str | None = None, nx: int = 128, ny: int = 96, nz: int = 32) -> None:
    rng = np.random.default_rng()
    a0 = rng.random((nz, ny, nx), dtype=np.float32)
    anext = a0.copy()
    c0, c1 = 1 / 6, 1 / 36
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a0, a0.nbytes, anext, anext.nbytes, nx, ny, nz, c0, c1))
        hpvm.request_memory(anext)
    np.testing.assert_allclose(anext, reference(a0, c0, c1), rtol=1e-5, atol=1e-6)
    print(f"stencil: {nx}x{ny}x{nz} OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 128)
    main(args.target, args.size, args.size * 3 // 4, max(3, args.size // 4))
