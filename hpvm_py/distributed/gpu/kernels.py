"""The collective kernels of GPU ranks on one host (Triton), on the flags of signals.py.
(docs/architecture.md, "Module notes": distributed/gpu/kernels.py)"""
import triton
import triton.language as tl

from .quant_kernels import row_fp8
from .signals import arrive, begin_arrival, depart, end_arrival, finish, peer_delta, signal, wait

SUM, MAX, MIN = 0, 1, 2


@triton.jit
def _widen(x, WIDEN: tl.constexpr):
    if WIDEN:  # static: x simply changes type
        x = x.to(tl.float32)
    return x


@triton.jit
def _combine(acc, v, OP: tl.constexpr):
    if OP == 0:
        acc = acc + v
    elif OP == 1:
        acc = tl.maximum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    else:
        acc = tl.minimum(acc, v, propagate_nan=tl.PropagateNan.ALL)
    return acc


@triton.jit
def _reduce_ranks(ptr, offs, mask, bases, rank, OP: tl.constexpr, WIDEN: tl.constexpr,
                  WORLD: tl.constexpr, ELEM: tl.constexpr):
    """ptr[offs] of rank 0 op rank 1 op ..., in the accumulator type."""
    acc = _widen(tl.load(ptr + peer_delta(bases, rank, 0, ELEM) + offs, mask=mask), WIDEN)
    for q in tl.static_range(1, WORLD):
        v = tl.load(ptr + peer_delta(bases, rank, q, ELEM) + offs, mask=mask)
        acc = _combine(acc, _widen(v, WIDEN), OP)
    return acc


@triton.jit
def _chunk(c, n, BLOCK: tl.constexpr):
    offs = c * BLOCK + tl.arange(0, BLOCK)
    return offs, offs < n


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_one_shot(buf, n, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, OP: tl.constexpr,
                        WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                        BLOCK: tl.constexpr):
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    # the prefetch pipeline: chunk c + programs is read while the peers acknowledge chunk c
    offs, mask = _chunk(b, n, BLOCK)
    acc = _reduce_ranks(buf, offs, mask, bases, rank, OP, WIDEN, WORLD, ELEM)
    for c in range(b, tl.cdiv(n, BLOCK), programs):
        step += 1
        signal(ctrl, bases, b, rank, step, WORLD)  # I have read chunk c of every rank
        next_offs, next_mask = _chunk(c + programs, n, BLOCK)
        next_acc = _reduce_ranks(buf, next_offs, next_mask, bases, rank, OP, WIDEN, WORLD, ELEM)
        failed = wait(ctrl, b, rank, step, deadline, failed, status, WORLD)  # all have read mine
        tl.store(buf + offs, acc.to(buf.dtype.element_ty), mask=mask)
        offs, mask, acc = next_offs, next_mask, next_acc
    finish(ctrl, b, step)


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_one_shot_push(buf, n, rows, ctrl, bases, rank, status_addr, timeout_ns, fingerprint,
                             OP: tl.constexpr, WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                             BLOCK: tl.constexpr, PROGRAMS: tl.constexpr):
    """One-shot by stores, one round trip: program b owns chunk b (BLOCK elements). It stores its
    chunk into row `rank` of its rows on every peer, then arrives (the arrival's release covers
    those stores, so a peer past the arrival sees them), reduces the chunk from its own values and
    the rows its peers stored here, in rank order (one_shot's order and rounding), and stores it
    in place. No final step: no peer reads this rank's buffer.

    rows (heap.py, in the heap's header): two sets by the parity of the program's step,
    [parity][program][rank][BLOCK]. A peer stores into a set again two steps later, after this
    rank's signal of the step between, which follows its reads (every kernel's program b waits
    for its peers at its last step, so the steps of program b advance in lockstep). A stored row
    is scratch: when the ranks disagree, nothing is read from it."""
    b = tl.program_id(0)
    parity = (tl.load(ctrl + b) + 1) % 2  # of the step the arrival below reaches
    mine = rows + parity * (PROGRAMS * WORLD * BLOCK) + b * (WORLD * BLOCK)
    cols = tl.arange(0, BLOCK)
    offs = b * BLOCK + cols
    mask = offs < n
    v = tl.load(buf + offs, mask=mask)
    for d in tl.static_range(1, WORLD):  # the peers in turn (all_reduce_push's _push_chunk)
        q = (rank + d) % WORLD
        tl.store(mine + peer_delta(bases, rank, q, ELEM) + rank * BLOCK + cols, v, mask=mask)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    mask = offs < n
    row = cols * 0  # a vector of row numbers: the rank's own row is not read
    acc = _widen(tl.where(rank == 0, v, tl.load(mine + cols, mask=mask & (row != rank))), WIDEN)
    for q in tl.static_range(1, WORLD):
        theirs = tl.load(mine + q * BLOCK + cols, mask=mask & (row + q != rank))
        acc = _combine(acc, _widen(tl.where(rank == q, v, theirs), WIDEN), OP)
    tl.store(buf + offs, acc.to(buf.dtype.element_ty), mask=mask)
    finish(ctrl, b, step)


@triton.jit
def _slices(n, failed, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    """What the two-shot kernels move: n elements (none when the ranks disagree or one is
    missing), and the length of each rank's slice of them, in whole chunks of BLOCK."""
    n = tl.where(failed == 0, n, 0)
    return n, tl.cdiv(tl.cdiv(n, WORLD), BLOCK) * BLOCK


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_two_shot(buf, n, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, OP: tl.constexpr,
                        WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                        BLOCK: tl.constexpr):
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n, part = _slices(n, failed, WORLD, BLOCK)
    first = rank * part
    end = tl.minimum(first + part, n)
    for c in range(b, tl.cdiv(part, BLOCK), programs):
        offs = first + c * BLOCK + tl.arange(0, BLOCK)
        mask = offs < end
        acc = _reduce_ranks(buf, offs, mask, bases, rank, OP, WIDEN, WORLD, ELEM)
        out = acc.to(buf.dtype.element_ty)
        for d in tl.static_range(1, WORLD + 1):  # the peers in turn, then my own buffer
            tl.store(buf + peer_delta(bases, rank, (rank + d) % WORLD, ELEM) + offs, out, mask=mask)
    # my slice is in every buffer once every rank departs
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit
def _push_chunk(buf, n, part, slot, c, bases, rank, WORLD: tl.constexpr, ELEM: tl.constexpr,
                BLOCK: tl.constexpr):
    """Chunk c of every peer's slice, from my buffer into that peer's scratch slot (my row). The
    peers in turn from the next rank on (rank + 1, rank + 2, ...), so that at each turn every rank
    stores to a different one: in rank order all ranks would store into rank 0 first."""
    cols = tl.arange(0, BLOCK)
    for d in tl.static_range(1, WORLD):
        q = (rank + d) % WORLD
        offs = q * part + c * BLOCK + cols
        v = tl.load(buf + offs, mask=offs < n)
        tl.store(slot + peer_delta(bases, rank, q, ELEM) + rank * BLOCK + cols, v, mask=offs < n)


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_push(buf, n, scratch, ctrl, bases, rank, status_addr, timeout_ns, fingerprint,
                    OP: tl.constexpr, WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                    BLOCK: tl.constexpr, EARLY: tl.constexpr):
    """Two-shot whose traffic over the links is stores only (the links carry stores faster than
    the replies of loads: benchmarks/gpu/nvlink_ceilings.py). Slice j of the buffer (whole chunks)
    is rank j's to reduce. Program b, for its k-th chunk c of a slice: store chunk c of every
    peer's slice into that peer's scratch (slot k % 2, the row of my rank) | signal | wait for
    every peer | reduce chunk c of my slice from my buffer and the rows the peers stored, in rank
    order (one_shot's order and rounding) | store the result into every rank's buffer. EARLY: the
    first chunk's stores go out between the halves of the arrival, so its signal is the arrival's,
    one round trip less per call (into scratch only: the buffers wait for the fingerprints'
    agreement); launch.py's shapes say where that was measured faster.

    scratch: per program two slots of WORLD rows of BLOCK elements. A peer stores into a slot
    again two chunks later, after this rank's next signal, which comes after its reads of the
    slot. A result lands in a peer's slice j chunk c after that peer's signal for chunk c, so
    after its own read of that chunk. The final step: every peer's results have landed here."""
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK)
    rows = scratch + b * (2 * WORLD * BLOCK)
    if EARLY:
        first, deadline, status = begin_arrival(ctrl, bases, b, rank, status_addr, timeout_ns, fingerprint,
                                                WORLD)
        _, part = _slices(n, 0, WORLD, BLOCK)  # (before the agreement: the call as given)
        if b < tl.cdiv(part, BLOCK):
            _push_chunk(buf, n, part, rows, b, bases, rank, WORLD, ELEM, BLOCK)
        failed = end_arrival(ctrl, bases, b, rank, first, deadline, fingerprint, status, WORLD)
    else:
        first, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                                 fingerprint, WORLD)
    n, part = _slices(n, failed, WORLD, BLOCK)
    step = first
    k = 0
    for c in range(b, tl.cdiv(part, BLOCK), programs):
        slot = rows + (k % 2) * (WORLD * BLOCK)
        if not EARLY or k > 0:  # (EARLY: chunk 0 went with the arrival)
            _push_chunk(buf, n, part, slot, c, bases, rank, WORLD, ELEM, BLOCK)
            step += 1
            signal(ctrl, bases, b, rank, step, WORLD)
            failed = wait(ctrl, b, rank, step, deadline, failed, status, WORLD)
        offs = rank * part + c * BLOCK + cols
        mask = offs < n
        acc = _widen(tl.load(tl.where(rank == 0, buf + offs, slot + cols), mask=mask), WIDEN)
        for q in tl.static_range(1, WORLD):
            v = tl.load(tl.where(rank == q, buf + offs, slot + q * BLOCK + cols), mask=mask)
            acc = _combine(acc, _widen(v, WIDEN), OP)
        out = acc.to(buf.dtype.element_ty)
        for d in tl.static_range(1, WORLD + 1):  # the peers in turn as above, then my own buffer
            tl.store(buf + peer_delta(bases, rank, (rank + d) % WORLD, ELEM) + offs, out, mask=mask)
        k += 1
    # my slice is in every buffer once every rank departs
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit(do_not_specialize=["fingerprint"])
def all_gather(src, dst, n, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr,
               ELEM: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    for c in range(b, tl.cdiv(n, BLOCK), programs):
        offs, mask = _chunk(c, n, BLOCK)
        for d in tl.static_range(1, WORLD + 1):  # the peers in turn, then my own src
            q = (rank + d) % WORLD
            v = tl.load(src + peer_delta(bases, rank, q, ELEM) + offs, mask=mask)
            tl.store(dst + q * n + offs, v, mask=mask)
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)  # every src read


@triton.jit(do_not_specialize=["fingerprint"])
def reduce_scatter(src, dst, n, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, OP: tl.constexpr,
                   WIDEN: tl.constexpr, WORLD: tl.constexpr, ELEM: tl.constexpr,
                   BLOCK: tl.constexpr):
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    for c in range(b, tl.cdiv(n, BLOCK), programs):
        offs, mask = _chunk(c, n, BLOCK)
        acc = _reduce_ranks(src + rank * n, offs, mask, bases, rank, OP, WIDEN, WORLD, ELEM)
        tl.store(dst + offs, acc.to(dst.dtype.element_ty), mask=mask)
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit(do_not_specialize=["fingerprint"])
def broadcast(buf, n, root, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr,
              ELEM: tl.constexpr, BLOCK: tl.constexpr):
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    if rank != root:
        from_root = buf + peer_delta(bases, rank, root, ELEM)
        for c in range(b, tl.cdiv(n, BLOCK), programs):
            offs, mask = _chunk(c, n, BLOCK)
            tl.store(buf + offs, tl.load(from_root + offs, mask=mask), mask=mask)
    # then no one reads the root's buffer any more
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_rmsnorm(x, residual, weight, out, scales, rows, hidden, eps, ctrl, bases, rank,
                       status_addr, timeout_ns, fingerprint, QUANT: tl.constexpr, WIDEN: tl.constexpr,
                       WORLD: tl.constexpr, ELEM: tl.constexpr, BLOCK: tl.constexpr):
    """QUANT: also the fp8 codes of each new row of x (as stored) into out and its scale into
    scales (quant_kernels.row_fp8); out and scales are not touched otherwise."""
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    rows = tl.where(failed == 0, rows, 0)  # the ranks disagree or one is missing: move no data
    cols = tl.arange(0, BLOCK)
    in_row = cols < hidden
    w = _widen(tl.load(weight + cols, mask=in_row), WIDEN)
    for row in range(b, rows, programs):
        offs = row * hidden + cols
        total = _reduce_ranks(x, offs, in_row, bases, rank, 0, WIDEN, WORLD, ELEM)
        step += 1
        signal(ctrl, bases, b, rank, step, WORLD)
        failed = wait(ctrl, b, rank, step, deadline, failed, status, WORLD)
        r = total + _widen(tl.load(residual + offs, mask=in_row), WIDEN)
        mean_square = tl.sum(tl.where(in_row, r * r, 0.0), axis=0) / hidden
        scale = 1.0 / tl.sqrt(mean_square + eps)
        tl.store(residual + offs, r.to(residual.dtype.element_ty), mask=in_row)
        y = (r * scale * w).to(x.dtype.element_ty)
        tl.store(x + offs, y, mask=in_row)
        if QUANT:
            row_fp8(y.to(tl.float32), in_row, out, scales, row, offs, BLOCK)
    finish(ctrl, b, step)


@triton.jit(do_not_specialize=["fingerprint"])
def announce(ctrl, bases, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr):
    """Program 0 of a call this rank cannot make: it arrives with the call's fingerprint (which
    its peers' differs from, unless every rank made the same mistake) and moves nothing."""
    step, deadline, failed, status = arrive(ctrl, bases, 0, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    finish(ctrl, 0, step)
