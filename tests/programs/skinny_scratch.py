"""Leaves with malloc scratch and barrier() in skinny 3-D grids ((1, 1, L) and (L, 1, 1)): extents
of 1 become constants of the gpu target's kernels (a small grid's fixed extents, Triton's
specialisation of arguments equal to 1), which leave loops that never run (issue 20). LAUNCHES
are what tests/backends/triton_compile_check.py compiles as those launches would on an H100."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def row_and_column_sums(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64):
    node = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(node)
    y = hpvm.get_node_instance_id_y(node)
    z = hpvm.get_node_instance_id_z(node)
    nx = hpvm.get_num_node_instances_x(node)
    ny = hpvm.get_num_node_instances_y(node)
    nz = hpvm.get_num_node_instances_z(node)
    i = (z * ny + y) * nx + x
    row = hpvm.malloc(nx * ny * nz * 4, f32)
    col = hpvm.malloc(nx * ny * nz * 4, f32)
    row[i] = a[i]
    col[i] = a[i]
    hpvm.barrier()
    h = nx // 2  # a tree sum along x: no iteration when nx == 1
    while h > 0:
        if x < h:
            row[i] += row[i + h]
        hpvm.barrier()
        h //= 2
    down = 0.0
    for k in range(nz):
        down += col[(k * ny + y) * nx + x]
    out[i] = row[i - x] + down


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, nx: i64, ny: i64,
         nz: i64):
    hpvm.node(row_and_column_sums, grid=(nx, ny, nz), a=a, a_bytes=a_bytes, out=out,
              out_bytes=out_bytes)


def reference(a: np.ndarray, grid: tuple[int, int, int]) -> np.ndarray:
    """What root computes (nx a power of two; small integers, so every order sums exactly)."""
    nx, ny, nz = grid
    cube = a.reshape(nz, ny, nx)
    return (cube.sum(axis=2, keepdims=True) + cube.sum(axis=0, keepdims=True)).reshape(-1)


GRIDS = [(1, 1, 64), (64, 1, 1), (1, 1, 1), (4, 1, 8)]


def _launch(grid: tuple[int, int, int]) -> tuple[object, list[object], list[tuple[int, ...]]]:
    a = np.zeros(int(np.prod(grid)), np.float32)
    return root, [a, a.nbytes, np.zeros_like(a), a.nbytes], [grid]


# (graph, the leaf's arguments, the leaf's extents)
LAUNCHES = [_launch(grid) for grid in GRIDS]
