"""Histogram with atomics: every instance adds one to the bin of its element."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i32, i64


@hpvm.leaf
def histogram(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
              nbins: i32):
    i = hpvm.instance_id(0)
    hpvm.atomic_add(bins, data[i] % nbins, 1)


@hpvm.graph
def root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
         nbins: i32, n: i64):
    hpvm.node(histogram, grid=n, data=data, data_bytes=data_bytes, bins=bins,
              bins_bytes=bins_bytes, nbins=nbins)


def main(target: str | None = None, n: int = 1 << 20, nbins: int = 256) -> None:
    rng = np.random.default_rng()
    data = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    bins = np.zeros(nbins, dtype=np.int32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, data, data.nbytes, bins, bins.nbytes, nbins, n))
        hpvm.request_memory(bins)
    # Python's % (as the kernel's): negative values land in [0, nbins)
    np.testing.assert_array_equal(bins, np.bincount(data % nbins, minlength=nbins))
    print(f"histogram: {n} values into {nbins} bins OK")


if __name__ == "__main__":
    from _common import parse_args

    args = parse_args(__doc__, 1 << 20)
    main(args.target, args.size)
