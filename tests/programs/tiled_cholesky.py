"""A tiled Cholesky factorisation as a DAG of tasks on k x k tiles, one node per task.

A = L L^T for a symmetric positive definite matrix of T x T tiles; only the lower tiles are
buffers (tile (i, j), i >= j). Tasks for step k: POTRF on the diagonal tile, TRSM on the tiles
below it, SYRK on the diagonal tiles to the right and GEMM on the other lower tiles. Each task is
a single-instance leaf looping over its tile; nodes run in creation order (a valid schedule).
"""
from __future__ import annotations

import math

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f64, i64


@hpvm.leaf
def potrf(a: InOut[Ptr[f64]], a_bytes: i64, k: i64):
    for j in range(k):
        d = a[j * k + j]
        for p in range(j):
            d -= a[j * k + p] * a[j * k + p]
        d = math.sqrt(d)
        a[j * k + j] = d
        for i in range(j + 1, k):
            s = a[i * k + j]
            for p in range(j):
                s -= a[i * k + p] * a[j * k + p]
            a[i * k + j] = s / d
        for i in range(j):
            a[i * k + j] = 0.0


@hpvm.leaf
def trsm(l: In[Ptr[f64]], l_bytes: i64, b: InOut[Ptr[f64]], b_bytes: i64, k: i64):
    # b := b * inv(l)^T, l lower triangular
    for r in range(k):
        for j in range(k):
            s = b[r * k + j]
            for p in range(j):
                s -= b[r * k + p] * l[j * k + p]
            b[r * k + j] = s / l[j * k + j]


@hpvm.leaf
def syrk(a: In[Ptr[f64]], a_bytes: i64, c: InOut[Ptr[f64]], c_bytes: i64, k: i64):
    # c := c - a a^T
    for i in range(k):
        for j in range(k):
            s = c[i * k + j]
            for p in range(k):
                s -= a[i * k + p] * a[j * k + p]
            c[i * k + j] = s


@hpvm.leaf
def gemm(a: In[Ptr[f64]], a_bytes: i64, b: In[Ptr[f64]], b_bytes: i64, c: InOut[Ptr[f64]],
         c_bytes: i64, k: i64):
    # c := c - a b^T
    for i in range(k):
        for j in range(k):
            s = c[i * k + j]
            for p in range(k):
                s -= a[i * k + p] * b[j * k + p]
            c[i * k + j] = s


@hpvm.graph
def cholesky3(t00: InOut[Ptr[f64]], t00_bytes: i64, t10: InOut[Ptr[f64]], t10_bytes: i64,
              t11: InOut[Ptr[f64]], t11_bytes: i64, t20: InOut[Ptr[f64]], t20_bytes: i64,
              t21: InOut[Ptr[f64]], t21_bytes: i64, t22: InOut[Ptr[f64]], t22_bytes: i64, k: i64):
    hpvm.node(potrf, a=t00, a_bytes=t00_bytes, k=k)
    hpvm.node(trsm, l=t00, l_bytes=t00_bytes, b=t10, b_bytes=t10_bytes, k=k)
    hpvm.node(trsm, l=t00, l_bytes=t00_bytes, b=t20, b_bytes=t20_bytes, k=k)
    hpvm.node(syrk, a=t10, a_bytes=t10_bytes, c=t11, c_bytes=t11_bytes, k=k)
    hpvm.node(gemm, a=t20, a_bytes=t20_bytes, b=t10, b_bytes=t10_bytes, c=t21, c_bytes=t21_bytes, k=k)
    hpvm.node(syrk, a=t20, a_bytes=t20_bytes, c=t22, c_bytes=t22_bytes, k=k)
    hpvm.node(potrf, a=t11, a_bytes=t11_bytes, k=k)
    hpvm.node(trsm, l=t11, l_bytes=t11_bytes, b=t21, b_bytes=t21_bytes, k=k)
    hpvm.node(syrk, a=t21, a_bytes=t21_bytes, c=t22, c_bytes=t22_bytes, k=k)
    hpvm.node(potrf, a=t22, a_bytes=t22_bytes, k=k)


LOWER = [(0, 0), (1, 0), (1, 1), (2, 0), (2, 1), (2, 2)]  # the order of cholesky3's parameters


def spd_tiles(k: int, rng: np.random.Generator) -> tuple[np.ndarray, dict[tuple[int, int], np.ndarray]]:
    """A random SPD matrix of 3 x 3 tiles of k x k, and copies of its lower tiles."""
    m = rng.standard_normal((3 * k, 3 * k))
    a = m @ m.T + 3 * k * np.eye(3 * k)
    tiles = {(i, j): np.ascontiguousarray(a[i * k:(i + 1) * k, j * k:(j + 1) * k]) for i, j in LOWER}
    return a, tiles
