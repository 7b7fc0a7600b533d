"""numba-cuda peers shared by the GPU benchmarks (bench_gpu.py, bench_nvptx.py): per-thread
kernels written the way an HPVM leaf is (as /work/shared/peers/numba_cuda_peers.py measured them)."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np


def numba_sgemm() -> Callable[[Any, Any, Any, int], Any] | None:
    """The Parboil leaf written per thread in numba-cuda (16 x 16 shared tiles), or None."""
    try:
        if not hasattr(np, "row_stack"):  # numba-cuda 0.30 still names it; NumPy 2.5 removed it
            np.row_stack = np.vstack
        from numba import cuda, float32
    except Exception as exc:  # noqa: BLE001 - the peer is optional
        print("numba-cuda unavailable:", exc)
        return None

    @cuda.jit
    def sgemm_numba(a, b, c, k):
        sa = cuda.shared.array((16, 16), float32)
        sb = cuda.shared.array((16, 16), float32)
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = cuda.blockIdx.y * 16 + ty
        col = cuda.blockIdx.x * 16 + tx
        acc = float32(0.0)
        for t in range(k // 16):
            sa[ty, tx] = a[row, t * 16 + tx]
            sb[ty, tx] = b[t * 16 + ty, col]
            cuda.syncthreads()
            for kk in range(16):
                acc += sa[ty, kk] * sb[kk, tx]
            cuda.syncthreads()
        c[row, col] = acc

    return lambda A, B, C, K: sgemm_numba[(C.shape[1] // 16, C.shape[0] // 16), (16, 16)](
        cuda.as_cuda_array(A), cuda.as_cuda_array(B), cuda.as_cuda_array(C), K)
