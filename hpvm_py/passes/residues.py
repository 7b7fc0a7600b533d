"""Residues for the bounds analysis (passes/bounds_analysis.py): what a condition such as
`row % 2 == 0` says about `row`. A state's key ("mod", x) holds a Residue (intervals.py): x leaves
that remainder modulo a constant, and the ends of x's interval move to values that do.
(docs/architecture.md, "The launch-time bounds proof")"""
from __future__ import annotations

from typing import Any

from ..ir import kernel as K
from .intervals import Interval, Residue, State, is_int, widens


def congruence(cond: K.Compare, op: str, state: dict) -> tuple[bool, State]:
    """(True, the state where `cond op` holds) when cond compares `x % m` or `x & (m - 1)` (m a
    power of two) with a constant r for equality: x leaves remainder r (`!=` says which only for
    m = 2); (False, state) for any other condition."""
    for side, other in ((cond.lhs, cond.rhs), (cond.rhs, cond.lhs)):
        found = remainder_of(side)
        if found is None or not isinstance(other, K.Const) or op not in ("eq", "ne"):
            continue
        name, modulus = found
        rest = int(other.value)
        if not 0 <= rest < modulus:  # no remainder is r: == never holds, != always does
            return True, (None if op == "eq" else state)
        if op == "ne":
            if modulus != 2:
                return True, (None if state.get(("mod", name)) == Residue(modulus, rest) else state)
            rest = 1 - rest
        return True, with_residue(name, Residue(modulus, rest), state)
    return False, state


def with_residue(name: str, residue: Residue, state: dict) -> State:
    """state where variable `name` leaves `residue`; and, where name's form is one atom
    (`row = get_node_instance_id_x(...)`, `q = p + 1`), that atom leaves the matching one, so
    that the sums made of it before the condition see it too. None: a contradiction."""
    out = _one_residue(name, residue, state)
    form = None if out is None else out.get(("form", name))
    if form is not None and len(form.terms) == 1:
        (atom, coef), = form.terms
        if coef in (1, -1):  # name = coef * atom + const, so atom = coef * (name - const)
            rest = coef * (residue.rest - form.const) % residue.modulus
            out = _one_residue(atom, Residue(residue.modulus, rest), out)
    return out


def _one_residue(name: Any, residue: Residue, state: dict) -> State:
    known = state.get(("mod", name))
    if known is not None:
        big, small = (known, residue) if known.modulus >= residue.modulus else (residue, known)
        if big.modulus % small.modulus:
            return state  # remainders of unrelated moduli: keep the one known
        if big.rest % small.modulus != small.rest:
            return None  # the two remainders contradict each other
        residue = big
    out = dict(state)
    out[("mod", name)] = residue
    if name in out:
        interval = residue.snap(out[name])
        if interval is None:
            return None
        out[name] = interval
    return out


def snapped(interval: Interval, atom: Any, state: dict) -> Interval | None:
    """interval (of variable or instance id `atom`) with its ends moved to values that leave
    atom's known remainder; None when no value in it does."""
    residue = state.get(("mod", atom))
    return interval if residue is None else residue.snap(interval)


def remainder_of(e: K.Expr) -> tuple[str, int] | None:
    """(x, m) where e is `x % m` (m >= 2) or `x & (m - 1)` (m a power of two >= 2) of an integer
    variable x (through casts that keep its value): e's value is x's remainder modulo m."""
    if not isinstance(e, K.BinOp) or not is_int(e.type):
        return None
    if e.op == "mod" and isinstance(e.rhs, K.Const):
        value, modulus = e.lhs, int(e.rhs.value)
    elif e.op == "and" and (isinstance(e.rhs, K.Const) or isinstance(e.lhs, K.Const)):
        value, mask = (e.lhs, e.rhs) if isinstance(e.rhs, K.Const) else (e.rhs, e.lhs)
        modulus = int(mask.value) + 1  # type: ignore[attr-defined]
        if modulus & (modulus - 1):
            return None
    else:
        return None
    while isinstance(value, K.Cast) and widens(value.value.type, value.type):
        value = value.value
    if modulus < 2 or not isinstance(value, K.Var) or not is_int(value.type):
        return None
    return value.name, modulus
