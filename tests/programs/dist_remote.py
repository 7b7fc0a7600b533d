"""Run under `mpiexec -n N python dist_remote.py SEED TARGET`: the leaf device API on real ranks.

A ring exchange by remote_load, remote_store into the next rank, remote_atomic_add counters that
every instance of every rank hits (exact totals; the old values are tickets that must form a
permutation), then the errors: a rank outside the world, an index outside the buffer, a buffer
not on the heap. Every rank's data derives from SEED, so each rank knows what its peers hold.
Reports `rank R: N checks ok`.
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import sys
from pathlib import Path

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64
from hpvm_py.errors import DistributedError, ExecutionError

SEED, TARGET = int(sys.argv[1]), sys.argv[2]
hpvm.distributed.init(timeout=30, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
N = 777
BINS = 13
checks = 0


def data(q: int) -> np.ndarray:
    return np.random.default_rng(SEED * 1009 + q).standard_normal(N).astype(np.float32)


def heap(values: np.ndarray) -> torch.Tensor:
    buf = hpvm.symmetric.empty(values.shape, torch.from_numpy(values).dtype)
    buf.copy_(torch.from_numpy(values))
    return buf


def check(name: str, ok: bool) -> None:
    global checks
    if not ok:
        raise AssertionError(f"rank {RANK} ({TARGET}): {name} failed")
    checks += 1


def line_of(marker: str) -> int:
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, text in enumerate(lines, 1) if marker in text and "line_of" not in text)


@hpvm.leaf
def ring_load(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64, me: i32,
              world: i32):
    i = hpvm.instance_id(0)
    got[i] = hpvm.remote_load(src, i, (me + 1) % world)


@hpvm.leaf
def push(src: In[Ptr[f32]], src_bytes: i64, inbox: Out[Ptr[f32]], inbox_bytes: i64, me: i32,
         world: i32):
    i = hpvm.instance_id(0)
    hpvm.remote_store(inbox, i, src[i] * 2.0 + 1.0, (me + 1) % world)


@hpvm.leaf
def count(total: InOut[Ptr[i64]], total_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
          mass: InOut[Ptr[f32]], mass_bytes: i64, tickets: Out[Ptr[i64]], tickets_bytes: i64,
          world: i32, bins: i64):
    i = hpvm.instance_id(0)
    for q in range(world):
        hpvm.remote_atomic_add(total, 0, 1, q)
        hpvm.remote_atomic_add(hist, i % bins, 1, q)
        hpvm.remote_atomic_add(mass, 0, 1.0, q)
    tickets[i] = hpvm.remote_atomic_add(total, 1, 1, 0)  # the old value: a ticket


@hpvm.leaf
def gather(tickets: In[Ptr[i64]], tickets_bytes: i64, everything: Out[Ptr[i64]],
           everything_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    q = hpvm.instance_id(1)
    everything[q * n + i] = hpvm.remote_load(tickets, i, q)


@hpvm.leaf
def peek(src: In[Ptr[f32]], src_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, rank: i32, index: i64):
    out[0] = hpvm.remote_load(src, index, rank)  # PEEK


@hpvm.graph
def ring_graph(src: In[Ptr[f32]], src_bytes: i64, got: Out[Ptr[f32]], got_bytes: i64, me: i32,
               world: i32, n: i64):
    hpvm.node(ring_load, grid=n, src=src, src_bytes=src_bytes, got=got, got_bytes=got_bytes, me=me,
              world=world)


@hpvm.graph
def push_graph(src: In[Ptr[f32]], src_bytes: i64, inbox: Out[Ptr[f32]], inbox_bytes: i64, me: i32,
               world: i32, n: i64):
    hpvm.node(push, grid=n, src=src, src_bytes=src_bytes, inbox=inbox, inbox_bytes=inbox_bytes,
              me=me, world=world)


@hpvm.graph
def count_graph(total: InOut[Ptr[i64]], total_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
                mass: InOut[Ptr[f32]], mass_bytes: i64, tickets: Out[Ptr[i64]], tickets_bytes: i64,
                world: i32, bins: i64, n: i64):
    hpvm.node(count, grid=n, total=total, total_bytes=total_bytes, hist=hist, hist_bytes=hist_bytes,
              mass=mass, mass_bytes=mass_bytes, tickets=tickets, tickets_bytes=tickets_bytes,
              world=world, bins=bins)


@hpvm.graph
def gather_graph(tickets: In[Ptr[i64]], tickets_bytes: i64, everything: Out[Ptr[i64]],
                 everything_bytes: i64, n: i64, world: i64):
    hpvm.node(gather, grid=(n, world), tickets=tickets, tickets_bytes=tickets_bytes,
              everything=everything, everything_bytes=everything_bytes, n=n)


SYNC = hpvm.comm.all_reduce(i64)


@hpvm.graph
def sync_graph(flag: InOut[Ptr[i64]], flag_bytes: i64):
    hpvm.node(SYNC, buf=flag, buf_bytes=flag_bytes)


@hpvm.graph
def peek_graph(src: In[Ptr[f32]], src_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, rank: i32,
               index: i64):
    hpvm.node(peek, src=src, src_bytes=src_bytes, out=out, out_bytes=out_bytes, rank=rank, index=index)


def run(graph, *args) -> None:
    with hpvm.runtime(TARGET):
        hpvm.wait(hpvm.launch(graph, *args))


src = heap(data(RANK))
got = heap(np.zeros(N, np.float32))
inbox = heap(np.full(N, np.nan, np.float32))
total = heap(np.zeros(2, np.int64))
hist = heap(np.zeros(BINS, np.int32))
mass = heap(np.zeros(1, np.float32))
tickets = heap(np.full(N, -1, np.int64))
everything = heap(np.zeros(WORLD * N, np.int64))
out = heap(np.zeros(1, np.float32))
flag = heap(np.zeros(1, np.int64))


def barrier() -> None:
    """Every rank has finished what it launched before (a collective ends with a heap barrier,
    and waits with the world's timeout)."""
    run(sync_graph, flag, flag.nbytes)


barrier()

# ring exchange: every rank reads the next rank's source
run(ring_graph, src, src.nbytes, got, got.nbytes, RANK, WORLD, N)
check("ring remote_load", np.array_equal(got.numpy(), data((RANK + 1) % WORLD)))

# every rank writes into the next rank's inbox; after a barrier, the previous rank's values are here
run(push_graph, src, src.nbytes, inbox, inbox.nbytes, RANK, WORLD, N)
barrier()
check("remote_store into the next rank", np.array_equal(inbox.numpy(), data((RANK - 1) % WORLD) * np.float32(2) + 1))

# every instance of every rank adds into every rank's counters at once
run(count_graph, total, total.nbytes, hist, hist.nbytes, mass, mass.nbytes, tickets, tickets.nbytes,
    WORLD, BINS, N)
barrier()
check("remote_atomic_add total", int(total[0]) == WORLD * N)
want = WORLD * np.bincount(np.arange(N) % BINS, minlength=BINS)
check("remote_atomic_add histogram", np.array_equal(hist.numpy(), want))
check("remote_atomic_add f32", float(mass[0]) == float(WORLD * N))
if RANK == 0:
    check("tickets counted", int(total[1]) == WORLD * N)
run(gather_graph, tickets, tickets.nbytes, everything, everything.nbytes, N, WORLD)
check("tickets are a permutation", np.array_equal(np.sort(everything.numpy()), np.arange(WORLD * N)))
barrier()

# errors, on every rank, located at the access
expected_line = line_of("# PEEK")
for rank, index, rule in ((WORLD, 0, "remote-rank"), (-1, 0, "remote-rank"), (0, N, "memory-in-bounds")):
    try:
        run(peek_graph, src, src.nbytes, out, out.nbytes, rank, index)
    except ExecutionError as exc:
        named = f"[{index}]" if rule == "memory-in-bounds" else f"on rank {rank}:"
        check(f"{rule} error", exc.rule == rule and exc.loc.line == expected_line and named in str(exc))
    else:
        check(f"{rule} error raised", False)
run(peek_graph, src, src.nbytes, out, out.nbytes, WORLD - 1 - RANK, N - 1)
check("peek", float(out[0]) == float(data(WORLD - 1 - RANK)[N - 1]))
private = torch.from_numpy(data(RANK))
try:
    run(peek_graph, private, private.nbytes, out, out.nbytes, 0, 0)
except DistributedError as exc:
    check("not on the heap", exc.rule == "buffer-on-heap" and "'src'" in str(exc) and
          exc.loc.line == expected_line)
else:
    check("not on the heap raised", False)
barrier()
report(RANK, f"rank {RANK}: {checks} checks ok")
