"""vadd and saxpy on 16M f32 (one instance per element) against Numba parallel and NumPy."""
import numba as nb
import numpy as np

from common import launcher, measure, report

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64

N = 16 * 2**20


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
         c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + b[i]


@hpvm.leaf
def saxpy(alpha: f32, x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    y[i] = alpha * x[i] + y[i]


@nb.njit(parallel=True, fastmath=True)
def nb_vadd(a, b, c):
    for i in nb.prange(a.size):
        c[i] = a[i] + b[i]


@nb.njit(parallel=True, fastmath=True)
def nb_saxpy(alpha, x, y):
    for i in nb.prange(x.size):
        y[i] = alpha * x[i] + y[i]


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    a, b, c = (rng.random(N, dtype=np.float32) for _ in range(3))
    ours = launcher(vadd, [(N,)], a, a.nbytes, b, b.nbytes, c, c.nbytes)
    ours()
    assert np.array_equal(c, a + b)
    results = measure({"hpvm-cpu": ours, "numba-parallel": lambda: nb_vadd(a, b, c),
                       "numpy": lambda: np.add(a, b, out=c)})
    ratios = {"vadd": report("vadd 16M f32", results, "numba-parallel")}

    x, y = rng.random(N, dtype=np.float32), rng.random(N, dtype=np.float32)
    alpha = np.float32(1.5)
    y0 = y.copy()
    ours = launcher(saxpy, [(N,)], alpha, x, x.nbytes, y, y.nbytes)
    ours()
    assert np.array_equal(y, alpha * x + y0)

    def np_saxpy():
        y[:] = alpha * x + y

    results = measure({"hpvm-cpu": ours, "numba-parallel": lambda: nb_saxpy(alpha, x, y),
                       "numpy": np_saxpy})
    ratios["saxpy"] = report("saxpy 16M f32", results, "numba-parallel")
    return ratios


if __name__ == "__main__":
    main()
