"""Analysis `bounds`: prove at launch that every memory access of a leaf stays in bounds.

Compiled code that indexes out of bounds would read or corrupt memory, or crash the process. The
backends therefore have a checked variant (every access tested, a failure reported at its line)
and an unchecked one. Before a launch, this analysis runs an interval abstract interpretation of
the leaf's body with the launch's concrete values (scalar arguments, buffer sizes, grid extents):
if every load, store and atomic index provably lies in [0, size), the unchecked code runs.

The domain is integer intervals; conditions refine the variables they compare (`if i < n:`),
loops reach a fixpoint with widening, arithmetic that may leave its type's range widens to the
whole range (values wrap), and anything unknown (loaded data, float casts) is the type's range.
Results are cached per distinct launch configuration, so a repeated launch costs a dict lookup.
"""
from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.base import BufferArg, NodeContext
from ..ir import kernel as K
from ..types import PtrType, ScalarType

INF = math.inf


@dataclass(frozen=True)
class Interval:
    lo: float
    hi: float

    def join(self, other: "Interval") -> "Interval":
        return Interval(min(self.lo, other.lo), max(self.hi, other.hi))

    def within(self, lo: float, hi: float) -> bool:
        return lo <= self.lo and self.hi <= hi


TOP = Interval(-INF, INF)


def _range(t: Any) -> Interval:
    if isinstance(t, ScalarType) and t.is_int:
        return Interval(t.min_value(), t.max_value())
    return TOP


def _fit(iv: Interval, t: Any) -> Interval:
    """Values outside the type's range wrap: then nothing is known but the range."""
    full = _range(t)
    return iv if iv.within(full.lo, full.hi) else full


def _mul(a: Interval, b: Interval) -> Interval:
    products = []
    for x in (a.lo, a.hi):
        for y in (b.lo, b.hi):
            products.append(0 if (x == 0 or y == 0) else x * y)
    return Interval(min(products), max(products))


class _Analysis:
    def __init__(self, leaf: K.LeafFunc, values: dict[str, Interval], limits: dict[str, Interval],
                 extents: list[tuple[int, ...]], level_dims: tuple[int, ...]):
        self.leaf = leaf
        self.types: dict[str, Any] = {p.name: p.type for p in leaf.params}
        self.types.update(leaf.locals)
        self.params = values
        self.limits = dict(limits)  # pointer name -> number of elements (interval, lo used)
        self.extents = extents
        self.level_dims = level_dims
        self.safe = True

    # -- statements -------------------------------------------------------------------------

    def run(self) -> bool:
        env = dict(self.params)
        for name, t in self.leaf.locals.items():
            if not isinstance(t, PtrType):
                env[name] = Interval(0, 0)  # locals start at zero
        self.block(self.leaf.body, env)
        return self.safe

    def block(self, block: K.Block, env: dict[str, Interval]) -> dict[str, Interval]:
        for stmt in block:
            if not self.safe:
                return env
            env = self.stmt(stmt, env)
        return env

    def stmt(self, stmt: K.Stmt, env: dict[str, Interval]) -> dict[str, Interval]:
        if isinstance(stmt, K.Assign):
            if isinstance(stmt.value, K.Malloc):
                nbytes = self.expr(stmt.value.nbytes, env)
                elem = stmt.value.type.elem  # type: ignore[union-attr]
                self.limits[stmt.target] = Interval(max(0, nbytes.lo) // elem.nbytes, INF)
                return env
            value = self.expr(stmt.value, env)
            env = _forget(env, stmt.target)
            env[stmt.target] = _fit(value, self.types.get(stmt.target))
            return env
        if isinstance(stmt, K.Store):
            self.access(stmt.ptr, stmt.index, env)
            self.expr(stmt.value, env)
            return env
        if isinstance(stmt, (K.ExprStmt, K.Return, K.Print)):
            for e in K.child_exprs(stmt):
                self.expr(e, env)
            return env
        if isinstance(stmt, K.If):
            self.expr(stmt.cond, env)
            then_env = self.block(stmt.then, self.refine(stmt.cond, env, True))
            else_env = self.block(stmt.orelse, self.refine(stmt.cond, env, False))
            return _join(then_env, else_env)
        if isinstance(stmt, K.For):
            return self.for_loop(stmt, env)
        if isinstance(stmt, K.While):
            return self.loop(stmt.body, env, stmt.cond)
        return env

    def for_loop(self, stmt: K.For, env: dict[str, Interval]) -> dict[str, Interval]:
        start, stop, step = (self.expr(e, env) for e in (stmt.start, stmt.stop, stmt.step))
        if step.lo > 0:
            var = Interval(start.lo, max(start.lo, stop.hi - 1))
        elif step.hi < 0:
            var = Interval(min(start.hi, stop.lo + 1), start.hi)
        else:
            var = start.join(stop)
        inside = _forget(env, stmt.var)
        inside[stmt.var] = _fit(var, self.types.get(stmt.var))
        after = self.loop(stmt.body, inside, None, fixed={stmt.var: inside[stmt.var]})
        return _join(env, after)

    def loop(self, body: K.Block, env: dict[str, Interval], cond: K.Expr | None,
             fixed: dict[str, Interval] | None = None) -> dict[str, Interval]:
        """Iterate the body until the variables stop growing, widening those that keep growing."""
        current = dict(env)
        for attempt in range(4):
            entry = self.refine(cond, current, True) if cond is not None else current
            if cond is not None:
                self.expr(cond, current)
            if fixed:
                entry = {**entry, **fixed}
            out = self.block(body, entry)
            merged = _join(current, out)
            if merged == current or not self.safe:
                break
            if attempt >= 1:  # widen what still grows, in the direction it grows
                merged = {k: _widen(current.get(k), v, self.types.get(k)) for k, v in merged.items()}
            current = merged
        return self.refine(cond, current, False) if cond is not None else current

    def access(self, ptr: K.Var, index: K.Expr, env: dict[str, Interval]) -> None:
        iv = self.bounded(index, env)
        limit = self.limits.get(ptr.name)
        if limit is None or not iv.within(0, limit.lo - 1):
            self.safe = False

    # -- conditions -------------------------------------------------------------------------

    def refine(self, cond: K.Expr | None, env: dict[str, Interval], truth: bool) -> dict[str, Interval]:
        if cond is None:
            return env
        if isinstance(cond, K.Logical):
            if (cond.op == "land") == truth:  # both sides hold
                return self.refine(cond.rhs, self.refine(cond.lhs, env, truth), truth)
            return env
        if isinstance(cond, K.UnaryOp) and cond.op == "not":
            return self.refine(cond.operand, env, not truth)
        if not isinstance(cond, K.Compare) or not isinstance(cond.lhs.type, ScalarType) or \
                not cond.lhs.type.is_int:
            return env
        op = cond.op if truth else _NEGATE[cond.op]
        env = self._bound(cond.lhs, op, self.expr(cond.rhs, env), env)
        env = self._bound(cond.rhs, _MIRROR[op], self.expr(cond.lhs, env), env)
        return self._fact(cond.lhs, op, cond.rhs, env)

    # -- relations: facts about affine forms ------------------------------------------------

    def _fact(self, lhs: K.Expr, op: str, rhs: K.Expr, env: dict) -> dict:
        """Record `lhs - rhs op 0` as bounds on the sum of its non-constant terms."""
        a, b = self.affine(lhs, env), self.affine(rhs, env)
        if a is None or b is None or op == "ne":
            return env
        terms = dict(a[0])
        for atom, coef in b[0].items():
            terms[atom] = terms.get(atom, 0) - coef
        terms = {k: v for k, v in terms.items() if v}
        if not terms or len(terms) == 1 and all(isinstance(k, str) for k in terms):
            return env  # a plain variable: _bound already refined it
        const = a[1] - b[1]
        lo, hi = {"lt": (-INF, -1), "le": (-INF, 0), "gt": (1, INF), "ge": (0, INF), "eq": (0, 0)}[op]
        key = ("fact", frozenset(terms.items()))
        bound = Interval(lo - const, hi - const)
        old = env.get(key)
        env = dict(env)
        env[key] = bound if old is None else Interval(max(old.lo, bound.lo), min(old.hi, bound.hi))
        return env

    def affine(self, e: K.Expr, env: dict) -> tuple[dict, float] | None:
        """e as sum(coef * atom) + const, with launch-time constants folded; None if not affine."""
        if isinstance(e, K.Const) and isinstance(e.type, ScalarType) and e.type.is_int:
            return {}, int(e.value)
        if isinstance(e, K.Var):
            iv = env.get(e.name)
            if iv is not None and iv.lo == iv.hi:
                return {}, iv.lo
            return {e.name: 1}, 0
        if isinstance(e, K.InstanceId):
            return {("id", e.level, e.dim): 1}, 0
        if isinstance(e, K.NumInstances):
            return {}, self._extent(e.level, e.dim)
        if isinstance(e, K.Cast) and _widens(e.value.type, e.type):
            return self.affine(e.value, env)
        if isinstance(e, K.BinOp) and e.op in ("add", "sub", "mul"):
            a, b = self.affine(e.lhs, env), self.affine(e.rhs, env)
            if a is None or b is None:
                return None
            if e.op == "mul":
                if not a[0]:
                    a, b = b, a
                if b[0]:
                    return None  # a product of two variables is not affine
                return {k: v * b[1] for k, v in a[0].items()}, a[1] * b[1]
            sign = 1 if e.op == "add" else -1
            terms = dict(a[0])
            for atom, coef in b[0].items():
                terms[atom] = terms.get(atom, 0) + sign * coef
            return {k: v for k, v in terms.items() if v}, a[1] + sign * b[1]
        return None

    def _atom(self, atom: Any, env: dict) -> Interval:
        if isinstance(atom, tuple):
            n = self._extent(atom[1], atom[2])
            return Interval(0, max(0, n - 1))
        return env.get(atom, _range(self.types.get(atom)))

    def bounded(self, e: K.Expr, env: dict) -> Interval:
        """The interval of e, tightened by the facts whose terms e contains."""
        iv = self.expr(e, env)
        form = self.affine(e, env)
        if form is None:
            return iv
        terms, const = form
        for key, fact in env.items():
            if not isinstance(key, tuple):
                continue
            fact_terms = dict(key[1])
            # the index may hold the fact's terms scaled by one factor: (k0 + ty) * n + col
            first_atom, first_coef = next(iter(fact_terms.items()))
            scale = terms.get(first_atom, 0) / first_coef
            if scale == 0 or scale != int(scale) or \
                    any(terms.get(atom) != scale * coef for atom, coef in fact_terms.items()):
                continue
            scaled = _mul(fact, Interval(scale, scale))
            rest = Interval(0, 0)
            for atom, coef in terms.items():
                if atom not in fact_terms:
                    part = _mul(self._atom(atom, env), Interval(coef, coef))
                    rest = Interval(rest.lo + part.lo, rest.hi + part.hi)
            candidate = Interval(scaled.lo + rest.lo + const, scaled.hi + rest.hi + const)
            iv = Interval(max(iv.lo, candidate.lo), min(iv.hi, candidate.hi))
        return iv

    def _bound(self, target: K.Expr, op: str, other: Interval, env: dict[str, Interval]) -> dict[str, Interval]:
        while isinstance(target, K.Cast) and _widens(target.value.type, target.type):
            target = target.value  # a widening integer cast keeps the value
        if not isinstance(target, K.Var) or target.name not in env:
            return env
        iv = env[target.name]
        lo, hi = iv.lo, iv.hi
        if op == "lt":
            hi = min(hi, other.hi - 1)
        elif op == "le":
            hi = min(hi, other.hi)
        elif op == "gt":
            lo = max(lo, other.lo + 1)
        elif op == "ge":
            lo = max(lo, other.lo)
        elif op == "eq":
            lo, hi = max(lo, other.lo), min(hi, other.hi)
        env = dict(env)
        env[target.name] = Interval(lo, hi) if lo <= hi else iv
        return env

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: K.Expr, env: dict[str, Interval]) -> Interval:
        t = e.type
        if isinstance(e, K.Const):
            return Interval(e.value, e.value) if isinstance(t, ScalarType) and t.is_int else TOP
        if isinstance(e, K.Var):
            return env.get(e.name, _range(t))
        if isinstance(e, K.Load):
            self.access(e.ptr, e.index, env)
            return _range(t)
        if isinstance(e, K.Atomic):
            self.access(e.ptr, e.index, env)
            self.expr(e.value, env)
            return _range(t)
        if isinstance(e, K.InstanceId):
            n = self._extent(e.level, e.dim)
            return Interval(0, max(0, n - 1))
        if isinstance(e, K.NumInstances):
            n = self._extent(e.level, e.dim)
            return Interval(n, n)
        if isinstance(e, K.NumDims):
            d = self.level_dims[e.level] if e.level < len(self.level_dims) else 0
            return Interval(d, d)
        if isinstance(e, K.Select):
            self.expr(e.cond, env)
            a = self.expr(e.if_true, self.refine(e.cond, env, True))
            b = self.expr(e.if_false, self.refine(e.cond, env, False))
            return a.join(b)
        if isinstance(e, K.Logical):
            self.expr(e.lhs, env)
            self.expr(e.rhs, self.refine(e.lhs, env, e.op == "land"))
            return Interval(0, 1)
        subs = [self.expr(c, env) for c in K.child_exprs(e)]
        if not (isinstance(t, ScalarType) and t.is_int):
            return TOP
        if isinstance(e, K.Cast):
            return _fit(subs[0], t) if isinstance(e.value.type, ScalarType) and e.value.type.is_int \
                else _range(t)
        if isinstance(e, K.Compare):
            return Interval(0, 1)
        if isinstance(e, K.BinOp):
            return _fit(_binop(e.op, subs[0], subs[1], t), t)
        if isinstance(e, K.UnaryOp):
            if e.op == "neg":
                return _fit(Interval(-subs[0].hi, -subs[0].lo), t)
            return _range(t) if e.op == "invert" else Interval(0, 1)
        if isinstance(e, K.MathCall):
            if e.name == "min":
                return Interval(min(subs[0].lo, subs[1].lo), min(subs[0].hi, subs[1].hi))
            if e.name == "max":
                return Interval(max(subs[0].lo, subs[1].lo), max(subs[0].hi, subs[1].hi))
            if e.name == "abs":
                a = subs[0]
                if a.lo >= 0:
                    return a
                return _fit(Interval(0, max(abs(a.lo), abs(a.hi))), t)
        return _range(t)

    def _extent(self, level: int, dim: int) -> int:
        if level < len(self.extents) and dim < len(self.extents[level]):
            return int(self.extents[level][dim])
        return 1


def _widens(src: Any, dst: Any) -> bool:
    """An integer cast that keeps every value of src."""
    if not (isinstance(src, ScalarType) and src.is_int and isinstance(dst, ScalarType) and dst.is_int):
        return False
    full = _range(dst)
    return _range(src).within(full.lo, full.hi)


def _binop(op: str, a: Interval, b: Interval, t: ScalarType) -> Interval:
    if op == "add":
        return Interval(a.lo + b.lo, a.hi + b.hi)
    if op == "sub":
        return Interval(a.lo - b.hi, a.hi - b.lo)
    if op == "mul":
        return _mul(a, b)
    if op == "floordiv" and b.lo > 0 and math.isfinite(a.lo) and math.isfinite(a.hi):
        return Interval(min(a.lo // b.lo, a.lo // b.hi), max(a.hi // b.lo, a.hi // b.hi))
    if op == "mod" and b.lo > 0:
        if a.lo >= 0 and a.hi < b.lo:
            return a
        return Interval(0, b.hi - 1)  # Python's %: the divisor's sign
    if op == "and" and (a.lo >= 0 or b.lo >= 0):
        return Interval(0, min(x.hi for x in (a, b) if x.lo >= 0))
    if op == "shr" and a.lo >= 0 and b.lo >= 0:
        return Interval(0, a.hi)
    return _range(t)


def _forget(env: dict, name: str) -> dict:
    """env without the facts that mention variable `name` (it is about to change)."""
    return {k: v for k, v in env.items()
            if isinstance(k, str) or all(atom != name for atom, _ in k[1])}


def _widen(old: Interval | None, new: Interval, t: Any) -> Interval:
    if old is None or old == new:
        return new
    full = _range(t)
    return Interval(full.lo if new.lo < old.lo else new.lo, full.hi if new.hi > old.hi else new.hi)


def _join(a: dict, b: dict) -> dict:
    """Values known on either path; facts (relations) only when both paths have them."""
    out = {}
    for k, v in a.items():
        if k in b:
            out[k] = v.join(b[k])
        elif isinstance(k, str):
            out[k] = v
    for k, v in b.items():
        if k not in out and isinstance(k, str):
            out[k] = v
    return out


_NEGATE = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}
_MIRROR = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le", "eq": "eq", "ne": "ne"}


class BoundsProof:
    """Per leaf and node context: decides, per launch, whether unchecked code is safe."""

    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext):
        self.leaf = leaf
        self.ctx = ctx
        self.has_accesses = any(isinstance(e, (K.Load, K.Atomic)) for e in K.walk_all_exprs(leaf.body)) \
            or any(isinstance(s, K.Store) for s in K.walk_stmts(leaf.body))
        self._cache: dict[tuple, bool] = {}
        self._lock = threading.Lock()
        # the parameters whose values can change a proof: buffers and integer scalars
        self._relevant = [i for i, p in enumerate(leaf.params)
                          if isinstance(p.type, PtrType) or (isinstance(p.type, ScalarType) and p.type.is_int)]

    def holds(self, args: list[Any], extents: list[tuple[int, ...]]) -> bool:
        """True when every access of this launch is provably in bounds."""
        if not self.has_accesses:
            return True
        key = self._key(args, extents)
        with self._lock:
            cached = self._cache.get(key)
        if cached is not None:
            return cached
        values, limits = self._environment(args)
        result = _Analysis(self.leaf, values, limits, extents, self.ctx.level_dims).run()
        with self._lock:
            if len(self._cache) > 256:
                self._cache.clear()
            self._cache[key] = result
        return result

    def _key(self, args: list[Any], extents: list[tuple[int, ...]]) -> tuple:
        """What the proof depends on: extents, buffer sizes, and the integer scalars only."""
        parts: list[Any] = [tuple(extents)]
        for i in self._relevant:
            arg = args[i]
            mode = self.ctx.input_modes[i]
            if mode == "buffer":
                parts.append(arg.nbytes if isinstance(arg, BufferArg) else None)
            elif mode == "uniform":
                parts.append(int(arg))
            else:
                arr = np.asarray(arg)
                parts.append((int(arr.min()), int(arr.max())) if arr.size else None)
        return tuple(parts)

    def _environment(self, args: list[Any]) -> tuple[dict[str, Interval], dict[str, Interval]]:
        values: dict[str, Interval] = {}
        limits: dict[str, Interval] = {}
        params = self.leaf.params
        for i, (p, arg, mode) in enumerate(zip(params, args, self.ctx.input_modes)):
            t = p.type
            if isinstance(t, PtrType):
                size = args[i + 1] if i + 1 < len(args) else 0
                size_value = int(size) if np.ndim(size) == 0 else int(np.asarray(size).min())
                real = arg.nbytes if isinstance(arg, BufferArg) else size_value
                limits[p.name] = Interval(min(size_value, real) // t.elem.nbytes, INF)
                continue
            if not (isinstance(t, ScalarType) and t.is_int):
                continue
            if mode == "uniform":
                v = int(np.asarray(arg).item())
                values[p.name] = Interval(v, v)
            else:
                arr = np.asarray(arg)
                values[p.name] = Interval(int(arr.min()), int(arr.max())) if arr.size else _range(t)
        return values, limits
