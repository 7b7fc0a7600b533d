"""Run under `mpiexec -n N python dist_relaunch.py SEED [TARGET]` (N >= 2): communication nodes
launched again and again (issue 22: the agreement is made once per graph and buffer set, and a
relaunch only exchanges its fingerprint through the heap). Each check reports `RELAUNCH <name>
ok` on every rank:

- relaunched all-reduce graphs (the staged small sum, the one-shot above the staging slot, the
  two-shot, bf16, i32, max) give exact sums of fresh random inputs every time, replayed, with no
  new agreement after the first launch;
- another buffer set between launches is agreed again and correct, and the first set is still kept;
- adversarial, on the kept path: one rank (FAULTY) launches with another size, another element
  type, another buffer or another graph while the others relaunch the kept one, or (its own
  HPVM_COMM_ONESHOT_BYTES) chooses another algorithm for a new buffer: every rank raises
  DistributedError naming what differs (never a hang or a wrong sum), and the ranks are still in
  step (a correct relaunch follows).

HPVM_COMM_FORCE_REMOTE=1 runs it on the engine path (no kept agreement there: offsets are not
compared and the agreement counter is not checked).
"""
import os
import sys

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report, report_disagreement
from hpvm_py import InOut, Ptr, bf16, f32, i32, i64
from hpvm_py.support import stats

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 1
TARGET = sys.argv[2] if len(sys.argv) > 2 else "cpu"
hpvm.distributed.init(timeout=60, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
FAULTY = WORLD // 2
assert WORLD >= 2, "run on 2 or more ranks"

SUM_F32, SUM_I32, SUM_BF16 = hpvm.comm.all_reduce(f32), hpvm.comm.all_reduce(i32), hpvm.comm.all_reduce(bf16)
MAX_F32 = hpvm.comm.all_reduce(f32, op="max")


@hpvm.graph
def sum_f32(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(SUM_F32, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def sum_i32(x: InOut[Ptr[i32]], x_bytes: i64):
    hpvm.node(SUM_I32, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def sum_bf16(x: InOut[Ptr[bf16]], x_bytes: i64):
    hpvm.node(SUM_BF16, buf=x, buf_bytes=x_bytes)


@hpvm.graph
def max_f32(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(MAX_F32, buf=x, buf_bytes=x_bytes)


def inputs(step: int, count: int, dtype: torch.dtype) -> list[torch.Tensor]:
    """Every rank's input of a step (each rank can compute all of them)."""
    out = []
    for q in range(WORLD):
        rng = np.random.default_rng([SEED, step, q])
        if dtype == torch.int32:
            out.append(torch.from_numpy(rng.integers(-1 << 20, 1 << 20, count).astype(np.int32)))
        else:
            out.append(torch.from_numpy(rng.standard_normal(count).astype(np.float32)).to(dtype))
    return out


def expected(parts: list[torch.Tensor], op: str) -> torch.Tensor:
    """In rank order, 16-bit floats accumulated in f32 (docs/distributed.md, Numerics)."""
    acc = parts[0].to(torch.float32 if parts[0].dtype == torch.bfloat16 else parts[0].dtype, copy=True)
    for p in parts[1:]:
        acc = acc + p.to(acc.dtype) if op == "sum" else torch.maximum(acc, p.to(acc.dtype))
    return acc.to(parts[0].dtype)


def run(graph, x: torch.Tensor, nbytes: int | None = None) -> None:  # noqa: ANN001
    hpvm.wait(hpvm.launch(graph, x, x.nbytes if nbytes is None else nbytes))
    if x.is_cuda:
        torch.cuda.synchronize()


def counter(name: str) -> int:
    return stats.snapshot().get(name, 0)


def collectives_run() -> int:
    """Collectives counted, whatever their path (a graph replay counts the node it holds)."""
    return sum(v for k, v in stats.snapshot().items() if k.startswith("collectives_"))


step = 0


def relaunch(name: str, graph, x: torch.Tensor, op: str = "sum", times: int = 12,  # noqa: ANN001
             new_agreements: int | None = 1) -> None:
    """Launch `graph` on x `times` times with fresh inputs; every result exact."""
    global step
    before, replayed = counter("collective_agreements"), counter("replayed_launches")
    graphed, counted = counter("cuda_graph_replays"), collectives_run()
    for _ in range(times):
        step += 1
        parts = inputs(step, x.numel(), x.dtype)
        x.copy_(parts[RANK].to(x.device))
        run(graph, x)
        want = expected(parts, op)
        got = x.cpu()
        if not torch.equal(got, want):
            bad = (got != want).nonzero()[:3].flatten().tolist()
            raise AssertionError((name, step, RANK, bad, [got[bad].tolist(), want[bad].tolist(), [p[bad].tolist() for p in parts]]))
    if not REMOTE and new_agreements is not None:
        assert counter("collective_agreements") - before == new_agreements, \
            (name, counter("collective_agreements") - before)
    if TARGET == "cpu":  # (the python target records no launches)
        assert counter("replayed_launches") - replayed >= times - 1, name
    if TARGET in ("gpu", "nvptx") and not REMOTE and times >= 4:
        # GPU ranks: from the third launch with the same scalars, one CUDA graph holds the node
        assert counter("cuda_graph_replays") - graphed >= times - 3, (name, counter("cuda_graph_replays") - graphed)
    # one communication node per launch: a launch counts it once, a graph's capture not at all
    assert collectives_run() - counted == times, (name, collectives_run() - counted)
    report(RANK, f"RELAUNCH {name} ok")


def disagree(name: str, mine, theirs, pattern: str) -> None:  # noqa: ANN001
    """FAULTY runs `mine`, the others `theirs`: every rank raises naming the difference."""
    report_disagreement(RANK, FAULTY, f"RELAUNCH {name} ok", mine, theirs, pattern)


runtime = hpvm.runtime(TARGET)  # one runtime: its compiled graphs keep their recorded launches
runtime.__enter__()
small = hpvm.symmetric.zeros(2048, torch.float32)  # 8 KiB: the staged sum
medium = hpvm.symmetric.zeros(64 << 10, torch.float32)  # 256 KiB: one-shot, two barriers
large = hpvm.symmetric.zeros(256 << 10, torch.float32)  # 1 MiB: two-shot (default threshold)
other = hpvm.symmetric.zeros(1024, torch.float32)
ints = hpvm.symmetric.zeros(2048, torch.int32)  # 8 KiB like small
halves = hpvm.symmetric.zeros(4096, torch.bfloat16)
twin = hpvm.symmetric.zeros(2048, torch.float32)  # like small, at another offset

relaunch("small", sum_f32, small)
relaunch("medium", sum_f32, medium)
relaunch("large", sum_f32, large, times=4)
relaunch("bf16", sum_bf16, halves)
relaunch("i32", sum_i32, ints)
relaunch("max", max_f32, other, op="max")
# another buffer set, then the first again: agreed once more, and the first is still kept
relaunch("new-set", sum_f32, other)
relaunch("first-set-kept", sum_f32, small, new_agreements=0)
for graph, x in ((sum_f32, small), (sum_f32, other), (sum_f32, small)):  # alternating sets
    relaunch("alternating", graph, x, times=3, new_agreements=0)

# adversarial, right after relaunches of `small` (its agreement kept on every rank)
disagree("size", lambda: run(sum_f32, small, small.nbytes // 2), lambda: run(sum_f32, small),
         r"ranks disagree on the size of 'x'")
relaunch("in-step-after-size", sum_f32, small, times=2, new_agreements=None)
disagree("dtype", lambda: run(sum_i32, ints), lambda: run(sum_f32, small),
         r"ranks disagree on the element type")
relaunch("in-step-after-dtype", sum_f32, small, times=2, new_agreements=None)
if not REMOTE:
    disagree("buffer", lambda: run(sum_f32, twin), lambda: run(sum_f32, small),
             r"ranks disagree on the heap offset of 'x'")
    relaunch("in-step-after-buffer", sum_f32, small, times=2, new_agreements=None)
if not REMOTE:
    # FAULTY's own threshold (another algorithm for the same call): a kept call shape keeps the
    # algorithm its ranks agreed on, so its relaunches stay exact; a new shape (a buffer new to
    # every rank) is chosen anew, and the ranks disagree on it
    if RANK == FAULTY:
        os.environ["HPVM_COMM_ONESHOT_BYTES"] = "0"
    try:
        relaunch("kept-algorithm", sum_f32, small, times=3, new_agreements=0)
        fresh = hpvm.symmetric.zeros(2048, torch.float32)
        disagree("algorithm", lambda: run(sum_f32, fresh), lambda: run(sum_f32, fresh),
                 r"ranks disagree on the algorithm")
    finally:
        os.environ.pop("HPVM_COMM_ONESHOT_BYTES", None)
    relaunch("in-step-after-algorithm", sum_f32, small, times=2, new_agreements=None)
disagree("collective", lambda: run(max_f32, small), lambda: run(sum_f32, small),
         r"ranks disagree on the reduction")
relaunch("in-step-after-collective", sum_f32, small, times=2, new_agreements=None)
runtime.__exit__(None, None, None)
report(RANK, "RELAUNCH done")
