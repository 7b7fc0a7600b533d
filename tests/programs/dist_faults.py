"""Run under `mpiexec -n N python dist_faults.py [TARGET] [END]` with N >= 2: ranks that disagree,
bad buffers, a full heap, then a rank that never arrives (END "missing", the default) or, alone,
a rank that dies in the middle of a collective (END "died"). Every expected error prints
`FAULT <name> ok` on the rank that saw it; after each disagreement the ranks must still be in step
(a correct collective follows).

One rank is at fault in each case: FAULTY, the middle rank (the last one on two ranks), or the last
rank for the disagreements that every rank reports alike. Every other rank must raise, naming it.

HPVM_COMM_FORCE_REMOTE=1 runs the checks that apply to the engine path (there, buffers need not
be on the heap, and offsets are not compared).
"""
import os
import re
import sys
import time
from typing import Callable

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import InOut, Out, In, Ptr, f32, i32, i64
from hpvm_py.distributed import ranks
from hpvm_py.distributed.gpu import launch as gpu_launch
from hpvm_py.errors import DistributedError, HPVMTimeoutError

TIMEOUT = 2.0  # for the rank that never arrives or dies; the other steps get a loaded machine's margin
TARGET = sys.argv[1] if len(sys.argv) > 1 else "cpu"  # gpu: on GPU ranks (tests/gpu_dist)
END = sys.argv[2] if len(sys.argv) > 2 else "missing"
assert END in ("missing", "died"), END
hpvm.distributed.init(timeout=60, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
assert WORLD >= 2, "run on 2 or more ranks"
FAULTY, LAST = WORLD // 2, WORLD - 1
ALL_SUM = WORLD * (WORLD + 1) / 2  # sum over the ranks of rank + 1

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


def by_rank(value: Callable[[int], object]) -> str:
    """What every rank contributes, as the errors list it: "rank 0: a, rank 1: b, ..."."""
    return ", ".join(f"rank {q}: {value(q)}" for q in range(WORLD))


def expect(name: str, error: type, *fragments: str, graph=None, args=(), pattern: str = "") -> None:  # noqa: ANN001
    try:
        run(graph, *args)
    except error as exc:
        text = str(exc)
        missing = [f for f in fragments if f not in text]
        if pattern and not re.search(pattern, text):
            missing.append(pattern)
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
    assert torch.all(x == ALL_SUM), x
    report(RANK, "FAULT in-step ok")


def disagreements() -> None:
    """Faults after which the ranks are still in step: each is followed by a correct collective."""
    x = hpvm.symmetric.zeros(100, torch.float32)
    n = 50 if RANK == FAULTY else 100
    expect("size", DistributedError, "ranks disagree on the size of 'x' (input 'buf') in bytes",
           by_rank(lambda q: 200 if q == FAULTY else 400), graph=sum_f32, args=(x, 4 * n))
    still_in_step()

    xf, xi = hpvm.symmetric.zeros(16, torch.float32), hpvm.symmetric.zeros(16, torch.int32)
    graph, buf = (sum_i32, xi) if RANK == LAST else (sum_f32, xf)
    expect("dtype", DistributedError, "ranks disagree on the element type",
           by_rank(lambda q: "i32" if q == LAST else "f32"), graph=graph, args=(buf, buf.nbytes))
    still_in_step()

    graph = bcast_f32 if RANK == FAULTY else sum_f32
    expect("kind", DistributedError, "ranks disagree on the collective",
           by_rank(lambda q: "broadcast" if q == FAULTY else "all_reduce"), graph=graph, args=(xf, xf.nbytes))
    still_in_step()

    src, dst = hpvm.symmetric.zeros(8, torch.float32), hpvm.symmetric.zeros(8 * WORLD, torch.float32)
    if RANK == FAULTY:
        expect("local-argument", DistributedError, f"dst must be world_size ({WORLD}) times src",
               graph=gather_f32, args=(src, src.nbytes, dst, dst.nbytes - 4))
    else:
        expect("peer-argument", DistributedError, f"rank(s) [{FAULTY}] could not take part",
               f"rank {FAULTY}: invalid arguments", graph=gather_f32, args=(src, src.nbytes, dst, dst.nbytes))
    still_in_step()

    if not REMOTE:
        a, b = hpvm.symmetric.zeros(32, torch.float32), hpvm.symmetric.zeros(32, torch.float32)
        mine = b if RANK == FAULTY else a
        expect("offset", DistributedError, "ranks disagree on the heap offset of 'x' (input 'buf')",
               "allocate symmetric buffers in the same order", graph=sum_f32, args=(mine, mine.nbytes))
        still_in_step()

        if RANK == FAULTY:
            plain = torch.zeros(32)
            expect("not-on-heap", DistributedError, "buffer 'x' (input 'buf') (128 bytes at", "is not on the symmetric heap",
                   "hpvm.symmetric.empty", graph=sum_f32, args=(plain, plain.nbytes))
        else:
            expect("peer-not-on-heap", DistributedError, f"rank(s) [{FAULTY}] could not take part",
                   "a buffer not on the symmetric heap", graph=sum_f32, args=(a, a.nbytes))
        still_in_step()
    else:
        plain = np.full(32, RANK + 1.0, dtype=np.float32)  # any host buffer on the engine path
        run(sum_f32, plain, plain.nbytes)
        assert np.all(plain == ALL_SUM), plain
        report(RANK, "FAULT engine-any-buffer ok")

    free = hpvm.symmetric.free_bytes()
    try:
        hpvm.symmetric.empty((free // 4 + 1000,), torch.float32)
    except DistributedError as exc:
        assert f"requested {4 * (free // 4 + 1000)} bytes" in str(exc), str(exc)
        assert "bytes free" in str(exc) and "HPVM_HEAP_BYTES" in str(exc), str(exc)
        report(RANK, "FAULT exhausted ok")
    still_in_step()


class Died(BaseException):
    """Where the faulty rank stops: it is still alive (MPICH's launcher may end the job when a rank
    exits), but from its peers' side it is as dead as a killed process, whose heap segment stays
    mapped and whose counters and messages never move again. A BaseException, as a kill is: the
    runtime passes it through instead of reporting it as its own error."""


def die_after_agreement(world: ranks.World) -> None:
    """Make this rank's next collective stop right after the ranks agreed on it: on the heap of
    CPU ranks after the descriptor barrier, on the engine before the engine's own collective, on
    GPU ranks (which agree inside the kernel) before the kernel is launched."""
    def never(*args: object, **kwargs: object) -> None:
        raise Died

    if REMOTE:
        world.engine.all_reduce = never
        return
    if world.device != "host":
        gpu_launch.all_reduce = never
        return
    agreed = world.comm.barrier  # the first barrier of a call is the descriptor exchange

    def once(what: Callable[[], str], loc: object) -> None:
        agreed(what, loc)
        raise Died

    world.comm.barrier = once


def missing_or_died() -> None:
    """The last fault: the ranks are out of step afterwards. Every survivor must raise within the
    timeout, naming the faulty rank and no other."""
    world = ranks.current()
    world.timeout = TIMEOUT  # every wait reads it (init(timeout=...) sets it)
    # a rank that dies after the agreement stops a collective only where one barrier follows it: a
    # sum larger than the staging slots (a small one is staged: the agreement is its only barrier)
    staged = getattr(world.control, "stage_slot_bytes", 0)
    xf = hpvm.symmetric.zeros(16 if END == "missing" else staged // 4 + 16, torch.float32)
    if RANK == FAULTY:
        if END == "missing":
            report(RANK, "FAULT missing skipped")  # never arrives at the next collective
        else:
            die_after_agreement(world)
            try:
                run(sum_f32, xf, xf.nbytes)
            except Died:
                report(RANK, "FAULT died here")
        # alive while the survivors wait (after a death, the engine path's survivors ask who is
        # still there once the engine gave up: a second timeout)
        time.sleep(TIMEOUT + 1 if END == "missing" else 2 * TIMEOUT + 1)
        return
    start = time.monotonic()
    args = (xf, xf.nbytes)
    expect(END, HPVMTimeoutError, "did not arrive within 2 s", "HPVM_COMM_TIMEOUT", graph=sum_f32, args=args,
           pattern=rf"rank(\(s\) \[| ){FAULTY}\]? did not")
    waited = time.monotonic() - start
    # the engine path asks the survivors who is there once its collective timed out: twice the timeout
    limit = 2 * TIMEOUT if END == "died" else TIMEOUT
    assert TIMEOUT <= waited < limit + 5, waited


with hpvm.runtime(TARGET):
    if END == "missing":
        disagreements()
    else:
        still_in_step()
    missing_or_died()
