"""The flag protocol of the GPU collectives, as Triton device functions.
(docs/architecture.md, "Module notes": distributed/gpu/signals.py)"""
import triton
import triton.language as tl

from .heap import FINGERPRINTS_AT, FLAGS_AT, MAX_WORLD, MISMATCH_AT, MISMATCHED

FLAGS: tl.constexpr = tl.constexpr(FLAGS_AT)  # word index of flags[0]: after the counters
FINGERPRINTS: tl.constexpr = tl.constexpr(FINGERPRINTS_AT)  # [program][rank] as the flags
MISMATCH: tl.constexpr = tl.constexpr(MISMATCH_AT)  # nonzero: a call disagreed, nothing runs
FAILED_MISMATCH: tl.constexpr = tl.constexpr(MISMATCHED)
RANKS: tl.constexpr = tl.constexpr(MAX_WORLD)  # lanes of the per-peer vectors: one per local rank


@triton.jit
def now_ns(dummy):
    """The device's global nanosecond timer (`dummy` only gives the asm an operand)."""
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,l", [dummy], dtype=tl.int64,
                                     is_pure=False, pack=1)


@triton.jit
def peer_delta(bases, rank, q, ELEM: tl.constexpr):
    """Elements from a pointer on this rank's heap to its twin on rank q (Iris's translation as an
    offset; heaps are 256-byte aligned, so the offset is a multiple of 16 elements, which the
    multiplication tells the compiler: peer loads stay 16-byte vectors)."""
    delta = (tl.load(bases + q) - tl.load(bases + rank)) // (16 * ELEM)
    return delta * 16


@triton.jit
def peers(bases, rank, WORLD: tl.constexpr):
    """Every peer at once, one lane per rank: the lanes' ranks, which lanes are peers, and the
    word offset from a word of this rank's heap to its twin on each (peer_delta's, for words)."""
    q = tl.arange(0, RANKS)
    is_peer = (q < WORLD) & (q != rank)
    delta = (tl.load(bases + q, mask=is_peer, other=0) - tl.load(bases + rank)) // 128
    return q, is_peer, delta * 16


@triton.jit
def signal(ctrl, bases, b, rank, step, WORLD: tl.constexpr):
    """Program b of this rank has reached `step`: tell every peer. One thread per peer, so the
    release exchanges' round trips over the links overlap: issued one after another, each
    release waited for the one before (a thread's release orders its earlier atomics too)."""
    tl.debug_barrier()
    q, is_peer, delta = peers(bases, rank, WORLD)
    tl.atomic_xchg(ctrl + delta + FLAGS + b * WORLD + rank, step, mask=is_peer, sem="release", scope="sys")


@triton.jit
def wait_word(ctrl, word, target, q, deadline, failed, status):
    """Until the word that rank q writes here reaches `target` (an acquire: what q wrote before
    it released that value is visible to this thread; the caller's block barrier shows it to the
    others), or the deadline passed (then q + 1 goes to the status word), or a kernel found a
    disagreement (FAILED_MISMATCH). Returns `failed`; waits for nothing once it is not 0."""
    seen = tl.atomic_add(word, 0, sem="acquire", scope="sys")
    while (seen < target) & (failed == 0):
        if now_ns(target) > deadline:
            failed = failed * 0 + (q + 1)
            tl.atomic_xchg(status, q + 1, sem="relaxed", scope="sys")
        if tl.load(ctrl + MISMATCH, volatile=True) != 0:
            failed = failed * 0 + FAILED_MISMATCH
            tl.atomic_xchg(status, FAILED_MISMATCH, sem="relaxed", scope="sys")
        seen = tl.atomic_add(word, 0, sem="acquire", scope="sys")
    return failed


@triton.jit
def publish(word, value):
    """Write `value` into a word a peer polls (wait_word), after everything this program wrote
    or read before: a block barrier, then a release exchange at system scope."""
    tl.debug_barrier()
    tl.atomic_xchg(word, value, sem="release", scope="sys")


@triton.jit
def wait(ctrl, b, rank, step, deadline, failed, status, WORLD: tl.constexpr):
    """Until program b of every peer has reached `step` (or the deadline passed: then the missing
    rank goes to the status word; or a kernel found a disagreement: a peer's program b may not
    exist then). Returns `failed` (0, the first missing rank + 1, or FAILED_MISMATCH)."""
    for q in tl.static_range(WORLD):
        if q != rank:
            failed = wait_word(ctrl, ctrl + FLAGS + b * WORLD + q, step, q, deadline, failed, status)
    tl.debug_barrier()
    return failed


@triton.jit
def same_call(ctrl, bases, b, rank, fingerprint, failed, status, WORLD: tl.constexpr):
    """After the arrival: whether every peer's program b published this call's fingerprint (and
    no earlier call disagreed). When not, every rank is told (the mismatch word of each) and the
    status word says so; the host names the difference (runner.py). Returns `failed`."""
    differs = tl.load(ctrl + MISMATCH, volatile=True) != 0
    for q in tl.static_range(WORLD):
        if q != rank:
            differs = differs | (tl.load(ctrl + FINGERPRINTS + b * WORLD + q, volatile=True) != fingerprint)
    if differs & (failed == 0):
        failed = failed * 0 + FAILED_MISMATCH
        lane, is_peer, delta = peers(bases, rank, WORLD)  # and this rank's own word
        tl.atomic_xchg(ctrl + tl.where(is_peer, delta, 0) + MISMATCH, 1, mask=lane < WORLD, sem="relaxed",
                       scope="sys")
        tl.atomic_xchg(status, FAILED_MISMATCH, sem="relaxed", scope="sys")
    return failed


@triton.jit
def arrive(ctrl, bases, b, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr):
    """The start of a call of program b: every peer's program b has reached it too, with the
    same call (its fingerprint, published before the arrival's signal, as data is before its
    flag). Returns the step reached, the deadline of the call's waits, `failed` (see wait; a
    kernel moves no data when it is not 0) and the status word."""
    step, deadline, status = begin_arrival(ctrl, bases, b, rank, status_addr, timeout_ns, fingerprint, WORLD)
    failed = end_arrival(ctrl, bases, b, rank, step, deadline, fingerprint, status, WORLD)
    return step, deadline, failed, status


@triton.jit
def begin_arrival(ctrl, bases, b, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr):
    """The first half of `arrive`: this call's fingerprint published to every peer. Returns the
    arrival's step, the deadline of the call's waits and the status word. A kernel may store into
    its peers' workspace between the two halves (never into their buffers: the call may differ)."""
    status = status_addr.to(tl.pointer_type(tl.int64))
    seq = tl.load(ctrl + b)  # this program's last step of the previous call
    deadline = now_ns(seq) + timeout_ns
    q, is_peer, delta = peers(bases, rank, WORLD)
    tl.store(ctrl + delta + FINGERPRINTS + b * WORLD + rank, fingerprint, mask=is_peer)
    return seq + 1, deadline, status


@triton.jit
def end_arrival(ctrl, bases, b, rank, step, deadline, fingerprint, status, WORLD: tl.constexpr):
    """The second half of `arrive`: signal the arrival's step, wait for every peer's, compare the
    fingerprints. Returns `failed`."""
    signal(ctrl, bases, b, rank, step, WORLD)
    failed = wait(ctrl, b, rank, step, deadline, tl.full([], 0, tl.int32), status, WORLD)
    # (a peer overwrites its slot only in its next call, which starts after this call's next wait)
    return same_call(ctrl, bases, b, rank, fingerprint, failed, status, WORLD)


@triton.jit
def depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD: tl.constexpr):
    """The end of a call whose last step was `step`: every peer is done with this rank's buffers
    (and this rank with theirs); step + 1 is kept as the program's last step."""
    signal(ctrl, bases, b, rank, step + 1, WORLD)
    wait(ctrl, b, rank, step + 1, deadline, failed, status, WORLD)
    finish(ctrl, b, step + 1)


@triton.jit
def finish(ctrl, b, last_step):
    tl.store(ctrl + b, last_step)
