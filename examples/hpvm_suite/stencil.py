"""Parboil 7-point stencil as HPVM's own port writes it (`parboil/benchmarks/stencil/src/hpvm/stencil.cpp`).

Anext = c1 * (sum of the six neighbours of A0) - c0 * A0 on the interior of an nx x ny x nz grid
(x fastest), c0 = 1/6, c1 = 1/36. The host copies A0 into Anext once (so the boundary planes are
in both buffers), then launches the graph `iterations` times, swapping A0 and Anext after each
launch, as the original's `for (t = 0; t < iteration; t++)` loop does; the result is the last
buffer written.

DFG (the same as the original's):

    root  stencil_lvl3        single instance
      stencil_lvl2            single instance (createNodeND(0, ...))
        stencil_lvl1          3-D, ceil((nx - 2) / 256) x (ny - 2) x (nz - 2) instances
          naive_kernel        leaf, 3-D, 256 x 1 x 1 instances (the 1-D CUDA block)

A0 is `In`, Anext `InOut` (`__hpvm__attributes(2, A0, Anext, 1, Anext)`); nx, ny, nz are `i32`
as in C. Instance (i, j, k) updates point (i + 1, j + 1, k + 1) when i + 1 < nx - 1.

Inputs: Parboil's `default` dataset, 512 x 512 x 64 and 100 iterations (its input file is not in
the HPVM repository): the port generates A0 uniform in [0, 1) from the suite's fixed seed.
`small` is 40 x 12 x 8, 3 iterations.

Check: Parboil's `tools/compare-output` for stencil: each element within 0.001 absolute or 0.2%.

Differences from the original: none in the graph.
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64

try:
    from ._common import ONCE, Passes, optional_numba, parboil_close, rng_for
except ImportError:  # loaded as a file (`hpvmc check examples/hpvm_suite/stencil.py`)
    import sys
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    from hpvm_suite._common import ONCE, Passes, optional_numba, parboil_close, rng_for

BLOCK_X = 256

SIZES = {"small": {"nx": 40, "ny": 12, "nz": 8, "iterations": 3},
         "standard": {"nx": 512, "ny": 512, "nz": 64, "iterations": 100}}


@hpvm.leaf
def naive_kernel(c0: f32, c1: f32, a0: In[Ptr[f32]], bytes_a0: i64, anext: InOut[Ptr[f32]],
                 bytes_anext: i64, nx: i32, ny: i32, nz: i32):
    this = hpvm.get_node()
    parent = hpvm.get_parent_node(this)
    lx = hpvm.get_node_instance_id_x(this)
    ly = hpvm.get_node_instance_id_y(this)
    lz = hpvm.get_node_instance_id_z(this)
    gx = hpvm.get_node_instance_id_x(parent)
    gy = hpvm.get_node_instance_id_y(parent)
    gz = hpvm.get_node_instance_id_z(parent)
    gridx = hpvm.get_num_node_instances_x(this)
    gridy = hpvm.get_num_node_instances_y(this)
    gridz = hpvm.get_num_node_instances_z(this)
    i = gx * gridx + lx + 1
    j = gy * gridy + ly + 1
    k = gz * gridz + lz + 1
    if i < nx - 1:
        at = i + nx * (j + ny * k)
        anext[at] = c1 * (a0[at + nx * ny] + a0[at - nx * ny] + a0[at + nx] + a0[at - nx]
                          + a0[at + 1] + a0[at - 1]) - a0[at] * c0


@hpvm.graph
def stencil_lvl1(c0: f32, c1: f32, a0: In[Ptr[f32]], bytes_a0: i64, anext: InOut[Ptr[f32]],
                 bytes_anext: i64, nx: i32, ny: i32, nz: i32, dim_x1: i64, dim_y1: i64,
                 dim_z1: i64):
    hpvm.node(naive_kernel, grid=(dim_x1, dim_y1, dim_z1), c0=c0, c1=c1, a0=a0, bytes_a0=bytes_a0,
              anext=anext, bytes_anext=bytes_anext, nx=nx, ny=ny, nz=nz)


@hpvm.graph
def stencil_lvl2(c0: f32, c1: f32, a0: In[Ptr[f32]], bytes_a0: i64, anext: InOut[Ptr[f32]],
                 bytes_anext: i64, nx: i32, ny: i32, nz: i32, dim_x1: i64, dim_y1: i64,
                 dim_z1: i64, dim_x2: i64, dim_y2: i64, dim_z2: i64):
    hpvm.node(stencil_lvl1, grid=(dim_x2, dim_y2, dim_z2), c0=c0, c1=c1, a0=a0,
              bytes_a0=bytes_a0, anext=anext, bytes_anext=bytes_anext, nx=nx, ny=ny, nz=nz,
              dim_x1=dim_x1, dim_y1=dim_y1, dim_z1=dim_z1)


@hpvm.graph
def stencil_lvl3(c0: f32, c1: f32, a0: In[Ptr[f32]], bytes_a0: i64, anext: InOut[Ptr[f32]],
                 bytes_anext: i64, nx: i32, ny: i32, nz: i32, dim_x1: i64, dim_y1: i64,
                 dim_z1: i64, dim_x2: i64, dim_y2: i64, dim_z2: i64):
    hpvm.node(stencil_lvl2, c0=c0, c1=c1, a0=a0, bytes_a0=bytes_a0, anext=anext,
              bytes_anext=bytes_anext, nx=nx, ny=ny, nz=nz, dim_x1=dim_x1, dim_y1=dim_y1,
              dim_z1=dim_z1, dim_x2=dim_x2, dim_y2=dim_y2, dim_z2=dim_z2)


root = stencil_lvl3
C0 = np.float32(1.0 / 6.0)
C1 = np.float32(1.0 / 6.0 / 6.0)


def make_inputs(nx: int, ny: int, nz: int, iterations: int) -> dict:
    a0 = rng_for("stencil").random((nz, ny, nx), dtype=np.float32)
    return {"nx": nx, "ny": ny, "nz": nz, "iterations": iterations, "a0": a0}


def run(inputs: dict, target: str | None, passes: Passes | None = None) -> dict:
    nx, ny, nz = inputs["nx"], inputs["ny"], inputs["nz"]
    h_a0 = inputs["a0"].copy()
    h_anext = h_a0.copy()
    grid = ((nx - 2 + BLOCK_X - 1) // BLOCK_X * BLOCK_X, ny - 2, nz - 2)
    block = (BLOCK_X, 1, 1)
    with hpvm.runtime(target):
        for buf in (h_a0, h_anext):  # the original's llvm_hpvm_track_mem: kept on the device
            hpvm.track_memory(buf)
        for _ in passes or ONCE:
            for _ in range(inputs["iterations"]):
                hpvm.wait(hpvm.launch(root, float(C0), float(C1), h_a0, h_a0.nbytes, h_anext,
                                      h_anext.nbytes, nx, ny, nz, *block, grid[0] // block[0],
                                      grid[1] // block[1], grid[2] // block[2]))
                h_a0, h_anext = h_anext, h_a0
        h_a0, h_anext = h_anext, h_a0  # the result is the buffer written last
        hpvm.request_memory(h_anext)
        hpvm.untrack_memory(h_a0)
        hpvm.untrack_memory(h_anext)
    return {"a": h_anext}


def reference(inputs: dict) -> dict:
    a = inputs["a0"].copy()
    b = a.copy()
    for _ in range(inputs["iterations"]):
        b[1:-1, 1:-1, 1:-1] = C1 * (a[2:, 1:-1, 1:-1] + a[:-2, 1:-1, 1:-1] + a[1:-1, 2:, 1:-1]
                                    + a[1:-1, :-2, 1:-1] + a[1:-1, 1:-1, 2:] + a[1:-1, 1:-1, :-2]) \
            - a[1:-1, 1:-1, 1:-1] * C0
        a, b = b, a
    return {"a": a}


def check(outputs: dict, expected: dict) -> str | None:
    return parboil_close(outputs["a"], expected["a"], 0.001, 0.002, "Anext")


def torch_program(inputs: dict, device: str):
    import torch

    a0 = torch.from_numpy(inputs["a0"]).to(device)
    iterations = inputs["iterations"]

    def step(a):
        b = a.clone()
        b[1:-1, 1:-1, 1:-1] = C1.item() * (a[2:, 1:-1, 1:-1] + a[:-2, 1:-1, 1:-1] + a[1:-1, 2:, 1:-1]
                                           + a[1:-1, :-2, 1:-1] + a[1:-1, 1:-1, 2:] + a[1:-1, 1:-1, :-2]) \
            - a[1:-1, 1:-1, 1:-1] * C0.item()
        return b

    def driver(kernel):
        a = a0
        for _ in range(iterations):
            a = kernel(a)
        return a

    return step, driver


def numba_program(inputs: dict, cuda: bool = False):
    """Parboil's OpenMP stencil (`src/omp_base`): z-planes in parallel, swapped buffers."""
    numba = optional_numba()
    if numba is None:
        return None
    a0 = inputs["a0"]
    iterations = inputs["iterations"]
    c0, c1 = C0, C1
    if cuda:
        global nc  # a module global: the kernels see it as numba.cuda (and the simulator swaps it)
        from numba import cuda as nc

        @nc.jit
        def kernel(a, b, nx, ny, nz):
            i, j, k = nc.grid(3)
            i += 1
            j += 1
            k += 1
            if i < nx - 1 and j < ny - 1 and k < nz - 1:
                b[k, j, i] = c1 * (a[k + 1, j, i] + a[k - 1, j, i] + a[k, j + 1, i] + a[k, j - 1, i]
                                   + a[k, j, i + 1] + a[k, j, i - 1]) - a[k, j, i] * c0

        nz, ny, nx = a0.shape
        initial = nc.to_device(a0)
        da, db = nc.device_array_like(initial), nc.device_array_like(initial)

        def go():  # from A0 every time, copied on the device (as hpvm-py's resident runs)
            da.copy_to_device(initial)
            db.copy_to_device(initial)
            x, y = da, db
            for _ in range(iterations):
                kernel[((nx + 125) // 128, ny - 2, nz - 2), (128, 1, 1)](x, y, nx, ny, nz)
                x, y = y, x
            nc.synchronize()
            return x
        return go

    @numba.njit(parallel=True)
    def stencil_omp(a, b, iterations):
        nz, ny, nx = a.shape
        for _ in range(iterations):
            for k in numba.prange(1, nz - 1):
                for j in range(1, ny - 1):
                    for i in range(1, nx - 1):
                        b[k, j, i] = c1 * (a[k + 1, j, i] + a[k - 1, j, i] + a[k, j + 1, i]
                                           + a[k, j - 1, i] + a[k, j, i + 1] + a[k, j, i - 1]) \
                            - a[k, j, i] * c0
            a, b = b, a
        return a

    def go():  # from A0 every time
        return stencil_omp(a0.copy(), a0.copy(), iterations)
    return go
