"""Which loop of a leaf may be split over several threads of one instance, and when.

HPVM-C programs often replicate a leaf over rows only and loop over the columns inside it (CAVA's
stages: 480 instances, each looping over 640 columns). On a GPU such a launch fills a few warps.
If the iterations of a top-level loop are independent, an instance's iterations may run on T
threads (lane t takes iterations t, t + T, ...), which is what nvptx's lanes mapping does
(backends/nvptx/simt.py). `lane_loop` proves at compile time what it can and leaves the rest to a
condition on the launch's integers and buffers (`LaneLoop.holds`), checked when a launch is
prepared; nothing here guesses.

A leaf qualifies when its body is `pre; for v in range(start, stop, step): body; post` with:

- pre: assignments only (no stores, no atomics): every lane computes the same values;
- post: nothing, or a `return` of values that no iteration assigns (every lane returns the same);
- start, stop: integers of uniform parameters, counts and constants; step a positive constant;
- the body: no `break` of this loop, no return, barrier, atomic, malloc or remote access; every
  scalar it assigns (and v) is written in each iteration before it is read, and read nowhere
  after the loop, so no value travels from one iteration to another;
- memory: no buffer the body stores to is loaded anywhere in the leaf; every store's index is
  `c * v + r`, with c the same polynomial of uniform parameters and counts for every store to the
  buffer and r free of values the iterations compute (instance ids, counts, parameters and
  `pre`'s values are fine).

At a launch (`holds`): c is not zero, and for every two stores to a buffer the difference of their
r (which must reduce to uniform parameters and counts) is never c * step times a trip distance
within the loop, so no two iterations write the same element; and the buffers stored to overlap
no other buffer argument of the launch (nvptx checks that part: it has the addresses). Indices are
compared as polynomials, which wrap as i64 arithmetic does (ir/polynomial.py).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Callable, Mapping

from ..ir import kernel as K
from ..ir import polynomial as P
from ..types import PtrType, ScalarType, i64

_LIMIT = 1 << 62  # |c * step| * trips below it: the trip distances do not wrap


@dataclass(frozen=True)
class LaneLoop:
    """The loop at body position `index` may be split when `holds` says so."""

    index: int
    var: str
    start: P.Poly  # of launch atoms: ("var", uniform parameter) and ("count", level, dim)
    stop: P.Poly
    step: int
    stores: tuple[tuple[str, P.Poly, tuple[P.Poly, ...]], ...]  # buffer, c, the differences of r
    written: tuple[str, ...]  # the buffers stored to

    def trips(self, value: Callable[[P.Atom], int]) -> int:
        start, stop = evaluate(self.start, value), evaluate(self.stop, value)
        return max(0, -(-(stop - start) // self.step))

    def holds(self, value: Callable[[P.Atom], int]) -> bool:
        """Whether no two iterations store to one element, given the launch's atom values."""
        trips = self.trips(value)
        for _, coefficient, differences in self.stores:
            stride = _signed(evaluate(coefficient, value) * self.step)
            if stride == 0 or abs(stride) * max(trips, 1) >= _LIMIT:
                return False
            for difference in differences:
                d = _signed(evaluate(difference, value))  # (0: the same element in the
                if d % stride == 0 and 0 < abs(d // stride) < trips:  # same iteration: one lane)
                    return False
        return True

    def params(self) -> set[str]:
        """The parameters `holds` reads."""
        polys = [self.start, self.stop] + [p for _, c, ds in self.stores for p in (c, *ds)]
        return {atom[1] for p in polys for atom in P.atoms(p) if atom[0] == "var"}


def evaluate(poly: P.Poly, value: Callable[[P.Atom], int]) -> int:
    total = 0
    for monomial, coefficient in poly.items():
        term = coefficient
        for atom in monomial:
            term *= value(atom)
        total += term
    return total


def _signed(n: int) -> int:
    n &= (1 << 64) - 1
    return n - (1 << 64) if n >> 63 else n


class _Reject(Exception):
    pass


def lane_loop(leaf: K.LeafFunc, input_modes: tuple[str, ...]) -> LaneLoop | None:
    """The loop of `leaf` that lanes may split (see the module's docstring), or None."""
    loops = [i for i, s in enumerate(leaf.body) if isinstance(s, K.For)]
    if len(loops) != 1:
        return None
    try:
        return _Analysis(leaf, input_modes, loops[0]).run()
    except _Reject:
        return None


class _Analysis:
    def __init__(self, leaf: K.LeafFunc, input_modes: tuple[str, ...], index: int):
        self.leaf = leaf
        self.index = index
        self.loop = leaf.body[index]
        assert isinstance(self.loop, K.For)
        self.pre, self.post = leaf.body[:index], leaf.body[index + 1:]
        assigned = Counter(s.target for s in K.walk_stmts(leaf.body) if isinstance(s, K.Assign))
        assigned.update(s.var for s in K.walk_stmts(leaf.body) if isinstance(s, K.For))
        self.assigned = assigned
        self.uniform = {p.name for p, mode in zip(leaf.params, input_modes)
                        if mode == "uniform" and isinstance(p.type, ScalarType) and not assigned[p.name]}
        self.fixed = {p.name for p in leaf.params if not assigned[p.name]}  # the same in every lane
        self.in_loop = {s.target for s in K.walk_stmts(self.loop.body) if isinstance(s, K.Assign)}
        self.in_loop |= {s.var for s in K.walk_stmts(self.loop.body) if isinstance(s, K.For)}
        self.in_loop.add(self.loop.var)
        self.lets = self._lets()

    def run(self) -> LaneLoop:
        loop = self.loop
        self._shape()
        self._private()
        step = loop.step.value if isinstance(loop.step, K.Const) else None
        if not isinstance(step, int) or step <= 0 or self.leaf.locals.get(loop.var) != i64:
            raise _Reject
        start, stop = self._launch_poly(loop.start), self._launch_poly(loop.stop)
        stores = self._stores()
        return LaneLoop(index=self.index, var=loop.var, start=start, stop=stop, step=step,
                        stores=stores, written=tuple(name for name, _, _ in stores))

    # -- shape and scalars -----------------------------------------------------------------------

    def _shape(self) -> None:
        if not all(isinstance(s, K.Assign) for s in self.pre):
            raise _Reject
        if any(isinstance(t, PtrType) for t in self.leaf.locals.values()):
            raise _Reject  # a view or offset pointer: what it aliases is not followed here
        if self.post and not (len(self.post) == 1 and isinstance(self.post[0], K.Return)):
            raise _Reject
        everything = self.leaf.body
        for e in K.walk_all_exprs(everything):
            if isinstance(e, (K.Atomic, K.Malloc)) or getattr(e, "rank", None) is not None:
                raise _Reject
        for s in K.walk_stmts(everything):
            if isinstance(s, (K.Barrier, K.Print, K.Breakpoint)) or getattr(s, "rank", None) is not None:
                raise _Reject
        for s in K.walk_stmts(self.loop.body):
            if isinstance(s, K.Return):
                raise _Reject
        if _breaks_out(self.loop.body):
            raise _Reject
        for s in self.post:  # every lane returns the same values
            if self._reads(s) & self.in_loop:
                raise _Reject

    def _private(self) -> None:
        """Every scalar the body assigns is written before it is read in each iteration."""
        defined = {self.loop.var}
        self._block_defines(self.loop.body, defined)

    def _block_defines(self, block: K.Block, defined: set[str]) -> None:
        for s in block:
            for name in self._reads(s, own=False) & self.in_loop:
                if name not in defined:
                    raise _Reject
            if isinstance(s, K.Assign):
                defined.add(s.target)
            elif isinstance(s, K.For):
                inner = set(defined) | {s.var}
                self._block_defines(s.body, inner)
            elif isinstance(s, K.While):
                self._block_defines(s.body, set(defined))
            elif isinstance(s, K.If):
                self._block_defines(s.then, set(defined))
                self._block_defines(s.orelse, set(defined))

    def _reads(self, s: K.Stmt, own: bool = True) -> set[str]:
        """The variables a statement reads (with own=False, only its own expressions, not those
        of the statements inside it)."""
        stmts = list(K.walk_stmts([s])) if own else [s]
        names = set()
        for stmt in stmts:
            for x in K.child_exprs(stmt):
                names |= {e.name for e in K.walk_exprs(x) if isinstance(e, K.Var)}
        return names

    # -- integers as polynomials ------------------------------------------------------------------

    def _lets(self) -> dict[str, K.Expr]:
        """Locals assigned once, at the top level of `pre` or of the loop body, from expressions
        without loads: an index may be read through them."""
        lets = {}
        for s in list(self.pre) + list(self.loop.body):
            if isinstance(s, K.Assign) and self.assigned[s.target] == 1 and \
                    not any(isinstance(e, (K.Load, K.Atomic)) for e in K.walk_exprs(s.value)):
                lets[s.target] = s.value
        return lets

    def _poly(self, e: K.Expr) -> P.Poly:
        poly = P.poly_of(e, self.lets.get)
        if poly is None:
            raise _Reject
        return poly

    def _launch_poly(self, e: K.Expr) -> P.Poly:
        poly = self._poly(e)
        if not all(_launch_atom(a, self.uniform) for a in P.atoms(poly)):
            raise _Reject
        return poly

    # -- memory ------------------------------------------------------------------------------------

    def _stores(self) -> tuple[tuple[str, P.Poly, tuple[P.Poly, ...]], ...]:
        stores = [s for s in K.walk_stmts(self.loop.body) if isinstance(s, K.Store)]
        written = {s.ptr.name for s in stores}
        if any(isinstance(e, K.Load) and e.ptr.name in written for e in K.walk_all_exprs(self.leaf.body)):
            raise _Reject
        if any(not isinstance(self._type(name), PtrType) or name not in self.fixed for name in written):
            raise _Reject  # a pointer the leaf computes: its target is not known here
        var = ("var", self.loop.var)
        out = []
        for name in sorted(written):
            parts = [self._split(self._poly(s.index), var) for s in stores if s.ptr.name == name]
            coefficient = parts[0][0]
            if any(c != coefficient for c, _ in parts) or \
                    not all(_launch_atom(a, self.uniform) for a in P.atoms(coefficient)):
                raise _Reject
            differences = []
            for i in range(len(parts)):
                for j in range(i + 1, len(parts)):
                    d = P.add(parts[i][1], parts[j][1], -1)
                    if not all(_launch_atom(a, self.uniform) for a in P.atoms(d)):
                        raise _Reject
                    differences.append(d)
            out.append((name, coefficient, tuple(differences)))
        return tuple(out)

    def _split(self, poly: P.Poly, var: P.Atom) -> tuple[P.Poly, P.Poly]:
        """(c, r) with poly = c * var + r; r may hold only values every iteration shares."""
        c: P.Poly = {}
        r: P.Poly = {}
        for monomial, coefficient in poly.items():
            count = monomial.count(var)
            if count > 1:
                raise _Reject
            if count:
                rest = tuple(a for a in monomial if a != var)
                c[rest] = c.get(rest, 0) + coefficient
            else:
                r[monomial] = coefficient
        for atom in P.atoms(r):
            if atom[0] == "var" and atom[1] not in self.fixed:
                raise _Reject  # a local no `let` explains: it may change between iterations
        return c, r

    def _type(self, name: str) -> object:
        for p in self.leaf.params:
            if p.name == name:
                return p.type
        return self.leaf.locals.get(name)


def _launch_atom(atom: P.Atom, uniform: set[str]) -> bool:
    return atom[0] == "count" or (atom[0] == "var" and atom[1] in uniform)


def _breaks_out(block: K.Block) -> bool:
    """A `break` that leaves this loop (not one of a loop inside it)."""
    for s in block:
        if isinstance(s, K.Break):
            return True
        if isinstance(s, K.If) and (_breaks_out(s.then) or _breaks_out(s.orelse)):
            return True
    return False


def atom_values(params: Mapping[str, int], extents: list[tuple[int, ...]]) -> Callable[[P.Atom], int]:
    """The value of each launch atom: a parameter's integer, or an instance count."""
    def value(atom: P.Atom) -> int:
        if atom[0] == "count":
            level, dim = atom[1], atom[2]
            dims = extents[level] if level < len(extents) else ()
            return int(dims[dim]) if dim < len(dims) else 1
        return int(params[atom[1]])
    return value
