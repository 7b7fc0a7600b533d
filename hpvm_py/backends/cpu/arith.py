"""Operators, comparisons and casts on register values, with the exact semantics of the kernel IR.

Nothing here may trap or produce poison: x86 `idiv` traps on a zero divisor and on INT_MIN / -1,
and an LLVM shift by a count >= the bit width is poison, so both are guarded with selects. No
fast-math flags are used: results must be bitwise reproducible.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...errors import CompileError
from ...support.loc import Loc
from ...types import ScalarType
from .intrinsics import overloaded
from .lltypes import F16, F32, I1, I32, reg_type, round_bf16, round_to
from .mathfns import MathLibrary

_INT_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
# eq/lt/le/gt/ge are false on NaN; ne is true on NaN, as in Python.
_FLOAT_CMP = {"eq": ("ordered", "=="), "ne": ("unordered", "!="), "lt": ("ordered", "<"),
              "le": ("ordered", "<="), "gt": ("ordered", ">"), "ge": ("ordered", ">=")}


def binop(b: ir.IRBuilder, op: str, t: ScalarType, x: ir.Value, y: ir.Value, loc: Loc,
          lib: MathLibrary, name: str = "") -> ir.Value:
    """x op y; `lib` supplies pow and fmod on floats."""
    if t.is_float:
        return round_to(b, _float_binop(b, op, x, y, loc, lib), t, name)
    return _int_binop(b, op, t, x, y, loc, name)


def _float_binop(b: ir.IRBuilder, op: str, x: ir.Value, y: ir.Value, loc: Loc,
                 lib: MathLibrary) -> ir.Value:
    if op == "add":
        return b.fadd(x, y)
    if op == "sub":
        return b.fsub(x, y)
    if op == "mul":
        return b.fmul(x, y)
    if op == "div":
        return b.fdiv(x, y)
    if op in ("floordiv", "mod"):
        return float_divmod(b, x, y, op, lib)
    if op == "pow":
        return lib.call(b, "pow", [x, y])
    raise CompileError(f"operator {op!r} needs integer operands", loc)


def float_divmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value, which: str,
                 lib: MathLibrary) -> ir.Value:
    """Python's float // or % , computed as NumPy's npy_divmod does (straight-line, no branches)."""
    ft = x.type
    zero = ir.Constant(ft, 0.0)
    one = ir.Constant(ft, 1.0)
    copysign = overloaded(b.module, "llvm.copysign", ft, [ft, ft])
    raw_mod = lib.call(b, "fmod", [x, y])
    y_is_zero = b.fcmp_ordered("==", y, zero)
    mod_nonzero = b.fcmp_unordered("!=", raw_mod, zero)
    if which == "mod":
        signs_differ = b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", raw_mod, zero))
        fixed = b.select(b.and_(mod_nonzero, signs_differ), b.fadd(raw_mod, y), raw_mod)
        result = b.select(mod_nonzero, fixed, b.call(copysign, [zero, y]))
        return b.select(y_is_zero, raw_mod, result)
    div = b.fdiv(b.fsub(x, raw_mod), y)
    signs_differ = b.xor(b.fcmp_ordered("<", y, zero), b.fcmp_ordered("<", raw_mod, zero))
    div = b.select(b.and_(mod_nonzero, signs_differ), b.fsub(div, one), div)
    floor = overloaded(b.module, "llvm.floor", ft, [ft])
    floored = b.call(floor, [div])
    round_up = b.fcmp_ordered(">", b.fsub(div, floored), ir.Constant(ft, 0.5))
    floored = b.select(round_up, b.fadd(floored, one), floored)
    quotient = b.fdiv(x, y)
    result = b.select(b.fcmp_unordered("!=", div, zero), floored,
                      b.call(copysign, [zero, quotient]))
    return b.select(y_is_zero, quotient, result)


def _int_binop(b: ir.IRBuilder, op: str, t: ScalarType, x: ir.Value, y: ir.Value, loc: Loc,
               name: str) -> ir.Value:
    if op == "add":
        return b.add(x, y, name=name)
    if op == "sub":
        return b.sub(x, y, name=name)
    if op == "mul":
        return b.mul(x, y, name=name)
    if op == "and":
        return b.and_(x, y, name=name)
    if op == "or":
        return b.or_(x, y, name=name)
    if op == "xor":
        return b.xor(x, y, name=name)
    if op in ("floordiv", "mod"):
        if t.is_signed:
            return _signed_divmod(b, x, y, op, name)
        return _unsigned_divmod(b, x, y, op, name)
    if op in ("shl", "shr"):
        return _shift(b, op, t, x, y, name)
    raise CompileError(f"operator {op!r} is not defined on {t} (the front end makes `/` a float "
                       "division and `**` a chain of multiplications)", loc)


def power_of_two_divmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value, which: str, t: ScalarType,
                        name: str = "") -> ir.Value:
    """x // y or x % y for a y known to be a positive power of two: a shift or a mask, exactly
    floor division and Python's modulo in two's complement, negative x included."""
    if which == "mod":
        return b.and_(x, b.sub(y, ir.Constant(x.type, 1)), name=name)
    shift = b.call(overloaded(b.module, "llvm.cttz", x.type, [x.type, I1]), [y, ir.Constant(I1, 1)])
    return b.ashr(x, shift, name=name) if t.is_signed else b.lshr(x, shift, name=name)


def is_power_of_two(b: ir.IRBuilder, y: ir.Value, t: ScalarType, name: str = "") -> ir.Value:
    """y > 0 (signed) or y != 0 (unsigned), with a single bit set."""
    zero = ir.Constant(y.type, 0)
    positive = b.icmp_signed(">", y, zero) if t.is_signed else b.icmp_unsigned("!=", y, zero)
    single_bit = b.icmp_unsigned("==", b.and_(y, b.sub(y, ir.Constant(y.type, 1))), zero)
    return b.and_(positive, single_bit, name=f"{name}.pow2" if name else "")


@dataclass(frozen=True)
class Reciprocal:
    """What `x // d` and `x % d` by one divisor of at most 32 bits need, computed once ahead of
    the code that divides by it (reciprocal_divmod): x86 divides one value at a time, tens of
    cycles each, and a loop that divides is never vectorised; a GPU's division is an emulated
    sequence with branches. By the reciprocal it is a few multiplies per value, without a branch:
    two 32 x 32 -> 64-bit ones on the host (`vpmuludq`, which vectorises), three 32-bit ones
    with `mul.hi.u32` on nvptx."""

    divisor: ir.Value      # d, sign- or zero-extended to i32
    magnitude: ir.Value    # |d| as i32 bits (1 for a zero divisor)
    low: ir.Value          # ceil(2**64 / |d|): its low and high 32 bits (it wraps to 0 for
    high: ir.Value         # |d| == 1)
    unit: ir.Value         # |d| == 1: the quotient is |x| itself
    negative: ir.Value | None  # d < 0 (signed types)
    zero: ir.Value         # d == 0: both results are 0


_I64 = ir.IntType(64)
_THIRTY_TWO = ir.Constant(_I64, 32)


def _magnitude32(b: ir.IRBuilder, x: ir.Value, t: ScalarType) -> tuple[ir.Value, ir.Value | None]:
    """|x| as the bits of an unsigned i32 and x < 0, for a value of at most 32 bits (|INT_MIN| is
    2**(bits-1))."""
    if not t.is_signed:
        return (b.zext(x, I32) if t.bits < 32 else x), None
    x32 = b.sext(x, I32) if t.bits < 32 else x
    negative = b.icmp_signed("<", x32, ir.Constant(I32, 0))
    return b.select(negative, b.sub(ir.Constant(I32, 0), x32), x32), negative


def reciprocal(b: ir.IRBuilder, d: ir.Value, t: ScalarType, name: str = "") -> Reciprocal:
    """The Reciprocal of divisor d (of at most 32 bits): one 64-bit division, where it is."""
    magnitude, negative = _magnitude32(b, d, t)
    one = ir.Constant(I32, 1)
    zero = b.icmp_unsigned("==", magnitude, ir.Constant(I32, 0))
    magnitude = b.select(zero, one, magnitude, name=f"{name}.magnitude")
    multiplier = b.add(b.udiv(ir.Constant(_I64, -1), b.zext(magnitude, _I64)),
                       ir.Constant(_I64, 1), name=f"{name}.reciprocal")
    wide = (b.sext(d, I32) if t.is_signed else b.zext(d, I32)) if t.bits < 32 else d
    return Reciprocal(wide, magnitude, b.trunc(multiplier, I32),
                      b.trunc(b.lshr(multiplier, _THIRTY_TWO), I32),
                      b.icmp_unsigned("==", magnitude, one), negative, zero)


def reciprocal_divmod(b: ir.IRBuilder, x: ir.Value, r: Reciprocal, which: str, t: ScalarType,
                      high_product: Callable[[ir.IRBuilder, ir.Value, ir.Value], ir.Value] | None,
                      name: str = "") -> ir.Value:
    """x // d or x % d with Python's floor semantics (a zero divisor gives 0, INT_MIN // -1 wraps),
    for d of at most 32 bits, from its Reciprocal: floor(|x| / |d|) is the top 64 bits of
    |x| * ceil(2**64 / |d|) for every |x| < 2**32 (Lemire, Kaser and Kurz, "Faster remainder by
    direct computation", 2019, theorem 1), then the signs as _signed_divmod fixes them. The rest
    is i32 arithmetic, which wraps as the narrower result does. `high_product` (the target's
    Lowering.high_product) makes that top half from 32-bit products; without it, from two
    64-bit ones."""
    ax, x_negative = _magnitude32(b, x, t)
    if high_product is None:
        wide = b.zext(ax, _I64)
        low = b.mul(b.zext(r.low, _I64), wide)
        high = b.mul(b.zext(r.high, _I64), wide)
        quotient = b.trunc(b.lshr(b.add(high, b.lshr(low, _THIRTY_TWO)), _THIRTY_TWO), I32)
    else:  # high * 2**64 + (middle + carried) * 2**32 + ...: the top half gains the carry
        middle = b.mul(r.high, ax)
        carried = b.add(middle, high_product(b, r.low, ax))
        carry = b.zext(b.icmp_unsigned("<", carried, middle), I32)
        quotient = b.add(high_product(b, r.high, ax), carry)
    quotient = b.select(r.unit, ax, quotient)
    remainder = b.sub(ax, b.mul(quotient, r.magnitude))
    if t.is_signed:
        assert x_negative is not None and r.negative is not None
        zero32 = ir.Constant(I32, 0)
        signs_differ = b.xor(x_negative, r.negative)
        inexact = b.icmp_unsigned("!=", remainder, zero32)
        if which == "floordiv":  # -(q + 1) where the truncated quotient is negative and inexact
            stepped = b.add(quotient, b.zext(inexact, I32))
            result = b.select(signs_differ, b.sub(zero32, stepped), quotient)
        else:
            truncated = b.select(x_negative, b.sub(zero32, remainder), remainder)
            result = b.select(b.and_(signs_differ, inexact), b.add(truncated, r.divisor),
                              truncated)
    else:
        result = quotient if which == "floordiv" else remainder
    narrowed = b.trunc(result, x.type) if x.type.width < 32 else result
    return b.select(r.zero, ir.Constant(x.type, 0), narrowed, name=name)


def _signed_divmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value, which: str, name: str) -> ir.Value:
    """Floor division / modulo rounding toward -inf; a zero divisor gives 0, INT_MIN // -1 wraps."""
    it = x.type
    zero = ir.Constant(it, 0)
    int_min = ir.Constant(it, -(1 << (it.width - 1)))
    y_is_zero = b.icmp_signed("==", y, zero)
    overflow = b.and_(b.icmp_signed("==", x, int_min), b.icmp_signed("==", y, ir.Constant(it, -1)))
    # Divide by 1 in the two trapping cases: x / 1 == INT_MIN is the wrapped INT_MIN // -1, and the
    # zero-divisor result is replaced below.
    safe_y = b.select(b.or_(y_is_zero, overflow), ir.Constant(it, 1), y)
    rem = b.srem(x, safe_y)
    # C truncates; Python floors: step down when the remainder's sign differs from the divisor's.
    adjust = b.and_(b.icmp_signed("!=", rem, zero),
                    b.icmp_signed("<", b.xor(rem, safe_y), zero))
    if which == "mod":
        result = b.select(adjust, b.add(rem, safe_y), rem)
    else:
        quot = b.sdiv(x, safe_y)
        result = b.select(adjust, b.sub(quot, ir.Constant(it, 1)), quot)
    return b.select(y_is_zero, zero, result, name=name)


def _unsigned_divmod(b: ir.IRBuilder, x: ir.Value, y: ir.Value, which: str, name: str) -> ir.Value:
    it = x.type
    zero = ir.Constant(it, 0)
    y_is_zero = b.icmp_unsigned("==", y, zero)
    safe_y = b.select(y_is_zero, ir.Constant(it, 1), y)
    result = b.urem(x, safe_y) if which == "mod" else b.udiv(x, safe_y)
    return b.select(y_is_zero, zero, result, name=name)


def _shift(b: ir.IRBuilder, op: str, t: ScalarType, x: ir.Value, count: ir.Value,
           name: str) -> ir.Value:
    """Shifts whose count is compared unsigned with the width: out-of-range counts never reach LLVM.
    The count is also masked to the width: without the mask NVPTX folds the select of an
    in-range shift into one shl.b64, whose count it truncates to 32 bits, so a count of 2**32 + 63
    shifted by 63 (tests/differential/reproducers/pingpong-1652447988.json)."""
    it = x.type
    width = ir.Constant(it, t.bits)
    mask = ir.Constant(it, t.bits - 1)
    in_range = b.icmp_unsigned("<", count, width)
    if op == "shr" and t.is_signed:
        # Shifting by width-1 gives exactly the out-of-range result: -1 for negatives, else 0.
        safe = b.and_(b.select(in_range, count, mask), mask)
        return b.ashr(x, safe, name=name)
    safe = b.and_(count, mask)
    shifted = b.shl(x, safe) if op == "shl" else b.lshr(x, safe)
    return b.select(in_range, shifted, ir.Constant(it, 0), name=name)


def unary(b: ir.IRBuilder, op: str, t: ScalarType, x: ir.Value, name: str = "") -> ir.Value:
    if op == "not":
        return b.xor(x, ir.Constant(I1, 1), name=name)
    if op == "neg":
        if t.is_float:
            return b.fneg(x, name=name)  # exact, also for the 16-bit types
        return b.sub(ir.Constant(x.type, 0), x, name=name)
    return b.xor(x, ir.Constant(x.type, -1), name=name)  # invert


def compare(b: ir.IRBuilder, op: str, t: ScalarType, x: ir.Value, y: ir.Value,
            name: str = "") -> ir.Value:
    if t.is_float:
        kind, pred = _FLOAT_CMP[op]
        if kind == "ordered":
            return b.fcmp_ordered(pred, x, y, name=name)
        return b.fcmp_unordered(pred, x, y, name=name)
    if t.is_signed:
        return b.icmp_signed(_INT_CMP[op], x, y, name=name)
    return b.icmp_unsigned(_INT_CMP[op], x, y, name=name)


def cast(b: ir.IRBuilder, v: ir.Value, src: ScalarType, dst: ScalarType, name: str = "") -> ir.Value:
    if src == dst:
        return v
    if dst.is_bool:
        zero = ir.Constant(v.type, 0.0 if src.is_float else 0)
        if src.is_float:
            return b.fcmp_unordered("!=", v, zero, name=name)
        return b.icmp_unsigned("!=", v, zero, name=name)
    if not src.is_float and not dst.is_float:
        if dst.bits < src.bits:
            return b.trunc(v, reg_type(dst), name=name)
        if src.is_signed:
            return b.sext(v, reg_type(dst), name=name)
        return b.zext(v, reg_type(dst), name=name)
    if not src.is_float:
        return _int_to_float(b, v, src, dst, name)
    if not dst.is_float:
        kind = "llvm.fptosi.sat" if dst.is_signed else "llvm.fptoui.sat"
        fn = overloaded(b.module, kind, reg_type(dst), [v.type], [reg_type(dst), v.type])
        return b.call(fn, [v], name=name)  # saturating; NaN gives 0
    return _float_to_float(b, v, src, dst, name)


def _int_to_float(b: ir.IRBuilder, v: ir.Value, src: ScalarType, dst: ScalarType,
                  name: str) -> ir.Value:
    def convert(value: ir.Value, to: ir.Type, name: str = "") -> ir.Value:
        if src.is_signed:
            return b.sitofp(value, to, name=name)
        return _unsigned_to_float(b, value, to, name)

    if dst.name == "f16":
        # Exact through f32 below 2^24, and anything larger becomes inf in half either way.
        return b.fpext(b.fptrunc(convert(v, F32), F16), F32, name=name)
    if dst.name == "bf16":
        return round_bf16(b, convert(v, F32), name)
    return convert(v, reg_type(dst), name=name)


def _unsigned_to_float(b: ir.IRBuilder, v: ir.Value, to: ir.Type, name: str) -> ir.Value:
    """An unsigned integer to a float without `uitofp`. LLVM 22's SLP vectoriser narrows a
    `uitofp` whose operand has many sign bits (`uitofp (sext i8 x to i64)`) to a narrower
    `uitofp`, which is wrong for a negative x: u64(i8(-5)) became 2**32 - 5 in f32
    (tests/differential/reproducers/mixed-645014325). `sitofp` of a non-negative value is what
    it narrows correctly: narrower integers are zero-extended first; a 64-bit one at or above
    2**63 is halved keeping its last bit (so it rounds alike) and doubled back."""
    width = v.type.width
    if width < 64:
        return b.sitofp(b.zext(v, ir.IntType(2 * width if width >= 16 else 32)), to, name=name)
    one = ir.Constant(v.type, 1)
    halved = b.or_(b.lshr(v, one), b.and_(v, one))
    twice = b.sitofp(halved, to)
    large = b.fadd(twice, twice)
    return b.select(b.icmp_signed("<", v, ir.Constant(v.type, 0)), large, b.sitofp(v, to), name=name)


def _float_to_float(b: ir.IRBuilder, v: ir.Value, src: ScalarType, dst: ScalarType,
                    name: str) -> ir.Value:
    if dst.bits == 64:
        return b.fpext(v, reg_type(dst), name=name)
    if dst.name == "f16":
        via = _f64_to_f32_odd(b, v) if src.bits == 64 else v
        return b.fpext(b.fptrunc(via, F16), F32, name=name)
    narrowed = b.fptrunc(v, F32) if src.bits == 64 else v
    if dst.name == "bf16":
        return round_bf16(b, narrowed, name)  # from f64: rounded to f32 first
    return narrowed  # f16/bf16 -> f32 changes nothing in registers


def _f64_to_f32_odd(b: ir.IRBuilder, v: ir.Value) -> ir.Value:
    """f64 -> f32 rounding to odd: truncate, and set the last bit when inexact.

    x86 has no f64 -> f16 instruction (LLVM would call a compiler-rt helper the JIT cannot
    resolve). Rounding to odd first keeps the f32 -> f16 rounding that follows exact: f32 has more
    than two extra bits of precision.
    """
    nearest = b.fptrunc(v, F32)
    exact = b.fcmp_ordered("==", b.fpext(nearest, v.type), v)
    bits = b.bitcast(nearest, I32)
    # Nearest rounded away from zero when |nearest| > |v|: step one unit back toward zero.
    fabs64 = overloaded(b.module, "llvm.fabs", v.type, [v.type])
    away = b.fcmp_ordered(">", b.call(fabs64, [b.fpext(nearest, v.type)]), b.call(fabs64, [v]))
    truncated = b.select(away, b.sub(bits, ir.Constant(I32, 1)), bits)
    odd = b.bitcast(b.or_(truncated, ir.Constant(I32, 1)), F32)
    is_nan = b.fcmp_unordered("uno", v, v)
    return b.select(b.or_(exact, is_nan), nearest, odd)
