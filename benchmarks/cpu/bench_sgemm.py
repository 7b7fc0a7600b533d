"""sgemm 512^3 f32: a naive 2-D leaf (one instance per C element, k loop inside) and a
Parboil-style leaf (16x16 tiles as the parent level, 16x16 leaf, scratch tiles and barriers)."""
import numba as nb
import numpy as np

from common import launcher, measure, report

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64

M = N = K = 512
TILE = 16


@hpvm.leaf
def sgemm_naive(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
                C_bytes: i64, K: i64):
    node = hpvm.get_node()
    col = hpvm.get_node_instance_id_x(node)
    row = hpvm.get_node_instance_id_y(node)
    n = hpvm.get_num_node_instances_x(node)
    acc = f32(0.0)
    for k in range(K):
        acc += A[row * K + k] * B[k * n + col]
    C[row * n + col] = acc


@hpvm.leaf
def sgemm_tiled(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
                C_bytes: i64, K: i64, N: i64):
    node = hpvm.get_node()
    parent = hpvm.get_parent_node(node)
    tx = hpvm.get_node_instance_id_x(node)
    ty = hpvm.get_node_instance_id_y(node)
    row = hpvm.get_node_instance_id_y(parent) * 16 + ty
    col = hpvm.get_node_instance_id_x(parent) * 16 + tx
    As = hpvm.malloc(16 * 16 * 4, f32)
    Bs = hpvm.malloc(16 * 16 * 4, f32)
    acc = f32(0.0)
    for t in range(K // 16):
        As[ty * 16 + tx] = A[row * K + t * 16 + tx]
        Bs[ty * 16 + tx] = B[(t * 16 + ty) * N + col]
        hpvm.barrier()
        for kk in range(16):
            acc += As[ty * 16 + kk] * Bs[kk * 16 + tx]
        hpvm.barrier()
    C[row * N + col] = acc


@nb.njit(parallel=True, fastmath=True)
def nb_naive(A, B, C):
    m, k = A.shape
    n = B.shape[1]
    for r in nb.prange(m):
        for c in range(n):
            acc = np.float32(0.0)
            for t in range(k):
                acc += A[r, t] * B[t, c]
            C[r, c] = acc


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    C1, C2, C3 = (np.zeros((M, N), np.float32) for _ in range(3))
    naive = launcher(sgemm_naive, [(N, M)], A, A.nbytes, B, B.nbytes, C1, C1.nbytes, K)
    tiled = launcher(sgemm_tiled, [(TILE, TILE), (N // TILE, M // TILE)], A, A.nbytes, B, B.nbytes,
                     C2, C2.nbytes, K, N)
    naive()
    tiled()
    want = A.astype(np.float64) @ B.astype(np.float64)
    assert np.allclose(C1, want, rtol=1e-4) and np.allclose(C2, want, rtol=1e-4)
    results = measure({"hpvm-cpu": naive, "hpvm-cpu tiled": tiled,
                       "numba-parallel": lambda: nb_naive(A, B, C3),
                       "numpy (BLAS)": lambda: np.matmul(A, B, out=C3)}, reps=7)
    ratio = report("sgemm 512^3 f32 (naive leaf; Parboil-style tiled leaf)", results,
                   "numba-parallel", reps=7)
    print(f"  hpvm-cpu / BLAS: {results['hpvm-cpu'] / results['numpy (BLAS)']:.1f}x slower; "
          f"tiled: {results['hpvm-cpu tiled'] / results['numpy (BLAS)']:.1f}x slower")
    return {"sgemm": ratio,
            "sgemm tiled": results["numba-parallel"] / results["hpvm-cpu tiled"]}


if __name__ == "__main__":
    main()
