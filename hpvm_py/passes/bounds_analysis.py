"""Abstract interpretation of a leaf body over intervals: is every access provably in bounds?
(docs/architecture.md, "Module notes": passes/bounds_analysis.py)"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir import kernel as K
from .intervals import (BOOL, INF, TOP, Form, Interval, State, binop, exact_binop, fit, forget, is_int,
                        is_fact, join_states, mul, type_range, widen_states, widens)
from .residues import congruence, snapped

WIDEN_AFTER = 3  # rounds of plain joins before bounds that still grow are widened
NARROW_ROUNDS = 2
MAX_PATHS = 16  # states of one block kept apart (by forms and residues) before they are joined
PATH_STEPS = 4_000  # statements analysed on separate paths in one proof; past it, paths are joined
# statements analysed in one proof before it gives up (the launch then runs the checked kernel):
# each loop's body is analysed a few times per analysis of the loop around it, so the work grows
# as 3 ** (loops nested), and a dozen nested loops would keep a launch proving for minutes
MAX_STEPS = 20_000
# expression nodes evaluated in one proof before it gives up: a select evaluates its condition
# again for each arm, so selects nested in conditions (`x if (y if c else z) > 0 else w`, 128
# deep) take 3 ** depth evaluations
MAX_EVALUATIONS = 1_000_000
# facts (intervals, forms) carried through the statements of one proof before it gives up: each
# assignment copies its state, which knows every variable assigned before, so a long leaf of
# fresh temporaries took its length squared (8,000 of them: half a minute of proving)
MAX_FACTS = 4_000_000

_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


class Unprovable(Exception):
    """Some access may be out of bounds (or a loop head could not be shown stable)."""


@dataclass
class _LoopExits:
    breaks: list[State] = field(default_factory=list)
    continues: list[State] = field(default_factory=list)


class BoundsAnalysis:
    def __init__(self, leaf: K.LeafFunc, values: dict[str, Interval], limits: dict[str, int],
                 extents: list[tuple[int, ...]], level_dims: tuple[int, ...], world_size: int = 1):
        self.leaf = leaf
        self.world_size = world_size  # remote accesses name ranks in [0, world_size)
        self.types: dict[str, Any] = {p.name: p.type for p in leaf.params}
        self.types.update(leaf.locals)
        self.values = values
        self.limits = dict(limits)  # pointer name -> number of valid elements
        self.extents = extents
        self.level_dims = level_dims
        self.probing = 0  # > 0 while loop heads are searched: failed accesses do not count yet
        self.steps = 0  # statements analysed so far, one per path (bounded by PATH_STEPS)
        self.evaluations = 0  # expression nodes evaluated so far (bounded by MAX_EVALUATIONS)
        self.facts = 0  # the sizes of the states statements were analysed in (MAX_FACTS)
        self.failure = "a loop's bounds did not settle"  # why the proof failed, once it has
        self.loops: list[_LoopExits] = []

    def run(self) -> bool:
        if any(0 in dims for dims in self.extents):
            return True  # no instance runs: no access happens (a launch over an empty grid)
        state: dict = dict(self.values)
        for name, t in self.leaf.locals.items():
            if is_int(t):
                state[name] = Interval(0, 0)  # every backend zeroes locals
        try:
            self._malloc_limits(state)
            self.block(self.leaf.body, state)
        except Unprovable:
            return False
        return True

    def _malloc_limits(self, state: dict) -> None:
        """Scratch sizes, as the driver evaluates them: once per group, before the body runs."""
        assigned = K.assignments(self.leaf.body)
        for stmt in self.leaf.body:
            if isinstance(stmt, K.Assign) and isinstance(stmt.value, K.Malloc):
                e = stmt.value.nbytes
                known = not any(isinstance(v, K.Var) and v.name in assigned for v in K.walk_exprs(e))
                nbytes = self.expr(e, state) if known else TOP
                elem = stmt.value.type.elem  # type: ignore[union-attr]
                # a negative or overflowing total fails the launch before the body runs
                self.limits[stmt.target] = int(max(0, nbytes.lo)) // elem.nbytes

    # -- statements -------------------------------------------------------------------------

    def block(self, block: K.Block, state: State) -> State:
        return join_states(*self.paths(block, [] if state is None else [state]))

    def paths(self, block: K.Block, states: list[dict]) -> list[dict]:
        """The states after `block`, one per path through its ifs whose variables' forms differ
        (a clamped index is in bounds on each path, not on their join), at most MAX_PATHS."""
        for stmt in block:
            if not states:
                return []
            after: list[dict] = []
            for state in states:
                if isinstance(stmt, K.If):
                    self.expr(stmt.cond, state)
                    for truth, branch in ((True, stmt.then), (False, stmt.orelse)):
                        wheres = self.refinements(stmt.cond, state, truth)
                        if wheres:
                            after.extend(self.paths(branch, _merge(wheres, MAX_PATHS)))
                else:
                    out = self.stmt(stmt, state)
                    if out is not None:
                        after.append(out)
            self.steps += len(states)
            if self.steps > MAX_STEPS:
                self.failure = f"the proof gave up after analysing {MAX_STEPS} statements " \
                               "(loops nested deeply)"
                raise Unprovable
            self.facts += sum(len(s) for s in states)
            if self.facts > MAX_FACTS:
                self.failure = f"the proof gave up after carrying {MAX_FACTS} facts through " \
                               "statements (a long leaf with many variables)"
                raise Unprovable
            states = _merge(after, MAX_PATHS if self.steps < PATH_STEPS else 1)
        return states

    def stmt(self, stmt: K.Stmt, state: dict) -> State:
        if isinstance(stmt, K.Assign):
            if isinstance(stmt.value, K.Malloc):
                return state
            t = self.types.get(stmt.target)
            if not is_int(t):
                self.expr(stmt.value, state)
                return forget(state, stmt.target)
            value = self.expr(stmt.value, state)
            form = self.affine(stmt.value, state)
            state = forget(state, stmt.target)
            state[stmt.target] = fit(value, t)
            if form is not None and stmt.target not in form[0] and \
                    value.within(type_range(t).lo, type_range(t).hi):
                state[("form", stmt.target)] = Form(frozenset(form[0].items()), form[1])
            return state
        if isinstance(stmt, K.Store):
            self.access(stmt.ptr, stmt.index, state)
            self.expr(stmt.value, state)
            self.rank(stmt.rank, state)
            return state
        if isinstance(stmt, (K.ExprStmt, K.Print)):
            for e in K.child_exprs(stmt):
                self.expr(e, state)
            return state
        if isinstance(stmt, K.Return):
            for e in stmt.values:
                self.expr(e, state)
            return None
        if isinstance(stmt, K.Break):
            self.loops[-1].breaks.append(state)
            return None
        if isinstance(stmt, K.Continue):
            self.loops[-1].continues.append(state)
            return None
        if isinstance(stmt, K.For):
            return self.for_loop(stmt, state)
        if isinstance(stmt, K.While):
            return self.while_loop(stmt, state)
        return state  # barrier, breakpoint

    def for_loop(self, stmt: K.For, state: dict) -> State:
        start, stop, step = (self.expr(e, state) for e in (stmt.start, stmt.stop, stmt.step))
        if step.lo > 0:
            var = Interval(start.lo, max(start.lo, stop.hi - 1))
        elif step.hi < 0:
            var = Interval(min(start.hi, stop.lo + 1), start.hi)
        else:
            var = start.join(stop)
        t = self.types.get(stmt.var)

        def enter(head: dict) -> State:
            inside = forget(head, stmt.var)
            if is_int(t):
                inside[stmt.var] = fit(var, t)
            return inside

        # the head holds the state before the first iteration and after each one: after the loop,
        # the variable keeps its last value (or its old one when the loop ran zero times)
        head, breaks = self._loop(stmt.body, forget(state, stmt.var), enter)
        return join_states(head, *breaks)

    def while_loop(self, stmt: K.While, state: dict) -> State:
        def enter(head: dict) -> State:
            self.expr(stmt.cond, head)
            return self.refine(stmt.cond, head, True)

        head, breaks = self._loop(stmt.body, state, enter)
        return join_states(self.refine(stmt.cond, head, False), *breaks)

    def _loop(self, body: K.Block, entry: dict, enter: Callable[[dict], State]
              ) -> tuple[dict, list[State]]:
        """The loop head's state (covering every iteration) and the states of its breaks."""
        head = entry
        self.probing += 1
        try:
            rounds = 0
            while True:
                backs, _ = self._iterate(body, enter(head))
                grown = join_states(head, *backs)
                assert grown is not None
                if grown == head:
                    break
                rounds += 1
                if rounds > WIDEN_AFTER + 3 * len(head) + 2:
                    raise Unprovable  # each widened round changes some key for good: cannot happen
                head = widen_states(head, grown, self.types) if rounds > WIDEN_AFTER else grown
            for _ in range(NARROW_ROUNDS):
                # head covers every reachable head state, so entry + one more iteration does too
                backs, _ = self._iterate(body, enter(head))
                narrowed = join_states(entry, *backs)
                assert narrowed is not None
                if narrowed == head:
                    break
                head = narrowed
        finally:
            self.probing -= 1
        _, breaks = self._iterate(body, enter(head))  # the real check of the body's accesses
        return head, breaks

    def _iterate(self, body: K.Block, state: State) -> tuple[list[State], list[State]]:
        """One pass over the body: (states going back to the head, states leaving by break)."""
        exits = _LoopExits()
        self.loops.append(exits)
        try:
            out = self.block(body, state)
        finally:
            self.loops.pop()
        return [out, *exits.continues], exits.breaks

    def rank(self, rank: K.Expr | None, state: dict) -> None:
        """The rank of a remote access must lie in [0, world_size)."""
        if rank is None or self.probing:
            return
        iv = self.tightened(rank, state, self.expr(rank, state))
        if not iv.within(0, self.world_size - 1):
            self.failure = f"{_where(rank, None)}: a remote access's rank may be " \
                           f"{_bound_text(iv, rank.type)}, in a world of {self.world_size}"
            raise Unprovable

    def access(self, ptr: K.Var, index: K.Expr, state: dict) -> None:
        if self.probing:
            return  # a loop head is still searched: its body's accesses are checked once it is found
        limit = self.limits.get(ptr.name)
        iv = self.expr(index, state)
        if limit is not None and iv.within(0, limit - 1):
            return  # the interval alone suffices: no relation needs to be searched
        iv = self.tightened(index, state, iv)
        if limit is None or not iv.within(0, limit - 1):
            held = "an unknown number of" if limit is None else str(limit)
            self.failure = f"{_where(index, ptr)}: an index into {ptr.name} may be " \
                           f"{_bound_text(iv, index.type)}, and {ptr.name} holds {held} elements"
            raise Unprovable

    # -- conditions -------------------------------------------------------------------------

    def refine(self, cond: K.Expr, state: dict, truth: bool) -> State:
        """The state where `cond` evaluates to `truth`; None when it cannot."""
        return join_states(*self.refinements(cond, state, truth))

    def refinements(self, cond: K.Expr, state: dict, truth: bool) -> list[dict]:
        """The states where `cond` evaluates to `truth`, one per way it can (`a or b`: a holds,
        or a does not and b does), joined past MAX_PATHS; [] when it cannot. Kept apart, the
        ways keep what each knows: not (row even and col even), then not (row even and col odd)
        leaves row odd, which their join forgets."""
        if isinstance(cond, K.Logical):
            both = (cond.op == "land") == truth
            firsts = self.refinements(cond.lhs, state, truth)
            if both:
                ways = [way for first in firsts for way in self.refinements(cond.rhs, first, truth)]
            else:  # the left side decides, or it does not and the right side does
                ways = firsts + [way for other in self.refinements(cond.lhs, state, not truth)
                                 for way in self.refinements(cond.rhs, other, truth)]
            return ways if len(ways) <= MAX_PATHS else [join_states(*ways)]  # type: ignore[list-item]
        if isinstance(cond, K.UnaryOp) and cond.op == "not":
            return self.refinements(cond.operand, state, not truth)
        one = self._refine_one(cond, state, truth)
        return [] if one is None else [one]

    def _refine_one(self, cond: K.Expr, state: dict, truth: bool) -> State:
        if isinstance(cond, K.Const):
            return state if bool(cond.value) == truth else None
        if isinstance(cond, K.Var) and is_int(cond.type) and cond.type.is_bool:
            return self._bound(cond, "eq", Interval(int(truth), int(truth)), state)
        if not isinstance(cond, K.Compare) or not is_int(cond.lhs.type):
            return state
        op = cond.op if truth else _NEGATE[cond.op]
        applies, refined = congruence(cond, op, state)
        if applies:
            return refined
        refined = self._bound(cond.lhs, op, self.expr(cond.rhs, state), state)
        if refined is None:
            return None
        refined = self._bound(cond.rhs, _MIRROR[op], self.expr(cond.lhs, refined), refined)
        if refined is None:
            return None
        return self._fact(cond.lhs, op, cond.rhs, refined)

    def _bound(self, target: K.Expr, op: str, other: Interval, state: dict) -> State:
        """Refine variable `target` (through widening casts) by `target op other`."""
        while isinstance(target, K.Cast) and widens(target.value.type, target.type):
            target = target.value  # a widening integer cast keeps the value
        if not isinstance(target, K.Var) or target.name not in state:
            return state
        iv = state[target.name]
        if op == "ne":
            if other.lo != other.hi:
                return state
            lo = iv.lo + 1 if iv.lo == other.lo else iv.lo
            hi = iv.hi - 1 if iv.hi == other.lo else iv.hi
            narrowed = Interval(lo, hi) if lo <= hi else None
        else:
            allowed = {"lt": Interval(-INF, other.hi - 1), "le": Interval(-INF, other.hi),
                       "gt": Interval(other.lo + 1, INF), "ge": Interval(other.lo, INF),
                       "eq": other}[op]
            narrowed = iv.meet(allowed)
        if narrowed is not None:
            narrowed = snapped(narrowed, target.name, state)
        if narrowed is None:
            return None  # no value of the variable satisfies the condition
        state = dict(state)
        state[target.name] = narrowed
        return state

    # -- relations: facts about exact affine sums -------------------------------------------

    def _fact(self, lhs: K.Expr, op: str, rhs: K.Expr, state: dict) -> State:
        """Record `lhs - rhs op 0` as bounds on the sum of its non-constant terms: over the
        variables as written, and over their forms' atoms."""
        if op == "ne":
            return state
        for substitute in (False, True):
            state = self._fact_over(lhs, op, rhs, state, substitute)
            if state is None:
                return None
        return state

    def _fact_over(self, lhs: K.Expr, op: str, rhs: K.Expr, state: dict, substitute: bool) -> State:
        a, b = self.affine(lhs, state, substitute), self.affine(rhs, state, substitute)
        if a is None or b is None:
            return state
        terms = dict(a[0])
        for atom, coef in b[0].items():
            terms[atom] = terms.get(atom, 0) - coef
        terms = {k: v for k, v in terms.items() if v}
        if not terms:
            return state  # a constant
        const = a[1] - b[1]
        lo, hi = {"lt": (-INF, -1), "le": (-INF, 0), "gt": (1, INF), "ge": (0, INF), "eq": (0, 0)}[op]
        bound = Interval(lo - const, hi - const)
        if len(terms) == 1 and all(isinstance(k, str) for k in terms):
            return self._scaled(terms, bound, state)  # (q + 1 < 1: q's own interval)
        key = ("fact", frozenset(terms.items()))
        old = state.get(key)
        if old is not None:
            bound = old.meet(bound)
            if bound is None:
                return None
        state = dict(state)
        state[key] = bound
        return state

    def _scaled(self, terms: dict, bound: Interval, state: dict) -> State:
        """Refine variable v by coef * v in bound."""
        (name, coef), = terms.items()
        if coef < 0:
            coef, bound = -coef, Interval(-bound.hi, -bound.lo)
        lo = bound.lo if bound.lo == -INF else -(-int(bound.lo) // coef)  # (ceiling)
        hi = bound.hi if bound.hi == INF else int(bound.hi) // coef
        narrowed = state.get(name, type_range(self.types.get(name))).meet(Interval(lo, hi))
        if narrowed is not None:
            narrowed = snapped(narrowed, name, state)
        if narrowed is None:
            return None  # no value of the variable satisfies the condition
        state = dict(state)
        state[name] = narrowed
        return state

    def affine(self, e: K.Expr, state: dict, substitute: bool = True) -> tuple[dict, int] | None:
        """e as sum(coef * atom) + const, exactly (no wrapping inside); None if not affine.
        `substitute`: a variable with a form is that form's sum, else an atom."""
        found = self._affine(e, state, substitute)
        return None if found is None else (found[0], found[1])

    def _affine(self, e: K.Expr, state: dict, substitute: bool) -> tuple[dict, int, Interval] | None:
        """affine(), with e's interval (as expr() gives it), computed in the same walk."""
        if isinstance(e, K.Const) and is_int(e.type):
            return {}, int(e.value), Interval(int(e.value), int(e.value))
        if isinstance(e, K.Var) and is_int(e.type):
            iv = state.get(e.name)
            if iv is not None and iv.lo == iv.hi:
                return {}, int(iv.lo), iv
            iv = iv if iv is not None else type_range(e.type)
            form = state.get(("form", e.name)) if substitute else None
            if form is not None:
                return dict(form.terms), form.const, iv
            return {e.name: 1}, 0, iv
        if isinstance(e, K.InstanceId):
            return {("id", e.level, e.dim): 1}, 0, self.expr(e, state)
        if isinstance(e, K.NumInstances):
            n = self._extent(e.level, e.dim)
            return {}, n, Interval(n, n)
        if isinstance(e, K.Cast) and widens(e.value.type, e.type):
            return self._affine(e.value, state, substitute)
        if isinstance(e, K.BinOp) and e.op in ("add", "sub", "mul") and is_int(e.type):
            a, b = self._affine(e.lhs, state, substitute), self._affine(e.rhs, state, substitute)
            if a is None or b is None:
                return None
            exact = exact_binop(e.op, a[2], b[2])
            full = type_range(e.type)
            if exact is None or not exact.within(full.lo, full.hi):
                return None  # it may wrap: not the mathematical sum
            if e.op == "mul":
                if not a[0]:
                    a, b = b, a
                if b[0]:
                    return None  # a product of two variables is not affine
                return {k: v * b[1] for k, v in a[0].items() if v * b[1]}, a[1] * b[1], exact
            sign = 1 if e.op == "add" else -1
            terms = dict(a[0])
            for atom, coef in b[0].items():
                terms[atom] = terms.get(atom, 0) + sign * coef
            return {k: v for k, v in terms.items() if v}, a[1] + sign * b[1], exact
        return None

    def _atom(self, atom: Any, state: dict) -> Interval:
        if isinstance(atom, tuple):
            n = self._extent(atom[1], atom[2])
            ids = Interval(0, max(0, n - 1))  # (an instance id may have a known remainder)
            return snapped(ids, atom, state) or ids
        return state.get(atom, type_range(self.types.get(atom)))

    def tightened(self, e: K.Expr, state: dict, iv: Interval) -> Interval:
        """e's interval `iv` (as expr() gives it), tightened by e's affine sum (over the variables
        as written, and over their forms' atoms) bounded by the relations whose terms it contains
        (scaled)."""
        if not any(isinstance(k, tuple) for k in state):
            return iv
        plain = self.affine(e, state, False)
        if plain is None:
            return iv  # (a form is substituted for a variable: no variable, no form)
        forms = [plain]
        substituted = self.affine(e, state, True)
        if substituted is not None and substituted != plain:
            forms.append(substituted)
        for terms, const in forms:
            facts = [(dict(key[1]), fact) for key, fact in state.items()
                     if is_fact(key) and all(atom in terms for atom, _ in key[1])]
            # no fact; each fact alone; as many as fit side by side, the widest first
            widest = sorted(facts, key=lambda f: -len(f[0]))
            for chosen in [[]] + [[f] for f in facts] + [widest]:
                iv = iv.meet(self._cover(terms, const, chosen, state)) or iv
        return iv

    def _cover(self, terms: dict, const: int, facts: list[tuple[dict, Interval]],
               state: dict) -> Interval:
        """Bounds of sum(terms) + const: the facts whose terms it holds (each scaled by one
        factor: (k0 + ty) * n + col), taken in turn on terms not yet covered, then each
        remaining atom's interval."""
        rest = dict(terms)
        lo = hi = const
        for fact_terms, fact in facts:
            first_atom, first_coef = next(iter(fact_terms.items()))
            mine = rest.get(first_atom, 0)
            if mine == 0 or mine % first_coef:
                continue
            scale = mine // first_coef
            if any(rest.get(atom) != scale * coef for atom, coef in fact_terms.items()):
                continue
            total = mul(fact, Interval(scale, scale))
            lo, hi = lo + total.lo, hi + total.hi
            for atom in fact_terms:
                del rest[atom]
        for atom, coef in rest.items():
            part = mul(self._atom(atom, state), Interval(coef, coef))
            lo, hi = lo + part.lo, hi + part.hi
        return Interval(lo, hi)

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: K.Expr, state: dict) -> Interval:
        self.evaluations += 1
        if self.evaluations > MAX_EVALUATIONS:
            self.failure = f"the proof gave up after evaluating {MAX_EVALUATIONS} expressions " \
                           "(conditional expressions nested in conditions)"
            raise Unprovable
        t = e.type
        if isinstance(e, K.Const):
            return Interval(int(e.value), int(e.value)) if is_int(t) else TOP
        if isinstance(e, K.Var):
            return state.get(e.name, type_range(t)) if is_int(t) else TOP
        if isinstance(e, K.Load):
            self.access(e.ptr, e.index, state)
            self.rank(e.rank, state)
            return type_range(t)
        if isinstance(e, K.Atomic):
            self.access(e.ptr, e.index, state)
            self.expr(e.value, state)
            self.rank(e.rank, state)
            return type_range(t)  # the old content: any value
        if isinstance(e, K.InstanceId):
            return Interval(0, max(0, self._extent(e.level, e.dim) - 1))
        if isinstance(e, K.NumInstances):
            n = self._extent(e.level, e.dim)
            return Interval(n, n)
        if isinstance(e, K.NumDims):
            d = self.level_dims[e.level] if e.level < len(self.level_dims) else 0
            return Interval(d, d)
        if isinstance(e, K.Select):
            self.expr(e.cond, state)
            sides = []
            for value, truth in ((e.if_true, True), (e.if_false, False)):
                where = self.refine(e.cond, state, truth)
                if where is not None:
                    sides.append(self.expr(value, where))
            if not sides:
                return type_range(t)
            return sides[0].join(sides[-1])
        if isinstance(e, K.Logical):
            self.expr(e.lhs, state)
            rest = self.refine(e.lhs, state, e.op == "land")  # where the right side is evaluated
            if rest is not None:
                self.expr(e.rhs, rest)
            return BOOL
        subs = [self.expr(c, state) for c in K.child_exprs(e)]
        if not is_int(t):
            return TOP
        if isinstance(e, K.Cast):
            return fit(subs[0], t) if is_int(e.value.type) else type_range(t)
        if isinstance(e, K.Compare):
            return BOOL
        if isinstance(e, K.BinOp):
            return binop(e.op, subs[0], subs[1], t)
        if isinstance(e, K.UnaryOp):
            a = subs[0]
            if e.op == "neg":
                return fit(Interval(-a.hi, -a.lo), t)
            if e.op == "invert" and t.is_signed:  # ~x == -x - 1
                return fit(Interval(-a.hi - 1, -a.lo - 1), t)
            return BOOL if e.op == "not" else type_range(t)
        if isinstance(e, K.MathCall) and len(subs) == 2 and e.name in ("min", "max"):
            a, b = subs
            pick = min if e.name == "min" else max
            return Interval(pick(a.lo, b.lo), pick(a.hi, b.hi))
        if isinstance(e, K.MathCall) and e.name == "abs":
            a = subs[0]
            if a.lo >= 0:
                return a
            return fit(Interval(0 if a.hi >= 0 else -a.hi, max(-a.lo, a.hi)), t)
        return type_range(t)

    def _extent(self, level: int, dim: int) -> int:
        if level < len(self.extents) and dim < len(self.extents[level]):
            return int(self.extents[level][dim])
        return 1


def _merge(states: list[dict], most: int) -> list[dict]:
    """States with the same forms and residues joined; all of them joined when more than `most`
    differ."""
    if len(states) < 2:
        return states
    groups: dict[frozenset, list[dict]] = {}
    for state in states:
        forms = frozenset((k, v) for k, v in state.items()
                          if isinstance(k, tuple) and k[0] in ("form", "mod"))
        groups.setdefault(forms, []).append(state)
    if len(groups) > most:
        return [join_states(*states)]  # type: ignore[list-item]
    return [state if len(group) == 1 else join_states(*group)  # type: ignore[misc]
            for group in groups.values() for state in group[:1]]


def _where(e: K.Expr, ptr: K.Var | None) -> str:
    """The source position of an access: its index's, else its pointer's."""
    loc = e.loc if e.loc.line else ptr.loc if ptr is not None else e.loc
    return str(loc)


def _bound_text(iv: Interval, t: Any) -> str:
    """`lo to hi`, or `any i64` where nothing narrower is known (a loaded value, a wrap)."""
    if iv == type_range(t) or iv.lo == -INF or iv.hi == INF:
        return f"any {t} value"
    return f"{int(iv.lo)} to {int(iv.hi)}"
