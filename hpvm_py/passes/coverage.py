"""Analysis `coverage`: does a launch provably write every element of an `Out` buffer?
(docs/architecture.md, "Module notes": passes/coverage.py)"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir import kernel as K
from ..support.loc import Loc
from ..types import PtrType, ScalarType, bf16
from .intervals import type_range
from .progressions import Progression, TooIrregular, first_missing

_KEPT = 256  # decisions cached per leaf and node context

Atom = tuple  # ("id", level, dim) or ("loop", depth): an instance id or a loop counter
Form = tuple[dict, int]  # sum(coef * atom) + const


class NotAffine(Exception):
    """Some value on the store's path is not an affine sum known at launch (args: its Loc)."""


@dataclass(frozen=True)
class Uncovered:
    """Why an Out parameter may be left in part unwritten: where, and what was found."""

    param: int
    loc: Loc  # the guard, loop or store a user would change
    why: str


@dataclass
class _Scope:
    """What a name means at one point of the store's path: the locals assigned once before it
    (each with its own scope) and how many loops around the store enclose that point."""

    defs: dict[str, "_Def"]
    loops: int


@dataclass
class _Def:
    value: K.Expr
    scope: _Scope


@dataclass
class _Step:
    """One element of a store's path: an `if` branch taken, or a `for` loop entered."""

    scope: _Scope
    cond: K.Expr | None = None  # an if: its condition, and the branch taken
    truth: bool = True
    loop: K.For | None = None


@dataclass
class _Site:
    """A store that may cover its buffer, with its path from the top of the body."""

    store: K.Store
    path: list[_Step]
    scope: _Scope  # the store's own


class OutCoverage:
    """Per leaf and node context: which Out parameters a launch may leave in part unwritten."""

    def __init__(self, leaf: K.LeafFunc, input_modes: tuple[str, ...]):
        self.leaf = leaf
        self.input_modes = input_modes  # backends/base.py's modes, one per parameter
        self.warned: set[int] = set()  # parameters whose warning was given (rt/executor.py)
        self.outs = [i for i, p in enumerate(leaf.params) if p.direction == "out"]
        self.sites: dict[int, list[_Site]] = {i: [] for i in self.outs}
        self.static: dict[int, Uncovered] = {}  # Out parameters no launch can cover
        self._cache: dict[tuple, dict[int, Uncovered]] = {}
        self._lock = threading.Lock()
        self.assigned: dict[str, int] = {}  # name -> assignments (a for loop counts 2)
        for stmt in K.walk_stmts(leaf.body):
            if isinstance(stmt, K.Assign):
                self.assigned[stmt.target] = self.assigned.get(stmt.target, 0) + 1
            elif isinstance(stmt, K.For):
                self.assigned[stmt.var] = self.assigned.get(stmt.var, 0) + 2
        self._returned: Loc | None = None
        if self.outs:
            reasons: dict[int, Uncovered] = {}
            self._walk(leaf.body, [], _Scope({}, 0), reasons)
            for i in self.outs:
                if not self.sites[i]:
                    self.static[i] = reasons.get(i) or Uncovered(
                        i, leaf.loc, "no store to it runs in every instance")
        # what a decision depends on: the Out buffers' sizes and the integer scalars the body uses
        used = K.names_read(leaf.body)
        self.relevant = [i for i, p in enumerate(leaf.params)
                         if i in self.sites or (_is_int(p.type) and p.name in used)]

    # -- once per leaf --------------------------------------------------------------------------

    def _walk(self, block: K.Block, path: list[_Step], scope: _Scope,
              reasons: dict[int, Uncovered]) -> None:
        for stmt in block:
            if isinstance(stmt, K.Store) and stmt.rank is None:
                self._site(stmt, path, scope, reasons)
            elif isinstance(stmt, K.Assign) and self.assigned.get(stmt.target) == 1:
                scope = _Scope({**scope.defs, stmt.target: _Def(stmt.value, scope)}, scope.loops)
            elif isinstance(stmt, K.If):
                self._walk(stmt.then, path + [_Step(scope, stmt.cond, True)], scope, reasons)
                self._walk(stmt.orelse, path + [_Step(scope, stmt.cond, False)], scope, reasons)
            elif isinstance(stmt, K.For):
                exit_loc = _early_exit(stmt.body)
                if exit_loc is not None:
                    self._note_all(stmt.body, exit_loc, "a loop around it may be left early", reasons)
                else:
                    self._walk(stmt.body, path + [_Step(scope, loop=stmt)],
                               _Scope(scope.defs, scope.loops + 1), reasons)
            elif isinstance(stmt, K.While):
                self._note_all(stmt.body, stmt.loc, "it runs in a while loop", reasons)
            if self._returned is None and any(isinstance(s, K.Return) for s in K.walk_stmts([stmt])):
                self._returned = stmt.loc  # the instance may end here: later stores may not run

    def _site(self, store: K.Store, path: list[_Step], scope: _Scope,
              reasons: dict[int, Uncovered]) -> None:
        i = self._out_index(store.ptr.name)
        if i is None:
            return
        if self._returned is not None:
            reasons.setdefault(i, Uncovered(i, self._returned, "an earlier return may end the instance"))
            return
        self.sites[i].append(_Site(store, list(path), scope))

    def _note_all(self, block: K.Block, loc: Loc, why: str, reasons: dict[int, Uncovered]) -> None:
        for stmt in K.walk_stmts(block):
            if isinstance(stmt, K.Store):
                i = self._out_index(stmt.ptr.name)
                if i is not None:
                    reasons.setdefault(i, Uncovered(i, loc, why))

    def _out_index(self, name: str) -> int | None:
        for i in self.outs:
            if self.leaf.params[i].name == name:
                return i
        return None

    # -- per launch -----------------------------------------------------------------------------

    def uncovered(self, args: list[Any], extents: list[tuple[int, ...]]) -> dict[int, Uncovered]:
        """The Out parameters (by index) that this launch may leave in part unwritten. `args`
        holds the launch's values: buffers as anything with `nbytes`, scalars as numbers (one
        per instance or per parent as arrays)."""
        if not self.outs:
            return {}
        try:
            key: tuple | None = self._key(args, extents)
        except (TypeError, ValueError, OverflowError, AttributeError):
            key = None
        found = self._cache.get(key) if key is not None else None
        if found is not None:
            return found
        found = {}
        for i in self.outs:
            reason = self.static.get(i) or self._decide(i, args, extents)
            if reason is not None:
                found[i] = reason
        if key is not None:
            with self._lock:
                if len(self._cache) >= _KEPT:
                    self._cache.clear()
                self._cache[key] = found
        return found

    def _key(self, args: list[Any], extents: list[tuple[int, ...]]) -> tuple:
        parts: list[Any] = [tuple(extents)]
        for i in self.relevant:
            value, mode = args[i], self.input_modes[i]
            if mode == "buffer":
                parts.append(value.nbytes)
            elif mode == "uniform" and isinstance(value, (int, np.integer)):
                parts.append(int(value))
            else:
                parts.append(None)  # values that differ by instance never enter a proof
        return tuple(parts)

    def _decide(self, i: int, args: list[Any], extents: list[tuple[int, ...]]) -> Uncovered | None:
        elem = self.leaf.params[i].type.elem  # type: ignore[union-attr]
        count = -(-int(args[i].nbytes) // elem.nbytes)
        if count == 0:
            return None
        scalars = {p.name: int(args[j]) for j, p in enumerate(self.leaf.params)
                   if _is_int(p.type) and self.input_modes[j] == "uniform"
                   and p.name not in self.assigned and isinstance(args[j], (int, np.integer))}
        first: Uncovered | None = None
        written: list[Progression] = []  # what the stores whose indices are known write
        for site in self.sites[i]:
            launch = _Launch(self, site, scalars, extents)
            try:
                indices = launch.indices()
            except NotAffine as e:
                first = first or Uncovered(i, e.args[0], NOT_AFFINE)
                continue
            if indices is not None and indices.covers(count):
                return None
            first = first or launch.uncovered(i, count, indices)
            if indices is not None:
                written.append(indices)
        if len(written) < 2:
            return first
        try:  # several stores together (`c[2 * i] = re; c[2 * i + 1] = im`)
            missing = first_missing(written, count)
        except TooIrregular:
            return first
        if missing is None:
            return None
        if len(written) < len(self.sites[i]):
            return first  # (a store whose indices are unknown may write it)
        return Uncovered(i, self.sites[i][0].store.loc,
                         f"no store of this launch writes element {missing} of its {count}")


NOT_AFFINE = ("the store's index, or a condition or loop on its way, is not an integer sum of "
              "instance ids, loop counters and scalars")


class _Launch:
    """One site's store, evaluated with one launch's values."""

    def __init__(self, coverage: OutCoverage, site: _Site, scalars: dict[str, int],
                 extents: list[tuple[int, ...]]):
        self.site = site
        self.scalars = scalars
        self.extents = extents
        self.assigned = coverage.assigned
        self.types: dict[str, Any] = {p.name: p.type for p in coverage.leaf.params}
        self.types.update(coverage.leaf.locals)
        self.full: dict[Atom, tuple[int, int]] = {}  # each atom's range before any guard
        self.ranges: dict[Atom, tuple[int, int]] = {}  # narrowed by the guards (lo > hi: empty)
        self.loops: list[tuple[str, Form]] = []  # entered loops: counter name, its value
        self.never = False  # a guard on the path is false for every instance

    def indices(self) -> Progression | None:
        """The indices the site's store writes in this launch; None when they are no progression.
        Raises NotAffine."""
        for step in self.site.path:
            if step.loop is not None:
                self._enter(step.loop, step.scope)
            else:
                assert step.cond is not None
                self._guard(step.cond, step.truth, step.scope)
        return self._image(*self.form(self.site.store.index, self.site.scope))

    def uncovered(self, i: int, count: int, indices: Progression | None) -> Uncovered:
        """Why the store alone does not cover the buffer's `count` elements."""
        if indices is None or (indices.count > 1 and indices.stride > 1):
            written = f"this launch's stores leave gaps among its {count} elements"
        elif indices.count == 0:
            written = f"this launch writes none of its {count} elements"
        else:
            end = indices.start + indices.count - 1
            written = (f"this launch writes elements [{max(indices.start, 0)}, "
                       f"{min(end, count - 1) + 1}) of its {count} at most")
        guards = [s.cond for s in self.site.path if s.cond is not None]
        if guards:
            return Uncovered(i, guards[-1].loc, f"{written}: the store runs under a condition")
        return Uncovered(i, self.site.store.loc, written)

    def _enter(self, loop: K.For, scope: _Scope) -> None:
        start = self.form(loop.start, scope)
        length = _sub(self.form(loop.stop, scope), start)
        step = self.form(loop.step, scope)
        if length[0] or step[0] or step[1] <= 0 or self.assigned.get(loop.var) != 2:
            raise NotAffine(loop.loc)  # trip counts that differ by instance, or a shared counter
        atom = ("loop", len(self.loops))
        self.full[atom] = self.ranges[atom] = (0, max(0, -(-length[1] // step[1])) - 1)
        value = ({**start[0], atom: step[1]}, start[1])
        self._fits(value, self.types.get(loop.var), loop.loc)
        self.loops.append((loop.var, value))

    def _guard(self, cond: K.Expr, truth: bool, scope: _Scope) -> None:
        """Narrow the atoms' ranges to where `cond` is `truth`."""
        if isinstance(cond, K.UnaryOp) and cond.op == "not":
            return self._guard(cond.operand, not truth, scope)
        if isinstance(cond, K.Logical) and (cond.op == "land") == truth:
            self._guard(cond.lhs, truth, scope)
            return self._guard(cond.rhs, truth, scope)
        if isinstance(cond, K.Const):
            self.never = self.never or bool(cond.value) != truth
            return None
        op = (cond.op if truth else _NEGATE[cond.op]) if isinstance(cond, K.Compare) else None
        if op is None or not _is_int(cond.lhs.type):
            raise NotAffine(cond.loc)
        terms, const = _sub(self.form(cond.lhs, scope), self.form(cond.rhs, scope))
        if not terms:  # terms + const op 0, for every instance alike (an elif's op != 0 too)
            self.never = self.never or not _holds(const, op)
            return None
        if len(terms) != 1:
            raise NotAffine(cond.loc)  # a condition no interval of one atom describes
        (atom, coef), = terms.items()
        lo, hi = self._range(atom)
        # coef * x + const op 0, solved for x
        if op == "ne":  # an interval only where the value it excludes is one of its ends
            x, rest = divmod(-const, coef)
            if rest == 0 and lo < x < hi:
                raise NotAffine(cond.loc)
            lo, hi = (lo + 1, hi) if rest == 0 and x == lo else \
                (lo, hi - 1) if rest == 0 and x == hi else (lo, hi)
        elif op == "eq":
            x, rest = divmod(-const, coef)
            lo, hi = (max(lo, x), min(hi, x)) if rest == 0 else (1, 0)
        elif (op in ("lt", "le")) == (coef > 0):  # an upper bound on x
            bound = -const - 1 if op == "lt" else -const + 1 if op == "gt" else -const
            hi = min(hi, bound // coef)
        else:  # a lower bound on x
            bound = -const + 1 if op == "gt" else -const - 1 if op == "lt" else -const
            lo = max(lo, -(bound // -coef))
        self.ranges[atom] = (lo, hi)
        return None

    def _range(self, atom: Atom) -> tuple[int, int]:
        found = self.ranges.get(atom)
        return found if found is not None else self._full(atom)

    def _full(self, atom: Atom) -> tuple[int, int]:
        """The atom's range before any guard (a sum computed before a guard sees every value)."""
        if atom[0] == "loop":
            return self.full[atom]
        return 0, self._extent(atom[1], atom[2]) - 1

    def _extent(self, level: int, dim: int) -> int:
        if level < len(self.extents) and dim < len(self.extents[level]):
            return int(self.extents[level][dim])
        return 1

    def _image(self, terms: dict, const: int) -> Progression | None:
        """The indices stored by the admitted instances, exactly; None when they are no
        progression (its stride the smallest coefficient, each larger one reaching no further
        than one step past what the smaller ones reach)."""
        if self.never or any(n == 0 for ext in self.extents for n in ext) or \
                any(lo > hi for lo, hi in self.ranges.values()):
            return Progression.of(0, 1, 0)
        parts = []
        for atom, coef in terms.items():
            lo, hi = self._range(atom)
            const += coef * (lo if coef > 0 else hi)  # the term's smallest value
            if hi > lo:
                parts.append((abs(coef), hi - lo))
        if not parts:
            return Progression.of(const, 1, 1)
        parts.sort()
        stride, reach = parts[0][0], 0
        for coef, steps in parts:
            if coef % stride or coef // stride > reach + 1:
                return None  # gaps, or a pattern of them
            reach += coef // stride * steps
        return Progression.of(const, stride, reach + 1)

    # -- affine forms -----------------------------------------------------------------------------

    def form(self, e: K.Expr, scope: _Scope) -> Form:
        """e as an exact affine sum (its value never wraps in its type)."""
        result = self._form(e, scope)
        self._fits(result, e.type, e.loc)
        return result

    def _form(self, e: K.Expr, scope: _Scope) -> Form:
        if isinstance(e, K.Const) and _is_int(e.type):
            return {}, int(e.value)
        if isinstance(e, K.InstanceId):
            return {("id", e.level, e.dim): 1}, 0
        if isinstance(e, K.NumInstances):
            return {}, self._extent(e.level, e.dim)
        if isinstance(e, K.Var):
            return self._var(e, scope)
        if isinstance(e, K.Cast) and _is_int(e.type) and _is_int(e.value.type):
            return self.form(e.value, scope)  # kept by the cast when form() says it fits e.type
        if isinstance(e, K.BinOp) and e.op in ("add", "sub", "mul") and _is_int(e.type):
            a, b = self.form(e.lhs, scope), self.form(e.rhs, scope)
            if e.op != "mul":
                return _add(a, b, 1 if e.op == "add" else -1)
            if a[0] and b[0]:
                raise NotAffine(e.loc)  # a product of two unknowns
            if not a[0]:
                a, b = b, a
            return {k: v * b[1] for k, v in a[0].items() if v * b[1]}, a[1] * b[1]
        raise NotAffine(e.loc)

    def _var(self, e: K.Var, scope: _Scope) -> Form:
        if e.name in self.scalars:
            return {}, self.scalars[e.name]
        for name, value in reversed(self.loops[:scope.loops]):
            if name == e.name:
                return value
        found = scope.defs.get(e.name)
        if found is None:
            raise NotAffine(e.loc)
        return self.form(found.value, found.scope)

    def _fits(self, form: Form, t: Any, loc: Loc) -> None:
        """The form's smallest and largest values over the atoms' full ranges lie in t."""
        if not _is_int(t):
            raise NotAffine(loc)
        terms, const = form
        lo = hi = const
        for atom, coef in terms.items():
            a, b = self._full(atom)
            b = max(a, b)
            lo += min(coef * a, coef * b)
            hi += max(coef * a, coef * b)
        full = type_range(t)
        if lo < full.lo or hi > full.hi:
            raise NotAffine(loc)


_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}


def _holds(value: int, op: str) -> bool:
    return {"lt": value < 0, "le": value <= 0, "gt": value > 0, "ge": value >= 0,
            "eq": value == 0, "ne": value != 0}[op]


def _add(a: Form, b: Form, sign: int = 1) -> Form:
    terms = dict(a[0])
    for atom, coef in b[0].items():
        terms[atom] = terms.get(atom, 0) + sign * coef
    return {k: v for k, v in terms.items() if v}, a[1] + sign * b[1]


def _sub(a: Form, b: Form) -> Form:
    return _add(a, b, -1)


def _early_exit(block: K.Block) -> Loc | None:
    """Where a loop body may leave the loop (or the instance) before its last iteration."""
    for stmt in K.walk_stmts(block):
        if isinstance(stmt, (K.Break, K.Continue, K.Return)):
            return stmt.loc
    return None


def _is_int(t: Any) -> bool:
    return isinstance(t, ScalarType) and t.is_int and not t.is_bool


def warning_text(leaf: K.LeafFunc, reason: Uncovered) -> str:
    """The warning text: the leaf, the parameter, why and where, and what to do."""
    param = leaf.params[reason.param]
    elem = param.type.elem.name  # type: ignore[union-attr]
    return (f"leaf {K.shown_name(leaf)!r} may leave part of its Out parameter {param.name!r} unwritten "
            f"({reason.why}, at {reason.loc}): its old contents are copied to the device as for "
            f"InOut, so that every target gives the same result; declare it InOut[Ptr[{elem}]] if "
            "the leaf relies on them (docs/language.md, \"Out buffers\")")


def check_report(leaf: K.LeafFunc) -> list[tuple[Loc, str]]:
    """What `hpvmc check` says about the leaf's Out parameters without launch values: those no
    launch writes whole (warnings), and those whose every store runs under a condition (notes:
    decided at each launch)."""
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
    coverage = OutCoverage(leaf, modes)
    report = [(r.loc, f"warning: {warning_text(leaf, r)}") for r in coverage.static.values()]
    for i, sites in coverage.sites.items():
        guards = [next(s.cond for s in reversed(site.path) if s.cond is not None)
                  for site in sites if any(s.cond is not None for s in site.path)]
        if sites and len(guards) == len(sites):
            name = leaf.params[i].name
            report.append((guards[0].loc, f"note: leaf {K.shown_name(leaf)!r} writes its Out parameter "
                           f"{name!r} under a condition: a launch where that leaves part of it "
                           "unwritten copies its old contents to the device, as for InOut, and "
                           "warns (docs/language.md, \"Out buffers\")"))
    return report


# a bf16 quiet NaN's bits (a bf16 buffer is a uint16 array: 0xAB bytes would be a plausible
# -1.2e-12, not the NaN that a float buffer gets)
_BF16_NAN = 0x7FC0


def poison(array: np.ndarray, elem: ScalarType) -> None:
    """Fill a host buffer of `elem` values with what an unwritten device buffer may hold
    (HPVM_POISON_OUT): NaN for floats, 0xAB bytes for integers."""
    if elem == bf16:
        array.view(np.uint16)[...] = _BF16_NAN
    elif array.dtype.kind == "f":
        array[...] = np.nan
    else:
        array.view(np.uint8)[...] = 0xAB
