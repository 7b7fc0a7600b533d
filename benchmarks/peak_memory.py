"""Peak memory of a run on a 1 GiB input (issue target: inputs + outputs + 10%).

vadd over three 1 GiB float32 arrays (a, b in; c out) on the cpu target; the process's peak
resident set size is compared with the bytes the arrays themselves need. Run in a fresh process.

    python benchmarks/peak_memory.py [--gib 1]
"""
from __future__ import annotations

import argparse
import os
import resource
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples"))

import numpy as np  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
import vadd  # noqa: E402


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--target", default="cpu")
    args = parser.parse_args()
    with hpvm.runtime(args.target):
        hpvm.compile(vadd.root)  # compile first: its memory is not the data's
    baseline = rss_mib()
    n = int(args.gib * 2**30) // 4
    a = np.ones(n, np.float32)
    b = np.full(n, 2.0, np.float32)
    c = np.zeros(n, np.float32)
    data_mib = 3 * a.nbytes / 2**20
    with hpvm.runtime(args.target):
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
    assert float(c[0]) == 3.0 and float(c[-1]) == 3.0
    peak = rss_mib() - baseline
    print(f"vadd on {args.gib:g} GiB inputs ({args.target}): data {data_mib:.0f} MiB, peak growth "
          f"{peak:.0f} MiB ({peak / data_mib:.3f} of inputs + outputs; target <= 1.10: "
          f"{'met' if peak <= 1.10 * data_mib else 'NOT met'})")


if __name__ == "__main__":
    main()
