"""The Triton helpers every generated kernel file starts with: the kernel IR's exact semantics.

Each helper holds one rule of docs/language.md that Triton's own operators do not follow: Python
floor division and modulo with a zero divisor giving 0, shifts past the width, saturating float to
integer casts, bf16 rounding that keeps NaNs, correctly rounded division and square root (Triton's
`/` and `tl.sqrt` are approximate on NVIDIA GPUs), exact C fmod (Triton's `%` on floats is not).

Functions Triton's interpreter cannot run (libdevice) are generated per mode: libdevice calls for
the GPU, NumPy through `host_math` for the interpreter (TRITON_INTERPRET=1), so GPU code never
refers to host functions.
"""
from __future__ import annotations

HEADER = '''\
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def _f16(x):
    """Round an f32 value to f16 (kept in f32)."""
    return x.to(tl.float16).to(tl.float32)


@triton.jit
def _bf16_bits(x):
    """f32 -> bf16 bits (int16): to nearest even; a NaN stays a quiet NaN."""
    b = x.to(tl.uint32, bitcast=True)
    r = b + 0x7FFF + ((b >> 16) & 1)
    r = tl.where(x != x, b | 0x400000, r)
    return (r >> 16).to(tl.uint16).to(tl.int16, bitcast=True)


@triton.jit
def _bf16_value(bits):
    """bf16 bits (int16) -> f32."""
    return (bits.to(tl.uint16, bitcast=True).to(tl.uint32) << 16).to(tl.float32, bitcast=True)


@triton.jit
def _bf16(x):
    """Round an f32 value to bf16 (kept in f32)."""
    return _bf16_value(_bf16_bits(x))


@triton.jit
def _sfloordiv(x, y, int_min):
    bad = (y == 0) | ((x == int_min) & (y == -1))
    d = tl.where(bad, 1, y)
    q = x // d
    r = x % d
    q = tl.where((r != 0) & ((r ^ d) < 0), q - 1, q)
    return tl.where(y == 0, 0, q)


@triton.jit
def _smod(x, y, int_min):
    bad = (y == 0) | ((x == int_min) & (y == -1))
    d = tl.where(bad, 1, y)
    r = x % d
    r = tl.where((r != 0) & ((r ^ d) < 0), r + d, r)
    return tl.where(y == 0, 0, r)


@triton.jit
def _ufloordiv(x, y):
    return tl.where(y == 0, 0, x // _nonzero(y))


@triton.jit
def _umod(x, y):
    return tl.where(y == 0, 0, x % _nonzero(y))


@triton.jit
def _smod_by(x, y, int_min):
    """_smod for a divisor that is one scalar for every lane: a mask when it is a positive power
    of two (in two's complement that is the floored remainder), no per-lane division."""
    if (y > 0) & ((y & (y - 1)) == 0):
        r = x & (y - 1)
    else:
        r = _smod(x, y, int_min)
    return r


@triton.jit
def _umod_by(x, y):
    """_umod for a divisor that is one scalar for every lane."""
    if (y != 0) & ((y & (y - 1)) == 0):
        r = x & (y - 1)
    else:
        r = _umod(x, y)
    return r


@triton.jit
def _shl(x, n, BITS: tl.constexpr):
    ok = (n >= 0) & (n < BITS)
    return tl.where(ok, x << tl.where(ok, n, 0), 0)


@triton.jit
def _lshr(x, n, BITS: tl.constexpr):
    ok = (n >= 0) & (n < BITS)
    return tl.where(ok, x >> tl.where(ok, n, 0), 0)


@triton.jit
def _fdiv(x, y):
    """Correctly rounded division (Triton's `/` is approximate for f32 on NVIDIA GPUs)."""
    if x.dtype == tl.float64:
        return x / y
    else:
        return tl.div_rn(x, y)


@triton.jit
def _sqrt(x):
    """Correctly rounded square root (tl.sqrt is approximate for f32 on NVIDIA GPUs)."""
    if x.dtype == tl.float64:
        return tl.sqrt(x)
    else:
        return tl.sqrt_rn(x)


@triton.jit
def _zero_signed_like(x):
    """+0.0 or -0.0 with the sign bit of x."""
    if x.dtype == tl.float64:
        return (x.to(tl.uint64, bitcast=True) & 0x8000000000000000).to(tl.float64, bitcast=True)
    else:
        return (x.to(tl.uint32, bitcast=True) & 0x80000000).to(tl.float32, bitcast=True)


@triton.jit
def _signbit(x):
    if x.dtype == tl.float64:
        return (x.to(tl.uint64, bitcast=True) >> 63) != 0
    else:
        return (x.to(tl.uint32, bitcast=True) >> 31) != 0


@triton.jit
def _copysign(x, y):
    """|x| with the sign of y; a NaN y counts as positive (its sign bit differs between CPUs and
    GPUs)."""
    if x.dtype == tl.float64:
        mag = x.to(tl.uint64, bitcast=True) & 0x7FFFFFFFFFFFFFFF
        sign = y.to(tl.uint64, bitcast=True) & 0x8000000000000000
        sign = tl.where(y != y, 0, sign)
        return (mag | sign).to(tl.float64, bitcast=True)
    else:
        mag = x.to(tl.uint32, bitcast=True) & 0x7FFFFFFF
        sign = y.to(tl.uint32, bitcast=True) & 0x80000000
        sign = tl.where(y != y, 0, sign)
        return (mag | sign).to(tl.float32, bitcast=True)


@triton.jit
def _ffloordiv(x, y):
    """Python // on floats (NumPy's npy_divmod)."""
    m = _m_fmod(x, y)
    div = _fdiv(x - m, y)
    differ = (y < 0) != (m < 0)
    div = tl.where((m != 0) & differ, div - 1.0, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1.0, floored)
    quotient = _fdiv(x, y)
    result = _select_bits(div != 0, floored, _zero_signed_like(quotient))
    return _select_bits(y == 0, quotient, result)


@triton.jit
def _fmod_py(x, y):
    """Python % on floats: the result takes the divisor's sign."""
    m = _m_fmod(x, y)
    differ = (y < 0) != (m < 0)
    fixed = tl.where((m != 0) & differ, m + y, m)
    result = _select_bits(m != 0, fixed, _zero_signed_like(y))
    return _select_bits(y == 0, m, result)


# Integer abs/min/max and isnan as calls: written out inline, each repeats its operands' code, so
# nested in each other (`min(min(min(x, y), y), y)`) the kernel's text grew 2 or 3 times per level.
@triton.jit
def _iabs(x):
    return tl.where(x < 0, -x, x)


@triton.jit
def _imin(x, y):
    return tl.where(x < y, x, y)


@triton.jit
def _imax(x, y):
    return tl.where(x > y, x, y)


@triton.jit
def _isnan(x):
    return x != x


@triton.jit
def _fmin_numpy(x, y):
    """min() on floats: a NaN in either operand gives NaN; a tie of zeros gives y."""
    return _select_bits(_flt(x, y) | (x != x), x, y)


@triton.jit
def _fmax_numpy(x, y):
    return _select_bits(_fgt(x, y) | (x != x), x, y)


@triton.jit
def _minnum(x, y):
    """fmin(), IEEE minimumNumber: a NaN operand is ignored; -0.0 < 0.0. (Selects of floats that
    may be signed zeros go through their bits: codegen's values.choose says why.)"""
    lower = (x < y) | ((x == y) & _signbit(x))
    return _select_bits(y != y, x, _select_bits(x != x, y, _select_bits(lower, x, y)))


@triton.jit
def _maxnum(x, y):
    """fmax(), IEEE maximumNumber: a NaN operand is ignored; -0.0 < 0.0."""
    higher = (x > y) | ((x == y) & ~_signbit(x))
    return _select_bits(y != y, x, _select_bits(x != x, y, _select_bits(higher, x, y)))


@triton.jit
def _f2i(x, lo, hi, LO_F: tl.constexpr, HI_F: tl.constexpr):
    """Saturating float -> integer cast (NaN gives 0); lo/hi are typed like the result."""
    big = x >= HI_F
    small = x <= LO_F
    inside = (x == x) & ~big & ~small
    v = tl.where(inside, x, 0.0).to(lo.dtype)
    return tl.where(big, hi, tl.where(small, lo, v))


@triton.jit
def _trip(start, stop, step):
    """Iterations of range(start, stop, step) on int64 values (a zero step runs nothing). The
    distance and the step's size are taken as uint64: stop - start may pass 2**63 (range(-2**63,
    2**63 - 1, 2**62) runs 4 times), and their wrapped int64 bits are then the exact values."""
    up = (step > 0) & (stop > start)
    down = (step < 0) & (stop < start)
    runs = up | down
    distance = tl.where(up, stop - start, start - stop).to(tl.uint64, bitcast=True)
    size = tl.where(up, step, -step).to(tl.uint64, bitcast=True)
    n = (distance - 1) // tl.where(runs, size, 1) + 1
    return tl.where(runs, n.to(tl.int64, bitcast=True), 0)


@triton.jit
def _trip_unsigned(start, stop, step):
    """Iterations of range(start, stop, step) on uint64 values."""
    up = (step > 0) & (stop > start)
    n_up = (stop - start - 1) // tl.where(up, step, 1) + 1
    return tl.where(up, n_up, 0).to(tl.int64)


@triton.jit
def _any(mask):
    return tl.max(mask.to(tl.int32), 0) > 0


@triton.jit
def _report(err, bad, index, site, limit, BLOCK: tl.constexpr):
    """Record the first out-of-bounds access of a launch: [site + 1, index, limit] of the lowest
    failing lane (site and limit: scalars, or blocks in a spread loop's chunk)."""
    if tl.max(bad.to(tl.int32), 0) > 0:
        lanes = tl.arange(0, BLOCK)
        first = lanes == tl.min(tl.where(bad, lanes, BLOCK), 0)
        bad_index = tl.sum(tl.where(first, index, 0), 0)
        bad_site = tl.sum(tl.where(first, site, 0), 0)
        bad_limit = tl.sum(tl.where(first, limit, 0), 0)
        zero = tl.zeros([], tl.int64)
        if tl.atomic_cas(err, zero, zero + bad_site + 1) == 0:
            tl.store(err + 1, bad_index)
            tl.store(err + 2, bad_limit)
'''

# The quads variant's helpers (quads.py): a block's values as its quads' four parts (lane 4n + q
# in part q, element n), and back. With four lanes to a thread, both stay in registers.
QUAD_HELPERS = """

@triton.jit
def _quads(x, N: tl.constexpr):
    even, odd = tl.split(tl.reshape(x, [N, 2, 2]))
    q0, q2 = tl.split(even)
    q1, q3 = tl.split(odd)
    return q0, q1, q2, q3


@triton.jit
def _unquads(q0, q1, q2, q3, BLOCK: tl.constexpr):
    return tl.reshape(tl.join(tl.join(q0, q2), tl.join(q1, q3)), [BLOCK])
"""

# Functions that need libdevice on the GPU (NumPy in the interpreter); fmod is C fmod, exact.
LIBRARY_FUNCTIONS = ("exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sin", "cos", "tan",
                     "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh",
                     "erf", "erfc", "pow", "atan2", "hypot", "trunc", "round", "fmod")
_LIBDEVICE_NAME = {"round": "rint"}
_ARITY = {"pow": 2, "atan2": 2, "hypot": 2, "fmod": 2}
INTERPRETER_IMPORT = "\nfrom hpvm_py.backends.triton import host_math as _host\n"


# Helpers that hide a value from LLVM behind a PTX move (which ptxas drops) on the GPU, and are
# plain in the interpreter, which runs no PTX:
# - _select_bits, for min() and max() on floats (a NaN gives NaN, a tie of zeros gives y): LLVM
#   makes a float select of a compare of the same operands a min.f32 / max.f32, whose choice
#   between -0.0 and +0.0 is not the language's (tests/differential/reproducers/stream-352666369);
# - _narrow_abs, abs of i8 and i16 in i32: LLVM narrows any form of it to abs.s16, whose result
#   for -32768 ptxas widened as +32768 (tests/differential/reproducers/pingpong-1158526871);
# - _ineg, integer negation up to 32 bits as ~x + 1: ptxas folds a `neg` into a three-way min/max
#   and drops its sign (tests/differential/reproducers/plain-1820096542; the nvptx target rewrites
#   its PTX for the same reason: backends/nvptx/toolchain.py);
# - _nonzero (a divisor's guard) and _narrow_min/_narrow_max, for 8- and 16-bit integers: ptxas
#   makes a 16-bit min/max compared with one of its operands a VIMNMX.U16x2 that writes both
#   halves' predicates to one register, and the compare came out wrong
#   (tests/differential/reproducers/plain-2409086397; nvptx rewrites those in its PTX too);
# - _ashr, an arithmetic shift right whose result is hidden: LLVM makes -(x >> 1) into
#   ((~x) >> 1) + 1, and ptxas 12.8 (triton 3.6) assembled that neg, shift and add as if the
#   negation came after the shift (tests/differential/reproducers/tiles-3646318069).
# And _flt, _fle, _fgt, _fge, the float order compares, in PTX written here (an unordered compare
# and a NaN test): ptxas takes abs.f32 and ex2.approx results to be numbers in a range and decided
# an ordered compare the range settles, as if no operand could be NaN: `abs(x) > -1.0` became true
# and min(-1.0, abs(x)) of a NaN -1.0 (tests/differential/reproducers/tiles-947270095; the nvptx
# target rewrites its PTX's compares the same way).
_GPU_IDENTITIES = {True: """

@triton.jit
def _ashr(x, n, BITS: tl.constexpr):
    ok = (n >= 0) & (n < BITS)
    return x >> tl.where(ok, n, BITS - 1)


@triton.jit
def _select_bits(take_x, x, y):
    return tl.where(take_x, x, y)


@triton.jit
def _narrow_abs(x):
    return tl.where(x < 0, -x, x)


@triton.jit
def _ineg(x):
    return -x


@triton.jit
def _nonzero(y):
    return tl.where(y == 0, 1, y)


@triton.jit
def _narrow_min(x, y):
    return tl.where(x < y, x, y)


@triton.jit
def _narrow_max(x, y):
    return tl.where(x > y, x, y)
""", False: """

@triton.jit
def _ashr(x, n, BITS: tl.constexpr):
    ok = (n >= 0) & (n < BITS)
    shifted = x >> tl.where(ok, n, BITS - 1)
    if BITS == 64:
        hidden = _move64(shifted.to(tl.int64, bitcast=True)).to(x.dtype, bitcast=True)
    else:
        hidden = _move32(shifted.to(tl.int32)).to(x.dtype)
    return hidden


@triton.jit
def _move32(bits):
    return tl.inline_asm_elementwise("mov.b32 $0, $1;", "=r,r", [bits], dtype=tl.int32,
                                     is_pure=True, pack=1)


@triton.jit
def _move64(bits):
    return tl.inline_asm_elementwise("mov.b64 $0, $1;", "=l,l", [bits], dtype=tl.int64,
                                     is_pure=True, pack=1)


@triton.jit
def _select_bits(take_x, x, y):
    if x.dtype.primitive_bitwidth == 64:
        xb = _move64(x.to(tl.int64, bitcast=True))
        yb = _move64(y.to(tl.int64, bitcast=True))
    else:
        xb = _move32(x.to(tl.int32, bitcast=True))
        yb = _move32(y.to(tl.int32, bitcast=True))
    return tl.where(take_x, xb, yb).to(x.dtype, bitcast=True)


@triton.jit
def _narrow_abs(x):
    wide = _move32(x.to(tl.int32))
    return tl.where(wide < 0, -wide, wide).to(x.dtype)


@triton.jit
def _ineg(x):
    if x.dtype.primitive_bitwidth == 64:
        negated = -x
    else:
        negated = _move32((~x).to(tl.int32)).to(x.dtype) + 1
    return negated


@triton.jit
def _nonzero(y):
    if y.dtype.primitive_bitwidth < 32:
        safe = tl.where(y == 0, 1, _move32(y.to(tl.int32)).to(y.dtype))
    else:
        safe = tl.where(y == 0, 1, y)
    return safe


@triton.jit
def _narrow_min(x, y):
    wide = _move32(x.to(tl.int32))
    return tl.where(wide < y.to(tl.int32), wide, y.to(tl.int32)).to(x.dtype)


@triton.jit
def _narrow_max(x, y):
    wide = _move32(x.to(tl.int32))
    return tl.where(wide > y.to(tl.int32), wide, y.to(tl.int32)).to(x.dtype)

"""}


def _order_compare(op: str, interpreted: bool) -> str:
    """_f<op>(x, y), a float order compare (op: lt, le, gt or ge): on the GPU, PTX of the compare
    with the other ordering and a NaN test, which ptxas keeps (the note above _GPU_IDENTITIES)."""
    if interpreted:
        body = f"    return x {_ORDER_SYMBOL[op]} y"
    else:
        def asm(kind: str) -> str:
            return (f"{{ .reg .pred %c<2>; setp.{op}u.{kind} %c0, $1, $2; setp.num.{kind} %c1, $1, "
                    f"$2; and.pred %c0, %c0, %c1; selp.u32 $0, 1, 0, %c0; }}")
        body = f"""    if x.dtype == tl.float64:
        hit = tl.inline_asm_elementwise("{asm('f64')}", "=r,l,l",
                                        [x.to(tl.int64, bitcast=True), y.to(tl.int64, bitcast=True)],
                                        dtype=tl.int32, is_pure=True, pack=1)
    else:
        hit = tl.inline_asm_elementwise("{asm('f32')}", "=r,r,r",
                                        [x.to(tl.int32, bitcast=True), y.to(tl.int32, bitcast=True)],
                                        dtype=tl.int32, is_pure=True, pack=1)
    return hit != 0"""
    return f"\n\n@triton.jit\ndef _f{op}(x, y):\n{body}\n"


_ORDER_SYMBOL = {"lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def gpu_identity_helpers(interpreted: bool) -> str:
    """_select_bits, _narrow_abs, _ineg, _nonzero, _narrow_min/_max and the float order compares
    _flt .. _fge, for the interpreter or for the GPU."""
    return _GPU_IDENTITIES[interpreted] + "".join(_order_compare(op, interpreted) for op in _ORDER_SYMBOL)


def library_helper(name: str, interpreted: bool) -> str:
    """The helper `_m_<name>` for one library function."""
    args = ", ".join(f"x{i}" for i in range(_ARITY.get(name, 1)))
    call = f'_host.call("{name}", {args})' if interpreted else \
        f"libdevice.{_LIBDEVICE_NAME.get(name, name)}({args})"
    return f"""

@triton.jit
def _m_{name}({args}):
    return {call}
"""
