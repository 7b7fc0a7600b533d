"""Run under `mpiexec -n N python dist_moe.py SEED TARGET`: the mixture-of-experts communication
nodes (hpvm.comm.moe_dispatch, moe_combine) as graphs on the given target, compared with a plain
NumPy reference of the whole world (moe_reference.py) computed on every rank from SEED: random
routing with rows routed nowhere, routing that sends everything to one rank (experts with no
rows, capacity overflow: drops), no rows at all, with and without gates; then the errors: a bad
expert id on one rank, ranks disagreeing on the capacity, a receive buffer of the wrong size.

HPVM_COMM_FORCE_REMOTE=1 runs the same on the engine path. Prints `rank R: N checks ok; paths P`
and one `MOE <fault> ok` line per error checked.
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import sys

import numpy as np
import torch

import hpvm_py as hpvm
import moe_reference as ref
from dist_report import report
from hpvm_py import In, Out, Ptr, f32, i32, i64
from hpvm_py.errors import DistributedError

SEED, TARGET = int(sys.argv[1]), sys.argv[2]
hpvm.distributed.init(timeout=30, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
         "u8": torch.uint8}
checks = 0


def moe_graph(dtype: str, hidden: int, experts: int, capacity: int):  # noqa: ANN201 - a graph
    t = getattr(hpvm, dtype)
    send = hpvm.comm.moe_dispatch(t, hidden=hidden, experts=experts, capacity=capacity)
    back = hpvm.comm.moe_combine(t, hidden=hidden, experts=experts, capacity=capacity)

    @hpvm.graph
    def g(tokens: In[Ptr[t]], tokens_bytes: i64, expert: In[Ptr[i32]], expert_bytes: i64,
          recv: Out[Ptr[t]], recv_bytes: i64, counts: Out[Ptr[i32]], counts_bytes: i64,
          origin: Out[Ptr[i32]], origin_bytes: i64, slot: Out[Ptr[i32]], slot_bytes: i64,
          gate: In[Ptr[f32]], gate_bytes: i64, out: Out[Ptr[t]], out_bytes: i64):
        hpvm.node(send, tokens=tokens, tokens_bytes=tokens_bytes, expert=expert, expert_bytes=expert_bytes,
                  recv=recv, recv_bytes=recv_bytes, counts=counts, counts_bytes=counts_bytes,
                  origin=origin, origin_bytes=origin_bytes, slot=slot, slot_bytes=slot_bytes)
        hpvm.node(back, expert_out=recv, expert_out_bytes=recv_bytes, slot=slot, slot_bytes=slot_bytes,
                  gate=gate, gate_bytes=gate_bytes, out=out, out_bytes=out_bytes)
    return g


def on_heap(values: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    buf = hpvm.symmetric.empty(values.shape, dtype)
    buf.copy_(torch.from_numpy(values).to(dtype))
    return buf


def host(t: torch.Tensor) -> torch.Tensor:
    return t.cpu()


def expect(name: str, ok: bool, detail=lambda: "") -> None:  # noqa: ANN001
    global checks
    if not ok:
        raise AssertionError(f"rank {RANK}: {name} differs {detail()}")
    checks += 1


def run_case(salt: int, dtype: str, tokens: int, hidden: int, experts: int, capacity: int, kind: str,
             gated: bool) -> None:
    rng = np.random.default_rng(SEED * 7 + salt)
    routes = ref.routes(rng, WORLD, tokens, experts, kind)
    if dtype == "u8":
        rows = [rng.integers(0, 256, (tokens, hidden)).astype(np.float64) for _ in range(WORLD)]
    else:  # values the element type holds exactly
        rows = [torch.from_numpy(rng.standard_normal((tokens, hidden))).to(TORCH[dtype]).double().numpy()
                for _ in range(WORLD)]
    gates = [rng.random(tokens).astype(np.float32) for _ in range(WORLD)]
    want = ref.dispatch(routes, rows, experts, capacity)
    local = experts // WORLD
    x = on_heap(rows[RANK], TORCH[dtype])
    expert = on_heap(routes[RANK], torch.int32)
    recv = hpvm.symmetric.zeros((local, capacity, hidden), TORCH[dtype])
    counts = hpvm.symmetric.zeros((WORLD, local), torch.int32)
    origin = hpvm.symmetric.zeros((local, capacity, 2), torch.int32)
    slot = hpvm.symmetric.zeros(tokens, torch.int32)
    gate = on_heap(gates[RANK], torch.float32)
    out = hpvm.symmetric.zeros((tokens, hidden), TORCH[dtype])
    graph = moe_graph(dtype, hidden, experts, capacity) if dtype != "u8" else None
    name = f"{dtype} {kind} T={tokens} E={experts} C={capacity}{' gated' if gated else ''}"
    args = (x, x.nbytes, expert, expert.nbytes, recv, recv.nbytes, counts, counts.nbytes, origin,
            origin.nbytes, slot, slot.nbytes)
    if graph is None:  # dispatch alone (combine takes float rows only)
        hpvm.wait(hpvm.launch(dispatch_only(dtype, hidden, experts, capacity), *args))
    else:
        hpvm.wait(hpvm.launch(graph, *args, gate, gate.nbytes if gated else 0, out, out.nbytes))
    got_recv = host(recv).double().numpy()
    received = ~np.isnan(want["recv"][RANK])
    expect(f"{name}: counts", np.array_equal(host(counts).numpy(), want["counts"][RANK]))
    expect(f"{name}: origin", np.array_equal(host(origin).numpy(), want["origin"][RANK]))
    expect(f"{name}: slot", np.array_equal(host(slot).numpy(), want["slot"][RANK]))
    expect(f"{name}: recv", np.array_equal(got_recv[received], want["recv"][RANK][received]))
    if graph is None:
        return
    expert_outs = [np.nan_to_num(w) for w in want["recv"]]
    combined = ref.combine(want["slot"], expert_outs, experts, capacity, gates if gated else None)[RANK]
    wanted = torch.from_numpy(combined)
    if dtype != "f64":  # the node multiplies in f32 and rounds once to the element type
        wanted = wanted.float()
    wanted = wanted.to(TORCH[dtype])
    expect(f"{name}: combine", torch.equal(host(out), wanted.view(tokens, hidden)),
           lambda: f"(max error {(host(out).double() - wanted.double()).abs().max()})")
    if not gated and kind != "empty":  # dispatch then combine gives back every kept row
        kept = want["slot"][RANK] >= 0
        expect(f"{name}: round trip", torch.equal(host(out)[kept], host(x)[kept]))


def dispatch_only(dtype: str, hidden: int, experts: int, capacity: int):  # noqa: ANN201
    t = getattr(hpvm, dtype)
    send = hpvm.comm.moe_dispatch(t, hidden=hidden, experts=experts, capacity=capacity)

    @hpvm.graph
    def g(tokens: In[Ptr[t]], tokens_bytes: i64, expert: In[Ptr[i32]], expert_bytes: i64,
          recv: Out[Ptr[t]], recv_bytes: i64, counts: Out[Ptr[i32]], counts_bytes: i64,
          origin: Out[Ptr[i32]], origin_bytes: i64, slot: Out[Ptr[i32]], slot_bytes: i64):
        hpvm.node(send, tokens=tokens, tokens_bytes=tokens_bytes, expert=expert, expert_bytes=expert_bytes,
                  recv=recv, recv_bytes=recv_bytes, counts=counts, counts_bytes=counts_bytes,
                  origin=origin, origin_bytes=origin_bytes, slot=slot, slot_bytes=slot_bytes)
    return g


def fault(name: str, graph, args: tuple, rule: str, text: str) -> None:  # noqa: ANN001
    """The launch raises DistributedError(rule) containing `text` on this rank."""
    try:
        hpvm.wait(hpvm.launch(graph, *args))
    except DistributedError as exc:
        assert exc.rule == rule and text in str(exc), (name, exc.rule, str(exc))
        assert "dist_moe.py" in str(exc), str(exc)  # the node's line
        report(RANK, f"MOE {name} ok")
        return
    raise AssertionError(f"rank {RANK}: {name}: no error")


def check_faults() -> None:
    hidden, experts, capacity, tokens = 8, 2 * WORLD, 4, 6
    local = experts // WORLD
    bad = WORLD // 2  # the middle rank (the last of two) is at fault
    graph = dispatch_only("f32", hidden, experts, capacity)
    x = hpvm.symmetric.zeros((tokens, hidden), torch.float32)
    expert = hpvm.symmetric.zeros(tokens, torch.int32)
    recv = hpvm.symmetric.zeros((local, capacity, hidden), torch.float32)
    counts = hpvm.symmetric.zeros((WORLD, local), torch.int32)
    origin = hpvm.symmetric.zeros((local, capacity, 2), torch.int32)
    slot = hpvm.symmetric.zeros(tokens, torch.int32)
    args = (x, x.nbytes, expert, expert.nbytes, recv, recv.nbytes, counts, counts.nbytes, origin,
            origin.nbytes, slot, slot.nbytes)
    if not recv.is_cuda:  # GPU ranks: the kernel reports it later (tests/gpu_dist/check_direct.py)
        if RANK == bad:
            expert[3] = experts
        fault("bad-expert", graph, args, "moe-routing", f"rank {bad}'s expert ids hold {experts} at row 3")
        expert.zero_()
    other = dispatch_only("f32", hidden, experts, capacity * 2 if RANK == bad else capacity)
    small = hpvm.symmetric.zeros((local, capacity * 2, hidden), torch.float32)
    bigger = (small, small.nbytes) if RANK == bad else (recv, recv.nbytes)
    origin2 = hpvm.symmetric.zeros((local, capacity * 2, 2), torch.int32)
    pairs = (origin2, origin2.nbytes) if RANK == bad else (origin, origin.nbytes)
    fault("capacity", other, args[:4] + bigger + args[6:8] + pairs + args[10:], "rank-agreement",
          "ranks disagree on capacity")
    fault("recv-size", graph, args[:5] + (recv.nbytes - 4,) + args[6:], "collective-arguments",
          "recv has")


with hpvm.runtime(TARGET):
    for salt, case in enumerate([("f32", 13, 8, 2 * WORLD, 16, "uniform", True),
                                 ("f32", 13, 8, 2 * WORLD, 16, "uniform", False),
                                 ("bf16", 21, 32, 4 * WORLD, 3, "uniform", True),
                                 ("f32", 9, 16, 2 * WORLD, 5, "skewed", True),
                                 ("f16", 9, 8, WORLD, 4, "skewed", False),
                                 ("f64", 7, 4, 2 * WORLD, 2, "uniform", True),
                                 ("f32", 5, 8, 2 * WORLD, 2, "empty", True),
                                 ("u8", 11, 16, 2 * WORLD, 6, "uniform", False),
                                 ("f32", 0, 8, 2 * WORLD, 2, "uniform", True)]):
        run_case(salt, *case)
    check_faults()
paths = sorted(k.removeprefix("collectives_") for k in hpvm.stats() if k.startswith("collectives_"))
report(RANK, f"rank {RANK}: {checks} checks ok; paths {','.join(paths)}")
