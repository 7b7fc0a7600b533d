"""cpu backend: operators, comparisons and casts against exact Python/NumPy references."""
from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
from llvmlite import ir

from cpu_harness import assert_floats, bf16_to_f32, f32_to_bf16, leaves_from_source, run
from hpvm_py import types as T
from hpvm_py.backends import jit
from hpvm_py.backends.cpu import arith

INT_TYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
FLOAT_TYPES = ["f16", "bf16", "f32", "f64"]
INT_OPS = {"add": "+", "sub": "-", "mul": "*", "floordiv": "//", "mod": "%", "and": "&",
           "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
FLOAT_OPS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}
CMP_OPS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}

# NumPy warns when a reference conversion overflows to inf, which is the expected result.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

rng = np.random.default_rng(1234)


def _binop_leaf(t: str, ops: dict[str, str]):
    outs = "".join(f", o_{name}: Out[Ptr[{t}]], o_{name}_bytes: i64" for name in ops)
    body = "".join(f"    o_{name}[i] = a[i] {sym} b[i]\n" for name, sym in ops.items())
    src = (f"@hpvm.leaf\ndef binops_{t}(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], "
           f"b_bytes: i64{outs}):\n    i = hpvm.get_node_instance_id_x(hpvm.get_node())\n{body}")
    return getattr(leaves_from_source(src), f"binops_{t}")


def _wrap(v: int, t: T.ScalarType) -> int:
    v &= (1 << t.bits) - 1
    return v - (1 << t.bits) if t.is_signed and v >> (t.bits - 1) else v


def _int_reference(op: str, x: int, y: int, t: T.ScalarType) -> int:
    if op in ("floordiv", "mod"):
        if y == 0:
            return 0
        return _wrap(x // y if op == "floordiv" else x % y, t)
    if op in ("shl", "shr"):
        count = y & ((1 << t.bits) - 1)  # the count is compared unsigned
        if count >= t.bits:
            return -1 if (op == "shr" and x < 0) else 0
        return _wrap(x << count, t) if op == "shl" else x >> count
    result = {"add": x + y, "sub": x - y, "mul": x * y, "and": x & y, "or": x | y,
              "xor": x ^ y}[op]
    return _wrap(result, t)


def _int_inputs(t: T.ScalarType, n: int = 400) -> tuple[np.ndarray, np.ndarray]:
    lo, hi = t.min_value(), t.max_value()
    edges = [0, 1, 2, 3, lo, hi, lo + 1, hi - 1] + ([-1, -2, -7, 7] if t.is_signed else [7, 255])
    a = rng.integers(lo, hi, n, endpoint=True, dtype=np.int64 if t.is_signed else np.uint64)
    b = rng.integers(lo, hi, n, endpoint=True, dtype=a.dtype)
    small = rng.integers(-3 if t.is_signed else 0, t.bits + 3, n // 4)  # shift counts and divisors
    b[: n // 4] = small.astype(a.dtype)
    pairs = [(x, y) for x in edges for y in edges]
    a[-len(pairs):] = [x for x, _ in pairs]
    b[-len(pairs):] = [y for _, y in pairs]
    return a.astype(t.numpy_dtype), b.astype(t.numpy_dtype)


@pytest.mark.parametrize("tname", INT_TYPES)
def test_integer_operators_exact(tname):
    t = T.SCALAR_TYPES[tname]
    a, b = _int_inputs(t)
    outs = [np.zeros_like(a) for _ in INT_OPS]
    args = [a, None, b, None]
    for o in outs:
        args += [o, None]
    run(_binop_leaf(tname, INT_OPS), [(a.size,)], *args)
    for (op, _), got in zip(INT_OPS.items(), outs):
        want = np.array([_int_reference(op, int(x), int(y), t) for x, y in zip(a, b)],
                        dtype=object).astype(t.numpy_dtype)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, f"{tname} {op}: {a[bad[0]]} {op} {b[bad[0]]} = {got[bad[0]]}, " \
                              f"want {want[bad[0]]}"


def _divisor_functions(t: T.ScalarType) -> dict[str, Any]:
    """floordiv(x, y), mod(x, y) by a power of two and is_pow2(y), as the nvptx target emits them
    (arith.power_of_two_divmod, arith.is_power_of_two), compiled for the host."""
    it = ir.IntType(t.bits)
    module = ir.Module(name=f"pow2_{t.name}")
    module.triple = jit.target_machine().triple
    for which in ("floordiv", "mod"):
        fn = ir.Function(module, ir.FunctionType(it, [it, it]), name=which)
        b = ir.IRBuilder(fn.append_basic_block())
        b.ret(arith.power_of_two_divmod(b, fn.args[0], fn.args[1], which, t))
    fn = ir.Function(module, ir.FunctionType(ir.IntType(8), [it]), name="is_pow2")
    b = ir.IRBuilder(fn.append_basic_block())
    b.ret(b.zext(arith.is_power_of_two(b, fn.args[0], t), ir.IntType(8)))
    loaded = jit.LoadedObject(jit.emit_object(jit.optimize(str(module))))
    c_int = getattr(ctypes, f"c_{'' if t.is_signed else 'u'}int{t.bits}")
    binary, unary = ctypes.CFUNCTYPE(c_int, c_int, c_int), ctypes.CFUNCTYPE(ctypes.c_int8, c_int)
    return {"loaded": loaded, "floordiv": binary(loaded.address("floordiv")),
            "mod": binary(loaded.address("mod")), "is_pow2": unary(loaded.address("is_pow2"))}


@pytest.mark.parametrize("tname", INT_TYPES)
def test_power_of_two_divisors_as_shifts_and_masks(tname):
    """The nvptx target runs a leaf's // and % by a launch-wide divisor as a shift and a mask
    when the divisor is a power of two: exactly floor division and Python's modulo for every
    dividend (negative ones, INT_MIN and the top bit included), and the test that picks that
    version is true for 2**k alone (0, negative values and INT_MIN are not, unsigned 2**(bits-1)
    is)."""
    t = T.SCALAR_TYPES[tname]
    fns = _divisor_functions(t)
    a, _ = _int_inputs(t, 200)
    for k in range(t.bits - (1 if t.is_signed else 0)):
        for x in (int(v) for v in a):
            for op in ("floordiv", "mod"):
                got, want = fns[op](x, 1 << k), _int_reference(op, x, 1 << k, t)
                assert got == want, f"{tname}: {x} {op} {1 << k} = {got}, want {want}"
    lo, hi = t.min_value(), t.max_value()
    for y in (y for y in (0, 1, 2, 3, 6, 64, 96, lo, hi, lo + 1, hi - 1, -1, -2, -64) if lo <= y <= hi):
        want = y > 0 and y & (y - 1) == 0
        assert fns["is_pow2"](y) == want, f"{tname}: is_pow2({y})"


def _host_high_product(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """The top half of a 32 x 32-bit product on the host, standing in for nvptx's mul.hi.u32."""
    i64 = ir.IntType(64)
    product = b.mul(b.zext(x, i64), b.zext(y, i64))
    return b.trunc(b.lshr(product, ir.Constant(i64, 32)), ir.IntType(32))


def _reciprocal_loop(t: T.ScalarType, high_product: Any) -> tuple[Any, Any]:
    """divide(x, q, r, n, d): q[k], r[k] = x[k] // d, x[k] % d by d's arith.Reciprocal, made once
    ahead of the loop as the cpu driver makes it (LLVM may vectorise the loop), for the host;
    the quotient from 64-bit products (high_product None, the cpu target's) or from 32-bit ones
    (nvptx's)."""
    it, i64 = ir.IntType(t.bits), ir.IntType(64)
    ptr = it.as_pointer()
    module = ir.Module(name=f"reciprocal_{t.name}")
    module.triple = jit.target_machine().triple
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr, i64, it]), name="divide")
    x, q, r, n, d = fn.args
    entry, loop, done = (fn.append_basic_block(name) for name in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    recip = arith.reciprocal(b, d, t, "d")
    b.cbranch(b.icmp_signed(">", n, ir.Constant(i64, 0)), loop, done)
    b.position_at_end(loop)
    k = b.phi(i64)
    k.add_incoming(ir.Constant(i64, 0), entry)
    value = b.load(b.gep(x, [k]))
    for which, out in (("floordiv", q), ("mod", r)):
        b.store(arith.reciprocal_divmod(b, value, recip, which, t, high_product), b.gep(out, [k]))
    following = b.add(k, ir.Constant(i64, 1))
    k.add_incoming(following, loop)
    b.cbranch(b.icmp_signed("<", following, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    loaded = jit.LoadedObject(jit.emit_object(jit.optimize(str(module))))
    c_int = getattr(ctypes, f"c_{'' if t.is_signed else 'u'}int{t.bits}")
    c_ptr = ctypes.c_void_p
    return loaded, ctypes.CFUNCTYPE(None, c_ptr, c_ptr, c_ptr, ctypes.c_int64, c_int)(
        loaded.address("divide"))


@pytest.mark.parametrize("high_product", [None, _host_high_product], ids=["wide", "halves"])
@pytest.mark.parametrize("tname", ["i8", "u8", "i16", "u16", "i32", "u32"])
def test_division_by_a_reciprocal_is_floor_division(tname, high_product):
    """The cpu and nvptx targets divide by a launch-wide divisor of at most 32 bits that is not a
    power of two through its reciprocal (arith.reciprocal_divmod): exactly Python's // and % (a zero
    divisor gives 0, INT_MIN // -1 wraps) for every dividend of 8 and 16 bits, and for the edges
    and random values of 32 bits, by edge, power-of-two-neighbour and random divisors."""
    t = T.SCALAR_TYPES[tname]
    loaded, divide = _reciprocal_loop(t, high_product)  # (the code lives as long as `loaded`)
    dtype = t.numpy_dtype
    lo, hi = t.min_value(), t.max_value()
    if t.bits <= 16:
        x = np.arange(lo, hi + 1, dtype=np.int64).astype(dtype)
    else:
        x, _ = _int_inputs(t, 20000)
        x = np.concatenate([x, np.array([lo, lo + 1, hi, hi - 1, 0, 1], dtype=dtype)])
    near_powers = {s * ((1 << k) + e) for k in range(1, t.bits) for e in (-1, 1) for s in (1, -1)}
    randoms = {int(v) for v in rng.integers(lo, hi, 64, endpoint=True)}
    divisors = sorted(v for v in {0, 1, -1, 2, 3, 7, -7, 10, 255, 1000, lo, hi, lo + 1, hi - 1}
                      | near_powers | randoms if lo <= v <= hi)
    if t.bits == 8:
        divisors = list(range(lo, hi + 1))
    wide = x.astype(np.int64)
    for d in divisors:
        q, r = np.zeros_like(x), np.zeros_like(x)
        divide(x.ctypes.data, q.ctypes.data, r.ctypes.data, x.size, d)
        if d == 0:
            want_q = want_r = np.zeros_like(x)
        else:
            want_q = (wide // d).astype(dtype)  # wraps: INT_MIN // -1 is INT_MIN
            want_r = (wide % d).astype(dtype)
        np.testing.assert_array_equal(q, want_q, err_msg=f"{tname} // {d}")
        np.testing.assert_array_equal(r, want_r, err_msg=f"{tname} % {d}")


def test_int_min_floordiv_minus_one_does_not_trap():
    for tname in ("i32", "i64", "i8"):
        t = T.SCALAR_TYPES[tname]
        a = np.array([t.min_value(), t.min_value(), -7, 7, -7, 7], dtype=t.numpy_dtype)
        b = np.array([-1, 0, 2, -2, 0, 0], dtype=t.numpy_dtype)
        outs = [np.zeros_like(a) for _ in INT_OPS]
        args = [a, None, b, None]
        for o in outs:
            args += [o, None]
        run(_binop_leaf(tname, INT_OPS), [(a.size,)], *args)
        div, mod = outs[3], outs[4]
        assert list(div) == [t.min_value(), 0, -4, -4, 0, 0]
        assert list(mod) == [0, 0, 1, -1, 0, 0]


def _float_inputs(t: T.ScalarType, n: int = 300) -> tuple[np.ndarray, np.ndarray]:
    specials = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 0.5, np.inf, -np.inf, np.nan, 3.0, -3.0,
                         1e-3, 7.0, -7.0])
    a = rng.standard_normal(n) * 10
    b = rng.standard_normal(n) * 3
    pairs = [(x, y) for x in specials for y in specials]
    a = np.concatenate([a, [x for x, _ in pairs]])
    b = np.concatenate([b, [y for _, y in pairs]])
    if t.name == "bf16":
        return f32_to_bf16(a), f32_to_bf16(b)
    return a.astype(t.numpy_dtype), b.astype(t.numpy_dtype)


def _as_compute(x: np.ndarray, t: T.ScalarType) -> np.ndarray:
    """Values as the computation sees them: 16-bit types in f32."""
    if t.name == "bf16":
        return bf16_to_f32(x)
    return x.astype(np.float32) if t.name == "f16" else x


def _round_back(x: np.ndarray, t: T.ScalarType) -> np.ndarray:
    if t.name == "bf16":
        return bf16_to_f32(f32_to_bf16(x))
    return x.astype(np.float16) if t.name == "f16" else x


@pytest.mark.parametrize("tname", FLOAT_TYPES)
def test_float_operators(tname):
    t = T.SCALAR_TYPES[tname]
    a, b = _float_inputs(t)
    outs = [np.zeros_like(a) for _ in FLOAT_OPS]
    args = [a, None, b, None]
    for o in outs:
        args += [o, None]
    run(_binop_leaf(tname, FLOAT_OPS), [(a.size,)], *args)
    x, y = _as_compute(a, t), _as_compute(b, t)
    with np.errstate(all="ignore"):
        refs = {"add": x + y, "sub": x - y, "mul": x * y, "div": x / y,
                "floordiv": np.floor_divide(x, y), "mod": np.remainder(x, y)}
    for (op, _), got in zip(FLOAT_OPS.items(), outs):
        want = _round_back(refs[op], t)
        got_values = bf16_to_f32(got) if tname == "bf16" else got
        assert_floats(got_values, want.astype(got_values.dtype), what=f"{tname} {op}")


def test_float_floordiv_mod_follow_numpy_divmod():
    a = np.array([7.0, -7.0, 7.0, -7.0, 0.0, -0.0, 1.0, 5.0, np.inf, 1.0, -1e-30],
                 dtype=np.float64)
    b = np.array([2.0, 2.0, -2.0, -2.0, 3.0, 3.0, 0.0, np.inf, 2.0, -np.inf, 3.0])
    outs = [np.zeros_like(a) for _ in FLOAT_OPS]
    args = [a, None, b, None]
    for o in outs:
        args += [o, None]
    run(_binop_leaf("f64", FLOAT_OPS), [(a.size,)], *args)
    with np.errstate(all="ignore"):
        assert_floats(outs[4], np.floor_divide(a, b), what="//")
        assert_floats(outs[5], np.remainder(a, b), what="%")
    assert np.signbit(outs[5][4]) == np.signbit(np.remainder(0.0, 3.0))
    assert outs[4][6] == np.inf and np.isnan(outs[5][6])  # zero divisor: a/b and fmod(a, 0)


@pytest.mark.parametrize("tname", ["i32", "u64", "f32", "f16"])
def test_comparisons(tname):
    t = T.SCALAR_TYPES[tname]
    outs = "".join(f", o_{n}: Out[Ptr[i1]], o_{n}_bytes: i64" for n in CMP_OPS)
    body = "".join(f"    o_{n}[i] = a[i] {s} b[i]\n" for n, s in CMP_OPS.items())
    mod = leaves_from_source(f"@hpvm.leaf\ndef cmp(a: In[Ptr[{tname}]], a_bytes: i64, "
                             f"b: In[Ptr[{tname}]], b_bytes: i64{outs}):\n"
                             f"    i = hpvm.get_node_instance_id_x(hpvm.get_node())\n{body}")
    a, b = _float_inputs(t) if t.is_float else _int_inputs(t)
    results = [np.zeros(a.size, dtype=bool) for _ in CMP_OPS]
    args = [a, None, b, None]
    for r in results:
        args += [r, None]
    run(mod.cmp, [(a.size,)], *args)
    with np.errstate(all="ignore"):
        refs = [a == b, a != b, a < b, a <= b, a > b, a >= b]
    for name, got, want in zip(CMP_OPS, results, refs):
        assert np.array_equal(got, want), f"{tname} {name}"
    if t.is_float:  # NaN != NaN is true, every other comparison with NaN false
        nan = np.isnan(a)
        assert results[1][nan].all() and not results[0][nan].any() and not results[2][nan].any()


CAST_TARGETS = ["i1", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
                "f64"]


def _cast_leaf(src: str):
    outs = "".join(f", o_{d}: Out[Ptr[{d}]], o_{d}_bytes: i64" for d in CAST_TARGETS)
    body = "".join(f"    o_{d}[i] = {d}(v)\n" for d in CAST_TARGETS)
    mod = leaves_from_source(f"@hpvm.leaf\ndef cast_{src}(a: In[Ptr[{src}]], a_bytes: i64{outs}):\n"
                             f"    i = hpvm.get_node_instance_id_x(hpvm.get_node())\n"
                             f"    v = a[i]\n{body}")
    return getattr(mod, f"cast_{src}")


def _cast_reference(value: float | int | bool, src: T.ScalarType, dst: T.ScalarType):
    """The value converted as the kernel IR defines it (Python numbers in, exact)."""
    if dst.is_bool:
        return bool(value != 0) or (isinstance(value, float) and value != value)
    if dst.is_float:
        if isinstance(value, (bool, int)) or not src.is_float:
            as_float = np.float64(float(int(value)))
        else:
            as_float = np.float64(value)
        if dst.name == "bf16":
            # integers and f64 reach bf16 through f32 (documented in lltypes)
            return f32_to_bf16(np.array([as_float], dtype=np.float32))[0]
        if dst.name == "f16" and not src.is_float:
            return np.float16(float(int(value)))
        return dst.numpy_dtype.type(as_float)
    if src.is_float:
        if value != value:
            return 0
        if value in (float("inf"), float("-inf")):
            return dst.max_value() if value > 0 else dst.min_value()
        return max(dst.min_value(), min(dst.max_value(), int(value)))
    return _wrap(int(value), dst)


@pytest.mark.parametrize("src", ["i1", "i8", "i32", "i64", "u8", "u16", "u32", "u64", "f16", "bf16", "f32",
                                 "f64"])
def test_casts(src):
    s = T.SCALAR_TYPES[src]
    if s.is_bool:
        a = np.array([True, False, True], dtype=bool)
    elif s.is_float:
        special = [0.0, -0.0, 0.4, -0.6, 1.5, -1.5, 2.5, 127.9, 128.0, 255.5, -129.0, 1e10, -1e10,
                   3e38, np.inf, -np.inf, np.nan, 65504.0, 1e-8, 70000.0]
        values = np.concatenate([special, rng.standard_normal(100) * 1000])
        a = f32_to_bf16(values) if src == "bf16" else values.astype(s.numpy_dtype)
    else:
        a = np.concatenate([_int_inputs(s, 200)[0],
                            np.array([s.min_value(), s.max_value()], dtype=object).astype(
                                s.numpy_dtype)])
    outs = [np.zeros(a.size, dtype=T.SCALAR_TYPES[d].numpy_dtype) for d in CAST_TARGETS]
    args = [a, None]
    for o in outs:
        args += [o, None]
    run(_cast_leaf(src), [(a.size,)], *args)
    inputs = bf16_to_f32(a).astype(np.float64) if src == "bf16" else a
    for dname, got in zip(CAST_TARGETS, outs):
        d = T.SCALAR_TYPES[dname]
        for value, g in zip(inputs, got):
            py_value = value.item() if hasattr(value, "item") else value
            want = _cast_reference(py_value, s, d)
            if d.is_float:
                g_f = bf16_to_f32(np.array([g]))[0] if dname == "bf16" else g
                w_f = bf16_to_f32(np.array([want]))[0] if dname == "bf16" else want
                assert_floats(np.array([g_f]), np.array([w_f]), what=f"{src} {py_value} -> {dname}")
            else:
                assert int(g) == int(want), f"{src} {py_value!r} -> {dname}: got {g}, want {want}"


def test_i8_arithmetic_wraps_and_unary_ops():
    mod = leaves_from_source("""
        @hpvm.leaf
        def unary(a: In[Ptr[i8]], a_bytes: i64, neg: Out[Ptr[i8]], neg_bytes: i64,
                  inv: Out[Ptr[i8]], inv_bytes: i64, notz: Out[Ptr[i1]], notz_bytes: i64,
                  sq: Out[Ptr[i8]], sq_bytes: i64, fneg: Out[Ptr[f32]], fneg_bytes: i64):
            i = hpvm.get_node_instance_id_x(hpvm.get_node())
            v = a[i]
            neg[i] = -v
            inv[i] = ~v
            notz[i] = not v
            sq[i] = v * v + i8(100)
            fneg[i] = -f32(v)
    """)
    a = np.arange(-128, 128, dtype=np.int8)
    neg, inv, sq = (np.zeros_like(a) for _ in range(3))
    notz = np.zeros(a.size, bool)
    fneg = np.zeros(a.size, np.float32)
    run(mod.unary, [(a.size,)], a, None, neg, None, inv, None, notz, None, sq, None, fneg, None)
    wide = a.astype(np.int64)
    assert np.array_equal(neg, (-wide).astype(np.int8))  # -(-128) wraps to -128
    assert np.array_equal(inv, ~a)
    assert np.array_equal(notz, a == 0)
    assert np.array_equal(sq, (wide * wide + 100).astype(np.int8))
    assert_floats(fneg, -a.astype(np.float32))
    assert np.signbit(fneg[128])  # -(0.0) is -0.0


def test_f64_to_f16_rounds_once():
    # Just above / below a tie between two halves: rounding through f32 first would land on the
    # tie and then round to even, the wrong way for the first value.
    mod = leaves_from_source("""
        @hpvm.leaf
        def narrow(a: In[Ptr[f64]], a_bytes: i64, h: Out[Ptr[f16]], h_bytes: i64):
            i = hpvm.get_node_instance_id_x(hpvm.get_node())
            h[i] = f16(a[i])
    """)
    a = np.array([1 + 2**-11 + 2**-40, 1 + 2**-11 - 2**-40, -(1 + 2**-11 + 2**-40), 65520.0,
                  65519.99, 1e-9, -3e-8, np.nan, 5.960464477539063e-08 * 0.5000001])
    h = np.zeros(a.size, np.float16)
    run(mod.narrow, [(a.size,)], a, None, h, None)
    assert_floats(h, a.astype(np.float16))
