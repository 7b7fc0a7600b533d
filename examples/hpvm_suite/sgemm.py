"""Parboil SGEMM as HPVM's own port writes it (`parboil/benchmarks/sgemm/src/hpvm/main.cc`).

C = alpha * A * B^T' + beta * C with Parboil's column-major layout: A is m x k (leading dimension
m), B is given as B^T, n x k (leading dimension n), C is m x n (leading dimension m). The host
calls `basicSgemm('N', 'T', ...)` once with alpha = 1, beta = 0 and C zeroed.

DFG (the same as the original's):

    root  sgemm_lvl3          single instance, binds everything down
      sgemm_lvl2              single instance (createNodeND(0, ...))
        sgemm_lvl1            2-D, (m / 16) x (n / 16) instances (the CUDA grid)
          mysgemm_nt          leaf, 2-D, 16 x 16 instances (the CUDA block)

A, B are `In`, C is `InOut` (the original's `__hpvm__attributes(3, A, B, C, 1, C)`); lda, ldb,
ldc and k are `i32` as the C `int`s are. Each leaf instance computes one element of C with a
plain dot-product loop over k (this HPVM port has no shared-memory tiling).

Inputs: Parboil's `medium` dataset is m x k x n = 1024 x 992 x 1056 (its matrix files are not in
the HPVM repository); the port generates A and B of those shapes, uniform in [-1, 1), from the
suite's fixed seed. `small` is 64 x 48 x 80 for CI. Sizes must be multiples of 16, as the
original requires.

Check: Parboil's `tools/compare-output` for sgemm: each element within 0.01 absolute or 1%.

Differences from the original: none in the graph. The leaf's `m`/`n` locals are named `row`/`col`
here (the parameters already use `m`, `n` in Python's host code).
"""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64

try:
    from ._common import ONCE, Passes, optional_numba, parboil_close, rng_for
except ImportError:  # loaded as a file (`hpvmc check examples/hpvm_suite/sgemm.py`)
    import sys
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    from hpvm_suite._common import ONCE, Passes, optional_numba, parboil_close, rng_for

TILE_SZ = 16

SIZES = {"small": {"m": 64, "k": 48, "n": 80}, "standard": {"m": 1024, "k": 992, "n": 1056}}


@hpvm.leaf
def mysgemm_nt(a: In[Ptr[f32]], bytes_a: i64, lda: i32, b: In[Ptr[f32]], bytes_b: i64, ldb: i32,
               c: InOut[Ptr[f32]], bytes_c: i64, ldc: i32, k: i32, alpha: f32, beta: f32):
    this = hpvm.get_node()
    parent = hpvm.get_parent_node(this)
    lx = hpvm.get_node_instance_id_x(this)
    ly = hpvm.get_node_instance_id_y(this)
    gx = hpvm.get_node_instance_id_x(parent)
    gy = hpvm.get_node_instance_id_y(parent)
    gridx = hpvm.get_num_node_instances_x(this)
    gridy = hpvm.get_num_node_instances_y(this)
    row = gx * gridx + lx
    col = gy * gridy + ly
    acc: f32 = 0.0
    for i in range(k):
        acc += a[row + i * lda] * b[col + i * ldb]
    c[row + col * ldc] = c[row + col * ldc] * beta + alpha * acc


@hpvm.graph
def sgemm_lvl1(a: In[Ptr[f32]], bytes_a: i64, lda: i32, b: In[Ptr[f32]], bytes_b: i64, ldb: i32,
               c: InOut[Ptr[f32]], bytes_c: i64, ldc: i32, k: i32, alpha: f32, beta: f32,
               dim_x1: i64, dim_y1: i64):
    hpvm.node(mysgemm_nt, grid=(dim_x1, dim_y1), a=a, bytes_a=bytes_a, lda=lda, b=b,
              bytes_b=bytes_b, ldb=ldb, c=c, bytes_c=bytes_c, ldc=ldc, k=k, alpha=alpha, beta=beta)


@hpvm.graph
def sgemm_lvl2(a: In[Ptr[f32]], bytes_a: i64, lda: i32, b: In[Ptr[f32]], bytes_b: i64, ldb: i32,
               c: InOut[Ptr[f32]], bytes_c: i64, ldc: i32, k: i32, alpha: f32, beta: f32,
               dim_x1: i64, dim_y1: i64, dim_x2: i64, dim_y2: i64):
    hpvm.node(sgemm_lvl1, grid=(dim_x2, dim_y2), a=a, bytes_a=bytes_a, lda=lda, b=b,
              bytes_b=bytes_b, ldb=ldb, c=c, bytes_c=bytes_c, ldc=ldc, k=k, alpha=alpha, beta=beta,
              dim_x1=dim_x1, dim_y1=dim_y1)


@hpvm.graph
def sgemm_lvl3(a: In[Ptr[f32]], bytes_a: i64, lda: i32, b: In[Ptr[f32]], bytes_b: i64, ldb: i32,
               c: InOut[Ptr[f32]], bytes_c: i64, ldc: i32, k: i32, alpha: f32, beta: f32,
               dim_x1: i64, dim_y1: i64, dim_x2: i64, dim_y2: i64):
    hpvm.node(sgemm_lvl2, a=a, bytes_a=bytes_a, lda=lda, b=b, bytes_b=bytes_b, ldb=ldb, c=c,
              bytes_c=bytes_c, ldc=ldc, k=k, alpha=alpha, beta=beta, dim_x1=dim_x1,
              dim_y1=dim_y1, dim_x2=dim_x2, dim_y2=dim_y2)


root = sgemm_lvl3


def make_inputs(m: int, k: int, n: int) -> dict:
    if m % TILE_SZ or n % TILE_SZ:
        raise ValueError(f"sgemm: m and n must be multiples of {TILE_SZ} (got {m}, {n})")
    rng = rng_for("sgemm")
    a = rng.uniform(-1, 1, (m, k)).astype(np.float32)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float32)
    return {"m": m, "k": k, "n": n, "a": a, "b": b}


def run(inputs: dict, target: str | None, passes: Passes | None = None) -> dict:
    m, k, n = inputs["m"], inputs["k"], inputs["n"]
    # column-major A (m x k) is row-major A^T; column-major B^T (n x k) is row-major B
    a_cm = np.ascontiguousarray(inputs["a"].T)
    bt_cm = np.ascontiguousarray(inputs["b"])
    c_cm = np.zeros((n, m), np.float32)  # column-major m x n
    with hpvm.runtime(target):
        for buf in (a_cm, bt_cm, c_cm):  # tracked as the original's llvm_hpvm_track_mem
            hpvm.track_memory(buf)
        for _ in passes or ONCE:
            hpvm.wait(hpvm.launch(root, a_cm, a_cm.nbytes, m, bt_cm, bt_cm.nbytes, n, c_cm,
                                  c_cm.nbytes, m, k, 1.0, 0.0, TILE_SZ, TILE_SZ, m // TILE_SZ,
                                  n // TILE_SZ))
        hpvm.request_memory(c_cm)
        for buf in (a_cm, bt_cm, c_cm):
            hpvm.untrack_memory(buf)
    return {"c": c_cm.T}


def reference(inputs: dict) -> dict:
    return {"c": (inputs["a"].astype(np.float64) @ inputs["b"].astype(np.float64)).astype(np.float32)}


def check(outputs: dict, expected: dict) -> str | None:
    return parboil_close(outputs["c"], expected["c"], 0.01, 0.01, "C", strict_abs=True)


def torch_program(inputs: dict, device: str):
    import torch

    a = torch.from_numpy(inputs["a"]).to(device)
    b = torch.from_numpy(inputs["b"]).to(device)
    c = torch.zeros(inputs["m"], inputs["n"], device=device)

    def sgemm(a, b, c):
        return 1.0 * (a @ b) + 0.0 * c

    return sgemm, lambda kernel: kernel(a, b, c)


def numba_program(inputs: dict, cuda: bool = False):
    """Parboil's OpenMP sgemm (`src/omp_base`): rows of C in parallel, a k-loop per element."""
    numba = optional_numba()
    if numba is None:
        return None
    a, b = inputs["a"], inputs["b"]
    m, k, n = inputs["m"], inputs["k"], inputs["n"]
    if cuda:
        global nc  # a module global: the kernels see it as numba.cuda (and the simulator swaps it)
        from numba import cuda as nc

        @nc.jit
        def kernel(a, b, c, m, n, k):
            col, row = nc.grid(2)
            if row < m and col < n:
                acc = np.float32(0.0)
                for i in range(k):
                    acc += a[row, i] * b[i, col]
                c[row, col] = acc

        da, db = nc.to_device(a), nc.to_device(b)
        dc = nc.device_array((m, n), np.float32)

        def go():
            kernel[((n + 15) // 16, (m + 15) // 16), (16, 16)](da, db, dc, m, n, k)
            nc.synchronize()
            return dc
        return go

    @numba.njit(parallel=True, fastmath=False, cache=False)
    def sgemm_omp(a, b, c, m, n, k):
        for row in numba.prange(m):
            for col in range(n):
                acc = np.float32(0.0)
                for i in range(k):
                    acc += a[row, i] * b[i, col]
                c[row, col] = acc

    c = np.zeros((m, n), np.float32)
    bt = np.ascontiguousarray(b)
    def go():
        sgemm_omp(a, bt, c, m, n, k)
        return c
    return go
