"""The cpu target against the memory wall: a STREAM-style triad is the ceiling, Numba parallel's
and STREAM's own loop in C with OpenMP (triad.c, built here with the machine's C compiler; skipped
with a note when there is none): Numba's parallel loops collapse on some many-core VMs, so the
faster of the two is the ceiling. Then vadd through hpvm-py with non-temporal stores chosen
automatically, forced on and forced off, and Numba parallel's vadd, all on the same 16M f32 arrays.
Every candidate runs on as many threads as hpvm-py (HPVM_NUM_THREADS, else the cores this process
may use).

Bandwidth counts what the kernel must move (STREAM's rule: 12 bytes per element for 2 loads and a
store), so a store that first reads its line (read-for-ownership) shows up as lower bandwidth.
BENCH_ELEMENTS changes the size.
"""
import ctypes
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Callable

import numba as nb
import numpy as np

from bench_vadd import nb_vadd, vadd
from common import default_threads, launcher, measure, report

N = int(os.environ.get("BENCH_ELEMENTS", 16 * 2**20))


@nb.njit(parallel=True, fastmath=True)
def nb_triad(a, b, c, scalar):
    for i in nb.prange(a.size):
        a[i] = b[i] + scalar * c[i]


def c_triad(a: np.ndarray, b: np.ndarray, c: np.ndarray, scalar: np.float32) -> Callable[[], None] | None:
    """triad.c built into a temporary folder and loaded, as a no-argument call; None (with a note)
    when this machine has no C compiler with OpenMP."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        print("  triad-c: skipped (no C compiler)")
        return None
    os.environ["OMP_NUM_THREADS"] = str(default_threads())  # (read when the library loads)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")  # its idle threads sleep: no stolen cores
    with tempfile.TemporaryDirectory(prefix="hpvm-triad-") as folder:
        library = Path(folder) / "triad.so"
        built = subprocess.run([compiler, "-O3", "-march=native", "-fopenmp", "-shared", "-fPIC",
                                "-o", str(library), str(Path(__file__).with_name("triad.c"))],
                               capture_output=True, text=True)
        if built.returncode != 0:
            print(f"  triad-c: skipped ({compiler} could not build it: {built.stderr.strip()[:200]})")
            return None
        fn = ctypes.CDLL(str(library)).triad  # (stays mapped once the folder is gone)
    fn.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_float, ctypes.c_long]
    pointers = [x.ctypes.data for x in (a, b, c)]
    return lambda: fn(*pointers, scalar, a.size)


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
    triads = {"triad-numba": lambda: nb_triad(c, a, b, scalar)}
    native = c_triad(c, a, b, scalar)
    if native is not None:
        native()
        assert np.allclose(c, a + scalar * b, rtol=1e-6)  # (contracted to a fused multiply-add)
        triads["triad-c"] = native
    results = measure({
        **triads,
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
    ceiling = min(results[name] for name in triads)
    ratios["vadd/triad"] = ceiling / results["hpvm-cpu"]
    print(f"  hpvm-cpu / the faster triad's bandwidth: {ratios['vadd/triad']:.2f}x")
    return ratios


if __name__ == "__main__":
    main()
