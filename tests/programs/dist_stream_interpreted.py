"""Run under `mpiexec -n 2 python dist_stream_interpreted.py SEED` (no GPU needed): the stream
all-reduce kernel of two GPU ranks (gpu/stream_kernels.py), run by Triton's interpreter on CPU
ranks whose symmetric heaps are shared memory, as tests/programs/dist_kernels_interpreted.py runs
the others: loads, stores and atomics on raw addresses reach the peer's heap through Iris's
translation; only the device clock of the bounded waits is the host's. Every publication of a
sequence number or an acknowledgement comes after a random pause, so the ranks drift apart and
the ring's flow control is what keeps the chunks right.

Checks, each reported as `STREAM <name> ok`:
- sizes: f32 sums of 1 element to many chunks per lane (sizes that are not multiples of a chunk,
  fewer chunks than lanes), in a ring of two slots (each slot reused many times per call): bit for
  bit NumPy's rank-order sum, and one_shot's result on the same inputs;
- bf16: the sum in f32, rounded once, bit for bit one_shot's (the interpreter's f32 -> bf16 cast
  truncates where the GPU's rounds to nearest even, so the NumPy reference truncates too);
- ops: max of f32, sum of i32, in rings of four and eight slots;
- back-to-back: calls of different sizes and lane counts, with no host barrier between them,
  one buffer reduced three times in place;
- mismatch: the ranks pass different fingerprints: neither moves data, both report it; after the
  host's recovery (control blocks cleared) the next call is right;
- missing: rank 1 arrives (`announce`) but pushes nothing: rank 0's wait for its ring gives up
  after the timeout and names rank 1.
"""
import os
import sys
import time

os.environ["TRITON_INTERPRET"] = "1"

import host_clock  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402, F401 - the interpreter wants it visible to jittery_publish

import hpvm_py as hpvm  # noqa: E402
from dist_report import report  # noqa: E402
from hpvm_py.distributed import ranks  # noqa: E402
from hpvm_py.distributed.agreement import communicator  # noqa: E402
from hpvm_py.distributed.gpu import heap as gpu_heap  # noqa: E402
from hpvm_py.distributed.gpu import kernels as K  # noqa: E402
from hpvm_py.distributed.gpu import signals  # noqa: E402
from hpvm_py.distributed.gpu import stream_kernels as S  # noqa: E402

signals.now_ns = host_clock.now_ns  # the waits look it up in signals' globals when they run

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 1
hpvm.distributed.init(timeout=20, device="cpu")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
assert WORLD == 2, "the stream all-reduce is for two ranks"
JITTER = np.random.default_rng([SEED, RANK, 99])


def pause() -> None:
    time.sleep(JITTER.random() * 0.002)


@triton.jit
def jittery_publish(word, value):
    """signals.publish after a random pause of up to 2 ms (the interpreter runs this as Python):
    the ranks drift apart, so a consumer that read a slot before its sequence number arrived, or
    a producer that refilled a slot before its acknowledgement, would move the wrong chunk."""
    pause()
    signals.publish(word, value)


S.publish = jittery_publish  # the stream kernel looks it up in its module's globals
WORLD_ = ranks.current()
ctrl = hpvm.symmetric.zeros(gpu_heap.CONTROL_BYTES // 8, torch.int64)
bases = torch.tensor(WORLD_.heap.bases, dtype=torch.int64)
status = torch.zeros(1, dtype=torch.int64)
FINGERPRINT = 987654321987
BLOCK, MAX_LANES = 64, 4
ring_space = hpvm.symmetric.zeros(MAX_LANES * gpu_heap.MAX_SLOTS * BLOCK * 4, torch.uint8)
TYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "i32": torch.int32}


def common(timeout_s: float = 30, fingerprint: int = FINGERPRINT) -> dict:
    return dict(ctrl=ctrl, bases=bases, rank=RANK, status_addr=status.data_ptr(),
                timeout_ns=int(timeout_s * 1e9), fingerprint=fingerprint, WORLD=WORLD)


def line_up() -> None:
    """Every rank has written its inputs (the kernels' arrival orders nothing on the host)."""
    communicator(WORLD_).barrier(lambda: "line-up", None)


def inputs(salt: int, n: int, dtype: str) -> list[torch.Tensor]:
    out = []
    for q in range(WORLD):
        rng = np.random.default_rng([SEED, salt, q])
        if dtype == "i32":
            out.append(torch.from_numpy(rng.integers(-1000, 1000, n).astype(np.int32)))
        else:
            values = torch.from_numpy((rng.standard_normal(n) * np.exp(rng.uniform(-4, 4, n))).astype(np.float32))
            out.append(values.to(TYPES[dtype]))
    return out


def numpy_reduce(parts: list[torch.Tensor], op: str, dtype: str) -> np.ndarray:
    """Rank 0 op rank 1 in the accumulator type, as bits of the element type."""
    wide = [p.float().numpy() if dtype == "bf16" else p.numpy() for p in parts]
    total = wide[0] + wide[1] if op == "sum" else np.maximum(wide[0], wide[1])
    if dtype == "bf16":  # the interpreter's cast: the top 16 bits of the f32 sum
        return (total.view(np.uint32) >> 16).astype(np.uint16).view(np.int16)
    return total.view(np.int32)


def stream(x: torch.Tensor, op: str = "sum", slots: int = 2, lanes: int = MAX_LANES, **options) -> None:
    n = x.numel()
    lanes = max(1, min(lanes, -(-n // BLOCK)))
    ring = ring_space.view(x.dtype)
    widen = x.dtype == torch.bfloat16
    S.all_reduce_stream[(lanes,)](x, n, ring, OP=["sum", "max", "min"].index(op), WIDEN=widen,
                                  ELEM=x.element_size(), BLOCK=BLOCK, SLOTS=slots, **common(**options))


def one_shot(x: torch.Tensor, op: str = "sum") -> None:
    n = x.numel()
    K.all_reduce_one_shot[(min(MAX_LANES, -(-n // BLOCK)),)](
        x, n, OP=["sum", "max", "min"].index(op), WIDEN=x.dtype == torch.bfloat16, ELEM=x.element_size(),
        BLOCK=BLOCK, **common())


def bits(x: torch.Tensor) -> np.ndarray:
    return x.view(torch.int16 if x.element_size() == 2 else torch.int32).numpy().copy()


def against_references(salt: int, n: int, dtype: str, op: str = "sum", slots: int = 2) -> None:
    parts = inputs(salt, n, dtype)
    x, y = hpvm.symmetric.empty(n, TYPES[dtype]), hpvm.symmetric.empty(n, TYPES[dtype])
    x.copy_(parts[RANK])
    y.copy_(parts[RANK])
    line_up()
    stream(x, op, slots)
    one_shot(y, op)
    assert int(status[0]) == 0, "a wait timed out"
    got = bits(x)
    assert np.array_equal(got, numpy_reduce(parts, op, dtype)), (dtype, op, n, slots, "numpy")
    assert np.array_equal(got, bits(y)), (dtype, op, n, slots, "one_shot")


def sizes() -> None:
    # 1 element; less than a chunk; fewer chunks than lanes; whole chunks; 10 and 25 chunks per
    # lane with a partial last chunk (two slots: each slot holds 5 and 12 chunks of a lane in turn)
    for k, n in enumerate((1, BLOCK - 3, 3 * BLOCK - 1, 8 * BLOCK, 40 * BLOCK - 17, 100 * BLOCK + 5)):
        against_references(10 + k, n, "f32")
    report(RANK, "STREAM sizes ok")


def bf16() -> None:
    for k, n in enumerate((777, 33 * BLOCK + 9)):
        against_references(20 + k, n, "bf16")
    report(RANK, "STREAM bf16 ok")


def ops() -> None:
    against_references(30, 21 * BLOCK + 11, "f32", "max", slots=4)
    against_references(31, 19 * BLOCK + 2, "i32", "sum", slots=8)
    report(RANK, "STREAM ops ok")


def back_to_back() -> None:
    sizes_ = (13 * BLOCK + 7, 2 * BLOCK, 50 * BLOCK + 1)
    parts = [inputs(40 + k, n, "f32") for k, n in enumerate(sizes_)]
    bufs = [hpvm.symmetric.empty(n, torch.float32) for n in sizes_]
    for x, p in zip(bufs, parts):
        x.copy_(p[RANK])
    line_up()
    for k, x in enumerate(bufs):  # 4, 2 and 4 lanes; no barrier between the calls
        stream(x, lanes=2 if k == 1 else MAX_LANES)
    stream(bufs[0])  # twice more in place: 4 x the sum, exactly (doubling is exact)
    stream(bufs[0])
    assert int(status[0]) == 0, "a wait timed out"
    for k, (x, p) in enumerate(zip(bufs, parts)):
        want = numpy_reduce(p, "sum", "f32").view(np.float32) * (4 if k == 0 else 1)
        assert np.array_equal(bits(x), want.view(np.int32)), k
    report(RANK, "STREAM back-to-back ok")


def recover() -> None:
    """The host's recovery after a failed call: no kernel runs anywhere while the control blocks
    are cleared (runner.py's two barriers)."""
    line_up()
    ctrl.zero_()
    status.zero_()
    line_up()


def mismatch() -> None:
    n = 9 * BLOCK + 3
    parts = inputs(50, n, "f32")
    x = hpvm.symmetric.empty(n, torch.float32)
    x.copy_(parts[RANK])
    line_up()
    stream(x, fingerprint=FINGERPRINT + RANK)
    assert int(status[0]) == gpu_heap.MISMATCHED, int(status[0])
    assert int(ctrl[gpu_heap.MISMATCH_AT]) != 0
    assert torch.equal(x, parts[RANK]), "a mismatched call moved data"
    recover()
    stream(x)
    assert int(status[0]) == 0
    assert np.array_equal(bits(x), numpy_reduce(parts, "sum", "f32")), "the call after the recovery"
    report(RANK, "STREAM mismatch ok")


def missing() -> None:
    n = 6 * BLOCK
    x = hpvm.symmetric.empty(n, torch.float32)
    x.copy_(inputs(60, n, "f32")[RANK])
    line_up()
    if RANK == 1:  # arrives with the same call, then moves nothing
        K.announce[(1,)](**common())
        assert int(status[0]) == 0
    else:
        start = time.monotonic()
        stream(x, lanes=1, timeout_s=1.0)
        assert int(status[0]) == 2, int(status[0])  # rank 1 + 1
        assert time.monotonic() - start < 15, "the wait was not bounded by the timeout"
    recover()
    report(RANK, "STREAM missing ok")


sizes()
bf16()
ops()
back_to_back()
mismatch()
missing()
report(RANK, "STREAM done")
