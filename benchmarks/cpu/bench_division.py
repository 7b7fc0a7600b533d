"""`a % d + a // d` over 16M int32 by a divisor passed once for the launch, against Numba
parallel and NumPy: the cpu target masks and shifts by a power of two (256) and multiplies by
the reciprocal of any other 32-bit divisor (255, 1000, -7); Numba divides value by value."""
import numba as nb
import numpy as np

from common import launcher, measure, report

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i32, i64

N = 16 * 2**20
DIVISORS = (255, 256, 1000, -7)


@hpvm.leaf
def divmod_sum(a: In[Ptr[i32]], a_bytes: i64, out: Out[Ptr[i32]], out_bytes: i64, d: i32):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    out[i] = a[i] % d + a[i] // d


@nb.njit(parallel=True)
def nb_divmod_sum(a, out, d):
    for i in nb.prange(a.size):
        out[i] = a[i] % d + a[i] // d


def main() -> dict[str, float]:
    a = np.random.default_rng(0).integers(-2**31, 2**31, N, dtype=np.int64).astype(np.int32)
    out = np.zeros_like(a)
    ratios = {}
    for d in DIVISORS:
        ours = launcher(divmod_sum, [(N,)], a, a.nbytes, out, out.nbytes, d)
        ours()
        want = (a.astype(np.int64) % d + a.astype(np.int64) // d).astype(np.int32)
        assert np.array_equal(out, want), d
        divisor = np.int32(d)
        results = measure({"hpvm-cpu": ours, "numba parallel": lambda: nb_divmod_sum(a, out, divisor),
                           "numpy": lambda: np.add(a % divisor, a // divisor, out=out)})
        ratios[f"divmod by {d}"] = report(f"a % {d} + a // {d}, 16M int32", results,
                                          "numba parallel")
        print()
    return ratios


if __name__ == "__main__":
    main()
