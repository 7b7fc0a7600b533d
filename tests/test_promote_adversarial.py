"""Typed arithmetic against an oracle written from docs/language.md ("Typing", "Arithmetic"), not
from hpvm_py: how operands of different types combine, weak literals, wrapping, floor `//` and `%`
with a zero divisor, shifts out of range, saturating float-to-int casts, int-to-float rounding once,
bf16 through f32, `/` of integers in f32, augmented assignments and stores that convert.

The oracle keeps integers as Python ints (wrapped by masking) and floats as Python floats holding a
value of their type (rounded by NumPy's float32/float16 conversions and a bf16 rounding written
here); the one place it uses NumPy's arithmetic is float `//` and `%`, which the docs define as
NumPy's. A seeded generator builds expression trees over per-instance inputs of every scalar type
(edge values: 0, +-1, min, max, powers of two, NaN, +-inf, -0.0, values next to rounding ties) and
literals, stores them through every form (plain, augmented, into a typed variable), and every
target must match the oracle bit for bit (any NaN equals any NaN). Expressions the docs refuse must
be a located FrontendError.

Found by this hunt (each test below named so fails without its fix):

- A float constant of the textual IR that is not a value of its type (`0.1:f16` in a hand-edited
  .hpvm file) was taken as written: the gpu target keeps a 16-bit float in an f32 register and
  used it at f32 precision, the other targets rounded it to f16 (`mul<f16>(x, 3.708007812500003:f16)`
  gave 3.70703125 on gpu, 3.708984375 elsewhere). The type check now refuses it (`kernel-types`,
  naming the nearest value): test_text_constants_must_be_values_of_their_type.
- A launch argument beyond a float parameter's range became inf, as documented, but through a
  NumPy conversion that warned ("overflow encountered in cast"): under `-W error` the launch died
  with an internal RuntimeWarning: test_float_arguments_beyond_range_are_inf_without_warnings.
"""
from __future__ import annotations

import math
import random
import struct
import warnings
from typing import Any, Callable

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py.errors import FrontendError, VerificationError

SEED = 20250921

INTS = {"i8": (True, 8), "i16": (True, 16), "i32": (True, 32), "i64": (True, 64),
        "u8": (False, 8), "u16": (False, 16), "u32": (False, 32), "u64": (False, 64)}
FLOATS = {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}
TYPES = ["i1", *INTS, *FLOATS]


class Refused(Exception):
    """docs/language.md says the front end refuses this."""


def is_float(t: str) -> bool:
    return t in FLOATS


def bits(t: str) -> int:
    return 1 if t == "i1" else INTS[t][1] if t in INTS else FLOATS[t]


def signed(t: str) -> bool:
    return t in INTS and INTS[t][0]


def lo(t: str) -> int:
    return -(1 << (bits(t) - 1)) if signed(t) else 0


def hi(t: str) -> int:
    return (1 << (bits(t) - 1)) - 1 if signed(t) else (1 << bits(t)) - 1


def wrap(v: int, t: str) -> int:
    v &= (1 << bits(t)) - 1
    return v - (1 << bits(t)) if signed(t) and v >= 1 << (bits(t) - 1) else v


# -- rounding --------------------------------------------------------------------------------

def bf16_of_f32(x: float) -> float:
    """An f32 value rounded to bf16 (ties to even), as a float."""
    if math.isnan(x):
        return x
    (b,) = struct.unpack("<I", struct.pack("<f", x))
    top, low = b >> 16, b & 0xFFFF
    if low > 0x8000 or (low == 0x8000 and top & 1):
        top += 1
    return struct.unpack("<f", struct.pack("<I", (top << 16) & 0xFFFFFFFF))[0]


def round_to(x: float, t: str) -> float:
    """An f64 value as float type t: rounded once, bf16 through f32 (docs: "bf16 via f32")."""
    with np.errstate(all="ignore"):
        if t == "f64":
            return x
        if t == "f16":
            return float(np.float16(x))
        f32 = float(np.float32(x))
    return f32 if t == "f32" else bf16_of_f32(f32)


def int_to_float(v: int, t: str) -> float:
    """An integer as float type t, rounded once to nearest even (bf16: through f32)."""
    if t == "bf16":
        return bf16_of_f32(int_to_float(v, "f32"))
    digits = {"f16": 11, "f32": 24, "f64": 53}[t]
    m = abs(v)
    shift = m.bit_length() - digits
    if shift > 0:
        q, rest = m >> shift, m & ((1 << shift) - 1)
        if rest > 1 << (shift - 1) or (rest == 1 << (shift - 1) and q & 1):
            q += 1
        m = q << shift
    largest = {"f16": 65504.0, "f32": float(np.finfo(np.float32).max),
               "f64": float(np.finfo(np.float64).max)}[t]
    out = math.inf if m > largest else float(m)
    return -out if v < 0 else out


def convert(v: Any, src: str, dst: str) -> Any:
    """A cast: integers wrap, floats saturate into integers (NaN gives 0), ints round once."""
    if dst == "i1":
        return int(v != 0)
    if is_float(src) and is_float(dst):
        return round_to(v, dst)
    if is_float(src):
        if math.isnan(v):
            return 0
        if math.isinf(v):
            return hi(dst) if v > 0 else lo(dst)
        return max(lo(dst), min(hi(dst), math.trunc(v)))
    return int_to_float(v, dst) if is_float(dst) else wrap(v, dst)


# -- typing ----------------------------------------------------------------------------------

def can_widen(src: str, dst: str) -> bool:
    """Implicit conversions: i8 -> i32, f32 -> f64, any integer -> a float, i1 -> anything."""
    if src == dst or (src == "i1" and dst != "i1"):
        return True
    if is_float(dst):
        return not is_float(src) or bits(dst) > bits(src)
    if is_float(src) or dst == "i1" or src == "i1":
        return False
    if signed(src) == signed(dst):
        return bits(dst) > bits(src)
    return signed(dst) and bits(dst) > bits(src)


def promote(a: str, b: str) -> str:
    """A float beats an integer; the wider float wins (f16 with bf16: f32); the wider integer
    wins, at equal width the unsigned one; i1 yields to any type."""
    if a == b:
        return a
    if is_float(a) and is_float(b):
        return "f32" if bits(a) == bits(b) else max(a, b, key=bits)
    if is_float(a) or is_float(b):
        return a if is_float(a) else b
    if "i1" in (a, b):
        return b if a == "i1" else a
    if bits(a) != bits(b):
        return max(a, b, key=bits)
    return b if signed(a) else a


class Weak:
    """A literal: it takes the other operand's type."""

    def __init__(self, value: int | float | bool):
        self.value = value
        self.kind = "bool" if isinstance(value, bool) else "int" if isinstance(value, int) else "float"


Typed = tuple[Any, Callable[[list], Any] | None]  # (type name or Weak, value of the instance)


def common(a: Any, b: Any) -> str:
    if isinstance(a, Weak):
        a, b = b, a
    if isinstance(b, Weak):
        if b.kind == "float" and not is_float(a):
            return "f32"  # a float literal with an integer operand makes the operation f32
        if b.kind == "int" and a == "i1":
            return "i64"  # an i1 is the integer 0 or 1 next to an int literal
        return a
    return promote(a, b)


def literal(w: Weak, t: str, explicit: bool, cast: bool = False) -> Any:
    v = w.value
    if t == "i1":
        if not explicit and not (isinstance(v, int) and v in (0, 1)):
            raise Refused("not an i1 literal")
        return int(bool(v))
    if is_float(t):
        return round_to(v, t) if isinstance(v, float) else int_to_float(int(v), t)
    if isinstance(v, float):
        if not explicit:
            raise Refused("a float literal does not become an integer implicitly")
        return convert(v, "f64", t)
    if not lo(t) <= v <= hi(t):
        if not cast:
            raise Refused("a literal that does not fit is an error")
        return wrap(int(v), t)
    return int(v)


def to(x: Typed, t: str, explicit: bool = True, cast: bool = False) -> Callable[[list], Any]:
    src, f = x
    if isinstance(src, Weak):
        v = literal(src, t, explicit, cast)
        return lambda vals: v
    if src == t:
        return f
    if not explicit and not can_widen(src, t):
        raise Refused("narrowing needs a cast")
    return lambda vals: convert(f(vals), src, t)


def float_op(op: str, x: float, y: float, t: str) -> float:
    with np.errstate(all="ignore"):
        if op in ("floordiv", "mod"):  # NumPy's, on f32 for the narrower types
            fn = np.floor_divide if op == "floordiv" else np.remainder
            wide = np.float64 if t == "f64" else np.float32
            return round_to(float(fn(wide(x), wide(y))), t)
        a, b = np.float64(x), np.float64(y)
        return round_to(float({"add": a + b, "sub": a - b, "mul": a * b, "div": a / b}[op]), t)


def int_op(op: str, x: int, y: int, t: str) -> int:
    n = bits(t)
    if op in ("floordiv", "mod"):
        return 0 if y == 0 else wrap(x // y if op == "floordiv" else x % y, t)
    if op == "shl":
        return wrap(x << y, t) if 0 <= y < n else 0
    if op == "shr":
        return x >> y if 0 <= y < n else (-1 if x < 0 else 0)
    return wrap({"add": x + y, "sub": x - y, "mul": x * y, "and": x & y, "or": x | y,
                 "xor": x ^ y}[op], t)


SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
          "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
PY_COMPARE = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
              "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}


def fold(op: str, x: Any, y: Any) -> Weak:
    """Literals fold with Python's arithmetic, but // and % by zero and shifts out of range give
    what they give at run time."""
    if op == "div" and y == 0:
        raise Refused("division by zero in a constant expression")
    if op in ("floordiv", "mod") and y == 0:
        if isinstance(x, float) or isinstance(y, float):
            return Weak(float_op(op, x, y, "f64"))
        return Weak(0)
    if op in ("and", "or", "xor", "shl", "shr") and (isinstance(x, float) or isinstance(y, float)):
        raise Refused("bitwise operators need integers")
    if op == "shl":
        return Weak(x << y if 0 <= y < 64 else 0)
    if op == "shr":
        return Weak(x >> y if 0 <= y < 64 else (-1 if x < 0 else 0))
    r = {"add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y, "div": lambda: x / y,
         "floordiv": lambda: x // y, "mod": lambda: x % y, "and": lambda: x & y,
         "or": lambda: x | y, "xor": lambda: x ^ y}[op]()
    return Weak(int(r) if isinstance(r, bool) and op not in ("and", "or", "xor") else r)


def truth(x: Typed) -> Typed:
    t, f = x
    if isinstance(t, Weak):
        return Weak(bool(t.value)), None
    return ("i1", f) if t == "i1" else ("i1", lambda vals: int(f(vals) != 0))


# -- expression trees ------------------------------------------------------------------------

class Node:
    def src(self) -> str:
        raise NotImplementedError

    def typed(self, types: list[str]) -> Typed:
        raise NotImplementedError


class Var(Node):
    def __init__(self, k: int):
        self.k = k

    def src(self) -> str:
        return f"v{self.k}"

    def typed(self, types: list[str]) -> Typed:
        return types[self.k], (lambda vals: vals[self.k])


class Lit(Node):
    def __init__(self, v: int | float | bool):
        self.v = v

    def src(self) -> str:
        v = self.v
        if isinstance(v, float) and not math.isfinite(v):
            return "math.nan" if math.isnan(v) else "math.inf" if v > 0 else "(-math.inf)"
        return f"({v!r})" if math.copysign(1, v) < 0 else repr(v)

    def typed(self, types: list[str]) -> Typed:
        return Weak(self.v), None


class Fixed(Node):
    def __init__(self, x: Typed):
        self.x = x

    def typed(self, types: list[str]) -> Typed:
        return self.x


class Bin(Node):
    def __init__(self, op: str, a: Node, b: Node):
        self.op, self.a, self.b = op, a, b

    def src(self) -> str:
        return f"({self.a.src()} {SYMBOL[self.op]} {self.b.src()})"

    def typed(self, types: list[str]) -> Typed:
        a, b, op = self.a.typed(types), self.b.typed(types), self.op
        if isinstance(a[0], Weak) and isinstance(b[0], Weak):
            return fold(op, a[0].value, b[0].value), None
        t = common(a[0], b[0])
        if op == "div" and not is_float(t):
            t = "f32"  # `/` on integers computes in f32
        if op in ("and", "or", "xor", "shl", "shr") and is_float(t):
            raise Refused("bitwise operators need integers")
        if t == "i1" and op not in ("and", "or", "xor"):
            t = "i64"  # True + True is 2
        fa, fb = to(a, t), to(b, t)
        apply = float_op if is_float(t) else int_op
        return t, (lambda vals: apply(op, fa(vals), fb(vals), t))


class Cmp(Node):
    def __init__(self, op: str, a: Node, b: Node):
        self.op, self.a, self.b = op, a, b

    def src(self) -> str:
        return f"({self.a.src()} {COMPARE[self.op]} {self.b.src()})"

    def typed(self, types: list[str]) -> Typed:
        a, b, compare = self.a.typed(types), self.b.typed(types), PY_COMPARE[self.op]
        if isinstance(a[0], Weak) and isinstance(b[0], Weak):
            return Weak(bool(compare(a[0].value, b[0].value))), None
        t = common(a[0], b[0])
        fa, fb = to(a, t), to(b, t)
        return "i1", (lambda vals: int(compare(fa(vals), fb(vals))))


class Select(Node):
    def __init__(self, c: Node, a: Node, b: Node):
        self.c, self.a, self.b = c, a, b

    def src(self) -> str:
        return f"({self.a.src()} if {self.c.src()} else {self.b.src()})"

    def typed(self, types: list[str]) -> Typed:
        c, a, b = truth(self.c.typed(types)), self.a.typed(types), self.b.typed(types)
        if isinstance(c[0], Weak):
            return a if c[0].value else b
        if isinstance(a[0], Weak) and isinstance(b[0], Weak):
            kinds = {a[0].kind, b[0].kind}
            t = "f32" if "float" in kinds else "i1" if kinds == {"bool"} else "i64"
        else:
            t = common(a[0], b[0])
        fa, fb, fc = to(a, t), to(b, t), c[1]
        return t, (lambda vals: fa(vals) if fc(vals) else fb(vals))


class MinMax(Node):
    def __init__(self, which: str, a: Node, b: Node):
        self.which, self.a, self.b = which, a, b

    def src(self) -> str:
        return f"{self.which}({self.a.src()}, {self.b.src()})"

    def typed(self, types: list[str]) -> Typed:
        a, b = self.a.typed(types), self.b.typed(types)
        pick = min if self.which == "min" else max
        if isinstance(a[0], Weak) and isinstance(b[0], Weak):
            return Weak(pick(a[0].value, b[0].value)), None
        t = common(a[0], b[0])
        fa, fb = to(a, t), to(b, t)

        def value(vals: list) -> Any:
            x, y = fa(vals), fb(vals)
            if not is_float(t):
                return pick(x, y)
            first = x < y if self.which == "min" else x > y
            return x if first or math.isnan(x) else y  # docs: `a if a < b or isnan(a) else b`
        return t, value


class Unary(Node):
    def __init__(self, op: str, a: Node):
        self.op, self.a = op, a

    def src(self) -> str:
        if self.op == "abs":
            return f"abs({self.a.src()})"
        return "(" + {"neg": "-", "inv": "~", "not": "not "}[self.op] + self.a.src() + ")"

    def typed(self, types: list[str]) -> Typed:
        x = self.a.typed(types)
        t, f = x
        if self.op == "not":
            c = truth(x)
            if isinstance(c[0], Weak):
                return Weak(not c[0].value), None
            return "i1", (lambda vals: 1 - c[1](vals))
        if isinstance(t, Weak):
            if self.op == "inv" and t.kind == "float":
                raise Refused("~ needs an integer")
            return Weak({"abs": abs, "neg": lambda v: -v, "inv": lambda v: ~int(v)}[self.op](t.value)), None
        if self.op == "abs":
            if t == "i1":
                raise Refused("abs() of a boolean")
            return t, (lambda vals: math.fabs(f(vals)) if is_float(t) else wrap(abs(f(vals)), t))
        if self.op == "neg":
            if t == "i1":
                g = to(x, "i64")
                return "i64", (lambda vals: -g(vals))
            return t, (lambda vals: -f(vals) if is_float(t) else wrap(-f(vals), t))
        if is_float(t) or t == "i1":
            raise Refused("~ needs a (non-boolean) integer")
        return t, (lambda vals: wrap(~f(vals), t))


class Cast(Node):
    def __init__(self, t: str, a: Node):
        self.t, self.a = t, a

    def src(self) -> str:
        return f"{self.t}({self.a.src()})"

    def typed(self, types: list[str]) -> Typed:
        x = self.a.typed(types)
        if self.t == "i1":
            c = truth(x)
            if isinstance(c[0], Weak):
                value = int(c[0].value)
                return "i1", (lambda vals: value)
            return c
        return self.t, to(x, self.t, cast=True)  # a cast of a literal wraps: hpvm.i8(300) is 44


class Square(Node):
    def __init__(self, a: Node):
        self.a = a

    def src(self) -> str:
        return f"({self.a.src()} ** 2)"

    def typed(self, types: list[str]) -> Typed:
        x = self.a.typed(types)
        if isinstance(x[0], Weak):
            try:
                return Weak(x[0].value ** 2), None
            except OverflowError:
                raise Refused("constant expression overflows") from None
        t = common(x[0], Weak(2))
        f = to(x, t)
        apply = float_op if is_float(t) else int_op
        return t, (lambda vals: apply("mul", f(vals), f(vals), t))


INT_LITERALS = [0, 1, 2, 3, 7, -1, -2, 8, 31, 32, 63, 64, 100, 127, 128, -128, -129, 255, 256,
                32767, 32768, 65535, 65536, 2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**53 + 1,
                2**63 - 1, -2**63, 2**63, 2**64 - 1, 16777217, -16777217]
FLOAT_LITERALS = [0.0, -0.0, 0.5, -0.5, 1.5, 3.0, -1.0, 1e30, 1e300, 1e-30, 65504.0, 65520.0,
                  0.1, 1e10, math.inf, -math.inf, math.nan, 16777217.0, 2.0**63, 3.4e38]


def gen_literal(rng: random.Random) -> Node:
    r = rng.random()
    if r < 0.1:
        return Lit(rng.random() < 0.5)
    return Lit(rng.choice(INT_LITERALS if r < 0.7 else FLOAT_LITERALS))


def gen_expr(rng: random.Random, nvars: int, depth: int) -> Node:
    if depth <= 0 or rng.random() < 0.25:
        r = rng.random()
        if r < 0.6:
            return Var(rng.randrange(nvars))
        return gen_literal(rng) if r < 0.8 else Cast(rng.choice(TYPES), gen_literal(rng))
    sub = lambda: gen_expr(rng, nvars, depth - 1)  # noqa: E731
    r = rng.random()
    if r < 0.4:
        return Bin(rng.choice(list(SYMBOL) + ["add", "sub", "mul", "floordiv", "mod"]), sub(), sub())
    if r < 0.5:
        return Cmp(rng.choice(list(COMPARE)), sub(), sub())
    if r < 0.58:
        return Select(sub(), sub(), sub())
    if r < 0.66:
        return MinMax(rng.choice(["min", "max"]), sub(), sub())
    if r < 0.76:
        return Unary(rng.choice(["abs", "neg", "neg", "inv", "not"]), sub())
    if r < 0.92:
        return Cast(rng.choice(TYPES), sub())
    return Square(sub())


AUGMENTED = ["add", "sub", "mul", "div", "floordiv", "mod", "and", "or", "xor", "shl", "shr"]


class Output:
    """Output slot j: `o{j}` (InOut, of element type `out`) written by one statement form."""

    def __init__(self, rng: random.Random, nvars: int, types: list[str]):
        self.expr = gen_expr(rng, nvars, 3)
        self.out = rng.choice(TYPES)
        self.form = rng.choice(["store", "store", "store", "augmented_store", "augmented_var",
                                "assign", "declared"])
        self.op = rng.choice(AUGMENTED)
        self.var = rng.randrange(nvars)
        self.declared = rng.choice(TYPES)
        if self.form == "store" and rng.random() < 0.5:
            try:
                t = self.expr.typed(types)[0]
                self.out = t if isinstance(t, str) else self.out  # the raw result, half the time
            except Refused:
                pass

    def lines(self, j: int) -> list[str]:
        e = self.expr.src()
        return {"store": [f"o{j}[i] = {e}"],
                "augmented_store": [f"o{j}[i] {SYMBOL[self.op]}= {e}"],
                "augmented_var": [f"w{j} = v{self.var}", f"w{j} {SYMBOL[self.op]}= {e}", f"o{j}[i] = w{j}"],
                "assign": [f"w{j} = {e}", f"o{j}[i] = w{j}"],
                "declared": [f"w{j}: {self.declared} = {e}", f"o{j}[i] = w{j}"]}[self.form]

    def value(self, types: list[str]) -> Callable[[list, Any], Any]:
        """The element stored, from the inputs and the element's old value."""
        x = self.expr.typed(types)
        if self.form == "store":
            f = to(x, self.out)
            return lambda vals, old: f(vals)
        if self.form == "augmented_store":
            t, g = Bin(self.op, Fixed((self.out, lambda vo: vo[1])),
                       Fixed((x[0], x[1] and (lambda vo: x[1](vo[0]))))).typed(types)
            f = to((t, g), self.out)
            return lambda vals, old: f((vals, old))
        if self.form == "augmented_var":
            t = types[self.var]
            w = to(Bin(self.op, Var(self.var), Fixed(x)).typed(types), t, explicit=False)
        else:
            if self.form == "assign":  # alone, an int literal is an i64 and a float one an f32
                t = x[0] if isinstance(x[0], str) else {"bool": "i1", "int": "i64", "float": "f32"}[x[0].kind]
            else:
                t = self.declared
            w = to(x, t, explicit=False)
        f = to((t, w), self.out)
        return lambda vals, old: f(vals)


# -- inputs and running ----------------------------------------------------------------------

def near_tie(rng: random.Random) -> float:
    """A value at or next to the midpoint of two neighbours of a narrower float type."""
    digits, emin = rng.choice([(11, -14), (8, -126), (24, -126)])
    e = rng.randint(emin - 3, 15 if digits == 11 else 100)
    m = rng.randrange(1 << (digits - 1), 1 << digits)
    mid = (2 * m + 1) * 2.0 ** (e - digits)
    return mid * (1 + rng.choice([0, 1, -1]) * 2.0**-52) * rng.choice([1, -1])


def edge_values(t: str, rng: random.Random, n: int) -> list:
    if t == "i1":
        return [rng.randint(0, 1) for _ in range(n)]
    if t in INTS:
        pool = [0, 1, lo(t), hi(t), lo(t) + 1, hi(t) - 1, 2, 3, 7] + ([-1, -2, -7] if signed(t) else [])
        out = []
        for _ in range(n):
            r = rng.random()
            if r < 0.5:
                out.append(rng.choice(pool))
            elif r < 0.7:
                out.append(wrap(rng.choice([1, -1]) << rng.randrange(bits(t)), t))
            elif r < 0.85:
                out.append(wrap(rng.randint(-40, 40), t))
            else:
                out.append(rng.randint(lo(t), hi(t)))
        return out
    pool = [0.0, -0.0, 1.0, -1.0, math.nan, math.inf, -math.inf, 1e300, -1e300, 5e-324, 0.5, -0.5,
            2.5, -2.5, 127.5, -128.5, 255.75, 65504.0, 2.0**31, -2.0**31, 2.0**32, 2.0**63, -2.0**63,
            2.0**64, 2.0**24 + 2, 1e10, 0.1]
    out = []
    for _ in range(n):
        r = rng.random()
        v = (rng.choice(pool) if r < 0.6 else near_tie(rng) if r < 0.7
             else rng.choice([1, -1]) * 2.0 ** rng.randint(-30, 70) if r < 0.8 else rng.uniform(-300, 300))
        out.append(round_to(v, t))
    return out


HEADER = """import math
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64
"""
BODY_LINE = HEADER.count("\n") + 5  # the first line of the leaf's body


def leaf_source(types: list[str], scalars: set[int], outputs: list[tuple[str, list[str]]]) -> str:
    """A leaf reading v{k} (a scalar parameter, or element i of a{k}) and writing o{j}[i]."""
    params = [f"v{k}: {t}" if k in scalars else f"a{k}: In[Ptr[{t}]], a{k}_bytes: i64"
              for k, t in enumerate(types)]
    params += [f"o{j}: InOut[Ptr[{out}]], o{j}_bytes: i64" for j, (out, _) in enumerate(outputs)]
    body = ["i = hpvm.get_node_instance_id_x(hpvm.get_node())"]
    body += [f"v{k} = a{k}[i]" for k in range(len(types)) if k not in scalars]
    for _, lines in outputs:
        body += lines
    names = [f"v{k}" if k in scalars else f"a{k}, a{k}_bytes" for k in range(len(types))]
    names += [f"o{j}, o{j}_bytes" for j in range(len(outputs))]
    binds = ", ".join(f"{n}={n}" for n in ", ".join(names).split(", "))
    sig = ", ".join(params)
    return (HEADER + f"\n\n@hpvm.leaf\ndef leaf({sig}):\n" + "".join(f"    {line}\n" for line in body)
            + f"\n\n@hpvm.graph\ndef root({sig}, n: i64):\n    hpvm.node(leaf, grid=n, {binds})\n")


def array(values: list, t: str) -> np.ndarray:
    if t == "bf16":
        return np.array([struct.unpack("<I", struct.pack("<f", v))[0] >> 16 for v in values], np.uint16)
    dtype = {"i1": np.bool_, "f16": np.float16, "f32": np.float32, "f64": np.float64}.get(t)
    return np.array(values, dtype=dtype or np.dtype(("u" if not signed(t) else "") + f"int{bits(t)}"))


def decoded(a: np.ndarray, t: str) -> list:
    if t == "bf16":
        return [struct.unpack("<f", struct.pack("<I", int(b) << 16))[0] for b in a]
    return [float(x) if is_float(t) else int(x) for x in a]


def same(got: Any, want: Any, t: str) -> bool:
    if is_float(t):
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    return got == want


def refused_text(case: int) -> tuple[list[str], list[str], set[int]] | None:
    """A statement the docs refuse, from the case's generator (None when it drew none)."""
    rng = random.Random(SEED + case)
    nvars = rng.randint(2, 4)
    types = [rng.choice(TYPES) for _ in range(nvars)]
    for _ in range(20):
        o = Output(rng, nvars, types)
        try:
            o.value(types)
        except Refused:
            return [o.out], o.lines(0), types  # type: ignore[return-value]
    return None


def check_case(case: int, targets: list[str], n: int = 24) -> None:
    rng = random.Random(SEED + case)
    nvars = rng.randint(2, 4)
    types = [rng.choice(TYPES) for _ in range(nvars)]
    scalars = {k for k in range(nvars) if rng.random() < 0.25}
    outputs: list[tuple[Output, Callable]] = []
    while len(outputs) < 6:
        o = Output(rng, nvars, types)
        try:
            outputs.append((o, o.value(types)))
        except Refused:
            continue
    inputs = [edge_values(t, rng, n) for t in types]
    for k in scalars:
        inputs[k] = [inputs[k][0]] * n
    olds = [edge_values(o.out, rng, n) for o, _ in outputs]
    want = [[f([column[i] for column in inputs], olds[j][i]) for i in range(n)]
            for j, (_, f) in enumerate(outputs)]
    module = load(leaf_source(types, scalars, [(o.out, o.lines(j)) for j, (o, _) in enumerate(outputs)]))
    for target in targets:
        args: list = []
        for k, t in enumerate(types):
            if k in scalars:
                args.append(bool(inputs[k][0]) if t == "i1" else inputs[k][0])
            else:
                buf = array(inputs[k], t)
                args += [buf, buf.nbytes]
        outs = [array(old, o.out) for old, (o, _) in zip(olds, outputs)]
        for buf in outs:
            args += [buf, buf.nbytes]
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, *args, n))
        for j, ((o, _), buf) in enumerate(zip(outputs, outs)):
            got = decoded(buf, o.out)
            for i in range(n):
                assert same(got[i], want[j][i], o.out), (
                    f"case {case} on {target}: {o.lines(j)} with v = "
                    f"{[(t, column[i]) for t, column in zip(types, inputs)]}, old {olds[j][i]}: "
                    f"got {got[i]!r}, the docs say {want[j][i]!r}")


@pytest.mark.parametrize("chunk", range(4))
def test_generated_expressions_follow_the_documented_typing(chunk: int) -> None:
    for case in range(chunk * 12, chunk * 12 + 12):
        check_case(case, [t for t in TARGETS if t in ("python", "cpu")])


@pytest.mark.parametrize("target", [t for t in TARGETS if t not in ("python", "cpu")])
def test_generated_expressions_on_the_gpu_targets(target: str) -> None:
    for case in range(1000, 1008):  # a few: the gpu target runs in Triton's interpreter here
        check_case(case, [target])


def test_refused_expressions_are_located_errors() -> None:
    checked = 0
    for case in range(2000, 2040):
        drawn = refused_text(case)
        if drawn is None:
            continue
        (out,), lines, types = drawn  # type: ignore[misc]
        module = load(leaf_source(types, set(), [(out, lines)]))
        with pytest.raises(FrontendError) as info:
            hpvm.compile(module.root, target="python")
        first = BODY_LINE + 1 + len(types)  # after the instance id and the loads
        assert info.value.loc is not None and first <= info.value.loc.line < first + len(lines), \
            (lines, str(info.value))
        checked += 1
    assert checked >= 20


# -- hand-written corners --------------------------------------------------------------------

CORNERS = [  # (operand types, expression, output type, inputs, what the docs say)
    (["i32", "u32"], "v0 < v1", "i1", [-1, 5], 0),  # both to u32: 4294967295 < 5
    (["i8", "u8"], "v0 + v1", "u8", [-1, 1], 0),  # equal width: unsigned wins
    (["i16", "u8"], "v0 - v1", "i16", [0, 255], -255),  # the wider integer wins
    (["f16", "bf16"], "v0 + v1", "f32", [2049.0, 0.0078125], 2048.0078125),  # f16 with bf16: f32
    (["i1", "i8"], "v0 - v1", "i8", [0, -128], -128),  # i1 yields to any type
    (["i1", "i1"], "v0 + v1", "i64", [1, 1], 2),  # True + True is 2
    (["i64", "i64"], "v0 // v1", "i64", [-2**63, -1], -2**63),  # INT_MIN // -1 is INT_MIN
    (["i8", "i8"], "v0 % v1", "i8", [-7, 0], 0),  # a zero divisor gives 0
    (["u8", "i64"], "v0 << v1", "i64", [1, 64], 0),  # shift counts outside [0, bits) give 0
    (["i32", "i32"], "v0 >> v1", "i32", [-8, 40], -1),
    (["i64", "i64"], "v0 / v1", "f32", [2**60 + 2**36 + 1, 1], float(2**60 + 2**37)),  # f32, rounded once
    (["f64", "i8"], "i8(v0)", "i8", [math.nan, 0], 0),  # NaN saturates to 0
    (["f32", "i8"], "u8(v0)", "u8", [-1e10, 0], 0),
    (["i64", "i8"], "bf16(v0)", "bf16", [2**31 + 2**23 + 1, 0], float(2**31)),  # via f32
    (["u8", "i8"], "-v0", "u8", [1, 0], 255),  # unary minus on unsigned wraps
    (["f32", "i8"], "v0 + 16777217", "f32", [0.0, 0], 16777216.0),  # the literal rounds once
    (["i8", "i8"], "max(v0, 0.5)", "f32", [-3, 0], 0.5),  # a float literal makes it f32
]


@pytest.mark.parametrize("types, expr, out, values, expected", CORNERS)
def test_documented_corners(target: str, types: list[str], expr: str, out: str, values: list,
                            expected: Any) -> None:
    module = load(leaf_source(types, set(range(len(types))), [(out, [f"o0[i] = {expr}"])]))
    buf = array([0], out)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, *[bool(v) if t == "i1" else v for t, v in zip(types, values)],
                              buf, buf.nbytes, 1))
    assert same(decoded(buf, out)[0], expected, out)


# -- the textual IR's float constants --------------------------------------------------------

TEXT = """; hpvm-py textual IR
module @root
file 0 "scale.py"

graph @root(%a: in ptr<{t}>, %a_bytes: i64, %c: out ptr<{t}>, %c_bytes: i64, %n: i64) -> () @0:8:0 {{
  node %scale = @scale [%n] @0:9:4
  bind_in %a -> %scale.0 @0:9:4
  bind_in %a_bytes -> %scale.1 @0:9:4
  bind_in %c -> %scale.2 @0:9:4
  bind_in %c_bytes -> %scale.3 @0:9:4
}}

leaf @scale(%a: in ptr<{t}>, %a_bytes: i64, %c: out ptr<{t}>, %c_bytes: i64) -> () target(any) @0:3:0 {{
  local %i: i64
  %i = instance_id.x(0) @0:4:4
  store %c[%i] = mul<{t}>(load<{t}>(%a, %i), {k}:{t}) @0:5:4
}}
"""


@pytest.mark.parametrize("k, t, nearest", [
    ("3.708007812500003", "f16", "3.708984375"),  # just above an f16 tie that f32 rounds onto
    ("0.1", "f16", "0.0999755859375"), ("70000.0", "f16", "inf"), ("0.1", "bf16", "0.10009765625"),
    ("16777217", "f32", "16777216.0"), ("0.1", "f32", "0.10000000149011612"), ("-1e-46", "f32", "-0.0"),
])
def test_text_constants_must_be_values_of_their_type(k: str, t: str, nearest: str) -> None:
    with pytest.raises(VerificationError, match=rf"is no {t} value \(the nearest is {nearest}:{t}\)") as info:
        hpvm.from_text(TEXT.format(k=k, t=t))
    assert info.value.rule == "kernel-types" and (info.value.loc.file, info.value.loc.line) == ("scale.py", 5)


@pytest.mark.parametrize("k, t", [("0.0999755859375", "f16"), ("3.708984375", "f16"), ("inf", "f16"),
                                  ("-0.0", "bf16"), ("nan", "bf16"), ("3", "f32"), ("-16777216", "f32"),
                                  ("0.1", "f64"), ("65504.0", "f16")])
def test_text_constants_of_their_type_run_alike(target: str, k: str, t: str) -> None:
    graph = hpvm.from_text(TEXT.format(k=k, t=t))
    a = array([1.0, -2.0, 0.5, 3.0], t)
    c = np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, c, c.nbytes, 4))
    constant = float(k)
    for x, got in zip([1.0, -2.0, 0.5, 3.0], decoded(c, t)):
        assert same(got, float_op("mul", x, constant, t), t)


def test_literals_of_a_leaf_read_back_from_text(target: str) -> None:
    """What the front end prints (its rounded literals) reads back and runs as the leaf does."""
    module = load(leaf_source(["f16", "bf16", "f32"], set(), [
        ("f16", ["o0[i] = v0 * 0.1 + 3.708007812500003"]), ("bf16", ["o1[i] = v1 * 0.1 - 1e30"]),
        ("f32", ["o2[i] = v2 * 0.1 + 16777217"])]))
    graph = hpvm.from_text(hpvm.to_text(module.root))
    results = []
    for root in (module.root, graph):
        bufs = [array([1.5, -3.0], t) for t in ("f16", "bf16", "f32")]
        outs = [np.zeros_like(b) for b in bufs]
        args = [x for b in bufs for x in (b, b.nbytes)] + [x for o in outs for x in (o, o.nbytes)]
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(root, *args, 2))
        results.append([o.tolist() for o in outs])
    assert results[0] == results[1]
    assert results[0][0][0] == float_op("add", float_op("mul", 1.5, round_to(0.1, "f16"), "f16"),
                                        round_to(3.708007812500003, "f16"), "f16")


# -- launch arguments beyond a float parameter's range -----------------------------------------

SCALAR_LEAF = """import hpvm_py as hpvm
from hpvm_py import f16, f32, bf16


@hpvm.leaf
def same(x: {t}) -> {t}:
    return x


@hpvm.graph
def root(x: {t}) -> {t}:
    return hpvm.node(same, x=x).out[0]
"""


@pytest.mark.parametrize("t, argument, expected", [
    ("f32", 1e300, math.inf), ("f32", np.float64(-1e300), -math.inf), ("f16", 70000.0, math.inf),
    ("f16", 65519.0, 65504.0), ("f32", -math.inf, -math.inf), ("f32", 3.0, 3.0),
])
def test_float_arguments_beyond_range_are_inf_without_warnings(target: str, t: str, argument: float,
                                                               expected: float) -> None:
    module = load(SCALAR_LEAF.format(t=t))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NumPy's "overflow encountered in cast" was raised here
        with hpvm.runtime(target):
            got = hpvm.wait(hpvm.launch(module.root, argument))
    assert float(got) == expected
