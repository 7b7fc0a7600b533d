"""The kernel language's arithmetic, identical on every target (docs/language.md, "Semantics").

Expected values come from NumPy, whose integer //, %, shifts and float //, % follow the same rules
(zero divisors give 0, shifts past the width give 0 or -1, floor division); casts saturate.
"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import types as T
from hpvm_py.ir import semantics as S
from programs import semantic_kernels as K

INT_TYPES = [T.i8, T.i32, T.i64, T.u8, T.u32, T.u64]
FLOAT_TYPES = [T.f16, T.f32, T.f64]
_cache: dict = {}


def graph(kind: str, *types):
    key = (kind, types)
    if key not in _cache:
        if kind == "binary":
            leaf = K.make_binary(types[0], None)
        elif kind == "int":
            leaf = K.make_int_only(types[0])
        elif kind == "float":
            leaf = K.make_float_only(types[0])
        else:
            leaf = K.make_cast(*types)
        _cache[key] = K.make_graph(leaf, 2 if kind == "cast" else 3)
    return _cache[key]


def edge_values(t: T.ScalarType, rng, n: int) -> np.ndarray:
    dt = t.numpy_dtype
    if t.is_float:
        with np.errstate(over="ignore"):
            special = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -2.5, 3.0, np.inf, -np.inf, np.nan, 1e30, -7.25], dt)
        return np.concatenate([special, (rng.standard_normal(n) * 100).astype(dt)])
    info = np.iinfo(dt)
    special = [0, 1, 2, 3, info.max, info.min, info.max - 1, info.min + 1]
    if t.is_signed:
        special += [-1, -2, -3, -7, 7]
    return np.concatenate([np.array(special, dtype=dt),
                           rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)])


def run(target: str, g, *arrays_and_scalars):
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(g, *arrays_and_scalars))


def pairs(t, rng):
    a = edge_values(t, rng, 200)
    b = edge_values(t, rng, 200)
    # every special value against every special value, plus random pairs
    k = 13 if t.is_signed or t.is_float else 8
    sa, sb = np.meshgrid(a[:k], b[:k])
    return np.concatenate([sa.ravel(), a]), np.concatenate([sb.ravel(), rng.permutation(b)])


BINARY = {0: np.add, 1: np.subtract, 2: np.multiply, 3: np.floor_divide, 4: np.remainder,
          5: np.minimum, 6: np.maximum}


@pytest.mark.parametrize("t", INT_TYPES + FLOAT_TYPES, ids=str)
@pytest.mark.parametrize("op", list(range(12)))
def test_arithmetic(target: str, t, op: int, rng) -> None:
    a, b = pairs(t, rng)
    c = np.zeros_like(a)
    run(target, graph("binary", t), a, a.nbytes, b, b.nbytes, c, c.nbytes, op, len(a))
    with np.errstate(all="ignore"):
        if op in BINARY:
            expected = BINARY[op](a, b)
        elif op == 7:
            expected = (a == b).astype(a.dtype)
        elif op == 8:
            expected = (a < b).astype(a.dtype)
        elif op == 9:
            expected = -a
        elif op == 10:
            expected = np.abs(a)
        else:
            expected = (a >= b).astype(a.dtype)
    np.testing.assert_array_equal(c, expected.astype(a.dtype))


@pytest.mark.parametrize("t", INT_TYPES, ids=str)
@pytest.mark.parametrize("op", list(range(6)))
def test_bitwise_and_shifts(target: str, t, op: int, rng) -> None:
    a, b = pairs(t, rng)
    if op in (3, 4):  # shift counts around and past the width, and negative ones
        counts = np.concatenate([np.arange(-3, t.bits + 3), rng.integers(0, t.bits, len(a))])
        b = counts[: len(a)].astype(a.dtype) if t.is_signed else np.abs(counts[: len(a)]).astype(a.dtype)
    c = np.zeros_like(a)
    run(target, graph("int", t), a, a.nbytes, b, b.nbytes, c, c.nbytes, op, len(a))
    ufunc = [np.bitwise_and, np.bitwise_or, np.bitwise_xor, np.left_shift, np.right_shift]
    expected = ufunc[op](a, b) if op < 5 else np.invert(a)
    np.testing.assert_array_equal(c, expected.astype(a.dtype))


@pytest.mark.parametrize("t", INT_TYPES, ids=str)
def test_division_by_one_divisor_for_the_launch(target: str, t, rng) -> None:
    """// and % by a scalar parameter, and // by an expression of it (d * 4, which wraps): powers
    of two (run as shifts and masks on cpu and nvptx), the top bit (INT_MIN when signed), other
    values, zero and negative divisors."""
    if ("divide", t) not in _cache:
        _cache[("divide", t)] = K.make_by_divisor(t)
    a = edge_values(t, rng, 300)
    info = np.iinfo(t.numpy_dtype)
    divisors = [1 << k for k in range(0, t.bits, 3)] + [1 << (t.bits - 1), 3, 7, 100, 0, info.max]
    if t.is_signed:
        divisors += [-1, -2, -8, info.min + 1]
    for d in divisors:
        d = t.numpy_dtype.type(d if d <= info.max else d - (1 << t.bits))  # 2**(bits-1): INT_MIN
        q, r, q4 = np.zeros_like(a), np.zeros_like(a), np.zeros_like(a)
        run(target, _cache[("divide", t)], a, a.nbytes, q, q.nbytes, r, r.nbytes, q4, q4.nbytes, d,
            len(a))
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(q, np.floor_divide(a, d), err_msg=f"// {d}")
            np.testing.assert_array_equal(r, np.remainder(a, d), err_msg=f"% {d}")
            np.testing.assert_array_equal(q4, np.floor_divide(a, d * t.numpy_dtype.type(4)),
                                          err_msg=f"// ({d} * 4)")


@pytest.mark.parametrize("t", [T.i8, T.i16, T.i32, T.i64], ids=str)
def test_abs_of_the_minimum_feeds_later_operations(target: str, t, rng) -> None:
    """abs(INT_MIN) is INT_MIN, also for what uses it next: on nvptx an i16 abs became abs.s16,
    whose result ptxas's shr.s16 then shifted as +32768
    (tests/differential/reproducers/pingpong-1158526871.json)."""
    if ("abs", t) not in _cache:
        _cache[("abs", t)] = K.make_abs_uses(t)
    a = edge_values(t, rng, 100)
    for k in (1, t.bits - 1):
        shifted, negative = np.zeros_like(a), np.zeros_like(a)
        wide = np.zeros(a.size, np.int64)
        run(target, _cache[("abs", t)], a, a.nbytes, shifted, shifted.nbytes, negative,
            negative.nbytes, wide, wide.nbytes, t.numpy_dtype.type(k), len(a))
        absolute = np.abs(a)  # wraps: abs(INT_MIN) == INT_MIN
        np.testing.assert_array_equal(shifted, absolute >> k, err_msg=f">> {k}")
        np.testing.assert_array_equal(negative, (absolute < 0).astype(a.dtype))
        np.testing.assert_array_equal(wide, absolute.astype(np.int64))


@pytest.mark.parametrize("t", [T.i8, T.i16, T.i32, T.i64], ids=str)
def test_negation_inside_nested_min_max(target: str, t, rng) -> None:
    """min(min(s * t, -x), t) and its kin keep the negation: ptxas folded a `neg` into a
    three-way min and dropped its sign on nvptx and gpu
    (tests/differential/reproducers/plain-1820096542.json)."""
    if ("negations", t) not in _cache:
        _cache[("negations", t)] = K.make_negations_in_min_max(t)
    a = edge_values(t, rng, 200)
    info = np.iinfo(t.numpy_dtype)
    for s, u in [(3, -3), (-7, 11), (0, info.min), (1, info.max), (info.max, 2)]:
        s, u = t.numpy_dtype.type(s), t.numpy_dtype.type(u)
        lo, hi, low_abs = np.zeros_like(a), np.zeros_like(a), np.zeros_like(a)
        run(target, _cache[("negations", t)], a, a.nbytes, lo, lo.nbytes, hi, hi.nbytes, low_abs,
            low_abs.nbytes, s, u, len(a))
        with np.errstate(all="ignore"):
            product = s * u  # wraps, as the leaf's does
            negated = np.negative(a)
            np.testing.assert_array_equal(lo, np.minimum(np.minimum(product, negated), u))
            np.testing.assert_array_equal(hi, np.maximum(np.maximum(product, negated), u))
            np.testing.assert_array_equal(
                low_abs, np.minimum(np.minimum(product, np.negative(np.abs(a))), u))


@pytest.mark.parametrize("t", [T.i8, T.i16, T.i32, T.i64], ids=str)
def test_negated_arithmetic_shifts(target: str, t, rng) -> None:
    """-((ty - 1) >> 1) over 8 x 8 blocks and -((a - 1) >> k): on gpu under triton 3.6, ptxas
    took LLVM's ((-ty) >> 1) + 1 for -(ty >> 1) + 1 on odd ty (reproducers/tiles-3646318069)."""
    if ("negated_shifts", t) not in _cache:
        _cache[("negated_shifts", t)] = K.make_negated_shifts(t)
    blocks = 2
    a = edge_values(t, rng, 64 * blocks)[:64 * blocks]
    ty = np.arange(64 * blocks) % 64 // 8
    with np.errstate(all="ignore"):
        want_id = np.negative((ty.astype(t.numpy_dtype) - t.numpy_dtype.type(1)) >> 1)
        for k in (1, 3, t.bits - 1):
            by_id, by_value = np.zeros_like(a), np.zeros_like(a)
            run(target, _cache[("negated_shifts", t)], a, a.nbytes, by_id, by_id.nbytes, by_value,
                by_value.nbytes, t.numpy_dtype.type(k), blocks)
            np.testing.assert_array_equal(by_id, want_id)
            np.testing.assert_array_equal(by_value, np.negative((a - t.numpy_dtype.type(1)) >> k))


@pytest.mark.parametrize("t", [T.f16, T.f32, T.f64], ids=str)
def test_selects_of_signed_zeros(target: str, t, rng) -> None:
    """T(k) or -0.0 chosen by a comparison, as an expression, a masked assignment and fmin's
    operand: with k = 1 ptxas 12.8 (triton 3.6) made the select FSET.BF, whose false result is
    +0.0 (reproducers/plain-1637228348). Results compared bit for bit."""
    key = ("signed_zero_selects", t)
    if key not in _cache:
        _cache[key] = K.make_signed_zero_selects(t)
    dtype = t.numpy_dtype
    a = np.concatenate([np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 0.05, 0.1, 0.7, 1.0, 3.0],
                                 dtype), edge_values(t, rng, 22)[:22]])
    zero = dtype.type(-0.0)
    for k in (1, 2):
        outs = [np.full_like(a, 7) for _ in range(4)]
        args = [v for out in outs for v in (out, out.nbytes)]
        run(target, _cache[key], a, a.nbytes, *args, k, len(a))
        kk = dtype.type(k)
        with np.errstate(invalid="ignore"):
            low = dtype.type(0.1) >= a
            want_chosen = np.where(low, kk, zero)
            want = [want_chosen, np.where(a > dtype.type(0.5), zero, kk), np.where(a <= dtype.type(0.1), kk, zero),
                    np.where(np.isnan(a), want_chosen, np.where((a < want_chosen) | ((a == want_chosen) & np.signbit(a)), a, want_chosen))]
        for name, got, expected in zip(("chosen", "swapped", "masked", "smaller"), outs, want):
            bits = f"u{dtype.itemsize}"
            np.testing.assert_array_equal(got.view(bits), expected.astype(dtype).view(bits),
                                          err_msg=f"{name}, k = {k}")


@pytest.mark.parametrize("t", [T.f16, T.f32, T.f64], ids=str)
def test_order_compares_of_ranged_values_with_nan(target: str, t, rng) -> None:
    """abs(x) > -1.0, exp(x) >= 0.0 and sin(x) < 2.0 are false for a NaN x, and min(-1.0, abs(x))
    is NaN: ptxas takes those values to be in a range and decided the compares true
    (reproducers/tiles-947270095)."""
    key = ("range_compares", t)
    if key not in _cache:
        _cache[key] = K.make_range_compares(t)
    dtype = t.numpy_dtype
    a = np.concatenate([np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, -3.0, 2.5], dtype),
                        edge_values(t, rng, 24)[:24]])
    rng.shuffle(a)
    lower = np.full_like(a, 7)
    flags = [np.full(len(a), 7, np.int32) for _ in range(3)]
    run(target, _cache[key], a, a.nbytes, lower, lower.nbytes,
        *[v for f in flags for v in (f, f.nbytes)], len(a))
    number = ~np.isnan(a)
    np.testing.assert_array_equal(lower, np.where(number, dtype.type(-1.0), np.nan))
    for name, got, want in zip(("abs(x) > -1", "exp(x) >= 0", "sin(x) < 2"), flags,
                               (number, number, np.isfinite(a))):
        np.testing.assert_array_equal(got, want.astype(np.int32), err_msg=f"{name} of {a}")


@pytest.mark.parametrize("signed,unsigned", [(T.i8, T.u64), (T.i16, T.u64), (T.i32, T.u64),
                                             (T.i64, T.u64), (T.i8, T.u32), (T.i8, T.u16)], ids=str)
@pytest.mark.parametrize("f", [T.f32, T.f64], ids=str)
def test_unsigned_conversions_of_sign_extended_values(target: str, signed, unsigned, f, rng) -> None:
    """F(U(S(x))) for negative x is near 2**bits(U): LLVM's SLP vectoriser narrowed such a
    `uitofp (sext x)` on cpu and gave 2**32 - k for u64 (reproducers/mixed-645014325). Six and
    nine instances: the loop's vector body and its remainder."""
    key = ("unsigned_conversions", signed, unsigned, f)
    if key not in _cache:
        _cache[key] = K.make_unsigned_conversions(signed, unsigned, f)
    for n in (6, 9, 64):
        a = np.concatenate([rng.integers(-2**63, 2**63 - 1, n - 4, dtype=np.int64, endpoint=True),
                            np.array([-5, -1, 2**62 + 2**40 + 1, -2**63], np.int64)])
        out, capped = np.zeros(n, f.numpy_dtype), np.zeros(n, f.numpy_dtype)
        run(target, _cache[key], a, a.nbytes, out, out.nbytes, capped, capped.nbytes, n)
        x = a[(np.arange(n) * 7 + 3) % n].astype(signed.numpy_dtype)
        np.testing.assert_array_equal(out, x.astype(unsigned.numpy_dtype).astype(f.numpy_dtype))
        low = np.minimum(x, signed.numpy_dtype.type(82))
        np.testing.assert_array_equal(capped, low.astype(unsigned.numpy_dtype).astype(f.numpy_dtype))


@pytest.mark.parametrize("t", [T.i8, T.u8, T.i16, T.u16, T.i32], ids=str)
def test_narrow_min_max_compared_with_an_operand(target: str, t, rng) -> None:
    """1 // d and 1 % d by a divisor from a scalar, and min(d, k) == k: on nvptx and gpu, ptxas
    made a 16-bit min/max compared with one of its operands (the zero-divisor guard max(d, 1),
    which LLVM compares with 1 for `1 // d`) a VIMNMX.U16x2 whose predicate it read wrongly
    (tests/differential/reproducers/plain-2409086397.json)."""
    if ("guards", t) not in _cache:
        _cache[("guards", t)] = K.make_narrow_guards(t)
    a = edge_values(t, rng, 300)
    info = np.iinfo(t.numpy_dtype)
    wide = a.astype(np.int64)

    def floor_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:  # a zero divisor gives 0
        return np.where(y == 0, 0, x // np.where(y == 0, 1, y))

    def floor_mod(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(y == 0, 0, x % np.where(y == 0, 1, y))

    def narrow(v: np.ndarray) -> np.ndarray:
        return np.asarray(v, np.int64).astype(a.dtype)  # wraps to the type

    for k, s in ((0, -1661203862), (1, 1), (64, 0), (info.max, 32), (info.min, -7)):
        k = t.numpy_dtype.type(k)
        q, r, capped = np.zeros_like(a), np.zeros_like(a), np.zeros_like(a)
        run(target, _cache[("guards", t)], a, a.nbytes, q, q.nbytes, r, r.nbytes, capped,
            capped.nbytes, k, np.int32(s), len(a))
        shifted, doubled = narrow((s * 8) & 0xFFFFFFFF), narrow((s * 2) & 0xFFFFFFFF)
        want_q = np.minimum(narrow(floor_div(1, shifted.astype(np.int64))), a)
        want_r = narrow(floor_mod(1, doubled.astype(np.int64)) + floor_div(1, wide))
        np.testing.assert_array_equal(q, want_q, err_msg=f"s = {s}")
        np.testing.assert_array_equal(r, want_r, err_msg=f"s = {s}")
        want = (np.minimum(a, k) == k).astype(np.int64) + (np.maximum(a, k) == k)
        np.testing.assert_array_equal(capped, narrow(want), err_msg=f"k = {k}")


@pytest.mark.parametrize("t", FLOAT_TYPES, ids=str)
@pytest.mark.parametrize("op", list(range(10)))
def test_float_functions(target: str, t, op: int, rng) -> None:
    a, b = pairs(t, rng)
    c = np.zeros_like(a)
    run(target, graph("float", t), a, a.nbytes, b, b.nbytes, c, c.nbytes, op, len(a))
    with np.errstate(all="ignore"):
        fns = [np.true_divide, lambda x, y: np.sqrt(x), lambda x, y: np.floor(x),
               lambda x, y: np.ceil(x), lambda x, y: np.rint(x), np.fmin, np.fmax, S.copysign,
               lambda x, y: (x != y).astype(x.dtype), lambda x, y: (x <= y).astype(x.dtype)]
        expected = fns[op](a, b).astype(a.dtype)
    np.testing.assert_array_equal(c, expected)


CASTS = [(T.f32, T.i32), (T.f64, T.i64), (T.f32, T.u8), (T.f64, T.u64), (T.f32, T.i8),
         (T.i64, T.i8), (T.u32, T.i16), (T.i32, T.f32), (T.i64, T.f64), (T.u64, T.f32),
         (T.f64, T.f32), (T.f32, T.f16), (T.f16, T.f64), (T.i8, T.u64), (T.f32, T.bf16)]


@pytest.mark.parametrize("src,dst", CASTS, ids=lambda t: str(t))
def test_casts_saturate_and_wrap(target: str, src, dst, rng) -> None:
    a = edge_values(src, rng, 300)
    if src.is_float:
        with np.errstate(over="ignore"):  # 2**64 is inf in f16: an edge case on purpose
            extra = np.array([2.0**31, -2.0**31 - 1e3, 2.0**63, 2.0**64, 255.9, -0.9, 127.5], src.numpy_dtype)
        a = np.concatenate([a, extra])
    c = np.zeros(len(a), dst.numpy_dtype)
    run(target, graph("cast", src, dst), a, a.nbytes, c, c.nbytes, len(a))
    expected = S.cast(a, src, dst)
    if dst == T.bf16:
        expected = S.bf16_to_bits(expected)
    np.testing.assert_array_equal(c, expected)
