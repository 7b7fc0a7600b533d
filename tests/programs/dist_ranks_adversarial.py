"""Run under `mpiexec -n N python dist_ranks_adversarial.py MODE [SEED STEPS]` (N >= 2). Each
check reports `RANKS <name> ok` on every rank (tests/test_ranks_adversarial.py reads them):

- MODE rmsnorm: a seeded sequence of fused all-reduce + RMSNorm nodes (f32, bf16, f16, f64; with
  and without the fp8 copy; rows of 1, 3, 7 or 64 elements). In most steps the ranks agree and
  every rank checks x and residual against NumPy and the fp8 codes and scales bit for bit against
  torch's e4m3fn of x as stored; in the others one rank (FAULTY) launches another node: its own
  quantize= (the node then has two more buffers), eps, hidden or element type. Every rank must
  raise DistributedError naming what differs and the faulty rank, and the ranks stay in step
  (the next step checks values). A quantize= of its own once made the engine path's ranks with
  the longer descriptor fail with an internal IndexError, and the heap path's ranks blame
  "experts" or a buffer size, each rank another field.
- MODE first-death: the world's very first collective on the engine path (run it with
  HPVM_COMM_FORCE_REMOTE=1): FAULTY stops right after the descriptor exchange. Every other rank
  must raise HPVMTimeoutError naming it, within twice the timeout: the MPI communicator the
  engine's collectives use was duplicated there with the blocking MPI_Comm_dup, which waited for
  the missing rank forever.
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import os
import re
import sys
import time

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import In, InOut, Out, Ptr, f32, i64, u8
from hpvm_py.distributed import ranks
from hpvm_py.errors import DistributedError, HPVMTimeoutError

MODE = sys.argv[1]
SEED = int(sys.argv[2]) if len(sys.argv) > 2 else 1
STEPS = int(sys.argv[3]) if len(sys.argv) > 3 else 12
TIMEOUT = 2.0 if MODE == "first-death" else 30.0
hpvm.distributed.init(timeout=TIMEOUT, device="cpu")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
assert WORLD >= 2, "run on 2 or more ranks"
FAULTY = WORLD - 1
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64}
TOL = {"f32": 1e-5, "bf16": 3e-2, "f16": 4e-3, "f64": 1e-12}  # relative to 1 + |value|
graphs: dict = {}


def rmsnorm_graph(dtype: str, eps: float, quantize: str | None):  # noqa: ANN201 - a graph
    key = (dtype, eps, quantize)
    if key in graphs:
        return graphs[key]
    t = getattr(hpvm, dtype)
    node = hpvm.comm.all_reduce_rmsnorm(t, eps=eps, quantize=quantize)
    if quantize:
        @hpvm.graph
        def g(x: InOut[Ptr[t]], x_bytes: i64, r: InOut[Ptr[t]], r_bytes: i64, w: In[Ptr[t]], w_bytes: i64,
              hidden: i64, o: Out[Ptr[u8]], o_bytes: i64, s: Out[Ptr[f32]], s_bytes: i64):
            hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                      weight_bytes=w_bytes, hidden=hidden, out=o, out_bytes=o_bytes, scales=s,
                      scales_bytes=s_bytes)
    else:
        @hpvm.graph
        def g(x: InOut[Ptr[t]], x_bytes: i64, r: InOut[Ptr[t]], r_bytes: i64, w: In[Ptr[t]], w_bytes: i64,
              hidden: i64):
            hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                      weight_bytes=w_bytes, hidden=hidden)
    graphs[key] = g
    return g


buffers: dict = {}


def heap(n: int, dtype: torch.dtype, role: str) -> torch.Tensor:
    """One heap buffer per (size, type, role), allocated in the same order on every rank."""
    key = (n, dtype, role)
    if key not in buffers:
        buffers[key] = hpvm.symmetric.zeros(n, dtype)
    return buffers[key]


def fp8_reference(x: torch.Tensor, rows: int, hidden: int) -> tuple[torch.Tensor, torch.Tensor]:
    """docs/distributed.md: per row s = max|x| / 448 (f32) and e4m3fn(clamp(x / s)); zero rows 0."""
    v = x.to(torch.float32).view(rows, hidden).numpy()
    s = (np.abs(v).max(axis=1) / np.float32(448)).astype(np.float32)
    safe = np.where(s > 0, s, np.float32(1))
    y = np.clip(np.where(s[:, None] > 0, v / safe[:, None], np.float32(0)), -448, 448).astype(np.float32)
    return torch.from_numpy(y).to(torch.float8_e4m3fn).view(torch.uint8).reshape(-1), torch.from_numpy(s)


def step_case(rng: np.random.Generator) -> dict:
    case = {"dtype": str(rng.choice(list(TORCH))), "hidden": int(rng.choice([1, 3, 7, 64])),
            "rows": int(rng.choice([1, 2, 5])), "eps": float(rng.choice([1e-6, 1e-5]))}
    case["quantize"] = None if case["dtype"] == "f64" or rng.random() < 0.5 else "fp8"
    return case


def allocate(case: dict) -> list:
    """The case's heap buffers (x, residual, weight, then the fp8 codes and scales)."""
    dtype, hidden, rows = case["dtype"], case["hidden"], case["rows"]
    n = hidden * rows
    found = [heap(n, TORCH[dtype], "x"), heap(n, TORCH[dtype], "r"), heap(hidden, TORCH[dtype], "w")]
    if case["quantize"]:
        found += [heap(n, torch.uint8, "o"), heap(rows, torch.float32, "s")]
    return found


def launch(case: dict, salt: int) -> tuple:
    """Launch the case's node on fresh inputs; returns what the check needs."""
    dtype, hidden, rows = case["dtype"], case["hidden"], case["rows"]
    n = hidden * rows
    def normal(stream: int, count: int) -> torch.Tensor:  # the same on every rank
        values = np.random.default_rng([SEED, salt, stream]).standard_normal(count)
        return torch.from_numpy(values).to(TORCH[dtype])

    xs = [normal(q, n) for q in range(WORLD)]
    residual, weight = normal(WORLD, n), normal(WORLD + 1, hidden)
    found = allocate(case)
    x, r, w = found[:3]
    x.copy_(xs[RANK])
    r.copy_(residual)
    w.copy_(weight)
    args = [x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden]
    for extra in found[3:]:
        args += [extra, extra.nbytes]
    hpvm.wait(hpvm.launch(rmsnorm_graph(dtype, case["eps"], case["quantize"]), *args))
    return xs, residual, weight, args


def check_values(case: dict, xs: list, residual: torch.Tensor, weight: torch.Tensor, args: list,
                 step: int) -> None:
    dtype, hidden, rows = case["dtype"], case["hidden"], case["rows"]
    x, r = args[0], args[2]
    total = sum(v.to(torch.float64).numpy() for v in xs) + residual.to(torch.float64).numpy()
    grid = total.reshape(rows, hidden)
    want = (grid / np.sqrt((grid ** 2).mean(axis=1, keepdims=True) + case["eps"])
            * weight.to(torch.float64).numpy()).reshape(-1)
    for name, got, ref in (("residual", r, total), ("x", x, want)):
        err = np.abs(got.to(torch.float64).numpy() - ref) / (1 + np.abs(ref))
        assert err.max() <= TOL[dtype], (RANK, step, case, name, float(err.max()))
    if case["quantize"]:
        codes, scales = fp8_reference(x, rows, hidden)
        assert torch.equal(args[9], scales), (RANK, step, case, "scales")
        assert torch.equal(args[7], codes), (RANK, step, case, "codes")


# one rank's node differs from its peers' in one option: (option, the message's pattern)
DISAGREEMENTS = [("quantize", r"ranks disagree on the quantization .*rank \d+: none"),
                 ("eps", r"ranks disagree on eps"), ("hidden", r"ranks disagree on hidden"),
                 ("dtype", r"ranks disagree on the element type")]


def faulty_variant(case: dict, option: str) -> dict:
    mine = dict(case)
    if option == "quantize":
        mine["dtype"] = "f32" if case["dtype"] == "f64" else case["dtype"]
        mine["quantize"] = None if case["quantize"] else "fp8"
    elif option == "eps":
        mine["eps"] = case["eps"] * 10
    elif option == "hidden":  # the same elements in rows of another length
        mine["hidden"], mine["rows"] = case["hidden"] * case["rows"], 1
        if mine["hidden"] == case["hidden"]:
            mine["hidden"], mine["rows"] = 1, case["hidden"]
    else:
        mine["dtype"] = "f64" if case["dtype"] == "f32" else "f32"
        mine["quantize"] = None if mine["dtype"] == "f64" else case["quantize"]
    return mine


def rmsnorm_sequence() -> None:
    rng = np.random.default_rng(SEED)
    checked = disagreed = 0
    for step in range(STEPS):
        case = step_case(rng)
        # every disagreement comes up (quantize= first: the node with two more buffers), then at random
        fault = DISAGREEMENTS[step // 2 % len(DISAGREEMENTS)] if step % 2 else None
        if fault is None:
            check_values(case, *launch(case, step), step)
            checked += 1
            continue
        option, pattern = fault
        if option == "quantize" and case["dtype"] == "f64":
            case = dict(case, dtype="f32")
        variant = faulty_variant(case, option)
        allocate(case), allocate(variant)  # every rank allocates the same sequence of buffers
        mine = variant if RANK == FAULTY else case
        try:
            launch(mine, step)
        except DistributedError as exc:
            text = str(exc)
            assert exc.rule == "rank-agreement" and re.search(pattern, text), (RANK, step, option, text)
            assert f"rank {FAULTY}: " in text, (RANK, step, option, text)
            disagreed += 1
            continue
        raise AssertionError(f"rank {RANK}: step {step}: {option} differs on rank {FAULTY}, no error")
    assert checked and disagreed, (checked, disagreed)
    report(RANK, "RANKS rmsnorm ok")


class Stopped(BaseException):
    """Where the faulty rank stops (a BaseException, as a kill: the runtime passes it through)."""


SUM_F32 = hpvm.comm.all_reduce(f32)


@hpvm.graph
def sum_f32(x: InOut[Ptr[f32]], x_bytes: i64):
    hpvm.node(SUM_F32, buf=x, buf_bytes=x_bytes)


def first_death() -> None:
    assert REMOTE, "run with HPVM_COMM_FORCE_REMOTE=1"
    x = hpvm.symmetric.zeros(16, torch.float32)
    if RANK == FAULTY:
        def stop(*args: object, **kwargs: object) -> None:
            raise Stopped

        ranks.current().engine.all_reduce = stop  # after the descriptor exchange, before the engine
        try:
            hpvm.wait(hpvm.launch(sum_f32, x, x.nbytes))
        except Stopped:
            report(RANK, "RANKS first-death here")
        time.sleep(2 * TIMEOUT + 1)  # alive while its peers wait (and ask who is there)
        return
    start = time.monotonic()
    try:
        hpvm.wait(hpvm.launch(sum_f32, x, x.nbytes))
    except HPVMTimeoutError as exc:
        waited = time.monotonic() - start
        assert f"rank(s) [{FAULTY}] did not arrive" in str(exc), str(exc)
        assert waited < 2 * TIMEOUT + 5, waited
        report(RANK, "RANKS first-death ok")
        return
    raise AssertionError(f"rank {RANK}: no error though rank {FAULTY} stopped")


with hpvm.runtime("cpu"):
    if MODE == "rmsnorm":
        rmsnorm_sequence()
    elif MODE == "first-death":
        first_death()
    else:
        raise SystemExit(f"unknown mode {MODE!r}")
