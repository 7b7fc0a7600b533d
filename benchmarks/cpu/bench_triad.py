"""The cpu target against the memory wall: a STREAM-style triad (Numba parallel, normal stores) is the
ceiling; vadd through hpvm-py with non-temporal stores chosen automatically, forced on and forced off,
and Numba parallel's vadd, all on the same 16M f32 arrays.

Bandwidth counts what the kernel must move (STREAM's rule: 12 bytes per element for 2 loads and a
store), so a store that first reads its line (read-for-ownership) shows up as lower bandwidth.
BENCH_ELEMENTS changes the size.
"""
import os

import numba as nb
import numpy as np

from bench_vadd import nb_vadd, vadd
from common import launcher, measure, report

N = int(os.environ.get("BENCH_ELEMENTS", 16 * 2**20))


@nb.njit(parallel=True, fastmath=True)
def nb_triad(a, b, c, scalar):
    for i in nb.prange(a.size):
        a[i] = b[i] + scalar * c[i]


def _with_stores(mode: str, launch):
    def run() -> None:
        os.environ["HPVM_CPU_NONTEMPORAL"] = mode  # read per launch
        launch()
    return run


def main() -> dict[str, float]:
    rng = np.random.default_rng(0)
    a, b, c = (rng.random(N, dtype=np.float32) for _ in range(3))
    ours = launcher(vadd, [(N,)], a, a.nbytes, b, b.nbytes, c, c.nbytes)
    ours()
    assert np.array_equal(c, a + b)
    scalar = np.float32(3.0)
    results = measure({
        "triad-numba": lambda: nb_triad(c, a, b, scalar),
        "hpvm-cpu": _with_stores("auto", ours),
        "hpvm-cpu-nt-on": _with_stores("on", ours),
        "hpvm-cpu-nt-off": _with_stores("off", ours),
        "numba-parallel": lambda: nb_vadd(a, b, c),
    })
    ratios = {"vadd/numba": report(f"vadd {N} f32 against the triad ceiling", results,
                                   "numba-parallel")}
    moved = 12 * N
    for name, ms in results.items():
        print(f"  {name:<22} {moved / ms / 1e6:9.1f} GB/s")
    ratios["vadd/triad"] = results["triad-numba"] / results["hpvm-cpu"]
    print(f"  hpvm-cpu / triad bandwidth: {ratios['vadd/triad']:.2f}x")
    return ratios


if __name__ == "__main__":
    main()
