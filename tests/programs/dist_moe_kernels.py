"""Run under `TRITON_INTERPRET=1 mpiexec -n N python dist_moe_kernels.py SEED`: the GPU kernels of
the mixture-of-experts collectives (hpvm_py/distributed/gpu/moe_kernels.py, launched as
gpu/moe_launch.py launches them) on CPU ranks, through Triton's interpreter, over the CPU heap:
the kernels' pointers are host addresses there, peers' heaps are mapped in every process, and the
flag protocol of signals.py works between processes (the interpreter runs a kernel's programs
one after the other, and program b only ever waits for the peers' programs b). The device clock
is replaced by the host's (the interpreter has no inline assembly).

Checked against moe_reference.py: random routing with drops and rows routed nowhere, everything
to one rank, no rows at all, bf16 and f32, with and without gates, back to back (the epochs); then
bad expert ids and bad slots (reported in the status word on that rank only) and last a rank
that skips a call (its peers' waits give up and name it). Prints `rank R: N checks ok`.
"""
import sys
import time

import numpy as np
import torch

import host_clock
import hpvm_py as hpvm
import moe_reference as ref
from dist_report import report
from hpvm_py.distributed import ranks
from hpvm_py.distributed.gpu import launch as G
from hpvm_py.distributed.gpu import moe_launch as M
from hpvm_py.distributed.gpu import signals
from hpvm_py.distributed.gpu.heap import CONTROL_BYTES
from hpvm_py.distributed.moe_plan import Layout


signals.now_ns = host_clock.now_ns  # the kernels' waits read it at run time (interpreted)

SEED = int(sys.argv[1])
hpvm.distributed.init(timeout=30, device="cpu")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
HEAP = ranks.current().heap
CTRL = hpvm.symmetric.zeros(CONTROL_BYTES // 8, torch.int64)  # the GPU heap's control region
STATUS = torch.zeros(1, dtype=torch.int64)
TYPES = {"f32": torch.float32, "bf16": torch.bfloat16}
checks = 0


def common(timeout_s: float = 20.0) -> dict:
    """What launch._common gives the kernels on a GPU heap, on the CPU heap."""
    return dict(ctrl=CTRL, bases=torch.tensor(HEAP.bases, dtype=torch.int64), rank=RANK,
                status_addr=STATUS.data_ptr(), timeout_ns=int(timeout_s * 1e9),
                fingerprint=987654321987, WORLD=WORLD)


def expect(name: str, ok: bool) -> None:
    global checks
    if not ok:
        raise AssertionError(f"rank {RANK}: {name} differs")
    checks += 1


class Case:
    """One call's buffers on the heap (the same allocations on every rank) and its reference."""

    def __init__(self, salt: int, dtype: str, tokens: int, hidden: int, experts: int, capacity: int,
                 kind: str):
        rng = np.random.default_rng(SEED * 13 + salt)
        self.lay = Layout(tokens, hidden, experts, capacity, WORLD)
        self.dtype = TYPES[dtype]
        self.routes = ref.routes(rng, WORLD, tokens, experts, kind)
        self.rows = [torch.from_numpy(rng.standard_normal((tokens, hidden))).to(self.dtype).double().numpy()
                     for _ in range(WORLD)]
        self.gates = [rng.random(tokens).astype(np.float32) for _ in range(WORLD)]
        self.want = ref.dispatch(self.routes, self.rows, experts, capacity)
        rows, local = self.lay.rows, self.lay.local
        zeros = hpvm.symmetric.zeros
        self.x = zeros(tokens * hidden, self.dtype)
        self.expert = zeros(tokens, torch.int32)
        self.recv, self.counts = zeros(rows * hidden, self.dtype), zeros(WORLD * local, torch.int32)
        self.origin, self.slot = zeros(2 * rows, torch.int32), zeros(tokens, torch.int32)
        self.gate, self.out = zeros(tokens, torch.float32), zeros(tokens * hidden, self.dtype)
        self.x.copy_(torch.from_numpy(self.rows[RANK].reshape(-1)).to(self.dtype))
        self.expert.copy_(torch.from_numpy(self.routes[RANK]))
        self.gate.copy_(torch.from_numpy(self.gates[RANK]))

    def dispatch(self) -> None:
        M.launch_dispatch(common(), [self.x, self.expert, self.recv, self.counts, self.origin, self.slot],
                          self.lay)

    def combine(self, gated: bool) -> None:
        M.launch_combine(common(), [self.recv, self.slot, self.gate if gated else None, self.out], self.lay)

    def check_dispatch(self, name: str) -> None:
        w = self.want
        received = ~np.isnan(w["recv"][RANK])
        got = self.recv.double().numpy().reshape(received.shape)
        expect(f"{name}: counts", np.array_equal(self.counts.numpy().reshape(WORLD, -1), w["counts"][RANK]))
        expect(f"{name}: origin", np.array_equal(self.origin.numpy().reshape(-1, self.lay.capacity, 2),
                                                 w["origin"][RANK]))
        expect(f"{name}: slot", np.array_equal(self.slot.numpy(), w["slot"][RANK]))
        expect(f"{name}: recv", np.array_equal(got[received], w["recv"][RANK][received]))

    def check_combine(self, name: str, gated: bool) -> None:
        outs = [np.nan_to_num(r) for r in self.want["recv"]]
        combined = ref.combine(self.want["slot"], outs, self.lay.experts, self.lay.capacity,
                               self.gates if gated else None)[RANK]
        wanted = torch.from_numpy(combined.reshape(-1)).float().to(self.dtype)
        expect(f"{name}: combine", torch.equal(self.out, wanted))


def check_calls() -> None:
    cases = [("f32", 11, 8, 2 * WORLD, 3, "uniform"), ("bf16", 9, 32, WORLD, 16, "skewed"),
             ("f32", 6, 8, 4 * WORLD, 2, "skewed"), ("f32", 5, 4, 2 * WORLD, 2, "empty"),
             ("bf16", 0, 8, 2 * WORLD, 2, "uniform")]
    for salt, (dtype, tokens, hidden, experts, capacity, kind) in enumerate(cases):
        case = Case(salt, dtype, tokens, hidden, experts, capacity, kind)
        name = f"{dtype} {kind} T={tokens} E={experts} C={capacity}"
        case.dispatch()
        case.check_dispatch(name)
        gated = salt % 2 == 0
        case.combine(gated)
        case.check_combine(name, gated)
    # back to back, no host synchronisation in between: the second call's epochs follow the first's
    one, two = Case(90, "f32", 7, 8, 2 * WORLD, 4, "uniform"), Case(91, "f32", 7, 8, 2 * WORLD, 4, "skewed")
    one.dispatch()
    two.dispatch()
    one.combine(True)
    two.combine(False)
    for case, gated in ((one, True), (two, False)):
        case.check_dispatch("back-to-back")
        case.check_combine("back-to-back", gated)
    expect("status after good calls", int(STATUS[0]) == 0)


def check_bad_data() -> None:
    """A bad expert id or slot on the middle rank: its status word says so; nobody else's."""
    bad = WORLD // 2
    case = Case(95, "f32", 6, 4, 2 * WORLD, 8, "uniform")
    if RANK == bad:
        case.expert[2] = case.lay.experts
    case.dispatch()
    expect("bad expert id reported", int(STATUS[0]) == (G.BAD_ROUTE if RANK == bad else 0))
    expect("bad expert id routed nowhere", RANK != bad or int(case.slot[2]) == -1)
    STATUS.zero_()
    if RANK == bad:
        case.slot[1] = -7
    case.combine(False)
    expect("bad slot reported", int(STATUS[0]) == (G.BAD_SLOT if RANK == bad else 0))
    expect("bad slot gives a zero row", RANK != bad or not case.out.view(6, 4)[1].any())
    STATUS.zero_()


def check_missing_rank() -> None:
    """The middle rank skips a dispatch: the others' waits give up after the timeout and write
    that rank + 1 into the status word (the ranks are out of step afterwards: this comes last)."""
    bad = WORLD // 2
    case = Case(99, "f32", 4, 4, 2 * WORLD, 2, "uniform")
    if RANK == bad:
        report(RANK, f"rank {RANK}: {checks} checks ok")
        report(RANK, "MOE missing skipped")
        return
    start = time.monotonic()
    M.launch_dispatch(common(timeout_s=0.5), [case.x, case.expert, case.recv, case.counts, case.origin,
                                              case.slot], case.lay)
    waited = time.monotonic() - start
    assert int(STATUS[0]) == bad + 1, int(STATUS[0])
    assert waited < 20, waited
    report(RANK, f"rank {RANK}: {checks} checks ok")
    report(RANK, "MOE missing ok")


check_calls()
check_bad_data()
check_missing_rank()
