"""histogram: 16M int32 values into 256 bins with atomic_add (one instance per value)."""
import numba as nb
import numpy as np

from common import launcher, measure, report

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i32, i64

N = 16 * 2**20
BINS = 256


@hpvm.leaf
def histogram(d: In[Ptr[i32]], d_bytes: i64, h: InOut[Ptr[i32]], h_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    hpvm.atomic_add(h, d[i] % 256, 1)


@nb.njit
def nb_hist(d, bins):
    h = np.zeros(bins, np.int64)
    for v in d:
        h[v % bins] += 1
    return h


def main() -> dict[str, float]:
    d = np.random.default_rng(0).integers(0, 10**6, N).astype(np.int32)
    h = np.zeros(BINS, np.int32)
    ours = launcher(histogram, [(N,)], d, d.nbytes, h, h.nbytes)
    ours()
    assert np.array_equal(h, np.bincount(d % BINS, minlength=BINS))
    results = measure({"hpvm-cpu": ours, "numba serial": lambda: nb_hist(d, BINS),
                       "numpy bincount": lambda: np.bincount(d % BINS, minlength=BINS)})
    return {"histogram": report("histogram 16M int32 -> 256 bins", results, "numba serial")}


if __name__ == "__main__":
    main()
