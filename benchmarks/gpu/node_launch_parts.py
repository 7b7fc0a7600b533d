"""Where the host time of a relaunched communication node goes, on GPU ranks of one host.

Run on 2+ GPUs: `mpirun -n 2 python benchmarks/gpu/node_launch_parts.py [BYTES]`. Rank 0 prints,
in µs on the host clock (median of interleaved calls, each followed by torch.cuda.synchronize):
the direct all-reduce, the graph relaunch (hpvm.launch + wait), the launch and the wait of the
relaunch timed apart, a one-leaf gpu graph with no collective (the runtime's own launch cost),
the fingerprint barrier alone, and then a cProfile of relaunches (top functions by own time).
"until done" rows time what a program needs before it reads the result: the direct call and
torch.cuda.synchronize(), or hpvm.launch + wait of the graph (wait returns once the device has
finished a graph's collectives: no synchronize after it).
"""
from __future__ import annotations

import cProfile
import io
import os
import pstats
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import InOut, Ptr, bf16, i64  # noqa: E402

SUM_BF16 = hpvm.comm.all_reduce(bf16)


@hpvm.graph
def one_all_reduce(x: InOut[Ptr[bf16]], x_bytes: i64):
    hpvm.node(SUM_BF16, buf=x, buf_bytes=x_bytes)


@hpvm.leaf
def bump(x: InOut[Ptr[bf16]], x_bytes: i64):
    x[0] = x[0] + 1.0


@hpvm.graph
def one_leaf(x: InOut[Ptr[bf16]], x_bytes: i64):
    hpvm.node(bump, x=x, x_bytes=x_bytes)


def main() -> None:
    from hpvm_py.distributed import agreement, ranks
    from hpvm_py.distributed.gpu import launch as G

    nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 8 << 10
    hpvm.distributed.init(device="cuda")
    rank = hpvm.distributed.rank()
    x = hpvm.symmetric.empty(nbytes // 2, torch.bfloat16)
    x.zero_()
    y = torch.zeros(nbytes // 2, dtype=torch.bfloat16, device=x.device)
    comm = agreement.communicator(ranks.current())
    times: dict[str, list[float]] = {}

    def relaunch_split() -> None:
        start = time.perf_counter()
        handle = hpvm.launch(one_all_reduce, x, nbytes)
        mid = time.perf_counter()
        hpvm.wait(handle)
        times.setdefault("  of which launch", []).append((mid - start) * 1e6)
        times.setdefault("  of which wait", []).append((time.perf_counter() - mid) * 1e6)

    calls = {
        "direct G.all_reduce": lambda: G.all_reduce(x),
        "graph relaunch": lambda: hpvm.wait(hpvm.launch(one_all_reduce, x, nbytes)),
        "graph relaunch (split)": relaunch_split,
        "one-leaf gpu graph": lambda: hpvm.wait(hpvm.launch(one_leaf, y, nbytes)),
        "fingerprint barrier": lambda: comm.same_fingerprint(12345, lambda: "bench", None),
        "host barrier": lambda: comm.barrier(lambda: "bench", None),
    }
    def until_done(name: str, call) -> None:  # noqa: ANN001
        torch.cuda.synchronize()
        start = time.perf_counter()
        call()
        times.setdefault(name, []).append((time.perf_counter() - start) * 1e6)

    with hpvm.runtime("gpu"):
        for _ in range(400):
            until_done("until done: direct + sync", lambda: (G.all_reduce(x), torch.cuda.synchronize()))
            until_done("until done: graph launch + wait", lambda: hpvm.wait(hpvm.launch(one_all_reduce, x, nbytes)))
            for name, call in calls.items():
                torch.cuda.synchronize()
                start = time.perf_counter()
                call()
                torch.cuda.synchronize()
                times.setdefault(name, []).append((time.perf_counter() - start) * 1e6)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(300):
            hpvm.wait(hpvm.launch(one_all_reduce, x, nbytes))
            torch.cuda.synchronize()
        profiler.disable()
    if rank == 0:
        print(f"{nbytes} bytes, {hpvm.distributed.world_size()} ranks; µs, host clock (p50 / p10)")
        for name, values in times.items():
            values = values[50:]
            print(f"{name:>32} {statistics.median(values):8.1f} {sorted(values)[len(values) // 10]:8.1f}")
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(30)
        print(text.getvalue())
        text = io.StringIO()
        pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(40)
        print(text.getvalue())
    hpvm.distributed.finalize()


if __name__ == "__main__":
    main()
