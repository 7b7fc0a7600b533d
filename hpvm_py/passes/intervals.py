"""The interval domain of the bounds analysis (passes/bounds_analysis.py).

An abstract state maps each integer variable to the interval of values it may hold, each
relation key ("fact", terms) to the interval of that affine sum of atoms, each form key
("form", name) to a Form: variable `name` holds exactly that affine sum of atoms (variables and
instance ids) plus a constant, and each residue key ("mod", name) to a Residue: `name` leaves
that remainder modulo a constant (a condition such as `row % 2 == 0` held). None is the state of
code that cannot run (after break, continue or return). Values are mathematical integers: an
operation whose exact result may leave its type's range wraps, so it gets the whole range.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Optional

from ..types import ScalarType

INF = math.inf


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def join(self, other: "Interval") -> "Interval":
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def meet(self, other: "Interval") -> "Interval | None":
        lo, hi = max(self.lo, other.lo), min(self.hi, other.hi)
        return Interval(lo, hi) if lo <= hi else None

    def within(self, lo: float, hi: float) -> bool:
        return lo <= self.lo and self.hi <= hi


@dataclass(frozen=True)
class Form:
    """A variable's value as an exact affine sum: sum(coef * atom) + const."""
    terms: frozenset  # (atom, coef) pairs
    const: int

    def join(self, other: "Form") -> "Form | None":
        return self if self == other else None  # a form that differs between paths holds on neither


@dataclass(frozen=True)
class Residue:
    """A variable's value is `rest` modulo `modulus` (0 <= rest < modulus)."""
    modulus: int
    rest: int

    def join(self, other: "Residue") -> "Residue | None":
        return self if self == other else None

    def snap(self, iv: Interval) -> Interval | None:
        """iv without the values at its ends that leave another remainder (None: no value left)."""
        lo = iv.lo if iv.lo == -INF else int(iv.lo) + (self.rest - int(iv.lo)) % self.modulus
        hi = iv.hi if iv.hi == INF else int(iv.hi) - (int(iv.hi) - self.rest) % self.modulus
        return Interval(lo, hi) if lo <= hi else None


TOP = Interval(-INF, INF)
BOOL = Interval(0, 1)

State = Optional[dict]  # name or relation key -> Interval, form key -> Form, residue key ->
# Residue; None: unreachable


def is_int(t: Any) -> bool:
    """Whether t is an integer scalar type (bool included): the values the domain tracks."""
    return isinstance(t, ScalarType) and t.is_int


def type_range(t: Any) -> Interval:
    if isinstance(t, ScalarType) and t.is_int:
        return _int_range(t)
    return TOP


@functools.lru_cache(maxsize=None)
def _int_range(t: ScalarType) -> Interval:
    return Interval(t.min_value(), t.max_value())


def fit(iv: Interval, t: Any) -> Interval:
    """Values outside the type's range wrap: then nothing is known but the range."""
    full = type_range(t)
    return iv if iv.within(full.lo, full.hi) else full


def wrap(value: int, t: ScalarType) -> int:
    """An integer as a value of type t holds it (two's complement wrapping)."""
    if t.is_bool:
        return int(value != 0)
    value &= (1 << t.bits) - 1
    if t.is_signed and value >> (t.bits - 1):
        value -= 1 << t.bits
    return value


def widens(src: Any, dst: Any) -> bool:
    """An integer cast that keeps every value of src."""
    if not (isinstance(src, ScalarType) and src.is_int and isinstance(dst, ScalarType) and dst.is_int):
        return False
    full = type_range(dst)
    return type_range(src).within(full.lo, full.hi)


def mul(a: Interval, b: Interval) -> Interval:
    products = [0 if (x == 0 or y == 0) else x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    return Interval(min(products), max(products))


def exact_binop(op: str, a: Interval, b: Interval) -> Interval | None:
    """The exact (unwrapped) result of add/sub/mul; None for other operators."""
    if op == "add":
        return Interval(a.lo + b.lo, a.hi + b.hi)
    if op == "sub":
        return Interval(a.lo - b.hi, a.hi - b.lo)
    if op == "mul":
        return mul(a, b)
    return None


def binop(op: str, a: Interval, b: Interval, t: ScalarType) -> Interval:
    """The interval of `a op b` computed in type t (language semantics: wrapping, floor division,
    a zero divisor gives 0, shifts outside [0, bits) give 0 or -1)."""
    exact = exact_binop(op, a, b)
    if exact is not None:
        return fit(exact, t)
    finite = all(math.isfinite(x) for x in (a.lo, a.hi))
    if op == "floordiv" and b.lo > 0 and finite:  # a positive divisor: monotone in both
        return fit(Interval(min(a.lo // b.lo, a.lo // b.hi), max(a.hi // b.lo, a.hi // b.hi)), t)
    if op == "mod" and b.lo > 0:  # Python's %: the divisor's sign, below the divisor
        if a.lo >= 0 and a.hi < b.lo:
            return a
        return Interval(0, b.hi - 1)
    if op == "and" and (a.lo >= 0 or b.lo >= 0):  # a non-negative operand masks the result
        return Interval(0, min(x.hi for x in (a, b) if x.lo >= 0))
    if op == "shr" and a.lo >= 0 and b.lo >= 0 and finite:  # a non-negative value shrinks
        # (a count of `bits` or more gives 0)
        lo = int(a.lo) >> int(b.hi) if b.hi < t.bits else 0
        hi = int(a.hi) >> int(b.lo) if b.lo < t.bits else 0
        return Interval(lo, hi)
    return type_range(t)


def join_states(*states: State) -> State:
    """What holds on every reachable path: keys known on all of them, their intervals joined
    (a variable missing from a state is unknown there, a relation missing does not hold)."""
    live = [s for s in states if s is not None]
    if not live:
        return None
    first, rest = live[0], live[1:]
    out = {}
    for k, v in first.items():
        for s in rest:
            other = s.get(k)
            if other is None:
                break
            v = v.join(other)
            if v is None:
                break
        else:
            out[k] = v
    return out


def widen_states(old: dict, new: dict, types: dict[str, Any]) -> dict:
    """`new` with every bound that grew since `old` pushed to its type's limit; relations that
    changed are dropped. Each key can then change at most twice more, so iteration terminates."""
    out = {}
    for k, v in new.items():
        before = old.get(k)
        if before is None or before == v:
            out[k] = v
        elif isinstance(k, str):
            full = type_range(types.get(k))
            out[k] = Interval(full.lo if v.lo < before.lo else v.lo, full.hi if v.hi > before.hi else v.hi)
    return out


def forget(state: dict, name: str) -> dict:
    """state without the relations, forms and residues that mention variable `name` (it is about
    to change), its own form included."""
    out = {}
    for k, v in state.items():
        if isinstance(k, str):
            out[k] = v
        elif k[0] == "fact":
            if all(atom != name for atom, _ in k[1]):
                out[k] = v
        elif k[0] == "mod":
            if k[1] != name:
                out[k] = v
        elif k[1] != name and all(atom != name for atom, _ in v.terms):
            out[k] = v
    return out


def is_fact(key: Any) -> bool:
    return isinstance(key, tuple) and key[0] == "fact"
