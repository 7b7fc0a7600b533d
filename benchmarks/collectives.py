"""All-reduce on CPU ranks, nccl-tests style: bytes, time, algbw, busbw, and the ratio to the
launcher's own engine (MPI_Allreduce through mpi4py) measured in the same run.

Each row times, in the same run and interleaved batch by batch: the graph path (`hpvm.launch` +
`wait` of a one-node all-reduce graph, launched again and again with the same buffer: a replayed
launch whose agreement is kept, checked by its fingerprint through the heap), the direct path (the
same collective without a graph) and MPI_Allreduce, on f32 buffers of the symmetric heap; one-shot
and two-shot are forced with HPVM_COMM_ONESHOT_BYTES to compare the algorithms at every size.
Times are the slowest rank's median of batches.

    python benchmarks/collectives.py [--ranks 2] [--max-mib 64] [--sizes 8K,1M]   (starts mpiexec itself)
    python benchmarks/collectives.py --calls [--sizes 8K,1M]   (per-call percentiles, same rows)
    python benchmarks/collectives.py --gpu [--max-mib 1024] [--sweep] [--launch] [--overlap]
        GPU ranks against NCCL (benchmarks/gpu/collectives_gpu.py; starts torchrun itself, one
        rank per GPU, NVLink multicast off)
    python benchmarks/collectives.py --gpu --quick [--max-mib 1024]
        only the quantized all-reduce (fp8, int8, int4) against NCCL's bf16 all-reduce
    python benchmarks/collectives.py --gpu --moe
        the mixture-of-experts dispatch and combine against torch.distributed.all_to_all_single
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import hpvm_py as hpvm  # noqa: E402
from _children import child_env  # noqa: E402
from hpvm_py import InOut, Ptr, f32, i64  # noqa: E402

SUM = hpvm.comm.all_reduce(f32)


@hpvm.graph
def all_reduce(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(SUM, buf=x, buf_bytes=x_bytes)


def _launch(ranks: int, max_mib: int, sizes: str | None, calls: bool = False) -> None:
    mpiexec = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = child_env(ROOT, HPVM_HEAP_BYTES=f"{2 * max_mib + 16}M", HPVM_BENCH_CHILD="1")
    extra = (["--sizes", sizes] if sizes else []) + (["--calls"] if calls else [])
    sys.exit(subprocess.call([mpiexec, "-n", str(ranks), sys.executable, __file__,
                              "--max-mib", str(max_mib), *extra], env=env))


def _sizes(text: str) -> list[int]:
    """"8K,1M" -> [8192, 1048576]."""
    scale = {"K": 1 << 10, "M": 1 << 20}
    return [int(t[:-1]) * scale[t[-1].upper()] if t[-1].upper() in scale else int(t)
            for t in text.split(",") if t]


def _time_us(fns: dict, comm, reps: int, batches: int = 7) -> dict:  # noqa: ANN001
    """Each function's time per call in microseconds: the slowest rank's median over `batches`
    batches of `reps` calls, the functions' batches interleaved (a busy machine slows them alike)."""
    from mpi4py import MPI

    times: dict = {name: [] for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(batches):
        for name, fn in fns.items():
            comm.Barrier()
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            times[name].append((time.perf_counter() - start) / reps)
    return {name: comm.allreduce(statistics.median(t), op=MPI.MAX) * 1e6 for name, t in times.items()}


def _direct(x, nbytes: int):  # noqa: ANN001, ANN202
    """The collective without a graph: the runtime's runner on a call made once, with its kept
    agreement (what a graph relaunch cannot beat)."""
    from hpvm_py.distributed import ranks
    from hpvm_py.distributed.call import Buffer, Call
    from hpvm_py.distributed.nodes import run_collective

    world = ranks.current()
    call = Call(kind="all_reduce", dtype=f32, node="direct", loc=None,
                buffers=[Buffer(param="buf", bound=None, tensor=x, address=x.data_ptr(), nbytes=x.nbytes,
                                size=nbytes)])
    kept = [None]

    def run() -> None:
        kept[0] = run_collective(world, call, kept[0])

    return run


def main(max_mib: int, only: list[int] | None = None) -> None:
    import numpy as np
    import torch
    from mpi4py import MPI

    hpvm.distributed.init()
    comm = MPI.COMM_WORLD
    rank, world = comm.Get_rank(), comm.Get_size()

    sizes = [8 << 10]
    while sizes[-1] * 4 <= max_mib << 20:
        sizes.append(sizes[-1] * 4)
    if only:
        sizes = sorted(only)
    biggest = hpvm.symmetric.empty(sizes[-1] // 4, torch.float32)
    plain = np.zeros(sizes[-1] // 4, dtype=np.float32)
    if rank == 0:
        print(f"all_reduce f32, {world} CPU ranks; algbw = bytes / time, busbw = algbw * 2(n-1)/n of the "
              "graph relaunch; graph: hpvm.launch + wait of a one-node graph launched again (replayed, "
              "agreement kept: only its fingerprint is exchanged); direct: the same collective without a "
              "graph; MPI: MPI_Allreduce in place; ratio = MPI time / graph time (> 1: hpvm-py faster)")
        print(f"{'bytes':>10} {'algorithm':>9} {'graph us':>9} {'direct us':>9} {'MPI us':>9} "
              f"{'algbw GB/s':>10} {'busbw GB/s':>10} {'graph/MPI':>9} {'ratio':>6}", flush=True)
    with hpvm.runtime("cpu"):
        for nbytes in sizes:
            x = biggest[:nbytes // 4]
            reps = max(3, min(200, (64 << 20) // (nbytes * 8)))
            mpi_buf = plain[:nbytes // 4]
            for algorithm, threshold in (("one-shot", str(1 << 62)), ("two-shot", "0")):
                os.environ["HPVM_COMM_ONESHOT_BYTES"] = threshold
                got = _time_us({"mpi": lambda: comm.Allreduce(MPI.IN_PLACE, mpi_buf, op=MPI.SUM),
                                "direct": _direct(x, nbytes),
                                "graph": lambda: hpvm.wait(hpvm.launch(all_reduce, x, nbytes))}, comm, reps)
                us, mpi_us = got["graph"], got["mpi"]
                algbw = nbytes / us / 1e3
                if rank == 0:
                    print(f"{nbytes:>10} {algorithm:>9} {us:>9.1f} {got['direct']:>9.1f} {mpi_us:>9.1f} "
                          f"{algbw:>10.2f} {algbw * 2 * (world - 1) / world:>10.2f} {us / mpi_us:>8.2f}x "
                          f"{mpi_us / us:>6.2f}", flush=True)


def calls_main(sizes: list[int]) -> None:
    """--calls: each call timed alone (graph relaunch, direct, MPI interleaved by batch); p10, p50
    and the mean of the slowest rank per call. On a shared machine the percentiles show what a call
    costs when both ranks run, the mean what descheduling adds (the table's batch means)."""
    import numpy as np
    import torch
    from mpi4py import MPI

    hpvm.distributed.init()
    comm = MPI.COMM_WORLD
    big = hpvm.symmetric.empty(max(sizes) // 4, torch.float32)
    plain = np.zeros(max(sizes) // 4, np.float32)
    clock = time.perf_counter
    if comm.rank == 0:
        print(f"all_reduce f32, {comm.size} CPU ranks, us per call (slowest rank of each call)")
        print(f"{'bytes':>10} {'path':>7} {'p10':>9} {'p50':>9} {'mean':>9}")
    with hpvm.runtime("cpu"):
        for nbytes in sizes:
            x, buf = big[:nbytes // 4], plain[:nbytes // 4]
            fns = {"graph": lambda: hpvm.wait(hpvm.launch(all_reduce, x, nbytes)),
                   "direct": _direct(x, nbytes),
                   "MPI": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)}
            times: dict = {k: [] for k in fns}
            for fn in fns.values():
                for _ in range(20):
                    fn()
            per_batch = 40 if nbytes < 1 << 20 else 10
            for _ in range(15):
                for name, fn in fns.items():
                    comm.Barrier()
                    for _ in range(per_batch):
                        start = clock()
                        fn()
                        times[name].append(clock() - start)
            for name, t in times.items():
                slowest = np.array(comm.allreduce(t, op=MPI.SUM)).reshape(comm.size, -1).max(axis=0) * 1e6
                if comm.rank == 0:
                    print(f"{nbytes:>10} {name:>7} {np.percentile(slowest, 10):>9.1f} "
                          f"{np.percentile(slowest, 50):>9.1f} {slowest.mean():>9.1f}", flush=True)


def _launch_gpu(argv: list[str]) -> None:
    """torchrun with one rank per GPU; NVLink multicast stays off in every rank's environment."""
    import torch

    env = child_env(ROOT, HPVM_BENCH_CHILD="1", NCCL_NVLS_ENABLE="0",
                    TORCH_SYMM_MEM_DISABLE_MULTICAST="1")
    sys.exit(subprocess.call([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                              str(torch.cuda.device_count()), __file__, *argv], env=env))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--max-mib", type=int, default=None, help="largest size (64 CPU, 1024 GPU)")
    parser.add_argument("--sizes", default=None, help="CPU: these sizes only (e.g. 8K,1M)")
    parser.add_argument("--calls", action="store_true", help="CPU: per-call percentiles (8K,1M by default)")
    parser.add_argument("--gpu", action="store_true", help="GPU ranks against NCCL")
    parser.add_argument("--sweep", action="store_true", help="GPU: time tuning variants too")
    parser.add_argument("--launch", action="store_true", help="GPU: time the whole node launch too")
    parser.add_argument("--overlap", action="store_true", help="GPU: the compute/comm overlap step")
    parser.add_argument("--quick", action="store_true", help="GPU: only the quantized all-reduce")
    parser.add_argument("--min-calls", type=int, default=20,
                        help="GPU: calls per timed batch at least (nccl-tests' default: 20)")
    parser.add_argument("--moe", action="store_true",
                        help="GPU (implies --gpu): the mixture-of-experts dispatch/combine against "
                        "all_to_all_single, instead of the all-reduce tables")
    options = parser.parse_args()
    if options.gpu or options.moe:  # --moe runs on GPU ranks only
        if os.environ.get("HPVM_BENCH_CHILD"):
            from gpu.collectives_gpu import main as gpu_main

            mib = options.max_mib or 1024
            # room for the stream all-reduce's rings (up to 33 MiB in the sweep), two-shot by
            # stores' scratch (66 MiB on 4 GPUs in the sweep) and, with --quick, the quantized
            # workspace (at most 5/8 of a bf16 buffer's bytes)
            os.environ.setdefault("HPVM_HEAP_BYTES", f"{mib + 80 + (mib if options.quick else 0)}M")
            gpu_main(options.sweep, options.launch, options.overlap, mib << 20, options.quick, options.moe,
                     options.min_calls)
        else:
            _launch_gpu(sys.argv[1:])
    elif os.environ.get("HPVM_BENCH_CHILD"):
        if options.calls:
            calls_main(_sizes(options.sizes or "8K,1M"))
        else:
            main(options.max_mib or 64, _sizes(options.sizes) if options.sizes else None)
    else:
        mib = options.max_mib or 64
        if options.calls and not options.sizes:
            options.sizes = "8K,1M"
        if options.sizes:
            mib = max(1, -(-max(_sizes(options.sizes)) >> 20))
        _launch(options.ranks, mib, options.sizes, options.calls)
