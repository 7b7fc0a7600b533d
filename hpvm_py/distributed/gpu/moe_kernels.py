"""The mixture-of-experts kernels of GPU ranks on one host (Triton), on the flags of signals.py.
(docs/architecture.md, "Module notes": distributed/gpu/moe_kernels.py)"""
import triton
import triton.language as tl

from .signals import arrive, depart, peer_delta, signal, wait


@triton.jit
def _hot(r, valid, BLOCK_E: tl.constexpr):
    """The [rows, experts] one-hot matrix of the expert ids r (a zero row where not valid)."""
    e = tl.arange(0, BLOCK_E)
    return ((r[:, None] == e[None, :]) & valid[:, None]).to(tl.int32)


@triton.jit
def _report(status_addr, bad, CODE: tl.constexpr):
    """Bad input seen (bad > 0): CODE into the status word (the host raises at its next check)."""
    if bad > 0:
        status = status_addr.to(tl.pointer_type(tl.int64))
        tl.atomic_xchg(status, CODE, sem="relaxed", scope="sys")


@triton.jit
def moe_count(route, n_tokens, per_program, scratch, experts, status_addr, BAD: tl.constexpr,
              BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr):
    """Program b: how many of this rank's rows [b * per_program, (b + 1) * per_program) go to each
    expert, into scratch[b, :BLOCK_E]. Local: no peer is involved."""
    b = tl.program_id(0)
    start = b * per_program
    end = start + per_program  # rows from n_tokens on are masked (loop bounds stay plain sums)
    hist = tl.zeros([BLOCK_E], dtype=tl.int32)
    bad = tl.zeros([BLOCK_T], dtype=tl.int32)
    for c in range(start, end, BLOCK_T):
        rows = c + tl.arange(0, BLOCK_T)
        m = (rows < end) & (rows < n_tokens)
        r = tl.load(route + rows, mask=m, other=-1)
        hist += tl.sum(_hot(r, m & (r >= 0) & (r < experts), BLOCK_E), axis=0)
        bad += (m & ((r < -1) | (r >= experts))).to(tl.int32)
    tl.store(scratch + b * BLOCK_E + tl.arange(0, BLOCK_E), hist)
    _report(status_addr, tl.sum(bad, axis=0), BAD)


@triton.jit(do_not_specialize=["fingerprint"])
def moe_dispatch(tokens, route, recv, counts, origin, slot, scratch, n_tokens, per_program, hidden,
                 experts, capacity, ctrl, bases, rank, status_addr, timeout_ns, fingerprint, WORLD: tl.constexpr,
                 ELEM: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_E: tl.constexpr,
                 BLOCK_P: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program b sends this rank's rows [b * per_program, ...) to their experts' ranks, after
    moe_count filled scratch. Steps: arrival; every rank's counts row into the counts matrix of
    every expert's rank; a step; positions (the rows of lower ranks first: a prefix sum of the
    matrix's column), slots and origins; the rows into their slots; empty slots marked; the end."""
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    agreed = failed == 0  # else the ranks disagree or one is missing: write nowhere
    n_tokens = tl.where(agreed, n_tokens, 0)
    local = experts // WORLD
    e = tl.arange(0, BLOCK_E)
    in_e = e < experts
    owner = tl.where(in_e, e // local, 0)
    column = e % local
    # per expert: this rank's rows in all, and those of the programs before b (scratch read in
    # tiles of BLOCK_P programs' rows)
    total = tl.zeros([BLOCK_E], dtype=tl.int32)
    before = tl.zeros([BLOCK_E], dtype=tl.int32)
    for tile in range(0, programs, BLOCK_P):
        owners = tile + tl.arange(0, BLOCK_P)[:, None] + e[None, :] * 0  # [program, expert]
        part = tl.load(scratch + owners * BLOCK_E + e[None, :], mask=owners < programs, other=0)
        total += tl.sum(part, axis=0)
        before += tl.sum(tl.where(owners < b, part, 0), axis=0)
    # the counts phase: row `rank` of the matrix on every expert's rank (every program writes it,
    # so that the signal of program b tells the peers' programs b that it is there)
    matrix = counts + peer_delta(bases, rank, owner, 4)
    tl.store(matrix + rank * local + column, total, mask=e < tl.where(agreed, experts, 0))
    step += 1
    signal(ctrl, bases, b, rank, step, WORLD)
    failed = wait(ctrl, b, rank, step, deadline, failed, status, WORLD)
    for lower in tl.static_range(WORLD):  # the rows of lower ranks come first in every expert's block
        row_of_lower = tl.load(matrix + lower * local + column, mask=in_e, other=0)
        before += tl.where(lower < rank, row_of_lower, 0)
    # positions, slots and origins of this program's rows
    start = b * per_program
    end = start + per_program
    i = tl.arange(0, BLOCK_T)
    earlier = i[None, :] < i[:, None]  # [row, other row]: the other row comes first
    for c in range(start, end, BLOCK_T):
        rows = c + i
        m = (rows < end) & (rows < n_tokens)
        r = tl.load(route + rows, mask=m, other=-1)
        valid = m & (r >= 0) & (r < experts)
        hot = _hot(r, valid, BLOCK_E)
        same = (r[:, None] == r[None, :]) & earlier & valid[None, :]
        pos = tl.sum(hot * before[None, :], axis=1) + tl.sum(same.to(tl.int32), axis=1)
        before += tl.sum(hot, axis=0)
        kept = valid & (pos < capacity)
        r0 = tl.where(kept, r, 0)
        p0 = tl.where(kept, pos, 0)
        tl.store(slot + rows, tl.where(kept, r0 * capacity + p0, -1), mask=m)
        landed = ((r0 % local) * capacity + p0).to(tl.int64)  # the row in the expert's rank's recv
        at = origin + peer_delta(bases, rank, r0 // local, 4) + landed * 2
        tl.store(at, tl.zeros([BLOCK_T], dtype=tl.int32) + rank, mask=kept)
        tl.store(at + 1, rows, mask=kept)
    tl.debug_barrier()  # the slots stored above are read below, by other threads of the program
    per_rank = local * capacity
    cols = tl.arange(0, BLOCK_H)
    for row in range(start, end):
        s = tl.load(slot + row, mask=row < n_tokens, other=-1)
        if s >= 0:
            dst = recv + peer_delta(bases, rank, s // per_rank, ELEM) + (s % per_rank).to(tl.int64) * hidden
            src = tokens + tl.cast(row, tl.int64) * hidden
            for h in range(0, hidden, BLOCK_H):
                mh = h + cols < hidden
                tl.store(dst + h + cols, tl.load(src + h + cols, mask=mh), mask=mh)
    # this rank's empty slots: origin (-1, -1) (the matrix is complete since the counts step)
    for k0 in range(b * BLOCK_T, per_rank, programs * BLOCK_T):
        k = k0 + i
        mk = k < per_rank
        col = k // capacity
        routed = tl.zeros([BLOCK_T], dtype=tl.int32)
        for sender in tl.static_range(WORLD):
            routed += tl.load(counts + sender * local + col, mask=mk, other=0)
        empty = mk & (k % capacity >= routed)
        at = origin + k.to(tl.int64) * 2
        tl.store(at, tl.full([BLOCK_T], -1, tl.int32), mask=empty)
        tl.store(at + 1, tl.full([BLOCK_T], -1, tl.int32), mask=empty)
    # then every row sent to this rank is in place, and no peer reads this rank's buffers
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit(do_not_specialize=["fingerprint"])
def moe_combine(expert_out, slot, gate, out, n_tokens, hidden, experts, capacity, ctrl, bases, rank,
                status_addr, timeout_ns, fingerprint, BAD: tl.constexpr, GATED: tl.constexpr, WORLD: tl.constexpr,
                ELEM: tl.constexpr, BLOCK_H: tl.constexpr):
    """Program b: rows b, b + programs, ... of out, each read from its slot on the expert's rank
    (times its gate), zero where the slot is -1 (or not one moe_dispatch writes: reported)."""
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n_tokens = tl.where(failed == 0, n_tokens, 0)  # the ranks disagree or one is missing
    per_rank = (experts // WORLD) * capacity
    top = experts * capacity
    cols = tl.arange(0, BLOCK_H)
    bad = tl.full([], 0, tl.int32)
    for row in range(b, n_tokens, programs):
        s = tl.load(slot + row)
        ok = (s >= 0) & (s < top)
        bad += ((s < -1) | (s >= top)).to(tl.int32)
        s0 = tl.where(ok, s, 0)
        src = expert_out + peer_delta(bases, rank, s0 // per_rank, ELEM) \
            + (s0 % per_rank).to(tl.int64) * hidden
        dst = out + tl.cast(row, tl.int64) * hidden
        readable = tl.where(ok, hidden, 0)  # a row routed nowhere reads nothing: zeros
        if GATED:
            g = tl.load(gate + row)
        for h in range(0, hidden, BLOCK_H):
            mh = h + cols < hidden
            v = tl.load(src + h + cols, mask=h + cols < readable, other=0.0)
            if GATED:
                if ELEM == 8:
                    v = v * g.to(tl.float64)
                else:
                    v = v.to(tl.float32) * g
            tl.store(dst + h + cols, v.to(out.dtype.element_ty), mask=mh)
    _report(status_addr, bad, BAD)
    # then no peer reads this rank's expert_out any more
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)
