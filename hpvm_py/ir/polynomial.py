"""Integer index expressions as polynomials with integer coefficients (dotmatch.py uses them).

An i64 expression built from +, - and * over atoms (instance ids, instance counts, i64 variables)
and constants is a polynomial; two such expressions compute the same value when their polynomials
are equal, also after i64 wrap-around (the map from integers to i64 keeps +, - and *). That lets
the matcher prove facts such as "this index reads the element that lane (t, ty) stored" and "k0
cancels out of k0 + (kk - k0)" without guessing from the shape of the source.
"""
from __future__ import annotations

from typing import Callable, Mapping

from . import kernel as K
from ..types import i64

Atom = tuple  # ("id", level, dim) | ("count", level, dim) | ("var", name)
Monomial = tuple[Atom, ...]  # sorted atoms; () is the constant term
Poly = dict[Monomial, int]


def atom_of(e: K.Expr) -> Atom | None:
    if isinstance(e, K.InstanceId):
        return ("id", e.level, e.dim)
    if isinstance(e, K.NumInstances):
        return ("count", e.level, e.dim)
    if isinstance(e, K.Var):
        return ("var", e.name)
    return None


def poly_of(e: K.Expr, expand: Callable[[str], K.Expr | None]) -> Poly | None:
    """The polynomial of an i64 expression, or None when it is not one. `expand(name)` gives the
    definition to substitute for a variable, or None to keep the variable as an atom."""
    if e.type != i64:
        return None
    if isinstance(e, K.Const):
        return _clean({(): int(e.value)})
    if isinstance(e, K.Var):
        definition = expand(e.name)
        return poly_of(definition, expand) if definition is not None else {(("var", e.name),): 1}
    atom = atom_of(e)
    if atom is not None:
        return {(atom,): 1}
    if isinstance(e, K.BinOp) and e.op in ("add", "sub", "mul"):
        lhs, rhs = poly_of(e.lhs, expand), poly_of(e.rhs, expand)
        if lhs is None or rhs is None:
            return None
        if e.op == "mul":
            return multiply(lhs, rhs)
        return add(lhs, rhs, -1 if e.op == "sub" else 1)
    if isinstance(e, K.UnaryOp) and e.op == "neg":
        inner = poly_of(e.operand, expand)
        return None if inner is None else {m: -c for m, c in inner.items()}
    return None


def add(p: Poly, q: Poly, sign: int = 1) -> Poly:
    out = dict(p)
    for m, c in q.items():
        out[m] = out.get(m, 0) + sign * c
    return _clean(out)


def multiply(p: Poly, q: Poly) -> Poly:
    out: Poly = {}
    for m1, c1 in p.items():
        for m2, c2 in q.items():
            m = tuple(sorted(m1 + m2))
            out[m] = out.get(m, 0) + c1 * c2
    return _clean(out)


def substitute(p: Poly, values: Mapping[Atom, Poly]) -> Poly:
    """p with each atom in `values` replaced by its polynomial."""
    out: Poly = {}
    for m, c in p.items():
        term: Poly = {(): c}
        for atom in m:
            term = multiply(term, values.get(atom, {(atom,): 1}))
        out = add(out, term)
    return out


def atoms(p: Poly) -> set[Atom]:
    return {a for m in p for a in m}


def to_expr(p: Poly, make_atom: Callable[[Atom], K.Expr]) -> K.Expr:
    """An i64 expression computing p (sum of coefficient * product of atoms)."""
    def const(v: int) -> K.Expr:
        return K.Const(value=v, type=i64)

    def binop(op: str, x: K.Expr, y: K.Expr) -> K.Expr:
        return K.BinOp(op=op, lhs=x, rhs=y, type=i64)

    total: K.Expr | None = None
    for m in sorted(p, key=lambda m: (len(m), m)):
        c = p[m]
        term: K.Expr | None = None
        for atom in m:
            term = make_atom(atom) if term is None else binop("mul", term, make_atom(atom))
        if term is None:
            term = const(c)
        elif c != 1:
            term = binop("mul", term, const(c))
        total = term if total is None else binop("add", total, term)
    return total if total is not None else const(0)


def _clean(p: Poly) -> Poly:
    """Coefficients reduced to i64 (wrap-around) and zero terms dropped."""
    out = {}
    for m, c in p.items():
        c = (c + (1 << 63)) % (1 << 64) - (1 << 63)
        if c:
            out[m] = c
    return out
