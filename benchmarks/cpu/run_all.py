"""Run every cpu benchmark and print the summary of ratios (peer time / hpvm-py time)."""
import numba
import numpy as np

import bench_division
import bench_histogram
import bench_sgemm
import bench_stencil
import bench_vadd
from common import default_threads
from hpvm_py.support.cores import cpu_model

import llvmlite


def main() -> None:
    print(f"{cpu_model()}, {default_threads()} threads; numpy "
          f"{np.__version__}, numba {numba.__version__}, llvmlite {llvmlite.__version__}\n")
    ratios = {}
    for bench in (bench_vadd, bench_stencil, bench_sgemm, bench_histogram, bench_division):
        ratios.update(bench.main())
        print()
    print("summary: peer time / hpvm-cpu time (> 1 means hpvm-cpu is faster)")
    for name, ratio in ratios.items():
        print(f"  {name:<14} {ratio:6.2f}x")


if __name__ == "__main__":
    main()
