"""Run under `mpiexec -n N python dist_kernels_interpreted.py SEED` (N >= 2, no GPU needed): the GPU
kernels of the quantized all-reduce and of the fused all-reduce + RMSNorm with its fp8 output,
run by Triton's interpreter on CPU ranks whose symmetric heaps are shared memory. The interpreter
loads, stores and runs atomics on raw addresses, so each rank's kernel reaches its peers' heaps
through Iris's translation and their flags as on GPUs; only the device clock of the bounded waits
(inline PTX) is replaced by the host's.

Checks, each reported as `KERNEL <name> ok`:
- all_reduce_quantized, int8 and int4, f32 buffers, several chunks per program, called twice:
  bit for bit the host codec (quantize.py) of every rank's input, added in rank order. (The
  interpreter's own casts to bf16 and fp8 truncate where the GPU's round to nearest even, so the
  16-bit element types and fp8 codes are left to tests/gpu_dist/check_quantized.py.)
- all_reduce_rmsnorm with QUANT, f32: x and residual as NumPy's, the per-row scales bit for bit
  max|x| / 448, each fp8 code at its place with the sign and binade of its element.
- all_reduce_push (two-shot by stores), with its first chunk sent apart from the arrival and with
  it (EARLY), f32 sum and max and i32 sum: sizes that are not whole chunks, slices of fewer chunks
  than programs and of many (each scratch slot reused), calls back to back with no host barrier:
  bit for bit NumPy's rank-order reduction and one_shot's; then one rank pausing after each wait
  (a mutant with one scratch slot per program fails); then what each program's slots hold
  after a call (programs whose slots overlap fail there: the interpreter runs a rank's programs
  one after another, so the sums alone would not show it).
- all_reduce_two_shot and all_gather (each rank's stores or reads of its peers in turn, from the
  next rank on): bit for bit NumPy's rank-order sum and the concatenated slices.
- all_reduce_one_shot_push (one-shot by stores, no final step), f32 sum and max and i32 sum, one
  chunk per program: calls back to back with no host barrier, in between calls of one-shot and
  push (so the steps' parities, which pick the rows, come from every kind of kernel): bit for bit
  NumPy's rank-order reduction; a call whose fingerprint differs on one rank moves no data on any
  rank, and the ranks are in step after the host's recovery; calls back to back while one rank
  dawdles after each arrival (a mutant whose calls all use one set of rows fails).
- the agreement inside the kernels (signals.same_call), adversarially: one rank's call has another
  fingerprint (with as many programs as its peers, or more: a call of another size): every
  rank's kernel ends without waiting out its timeout, reports the mismatch, moves no data, and
  leaves the mismatch word set, so that a later call that agrees moves nothing either until the
  control blocks are cleared; after that the ranks are in step (an exact sum).
"""
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401 - the interpreter wants it visible to host_clock

import hpvm_py as hpvm  # noqa: E402
from dist_report import report  # noqa: E402
from hpvm_py.distributed import quantize as Q  # noqa: E402
from hpvm_py.distributed import ranks  # noqa: E402
from hpvm_py.distributed.agreement import communicator  # noqa: E402
from hpvm_py.distributed.gpu import heap as gpu_heap  # noqa: E402
from hpvm_py.distributed.gpu import kernels as K  # noqa: E402
from hpvm_py.distributed.gpu import quant_kernels as QK  # noqa: E402
from hpvm_py.distributed.gpu import signals  # noqa: E402
from hpvm_py.distributed.quantized import sum_payloads  # noqa: E402


@triton.jit
def host_clock(dummy):
    """The interpreter runs this as Python: the host's clock stands in for %globaltimer."""
    return dummy * 0 + time.monotonic_ns()


signals.now_ns = host_clock  # the waits look it up in signals' globals when they run

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 1
hpvm.distributed.init(timeout=20, device="cpu")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
WORLD_ = ranks.current()
ctrl = hpvm.symmetric.zeros(gpu_heap.CONTROL_BYTES // 8, torch.int64)
bases = torch.tensor(WORLD_.heap.bases, dtype=torch.int64)
status = torch.zeros(1, dtype=torch.int64)
COMMON = dict(ctrl=ctrl, bases=bases, rank=RANK, status_addr=status.data_ptr(), timeout_ns=30 * 10 ** 9,
              fingerprint=-1234567890123, WORLD=WORLD)


def line_up() -> None:
    """Every rank has written its inputs (the kernels' arrival orders nothing on the host)."""
    communicator(WORLD_).barrier(lambda: "line-up", None)


def inputs(step: int, n: int) -> list[torch.Tensor]:
    out = []
    for q in range(WORLD):
        rng = np.random.default_rng([SEED, step, q])
        out.append(torch.from_numpy((rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))).astype(np.float32)))
    return out


def rank_order(parts: list[torch.Tensor], op: int = 0) -> np.ndarray:
    """Rank 0 op rank 1 op ..., in the element type (op 0: sum, 1: max)."""
    want = parts[0].numpy().copy()
    for p in parts[1:]:
        want = want + p.numpy() if op == 0 else np.maximum(want, p.numpy())
    return want


def host_semantics(parts: list[torch.Tensor], mode: str) -> torch.Tensor:
    n = parts[0].numel()
    layout = Q.Layout(n, mode)
    payloads = []
    for p in parts:
        codes, scales = np.zeros(layout.code_bytes, np.uint8), np.zeros(layout.groups, np.float32)
        Q.encode(p.numpy(), mode, codes, scales)
        payloads.append((codes, scales))
    return torch.from_numpy(sum_payloads(payloads, n, mode))


def quantized_sum(mode: str) -> None:
    n, block, programs = 20_001, 4096, 2  # 5 chunks: programs take 3 and 2
    layout = Q.Layout(n, mode)
    x = hpvm.symmetric.empty(n, torch.float32)
    workspace = hpvm.symmetric.zeros(layout.total, torch.uint8)
    codes, scales = workspace[:layout.code_bytes], workspace[layout.scales_offset:].view(torch.float32)
    for call in range(2):
        parts = inputs(call + 10 * Q.MODES.index(mode), n)
        x.copy_(parts[RANK])
        line_up()
        QK.all_reduce_quantized[(programs,)](x, n, codes, scales, MODE=Q.MODES.index(mode), QMAX=Q.QMAX[mode],
                                             CODE_BYTES=block * Q.BITS[mode] // 8, BLOCK=block, **COMMON)
        assert int(status[0]) == 0, "a wait timed out"
        assert torch.equal(x.view(torch.int32), host_semantics(parts, mode).view(torch.int32)), (mode, call)
    report(RANK, f"KERNEL quantized {mode} ok")


def rmsnorm_fp8() -> None:
    rows, hidden, eps = 5, 96, 1e-5
    parts = inputs(100, rows * hidden)
    residual, weight = inputs(101, rows * hidden)[0], inputs(102, hidden)[0]
    x, r = hpvm.symmetric.empty(rows * hidden, torch.float32), hpvm.symmetric.empty(rows * hidden, torch.float32)
    w = hpvm.symmetric.empty(hidden, torch.float32)
    out, scales = hpvm.symmetric.zeros(rows * hidden, torch.uint8), hpvm.symmetric.zeros(rows, torch.float32)
    x.copy_(parts[RANK])
    r.copy_(residual)
    w.copy_(weight)
    line_up()
    K.all_reduce_rmsnorm[(2,)](x, r, w, out, scales, rows, hidden, eps, QUANT=True, WIDEN=False, ELEM=4,
                               BLOCK=triton.next_power_of_2(hidden), **COMMON)
    assert int(status[0]) == 0, "a wait timed out"
    total = sum(p.double() for p in parts) + residual.double()
    want = (total.view(rows, hidden) / torch.sqrt(total.view(rows, hidden).square().mean(1, keepdim=True) + eps)
            * weight.double())
    assert torch.allclose(r.double(), total, rtol=1e-5, atol=1e-5), "residual"
    assert torch.allclose(x.double(), want.view(-1), rtol=1e-4, atol=1e-4), "x"
    v = x.view(rows, hidden)
    assert torch.equal(scales, v.abs().amax(1) / torch.full((rows,), 448.0)), "scales"
    # the interpreter's f32 -> fp8 cast rounds halves up and loses the carry into the exponent
    # (100 becomes 104, 7.9 becomes 4): only where each code lies, its sign and its size within a
    # factor of two are checked here (the GPU suite checks the codes bit for bit)
    back = out.view(torch.float8_e4m3fn).float().view(rows, hidden) * scales[:, None]
    tiny = scales[:, None] / 64  # below the normal range of v / s
    assert torch.all((back.abs() <= v.abs() * 1.125 + tiny) & (back.abs() >= v.abs() / 2 - tiny)), "codes"
    assert torch.all((torch.sign(back) == torch.sign(v)) | (v.abs() < tiny)), "signs"
    report(RANK, "KERNEL rmsnorm-fp8 ok")


def one_shot(x: torch.Tensor, n: int, programs: int, fingerprint: int) -> None:
    K.all_reduce_one_shot[(programs,)](x, n, OP=0, WIDEN=False, ELEM=4, BLOCK=1024,
                                       **{**COMMON, "fingerprint": fingerprint})


PUSH_BLOCK, PUSH_PROGRAMS = 64, 2


def push_call(scratch: torch.Tensor, early: bool):  # noqa: ANN201
    """A call of two-shot by stores on x, in 128-element chunks, with this scratch."""
    def push(x: torch.Tensor, n: int, programs: int, fingerprint: int) -> None:
        K.all_reduce_push[(programs,)](x, n, scratch, OP=0, WIDEN=False, ELEM=4, BLOCK=128, EARLY=early,
                                       **{**COMMON, "fingerprint": fingerprint})
    return push


def push_sum(early: bool) -> None:
    scratch = hpvm.symmetric.zeros(PUSH_PROGRAMS * 2 * WORLD * PUSH_BLOCK, torch.float32)

    def push(x: torch.Tensor, op: int) -> None:
        n = x.numel()
        programs = max(1, min(PUSH_PROGRAMS, -(-n // (WORLD * PUSH_BLOCK))))
        K.all_reduce_push[(programs,)](x, n, scratch.view(x.dtype), OP=op, WIDEN=False, ELEM=4,
                                       BLOCK=PUSH_BLOCK, EARLY=early, **COMMON)

    cases = []  # (n, dtype, op): 1 element; under a chunk per slice; whole chunks; many per program
    for k, (n, dtype, op) in enumerate(((1, torch.float32, 0), (WORLD * PUSH_BLOCK - 5, torch.float32, 1),
                                        (4 * WORLD * PUSH_BLOCK, torch.int32, 0),
                                        (11 * WORLD * PUSH_BLOCK + 7, torch.float32, 0))):
        parts = [p if dtype == torch.float32 else (p * 1000).to(torch.int32) for p in inputs(300 + k, n)]
        x, y = hpvm.symmetric.empty(n, dtype), hpvm.symmetric.empty(n, dtype)
        x.copy_(parts[RANK])
        y.copy_(parts[RANK])
        cases.append((parts, x, y, op))
    line_up()
    for parts, x, y, op in cases:  # back to back: no barrier between the calls
        push(x, op)
    for parts, x, y, op in cases:
        K.all_reduce_one_shot[(PUSH_PROGRAMS,)](y, y.numel(), OP=op, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK,
                                                **COMMON)
    assert int(status[0]) == 0, "a wait timed out"
    for parts, x, y, op in cases:
        want = rank_order(parts, op)
        assert np.array_equal(x.numpy().view(np.int32), want.view(np.int32)), (x.numel(), op, "numpy")
        assert torch.equal(x.view(torch.int32), y.view(torch.int32)), (x.numel(), op, "one_shot")
    # rank SLOW pauses after each chunk's wait, before it reads the rows its peers stored: a peer
    # free to store its next chunk into the slot still to be read would change the sum (a mutant
    # with one slot fails here); one program, so the peers run ahead as far as the steps let them
    parts = inputs(350, 6 * WORLD * PUSH_BLOCK + 3)
    x = hpvm.symmetric.empty(parts[0].numel(), torch.float32)
    x.copy_(parts[RANK])
    line_up()
    K.wait = dawdling_wait  # the push loop looks it up in its module's globals
    try:
        K.all_reduce_push[(1,)](x, x.numel(), scratch, OP=0, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK,
                                EARLY=early, **COMMON)
    finally:
        K.wait = WAIT
    assert int(status[0]) == 0, "a wait timed out"
    assert np.array_equal(x.numpy(), rank_order(parts)), "a slot was overwritten before it was read"
    push_layout(early)
    report(RANK, f"KERNEL push{' early' if early else ''} ok")


def push_layout(early: bool) -> None:
    """After a call, each program's slots hold the last chunk each peer stored there: chunk k of
    program b's in slot k % 2. (The interpreter runs a rank's programs one after another, so
    programs whose slots overlapped would pass the sums and fail here.)"""
    slots, programs, chunks = 2, 2, 9
    scratch = hpvm.symmetric.zeros(programs * slots * WORLD * PUSH_BLOCK, torch.float32)
    parts = inputs(360, chunks * WORLD * PUSH_BLOCK)
    x = hpvm.symmetric.empty(parts[0].numel(), torch.float32)
    x.copy_(parts[RANK])
    line_up()
    K.all_reduce_push[(programs,)](x, x.numel(), scratch, OP=0, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK,
                                   EARLY=early, **COMMON)
    line_up()  # every peer's stores into this rank's scratch are done
    assert int(status[0]) == 0, "a wait timed out"
    rows = scratch.view(programs, slots, WORLD, PUSH_BLOCK)
    for b in range(programs):
        last = {k % slots: c for k, c in enumerate(range(b, chunks, programs))}
        for slot, c in last.items():
            start = (RANK * chunks + c) * PUSH_BLOCK
            for q in range(WORLD):
                if q != RANK:
                    assert torch.equal(rows[b, slot, q], parts[q][start:start + PUSH_BLOCK]), (b, slot, q, c)


def two_shot_and_gather() -> None:
    """Two-shot (its sums stored to the ranks in turn from the next one) bit for bit NumPy's
    rank-order sum, and all-gather (the peers read in turn) every rank's slice at its place."""
    n = 5 * WORLD * PUSH_BLOCK + 11
    parts = inputs(370, n)
    x, src = hpvm.symmetric.empty(n, torch.float32), hpvm.symmetric.empty(n, torch.float32)
    x.copy_(parts[RANK])
    src.copy_(parts[RANK])
    gathered = torch.zeros(WORLD * n)
    line_up()
    K.all_reduce_two_shot[(PUSH_PROGRAMS,)](x, n, OP=0, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK, **COMMON)
    K.all_gather[(PUSH_PROGRAMS,)](src, gathered, n, ELEM=4, BLOCK=PUSH_BLOCK, **COMMON)
    assert int(status[0]) == 0, "a wait timed out"
    assert np.array_equal(x.numpy(), rank_order(parts)), "two-shot"
    assert torch.equal(gathered, torch.cat(parts)), "all-gather"
    report(RANK, "KERNEL two-shot all-gather ok")


ROWS_PROGRAMS = 4
SLOW = WORLD - 1  # the rank whose reductions dawdle in one_shot_push


@triton.jit
def dawdling_same_call(ctrl, bases, b, rank, fingerprint, failed, status, WORLD: tl.constexpr):
    """signals.same_call, the end of the arrival, after a pause of 20 ms on rank SLOW (the
    interpreter runs this as Python): its peers run ahead into their next call, whose stores
    would land in the rows it is about to read if a call did not switch to the other set."""
    if RANK == SLOW:
        time.sleep(0.02)
    return SAME_CALL(ctrl, bases, b, rank, fingerprint, failed, status, WORLD)


SAME_CALL = signals.same_call


@triton.jit
def dawdling_wait(ctrl, b, rank, step, deadline, failed, status, WORLD: tl.constexpr):
    """signals.wait, then a pause of 20 ms on rank SLOW before its caller goes on (the interpreter
    runs this as Python)."""
    failed = WAIT(ctrl, b, rank, step, deadline, failed, status, WORLD)
    if RANK == SLOW:
        time.sleep(0.02)
    return failed


WAIT = signals.wait


def one_shot_push() -> None:
    rows = hpvm.symmetric.zeros(2 * ROWS_PROGRAMS * WORLD * PUSH_BLOCK, torch.float32)
    scratch = hpvm.symmetric.zeros(PUSH_PROGRAMS * 2 * WORLD * PUSH_BLOCK, torch.float32)

    def by_stores(x: torch.Tensor, op: int, fingerprint: int = COMMON["fingerprint"]) -> None:
        K.all_reduce_one_shot_push[(-(-x.numel() // PUSH_BLOCK),)](
            x, x.numel(), rows.view(x.dtype), OP=op, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK, PROGRAMS=ROWS_PROGRAMS,
            **{**COMMON, "fingerprint": fingerprint})

    others = {  # kernels between the calls: they advance the programs' steps too
        "one_shot": lambda x: K.all_reduce_one_shot[(2,)](x, x.numel(), OP=0, WIDEN=False, ELEM=4, BLOCK=PUSH_BLOCK,
                                                          **COMMON),
        "push": lambda x: K.all_reduce_push[(1,)](x, x.numel(), scratch, OP=0, WIDEN=False, ELEM=4,
                                                  BLOCK=PUSH_BLOCK, EARLY=True, **COMMON)}
    cases = []
    for k, (n, dtype, op) in enumerate(((1, torch.float32, 0), (PUSH_BLOCK - 3, torch.float32, 1),
                                        (ROWS_PROGRAMS * PUSH_BLOCK, torch.int32, 0),
                                        (3 * PUSH_BLOCK + 7, torch.float32, 0), (2 * PUSH_BLOCK, torch.float32, 1))):
        parts = [p if dtype == torch.float32 else (p * 1000).to(torch.int32) for p in inputs(400 + k, n)]
        x = hpvm.symmetric.empty(n, dtype)
        x.copy_(parts[RANK])
        cases.append((parts, x, op))
    between = [hpvm.symmetric.zeros(3 * PUSH_BLOCK, torch.float32) for _ in cases]
    # one program each: the interpreter runs a call's programs in turn, so with a second program
    # the fast rank could not leave the call before the slow one had read its rows
    back_to_back = [hpvm.symmetric.empty(PUSH_BLOCK - 5, torch.float32) for _ in range(4)]
    chained = [inputs(420 + k, PUSH_BLOCK - 5) for k in range(4)]
    for x, parts in zip(back_to_back, chained):
        x.copy_(parts[RANK])
    line_up()
    for (parts, x, op), other, name in zip(cases, between, ("one_shot", "push", "one_shot", "push", "push")):
        by_stores(x, op)  # no barrier between the calls
        others[name](other)  # zeros: the sum stays zero
    signals.same_call = dawdling_same_call  # arrive looks it up in its module's globals
    for x in back_to_back:  # one-shot by stores only: the steps' parities alternate
        by_stores(x, 0)
    signals.same_call = SAME_CALL
    assert int(status[0]) == 0, "a wait timed out"
    for x, parts in zip(back_to_back, chained):
        assert np.array_equal(x.numpy(), rank_order(parts)), "back to back"
    for parts, x, op in cases:
        want = rank_order(parts, op)
        assert np.array_equal(x.numpy().view(np.int32), want.view(np.int32)), (x.numel(), op)
    assert all(not torch.any(b) for b in between)
    parts = inputs(450, 2 * PUSH_BLOCK + 1)
    x = hpvm.symmetric.empty(parts[0].numel(), torch.float32)
    x.copy_(parts[RANK])
    line_up()
    by_stores(x, 0, fingerprint=5 if RANK == WORLD - 1 else 6)
    assert int(status[0]) == gpu_heap.MISMATCHED, int(status[0])
    assert torch.equal(x, parts[RANK]), "a disagreeing call moved data"
    line_up()  # the host's recovery (runner.py): control blocks cleared between two barriers
    ctrl.zero_()
    status.zero_()
    line_up()
    by_stores(x, 0)
    assert int(status[0]) == 0 and np.array_equal(x.numpy(), rank_order(parts)), "the call after the recovery"
    report(RANK, "KERNEL one-shot-push ok")



def disagreements(name: str, call) -> None:  # noqa: ANN001
    """`call(x, n, programs, fingerprint)`: one_shot (three chunks of 1024) or push, whose first
    chunk goes into the peers' scratch before the fingerprints are compared."""
    n = 3000
    faulty = WORLD - 1
    parts = inputs(200, n)
    total = sum(p.double() for p in parts).float()
    x = hpvm.symmetric.empty(n, torch.float32)

    def fresh() -> None:
        x.copy_(parts[RANK])
        line_up()

    def clear() -> None:  # what runner.py's recovery does, between two barriers
        line_up()
        ctrl.zero_()
        status.zero_()
        line_up()

    def mismatched(what: str) -> None:
        assert int(status[0]) == gpu_heap.MISMATCHED, (what, int(status[0]))
        assert torch.equal(x, parts[RANK]), f"{what}: a disagreeing call moved data"
        assert int(ctrl[gpu_heap.MISMATCH_AT]) != 0, f"{what}: the mismatch word is not set"

    fresh()
    call(x, n, 3, 77)
    assert int(status[0]) == 0 and torch.allclose(x, total, rtol=1e-6, atol=1e-5), "agreeing call"
    for what, programs, fingerprint in (("fingerprint", 3, 78), ("programs", 1, 79)):
        fresh()
        start = time.monotonic()
        call(x, n, programs if RANK == faulty else 3, fingerprint if RANK == faulty else 77)
        assert time.monotonic() - start < 20, f"{what}: a kernel waited for its timeout"
        mismatched(what)
        report(RANK, f"KERNEL {name} mismatch-{what} ok")
        line_up()
        status.zero_()  # the host saw it; the control block is not cleared yet: the word stays
        fresh()
        call(x, n, 3, 77)
        mismatched(f"{what}, sticky")
        clear()
        fresh()
        call(x, n, 3, 77)
        assert int(status[0]) == 0 and torch.allclose(x, total, rtol=1e-6, atol=1e-5), f"{what}: in step after"
    report(RANK, f"KERNEL {name} in-step-after-mismatch ok")


quantized_sum("int8")
quantized_sum("int4")
rmsnorm_fp8()
push_sum(False)
push_sum(True)
two_shot_and_gather()
one_shot_push()
disagreements("one_shot", one_shot)
for first_early in (False, True):
    disagreements("push early" if first_early else "push",
                  push_call(hpvm.symmetric.zeros(3 * 2 * WORLD * 128, torch.float32), first_early))
report(RANK, "KERNEL done")
