"""Run under `mpiexec -n 2 python dist_faults.py`: ranks that disagree, bad buffers, a full heap and
a rank that never arrives. Every expected error prints `FAULT <name> ok` on the rank that saw it;
after each disagreement the ranks must still be in step (a correct collective follows).

HPVM_COMM_FORCE_REMOTE=1 runs the checks that apply to the engine path (there, buffers need not
be on the heap, and offsets are not compared).
"""
import os
import sys
import time

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import InOut, Out, In, Ptr, f32, i32, i64
from hpvm_py.distributed import ranks
from hpvm_py.errors import DistributedError, HPVMTimeoutError

TIMEOUT = 2.0  # for the rank that never arrives; the other steps get a loaded machine's margin
TARGET = sys.argv[1] if len(sys.argv) > 1 else "cpu"  # gpu: on GPU ranks (tests/gpu_dist)
hpvm.distributed.init(timeout=60)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
assert WORLD == 2

SUM_F32, SUM_I32 = hpvm.comm.all_reduce(f32), hpvm.comm.all_reduce(i32)
BCAST_F32, GATHER_F32 = hpvm.comm.broadcast(f32), hpvm.comm.all_gather(f32)


@hpvm.graph
def sum_f32(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(SUM_F32, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def sum_i32(x: InOut[Ptr[i32]], x_bytes: i64):
    hpvm.node(SUM_I32, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def bcast_f32(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(BCAST_F32, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def gather_f32(src: In[Ptr[f32]], src_bytes: i64, dst: Out[Ptr[f32]], dst_bytes: i64):
    hpvm.node(GATHER_F32, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)


def run(graph, *args) -> None:  # noqa: ANN001
    hpvm.wait(hpvm.launch(graph, *args))


def expect(name: str, error: type, *fragments: str, graph=None, args=()) -> None:  # noqa: ANN001
    try:
        run(graph, *args)
    except error as exc:
        text = str(exc)
        missing = [f for f in fragments if f not in text]
        if missing:
            raise AssertionError(f"rank {RANK}: {name}: {missing} not in {text!r}") from None
        if "dist_faults.py" not in text:
            raise AssertionError(f"rank {RANK}: {name}: no user location in {text!r}") from None
        report(RANK, f"FAULT {name} ok")
        return
    raise AssertionError(f"rank {RANK}: {name}: no error")


def still_in_step() -> None:
    x = hpvm.symmetric.empty(64, torch.float32)
    x.fill_(RANK + 1.0)
    run(sum_f32, x, x.nbytes)
    assert torch.all(x == 3.0), x
    report(RANK, "FAULT in-step ok")


with hpvm.runtime(TARGET):
    x = hpvm.symmetric.zeros(100, torch.float32)
    n = 100 if RANK == 0 else 50
    expect("size", DistributedError, "ranks disagree on the size of 'x' (input 'buf') in bytes",
           "rank 0: 400, rank 1: 200", graph=sum_f32, args=(x, 4 * n))
    still_in_step()

    xf, xi = hpvm.symmetric.zeros(16, torch.float32), hpvm.symmetric.zeros(16, torch.int32)
    graph, buf = (sum_f32, xf) if RANK == 0 else (sum_i32, xi)
    expect("dtype", DistributedError, "ranks disagree on the element type (rank 0: f32, rank 1: i32)",
           graph=graph, args=(buf, buf.nbytes))
    still_in_step()

    graph = sum_f32 if RANK == 0 else bcast_f32
    expect("kind", DistributedError, "ranks disagree on the collective (rank 0: all_reduce, rank 1: broadcast)",
           graph=graph, args=(xf, xf.nbytes))
    still_in_step()

    src, dst = hpvm.symmetric.zeros(8, torch.float32), hpvm.symmetric.zeros(16, torch.float32)
    if RANK == 1:
        expect("local-argument", DistributedError, "dst must be world_size (2) times src",
               graph=gather_f32, args=(src, src.nbytes, dst, 4 * 15))
    else:
        expect("peer-argument", DistributedError, "rank(s) [1] could not take part",
               "rank 1: invalid arguments", graph=gather_f32, args=(src, src.nbytes, dst, dst.nbytes))
    still_in_step()

    if not REMOTE:
        a, b = hpvm.symmetric.zeros(32, torch.float32), hpvm.symmetric.zeros(32, torch.float32)
        mine = a if RANK == 0 else b
        expect("offset", DistributedError, "ranks disagree on the heap offset of 'x' (input 'buf')",
               "allocate symmetric buffers in the same order", graph=sum_f32, args=(mine, mine.nbytes))
        still_in_step()

        plain = torch.zeros(32) if RANK == 1 else a
        if RANK == 1:
            expect("not-on-heap", DistributedError, "buffer 'x' (input 'buf') (128 bytes at", "is not on the symmetric heap",
                   "hpvm.symmetric.empty", graph=sum_f32, args=(plain, plain.nbytes))
        else:
            expect("peer-not-on-heap", DistributedError, "rank(s) [1] could not take part",
                   "a buffer not on the symmetric heap", graph=sum_f32, args=(plain, plain.nbytes))
        still_in_step()
    else:
        plain = np.full(32, RANK + 1.0, dtype=np.float32)  # any host buffer on the engine path
        run(sum_f32, plain, plain.nbytes)
        assert np.all(plain == 3.0), plain
        report(RANK, "FAULT engine-any-buffer ok")

    free = hpvm.symmetric.free_bytes()
    try:
        hpvm.symmetric.empty((free // 4 + 1000,), torch.float32)
    except DistributedError as exc:
        assert f"requested {4 * (free // 4 + 1000)} bytes" in str(exc), str(exc)
        assert "bytes free" in str(exc) and "HPVM_HEAP_BYTES" in str(exc), str(exc)
        report(RANK, "FAULT exhausted ok")
    still_in_step()

    ranks.current().timeout = TIMEOUT  # every wait reads it (init(timeout=...) sets it)
    if RANK == 1:
        report(RANK, "FAULT missing skipped")  # rank 1 never arrives at the next collective
        time.sleep(TIMEOUT + 1)  # alive meanwhile: MPICH's launcher may end the job when a rank exits
    else:
        start = time.monotonic()
        expect("missing", HPVMTimeoutError, "rank(s) [1] did not arrive within 2 s", "HPVM_COMM_TIMEOUT",
               graph=sum_f32, args=(xf, xf.nbytes))
        waited = time.monotonic() - start
        assert TIMEOUT <= waited < TIMEOUT + 5, waited
