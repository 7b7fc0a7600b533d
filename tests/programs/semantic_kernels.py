"""Leaves that apply one operation (chosen at run time) elementwise, for every scalar type.

No `from __future__ import annotations` here: the factories' annotations name their closure
variable T, which must be evaluated when each function is defined.
"""

import math

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, i32, i64

INT_OPS = ["add", "sub", "mul", "floordiv", "mod", "and", "or", "xor", "shl", "shr", "min", "max",
           "eq", "lt", "ge", "neg", "invert", "abs"]
FLOAT_OPS = ["add", "sub", "mul", "div", "floordiv", "mod", "min", "max", "eq", "ne", "lt", "le",
             "neg", "abs", "sqrt", "floor", "ceil", "round", "fmin", "fmax", "copysign"]


def make_binary(T, ops):
    @hpvm.leaf
    def apply(a: In[Ptr[T]], a_bytes: i64, b: In[Ptr[T]], b_bytes: i64, c: Out[Ptr[T]],
              c_bytes: i64, op: i32):
        i = hpvm.instance_id(0)
        x = a[i]
        y = b[i]
        if op == 0:
            c[i] = x + y
        elif op == 1:
            c[i] = x - y
        elif op == 2:
            c[i] = x * y
        elif op == 3:
            c[i] = x // y
        elif op == 4:
            c[i] = x % y
        elif op == 5:
            c[i] = min(x, y)
        elif op == 6:
            c[i] = max(x, y)
        elif op == 7:
            c[i] = T(x == y)
        elif op == 8:
            c[i] = T(x < y)
        elif op == 9:
            c[i] = -x
        elif op == 10:
            c[i] = abs(x)
        else:
            c[i] = T(x >= y)
    return apply


def make_int_only(T):
    @hpvm.leaf
    def bits(a: In[Ptr[T]], a_bytes: i64, b: In[Ptr[T]], b_bytes: i64, c: Out[Ptr[T]],
             c_bytes: i64, op: i32):
        i = hpvm.instance_id(0)
        x = a[i]
        y = b[i]
        if op == 0:
            c[i] = x & y
        elif op == 1:
            c[i] = x | y
        elif op == 2:
            c[i] = x ^ y
        elif op == 3:
            c[i] = x << y
        elif op == 4:
            c[i] = x >> y
        else:
            c[i] = ~x
    return bits


def make_float_only(T):
    @hpvm.leaf
    def floats(a: In[Ptr[T]], a_bytes: i64, b: In[Ptr[T]], b_bytes: i64, c: Out[Ptr[T]],
               c_bytes: i64, op: i32):
        i = hpvm.instance_id(0)
        x = a[i]
        y = b[i]
        if op == 0:
            c[i] = x / y
        elif op == 1:
            c[i] = math.sqrt(x)
        elif op == 2:
            c[i] = math.floor(x)
        elif op == 3:
            c[i] = math.ceil(x)
        elif op == 4:
            c[i] = hpvm.math.round(x)
        elif op == 5:
            c[i] = hpvm.math.fmin(x, y)
        elif op == 6:
            c[i] = hpvm.math.fmax(x, y)
        elif op == 7:
            c[i] = math.copysign(x, y)
        elif op == 8:
            c[i] = T(x != y)
        else:
            c[i] = T(x <= y)
    return floats


def make_by_divisor(T):
    """a // d and a % d by one divisor d for the whole launch, and a // (d * 4) (the nvptx and cpu
    targets emit such a body twice: shifts and masks where the divisors are powers of two, and
    elsewhere, on cpu and in nvptx's loops, a multiply by the reciprocal of a 32-bit one)."""
    @hpvm.leaf
    def by_divisor(a: In[Ptr[T]], a_bytes: i64, q: Out[Ptr[T]], q_bytes: i64, r: InOut[Ptr[T]],
                   r_bytes: i64, q4: Out[Ptr[T]], q4_bytes: i64, d: T):
        i = hpvm.instance_id(0)
        q[i] = a[i] // d
        for k in range(i % 2, 2):  # a loop, run once or twice
            r[i] = a[i] % d
        q4[i] = a[i] // (d * 4)

    @hpvm.graph
    def divide(a: In[Ptr[T]], a_bytes: i64, q: Out[Ptr[T]], q_bytes: i64, r: InOut[Ptr[T]],
               r_bytes: i64, q4: Out[Ptr[T]], q4_bytes: i64, d: T, n: i64):
        hpvm.node(by_divisor, grid=n, a=a, a_bytes=a_bytes, q=q, q_bytes=q_bytes, r=r,
                  r_bytes=r_bytes, q4=q4, q4_bytes=q4_bytes, d=d)
    return divide


def make_abs_uses(T):
    """abs(a) used by later operations (a shift, a compare, a widening cast): abs(INT_MIN) wraps to
    INT_MIN, and what follows must see that value."""
    @hpvm.leaf
    def abs_uses(a: In[Ptr[T]], a_bytes: i64, shifted: Out[Ptr[T]], shifted_bytes: i64,
                 negative: Out[Ptr[T]], negative_bytes: i64, wide: Out[Ptr[i64]], wide_bytes: i64,
                 k: T):
        i = hpvm.instance_id(0)
        shifted[i] = abs(a[i]) >> k
        negative[i] = T(abs(a[i]) < 0)
        wide[i] = i64(abs(a[i]))

    @hpvm.graph
    def run_abs(a: In[Ptr[T]], a_bytes: i64, shifted: Out[Ptr[T]], shifted_bytes: i64,
                negative: Out[Ptr[T]], negative_bytes: i64, wide: Out[Ptr[i64]], wide_bytes: i64,
                k: T, n: i64):
        hpvm.node(abs_uses, grid=n, a=a, a_bytes=a_bytes, shifted=shifted,
                  shifted_bytes=shifted_bytes, negative=negative, negative_bytes=negative_bytes,
                  wide=wide, wide_bytes=wide_bytes, k=k)
    return run_abs


def make_negations_in_min_max(T):
    """A negation (written, `0 - x`, `x * -1`, of an abs) inside two nested min or max: ptxas folded
    such a `neg` into a three-way min and dropped its sign
    (tests/differential/reproducers/plain-1820096542.json)."""
    @hpvm.leaf
    def negations(a: In[Ptr[T]], a_bytes: i64, lo: Out[Ptr[T]], lo_bytes: i64, hi: Out[Ptr[T]],
                  hi_bytes: i64, low_abs: Out[Ptr[T]], low_abs_bytes: i64, s: T, t: T):
        i = hpvm.instance_id(0)
        x = a[i]
        lo[i] = min(min(s * t, -x), t)
        hi[i] = max(max(s * t, x * -1), t)
        low_abs[i] = min(min(s * t, 0 - abs(x)), t)

    @hpvm.graph
    def run_negations(a: In[Ptr[T]], a_bytes: i64, lo: Out[Ptr[T]], lo_bytes: i64,
                      hi: Out[Ptr[T]], hi_bytes: i64, low_abs: Out[Ptr[T]], low_abs_bytes: i64,
                      s: T, t: T, n: i64):
        hpvm.node(negations, grid=n, a=a, a_bytes=a_bytes, lo=lo, lo_bytes=lo_bytes, hi=hi,
                  hi_bytes=hi_bytes, low_abs=low_abs, low_abs_bytes=low_abs_bytes, s=s, t=t)
    return run_negations


def make_unsigned_conversions(S, U, F):
    """Values of the signed type S, gathered and sign-extended to the unsigned type U, then made
    floats of type F: LLVM's SLP vectoriser narrowed `uitofp (sext x)` to a narrower `uitofp`, so
    u64(i8(-5)) became 2**32 - 5 on cpu (tests/differential/reproducers/mixed-645014325.json)."""
    @hpvm.leaf
    def conversions(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[F]], out_bytes: i64,
                    capped: Out[Ptr[F]], capped_bytes: i64, n: i64):
        i = hpvm.instance_id(0)
        x = a[(i * 7 + 3) % n]
        out[i] = F(U(S(x)))
        capped[i] = F(F(U(min(S(x), S(82)))))

    @hpvm.graph
    def run_conversions(a: In[Ptr[i64]], a_bytes: i64, out: Out[Ptr[F]], out_bytes: i64,
                        capped: Out[Ptr[F]], capped_bytes: i64, n: i64):
        hpvm.node(conversions, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes,
                  capped=capped, capped_bytes=capped_bytes, n=n)
    return run_conversions


def make_negated_shifts(T):
    """-((ty - 1) >> 1) over 8 x 8 blocks, and the same of loaded values: LLVM makes it
    ((-ty) >> 1) + 1, which ptxas 12.8 (triton 3.6) assembled as if the negation came after the
    shift (tests/differential/reproducers/tiles-3646318069.json)."""
    @hpvm.leaf
    def negated(a: In[Ptr[T]], a_bytes: i64, by_id: Out[Ptr[T]], by_id_bytes: i64,
                by_value: Out[Ptr[T]], by_value_bytes: i64, k: T):
        tx = hpvm.instance_id(0)
        ty = hpvm.instance_id(1)
        i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node())) * 64 + ty * 8 + tx
        by_id[i] = -((T(-1) + T(ty)) >> T(1))
        by_value[i] = -((a[i] - T(1)) >> k)

    @hpvm.graph
    def blocks(a: In[Ptr[T]], a_bytes: i64, by_id: Out[Ptr[T]], by_id_bytes: i64,
               by_value: Out[Ptr[T]], by_value_bytes: i64, k: T):
        hpvm.node(negated, grid=(8, 8), a=a, a_bytes=a_bytes, by_id=by_id, by_id_bytes=by_id_bytes,
                  by_value=by_value, by_value_bytes=by_value_bytes, k=k)

    @hpvm.graph
    def run_negated(a: In[Ptr[T]], a_bytes: i64, by_id: Out[Ptr[T]], by_id_bytes: i64,
                    by_value: Out[Ptr[T]], by_value_bytes: i64, k: T, n: i64):
        hpvm.node(blocks, grid=n, a=a, a_bytes=a_bytes, by_id=by_id, by_id_bytes=by_id_bytes,
                  by_value=by_value, by_value_bytes=by_value_bytes, k=k)
    return run_negated


def make_signed_zero_selects(T):
    """Selects between T(k) and -0.0 (a conditional expression, a masked assignment, an fmin of
    one): with k = 1, Triton makes k a constant, and ptxas 12.8 (triton 3.6) turned a float select
    of 1.0 and -0.0 into FSET.BF, whose false result is +0.0
    (tests/differential/reproducers/plain-1637228348.json)."""
    @hpvm.leaf
    def selects(a: In[Ptr[T]], a_bytes: i64, chosen: Out[Ptr[T]], chosen_bytes: i64,
                swapped: Out[Ptr[T]], swapped_bytes: i64, masked: Out[Ptr[T]], masked_bytes: i64,
                smaller: Out[Ptr[T]], smaller_bytes: i64, k: i64):
        i = hpvm.instance_id(0)
        x = a[i]
        chosen[i] = T(k) if T(0.1) >= x else T(-0.0)
        swapped[i] = T(-0.0) if x > T(0.5) else T(k)
        v = T(-0.0)
        if x <= T(0.1):
            v = T(k)
        masked[i] = v
        smaller[i] = hpvm.math.fmin(T(k) if T(0.1) >= x else T(-0.0), x)

    @hpvm.graph
    def run_selects(a: In[Ptr[T]], a_bytes: i64, chosen: Out[Ptr[T]], chosen_bytes: i64,
                    swapped: Out[Ptr[T]], swapped_bytes: i64, masked: Out[Ptr[T]],
                    masked_bytes: i64, smaller: Out[Ptr[T]], smaller_bytes: i64, k: i64, n: i64):
        hpvm.node(selects, grid=n, a=a, a_bytes=a_bytes, chosen=chosen, chosen_bytes=chosen_bytes,
                  swapped=swapped, swapped_bytes=swapped_bytes, masked=masked,
                  masked_bytes=masked_bytes, smaller=smaller, smaller_bytes=smaller_bytes, k=k)
    return run_selects


def make_range_compares(T):
    """Order compares of values ptxas takes to be in a range (abs >= 0, exp >= 0, |sin| <= 1),
    whose NaN makes them false: ptxas decided `abs(x) > -1.0` true, so min(-1.0, abs(x)) of a NaN
    gave -1.0 (tests/differential/reproducers/tiles-947270095)."""
    @hpvm.leaf
    def ranges(a: In[Ptr[T]], a_bytes: i64, lower: Out[Ptr[T]], lower_bytes: i64,
               above: Out[Ptr[i32]], above_bytes: i64, exp_above: Out[Ptr[i32]], exp_above_bytes: i64,
               sin_below: Out[Ptr[i32]], sin_below_bytes: i64):
        i = hpvm.instance_id(0)
        x = a[i]
        lower[i] = min(T(-1.0), abs(x))
        above[i] = 1 if abs(x) > T(-1.0) else 0
        exp_above[i] = 1 if math.exp(x) >= T(0.0) else 0
        sin_below[i] = 0 if not (math.sin(x) < T(2.0)) else 1

    @hpvm.graph
    def run_ranges(a: In[Ptr[T]], a_bytes: i64, lower: Out[Ptr[T]], lower_bytes: i64,
                   above: Out[Ptr[i32]], above_bytes: i64, exp_above: Out[Ptr[i32]],
                   exp_above_bytes: i64, sin_below: Out[Ptr[i32]], sin_below_bytes: i64, n: i64):
        hpvm.node(ranges, grid=n, a=a, a_bytes=a_bytes, lower=lower, lower_bytes=lower_bytes,
                  above=above, above_bytes=above_bytes, exp_above=exp_above,
                  exp_above_bytes=exp_above_bytes, sin_below=sin_below, sin_below_bytes=sin_below_bytes)
    return run_ranges


def make_narrow_guards(T):
    """1 // d and 1 % d (LLVM makes them a compare of d's zero-divisor guard, max(d, 1), with 1),
    and min(d, k) == k: for 8- and 16-bit d, ptxas made such a min/max and compare one
    VIMNMX.U16x2 whose predicate it read wrongly (tests/differential/reproducers/plain-2409086397)."""
    @hpvm.leaf
    def guards(a: In[Ptr[T]], a_bytes: i64, q: Out[Ptr[T]], q_bytes: i64, r: Out[Ptr[T]],
               r_bytes: i64, capped: Out[Ptr[T]], capped_bytes: i64, k: T, s: i32):
        i = hpvm.instance_id(0)
        d = a[i]
        q[i] = min(T(1) // T(s << 3), d)
        r[i] = T(1) % T(s * 2) + T(1) // d
        capped[i] = T(min(d, k) == k) + T(max(d, k) == k)

    @hpvm.graph
    def run_guards(a: In[Ptr[T]], a_bytes: i64, q: Out[Ptr[T]], q_bytes: i64, r: Out[Ptr[T]],
                   r_bytes: i64, capped: Out[Ptr[T]], capped_bytes: i64, k: T, s: i32, n: i64):
        hpvm.node(guards, grid=n, a=a, a_bytes=a_bytes, q=q, q_bytes=q_bytes, r=r, r_bytes=r_bytes,
                  capped=capped, capped_bytes=capped_bytes, k=k, s=s)
    return run_guards


def make_cast(S, D):
    @hpvm.leaf
    def cast(a: In[Ptr[S]], a_bytes: i64, c: Out[Ptr[D]], c_bytes: i64):
        i = hpvm.instance_id(0)
        c[i] = D(a[i])
    return cast


def make_graph(leaf, nargs: int):
    if nargs == 3:
        @hpvm.graph
        def run3(a: In[Ptr[leaf.ir.params[0].type.elem]], a_bytes: i64,
                 b: In[Ptr[leaf.ir.params[2].type.elem]], b_bytes: i64,
                 c: Out[Ptr[leaf.ir.params[4].type.elem]], c_bytes: i64, op: i32, n: i64):
            hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes, op=op)
        return run3

    @hpvm.graph
    def run2(a: In[Ptr[leaf.ir.params[0].type.elem]], a_bytes: i64,
             c: Out[Ptr[leaf.ir.params[2].type.elem]], c_bytes: i64, n: i64):
        hpvm.node(leaf, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)
    return run2
