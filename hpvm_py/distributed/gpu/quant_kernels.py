"""The quantized all-reduce of GPU ranks on one host (Triton) and the codec it shares with the
fused RMSNorm's fp8 output: quantize.py's arithmetic, operation for operation.
(docs/architecture.md, "Module notes": distributed/gpu/quant_kernels.py)"""
import triton
import triton.language as tl

from ..quantize import GROUP as _GROUP_SIZE
from ..quantize import MODES
from .signals import arrive, depart, peer_delta, signal, wait

FP8, INT8, INT4 = (MODES.index(m) for m in ("fp8", "int8", "int4"))  # the MODE constexpr
GROUP: tl.constexpr = tl.constexpr(_GROUP_SIZE)
_RINT: tl.constexpr = tl.constexpr(12582912.0)  # 1.5 * 2^23: adding it rounds |y| < 2^22 to an integer


@triton.jit
def _rint(y):
    """Round to the nearest integer, ties to even, for |y| < 2^22 (what np.rint does): the f32
    addition rounds, the subtraction is exact (no fast-math flag lets the compiler fold them)."""
    return (y + _RINT) - _RINT


@triton.jit
def scaled(v, QMAX: tl.constexpr, ROWS: tl.constexpr, COLS: tl.constexpr):
    """quantize.scaled: per row of v (ROWS x COLS f32) s = absmax / QMAX, correctly rounded, and
    v / s clamped to [-QMAX, QMAX] (a row of zeros: s = 0 and zeros). Returns (y, s)."""
    absmax = tl.max(tl.abs(v), axis=1)
    s = tl.div_rn(absmax, tl.full([ROWS], QMAX, tl.float32))
    positive = tl.broadcast_to(s[:, None] > 0, [ROWS, COLS])
    safe = tl.broadcast_to(tl.where(s > 0, s, 1.0)[:, None], [ROWS, COLS])
    y = tl.where(positive, tl.div_rn(v, safe), 0.0)
    return tl.minimum(tl.maximum(y, -QMAX), QMAX), s


@triton.jit
def fp8_bytes(y):
    """e4m3fn bytes of |y| <= 448, rounded to nearest even (quantize.fp8_e4m3)."""
    return y.to(tl.float8e4nv).to(tl.uint8, bitcast=True)


@triton.jit
def encode(v, MODE: tl.constexpr, QMAX: tl.constexpr, BLOCK: tl.constexpr):
    """quantize.encode of BLOCK f32 values (zeros past the end): (codes, scales) with BLOCK bytes
    of codes (BLOCK // 2 for int4) and BLOCK // GROUP scales; QMAX: quantize.QMAX[mode]."""
    y, s = scaled(tl.reshape(v, [BLOCK // GROUP, GROUP]), QMAX, BLOCK // GROUP, GROUP)
    flat = tl.reshape(y, [BLOCK])
    if MODE == 0:
        codes = fp8_bytes(flat)
    elif MODE == 1:
        codes = _rint(flat).to(tl.int8).to(tl.uint8, bitcast=True)
    else:
        low, high = tl.split(tl.reshape(_rint(flat).to(tl.int32) + 8, [BLOCK // 2, 2]))
        codes = (low | (high << 4)).to(tl.uint8)
    return codes, s


@triton.jit
def decode(codes, scales, MODE: tl.constexpr, BLOCK: tl.constexpr):
    """quantize.decode of one chunk: BLOCK f32 values, code * scale (one product each; the kernel
    is compiled without FP fusion, so no product is fused into a following add)."""
    if MODE == 0:
        q = codes.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    elif MODE == 1:
        q = codes.to(tl.int8, bitcast=True).to(tl.float32)
    else:
        q = tl.interleave((codes & 15).to(tl.float32) - 8.0, (codes >> 4).to(tl.float32) - 8.0)
    grouped = tl.reshape(q, [BLOCK // GROUP, GROUP])
    return tl.reshape(grouped * tl.broadcast_to(scales[:, None], [BLOCK // GROUP, GROUP]), [BLOCK])


@triton.jit
def _peer_decode(codes, scales, coffs, goffs, bases, rank, q, MODE: tl.constexpr, BLOCK: tl.constexpr):
    """Decode rank q's chunk of its workspace (Iris's translation of my workspace pointers)."""
    c = tl.load(codes + peer_delta(bases, rank, q, 1) + coffs)
    s = tl.load(scales + peer_delta(bases, rank, q, 4) + goffs)
    return decode(c, s, MODE, BLOCK)


@triton.jit(do_not_specialize=["fingerprint"])
def all_reduce_quantized(buf, n, codes, scales, ctrl, bases, rank, status_addr, timeout_ns, fingerprint,
                         MODE: tl.constexpr, QMAX: tl.constexpr, CODE_BYTES: tl.constexpr,
                         WORLD: tl.constexpr, BLOCK: tl.constexpr):
    """One-shot quantized sum. Program b, for each of its chunks c: encode my chunk c into my
    workspace | signal | wait until every peer has encoded its chunk c | decode chunk c of every
    rank's workspace, add in rank order in f32, store into my buffer (CODE_BYTES: the codes of
    a chunk, BLOCK or BLOCK // 2 bytes). Peers read workspaces only;
    the final step means none reads mine after the kernel, so the next call may rewrite it."""
    b = tl.program_id(0)
    programs = tl.num_programs(0)
    step, deadline, failed, status = arrive(ctrl, bases, b, rank, status_addr, timeout_ns,
                                            fingerprint, WORLD)
    n = tl.where(failed == 0, n, 0)  # the ranks disagree or one is missing: move no data
    for c in range(b, tl.cdiv(n, BLOCK), programs):
        offs = c * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        coffs = c * CODE_BYTES + tl.arange(0, CODE_BYTES)
        goffs = c * (BLOCK // GROUP) + tl.arange(0, BLOCK // GROUP)
        mine, s = encode(tl.load(buf + offs, mask=mask, other=0.0).to(tl.float32), MODE, QMAX, BLOCK)
        tl.store(codes + coffs, mine)  # the workspace holds whole chunks (quantize.PAD)
        tl.store(scales + goffs, s)
        step += 1
        signal(ctrl, bases, b, rank, step, WORLD)  # my chunk c is encoded
        failed = wait(ctrl, b, rank, step, deadline, failed, status, WORLD)  # and every peer's
        acc = _peer_decode(codes, scales, coffs, goffs, bases, rank, 0, MODE, BLOCK)
        for q in tl.static_range(1, WORLD):
            acc = acc + _peer_decode(codes, scales, coffs, goffs, bases, rank, q, MODE, BLOCK)
        tl.store(buf + offs, acc.to(buf.dtype.element_ty), mask=mask)
    depart(ctrl, bases, b, rank, step, deadline, failed, status, WORLD)


@triton.jit
def row_fp8(y, in_row, out, scales, row, offs, BLOCK: tl.constexpr):
    """The fused RMSNorm's fp8 copy of one row (quantize.rows_fp8): y, the row as stored, in f32."""
    v = tl.where(in_row, y, 0.0)
    q, s = scaled(tl.reshape(v, [1, BLOCK]), 448.0, 1, BLOCK)
    tl.store(out + offs, fp8_bytes(tl.reshape(q, [BLOCK])), mask=in_row)
    tl.store(scales + row + tl.arange(0, 1), s)
