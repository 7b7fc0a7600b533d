"""The stream all-reduce of two GPU ranks (Triton): each rank pushes its buffer through rings of
slots in its peer's workspace while it drains the rings its peer fills in its own.
(docs/architecture.md, "Module notes": distributed/gpu/stream_kernels.py)"""
import triton
import triton.language as tl

from .heap import LANE_WORDS as _LANE_WORDS
from .heap import MAX_SLOTS as _MAX_SLOTS
from .heap import RING_AT
from .kernels import _combine, _widen
from .signals import arrive, finish, peer_delta, publish, wait_word

RING: tl.constexpr = tl.constexpr(RING_AT)  # word index of lane 0's first sequence word
LANE_WORDS: tl.constexpr = tl.constexpr(_LANE_WORDS)  # per lane: MAX_SLOTS sequence words, the ack
ACK: tl.constexpr = tl.constexpr(_MAX_SLOTS)  # the acknowledgement's index within its lane


@triton.jit
def _in_rank_order(mine, theirs, rank, OP: tl.constexpr, WIDEN: tl.constexpr):
    """rank 0's chunk op rank 1's, in the accumulator type (one_shot's order and rounding)."""
    mine, theirs = _widen(mine, WIDEN), _widen(theirs, WIDEN)
    first = tl.where(rank == 0, mine, theirs)
    second = tl.where(rank == 0, theirs, mine)
    return _combine(first, second, OP)


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_stream(buf, n, ring, ctrl, bases, rank, status_addr, timeout_ns, fingerprint,
                      OP: tl.constexpr, WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                      BLOCK: tl.constexpr, SLOTS: tl.constexpr):
    """Lane (program) b owns chunks b, b + L, b + 2L, ... (L lanes) and a ring of SLOTS slots of
    BLOCK elements at `ring` + b * SLOTS * BLOCK of each rank's workspace. Its i-th chunk goes
    into slot i % SLOTS of the peer's ring; sequence numbers are the lane's steps (the arrival's
    step s, chunk i: s + i + 1), so they only grow, across calls too.

    Iteration i of the lane: push chunk i (wait until the peer acknowledged chunk i - SLOTS, the
    slot's last occupant; store the chunk there; publish s + i + 1 into the slot's sequence word
    on the peer), then drain chunk j = i - LAG (wait until my slot j % SLOTS holds s + j + 1; read
    it and my own chunk j, combine in rank order, store; acknowledge s + j + 1 on the peer). LAG
    = SLOTS // 2 chunks are in flight each way, and LAG < SLOTS keeps the two ranks' waits from
    ever waiting on each other. Every word a lane polls is in its own rank's control block
    (heap.RING_AT), written only by the peer's same lane."""
    tl.static_assert(WORLD == 2, "the stream all-reduce is for two ranks")
    tl.static_assert(SLOTS >= 2, "a ring has two slots or more")
    tl.static_assert(SLOTS <= ACK, "a ring has at most heap.MAX_SLOTS slots")
    LAG: tl.constexpr = SLOTS // 2
    b = tl.program_id(0)
    lanes = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    peer = 1 - rank
    count = tl.cdiv(tl.cdiv(n, BLOCK) - b, lanes)  # this lane's chunks (0 when b has none)
    cols = tl.arange(0, BLOCK)
    mine_ring = ring + b * (SLOTS * BLOCK)  # the peer fills it
    peer_ring = mine_ring + peer_delta(bases, rank, peer, ELEM)  # I fill it
    lane = ctrl + RING + b * LANE_WORDS  # polled here, written by the peer
    peer_lane = lane + peer_delta(bases, rank, peer, 8)
    for i in range(0, count + LAG):
        if i < count:
            offs = (b + i * lanes) * BLOCK + cols
            mask = offs < n
            v = tl.load(buf + offs, mask=mask)
            if i >= SLOTS:  # the slot's last chunk has been drained by the peer
                failed = wait_word(ctrl, lane + ACK, step + (i - SLOTS + 1), peer, deadline, failed,
                                   status)
                tl.debug_barrier()
            tl.store(peer_ring + (i % SLOTS) * BLOCK + cols, v, mask=mask)
            publish(peer_lane + i % SLOTS, step + (i + 1))
        if i >= LAG:
            j = i - LAG
            failed = wait_word(ctrl, lane + j % SLOTS, step + (j + 1), peer, deadline, failed, status)
            tl.debug_barrier()
            offs = (b + j * lanes) * BLOCK + cols
            mask = offs < n
            theirs = tl.load(mine_ring + (j % SLOTS) * BLOCK + cols, mask=mask)
            acc = _in_rank_order(tl.load(buf + offs, mask=mask), theirs, rank, OP, WIDEN)
            tl.store(buf + offs, acc.to(buf.dtype.element_ty), mask=mask)
            publish(peer_lane + ACK, step + (j + 1))  # after the slot's reads
    # no final step: the peer read nothing of mine but what it acknowledged, and wrote nothing
    # here that I have not drained; the next call's arrival orders the rest
    finish(ctrl, b, step + count)
