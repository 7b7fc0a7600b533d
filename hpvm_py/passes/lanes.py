"""Which loop of a leaf may be split over several threads of one instance, and when.

HPVM-C programs often replicate a leaf over rows only and loop over the columns inside it (CAVA's
stages: 480 instances, each looping over 640 columns). On a GPU such a launch fills a few warps.
If the iterations of a loop nest are independent, an instance's iterations of its innermost loop
may run on T threads (lane t takes iterations t, t + T, ... of every pass of the outer loops),
which is what nvptx's lanes mapping does (backends/nvptx/simt.py). `lane_loop` proves at compile
time what it can and leaves the rest to a condition on the launch's integers (`LaneLoop.holds`),
checked when a launch is prepared, with the buffers' addresses; nothing here guesses.

A leaf qualifies when its body is `pre; <nest>; post`, the nest being a top-level loop and the
loops perfectly nested in it (`for chan in range(3): for col in range(cols): ...`), with:

- pre: assignments only (no stores, no atomics): every lane computes the same values;
- post: nothing, or a `return` of values that no iteration assigns (every lane returns the same);
- every loop of the nest: `range(start, stop, step)` with start and stop integers of uniform
  parameters, counts and constants, and step a positive constant;
- the innermost loop's body: no `break` of it, no return, barrier, atomic, malloc, print or remote
  access; every scalar it assigns is written before it is read in each iteration, and read
  nowhere after the nest, and no loop variable of the nest is assigned, so no value travels from
  one iteration to another;
- memory: no pointer locals (views), no buffer the nest stores to is loaded anywhere in the leaf,
  and every store's index is `sum of c_k * v_k + r` over the nest's variables v_k, with each c_k
  the same polynomial of uniform parameters and counts for every store to the buffer and r free
  of values the iterations compute (instance ids, counts, parameters and `pre`'s values are fine).

At a launch (`holds`): the strides c_k * step_k nest like digits (sorted, each beyond what the
smaller ones reach over their trips), so different iterations store to different elements of a
buffer, and for every two stores to it the difference of their r (which must reduce to uniform
parameters and counts) is no nonzero combination of strides within the trips; nvptx also checks
that the buffers stored to overlap no other buffer argument. Indices are compared as polynomials,
which wrap as i64 arithmetic does (ir/polynomial.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

from ..ir import kernel as K
from ..ir import polynomial as P
from ..types import PtrType, ScalarType, i64

_LIMIT = 1 << 62  # |c * step| * trips below it: the trip distances do not wrap


@dataclass(frozen=True)
class Range:
    """One loop of the nest: `for var in range(start, stop, step)`, step a positive constant."""

    var: str
    start: P.Poly  # of launch atoms: ("var", uniform parameter) and ("count", level, dim)
    stop: P.Poly
    step: int

    def trips(self, value: Callable[[P.Atom], int]) -> int:
        start, stop = evaluate(self.start, value), evaluate(self.stop, value)
        return max(0, -(-(stop - start) // self.step))


@dataclass(frozen=True)
class LaneLoop:
    """The nest at body position `index`: `loops` from the outermost to the one split (each
    lane runs the outer ones whole); it may be split when `holds` says so."""

    index: int
    loops: tuple[Range, ...]
    stores: tuple[tuple[str, tuple[P.Poly, ...], tuple[P.Poly, ...]], ...]
    # per buffer stored to: the coefficient of each loop's variable in its indices, and the
    # differences of the rest of every two of its stores' indices

    @property
    def split(self) -> Range:
        return self.loops[-1]

    @property
    def written(self) -> tuple[str, ...]:
        return tuple(name for name, _, _ in self.stores)

    def trips(self, value: Callable[[P.Atom], int]) -> int:
        """Iterations of the loop that is split."""
        return self.split.trips(value)

    def holds(self, value: Callable[[P.Atom], int]) -> bool:
        """Whether no two iterations of the nest store to one element, given the launch's atom
        values: the loops' strides through each buffer nest like digits (each beyond what the
        smaller ones reach, so the map from iterations to elements is one to one), and no two
        stores are a nonzero digit combination apart."""
        trips = [r.trips(value) for r in self.loops]
        if 0 in trips:
            return False
        for _, coefficients, differences in self.stores:
            digits = []
            for c, r, t in zip(coefficients, self.loops, trips):
                stride = abs(_signed(evaluate(c, value) * r.step))
                if t > 1:
                    digits.append((stride, t))
            digits.sort()
            reach = 0
            for stride, t in digits:
                if stride <= reach:
                    return False
                reach += stride * (t - 1)
                if reach >= _LIMIT:
                    return False
            for difference in differences:  # 0: the same element in the same iteration
                d = _signed(evaluate(difference, value))
                if d and _reachable(d, digits[::-1]):
                    return False
        return True

    def params(self) -> set[str]:
        """The parameters `holds` reads."""
        polys = [p for r in self.loops for p in (r.start, r.stop)]
        polys += [p for _, cs, ds in self.stores for p in (*cs, *ds)]
        return {atom[1] for p in polys for atom in P.atoms(p) if atom[0] == "var"}


def _reachable(d: int, digits: list[tuple[int, int]]) -> bool:
    """Whether d = sum of stride * delta with |delta| < trips, over `digits` (largest first,
    each stride beyond what the smaller ones reach: at most two candidates per digit)."""
    if not digits:
        return d == 0
    (stride, trips), rest = digits[0], digits[1:]
    q = d // stride
    return any(abs(delta) < trips and _reachable(d - delta * stride, rest) for delta in (q, q + 1))


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
        assigned = K.assignments(leaf.body)
        self.assigned = assigned
        self.uniform = {p.name for p, mode in zip(leaf.params, input_modes)
                        if mode == "uniform" and isinstance(p.type, ScalarType) and not assigned[p.name]}
        self.fixed = {p.name for p in leaf.params if not assigned[p.name]}  # the same in every lane
        self.in_loop = set(K.assignments([self.loop]))
        # the perfect nest from this loop down: each loop's body is the next loop alone
        self.nest = [self.loop]
        while len(self.nest[-1].body) == 1 and isinstance(self.nest[-1].body[0], K.For):
            self.nest.append(self.nest[-1].body[0])
        self.inner = self.nest[-1]  # the loop the lanes share
        self.lets = self._lets()

    def run(self) -> LaneLoop:
        self._shape()
        self._private()
        loops = []
        for loop in self.nest:
            step = loop.step.value if isinstance(loop.step, K.Const) else None
            if not isinstance(step, int) or step <= 0 or self.leaf.locals.get(loop.var) != i64:
                raise _Reject
            loops.append(Range(loop.var, self._launch_poly(loop.start),
                               self._launch_poly(loop.stop), step))
        return LaneLoop(index=self.index, loops=tuple(loops), stores=self._stores())

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
        if _breaks_out(self.inner.body):
            raise _Reject
        for s in self.post:  # every lane returns the same values
            if self._reads(s) & self.in_loop:
                raise _Reject

    def _private(self) -> None:
        """Every scalar the shared loop's body assigns is written before it is read in each
        iteration; the nest's variables are not assigned in it."""
        variables = {loop.var for loop in self.nest}
        if variables & set(K.assignments(self.inner.body)):
            raise _Reject
        self._block_defines(self.inner.body, set(variables))

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
        for s in list(self.pre) + list(self.inner.body):
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
        variables = [("var", loop.var) for loop in self.nest]
        out = []
        for name in sorted(written):
            parts = [self._split(self._poly(s.index), variables) for s in stores if s.ptr.name == name]
            coefficients = parts[0][0]
            if any(cs != coefficients for cs, _ in parts) or \
                    not all(_launch_atom(a, self.uniform) for c in coefficients for a in P.atoms(c)):
                raise _Reject
            differences = []
            for i in range(len(parts)):
                for j in range(i + 1, len(parts)):
                    d = P.add(parts[i][1], parts[j][1], -1)
                    if not all(_launch_atom(a, self.uniform) for a in P.atoms(d)):
                        raise _Reject
                    differences.append(d)
            out.append((name, coefficients, tuple(differences)))
        return tuple(out)

    def _split(self, poly: P.Poly, variables: list[P.Atom]) -> tuple[tuple[P.Poly, ...], P.Poly]:
        """(c, r) with poly = sum of c[k] * variables[k] + r; r may hold only values every
        iteration shares."""
        c: list[P.Poly] = [{} for _ in variables]
        r: P.Poly = {}
        for monomial, coefficient in poly.items():
            found = [k for k, var in enumerate(variables) for a in monomial if a == var]
            if len(found) > 1:
                raise _Reject  # a product of loop variables: not a stride
            if found:
                var = variables[found[0]]
                rest = tuple(a for a in monomial if a != var)
                c[found[0]][rest] = c[found[0]].get(rest, 0) + coefficient
            else:
                r[monomial] = coefficient
        for atom in P.atoms(r):
            if atom[0] == "var" and atom[1] not in self.fixed:
                raise _Reject  # a local no `let` explains: it may change between iterations
        return tuple(c), r

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
