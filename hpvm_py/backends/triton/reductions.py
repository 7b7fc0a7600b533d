"""Reduction loops that the Triton generator may spread over a program's lanes (spread.py emits them).
(docs/architecture.md, "Module notes": backends/triton/reductions.py)"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...ir import kernel as K
from ...passes.uniform import Uniformity
from ...types import PtrType, ScalarType

_INTEGER_OPS = ("add", "and", "or", "xor")  # BinOp ops an integer accumulator may fold with


@dataclass(frozen=True)
class Accumulator:
    """`name = update` in the loop body, with update = op(name, element) or op(element, name)."""

    name: str
    op: str  # max, min (MathCall) or add, and, or, xor (BinOp)
    type: ScalarType
    update: K.Expr
    element: K.Expr
    # the accumulator is the first operand: float max/min then keep the later of two equal values
    # and the earlier of two NaNs (the other order: the earlier value and the later NaN)
    first: bool

    def folding(self, value: K.Expr) -> K.Expr:
        """The update with `value` in place of the element."""
        acc = K.Var(name=self.name, type=self.type)
        lhs, rhs = (acc, value) if self.first else (value, acc)
        if isinstance(self.update, K.MathCall):
            return replace(self.update, args=[lhs, rhs])
        return replace(self.update, lhs=lhs, rhs=rhs)


@dataclass(frozen=True)
class ReductionLoop:
    loop: K.For
    accumulators: tuple[Accumulator, ...]
    temporaries: frozenset[str]  # locals the body assigns that are not accumulators

    @property
    def words(self) -> int:
        """64-bit words of one program's partial results when the loop is split (spread.py): a
        value per accumulator, and for floats its iteration too."""
        return sum(2 if acc.type.is_float else 1 for acc in self.accumulators)

    @property
    def per_lane(self) -> frozenset[str]:
        """Locals that hold one value per lane in the spread loop (blocks in the generated code)."""
        return self.temporaries | {self.loop.var}


def reduction_loops(leaf: K.LeafFunc, uniform: Uniformity) -> list[ReductionLoop]:
    """The top-level loops of a leaf body that may be spread over the lanes (module docstring)."""
    found = []
    for position, stmt in enumerate(leaf.body):
        if isinstance(stmt, K.For):
            loop = _reduction_loop(stmt, uniform)
            rest = leaf.body[position + 1:]
            if loop is not None and not any(K.read_first(rest, name) for name in loop.per_lane):
                found.append(loop)
    return found


def splittable(leaf: K.LeafFunc, loops: list[ReductionLoop]) -> bool:
    """Whether the leaf's spread loop may be split over several programs per parent instance:
    it is the only one, and the statements before it have no effect that repeating them in every
    program would multiply (the programs that do not combine the results stop after the loop)."""
    if len(loops) != 1:
        return False
    before = leaf.body[:next(i for i, s in enumerate(leaf.body) if s is loops[0].loop)]
    return not any(isinstance(s, (K.Store, K.Barrier, K.Return, K.Print, K.Breakpoint))
                   for s in K.walk_stmts(before)) and all(_pure(e) for e in K.walk_all_exprs(before))


def without(leaf: K.LeafFunc, loops: list[ReductionLoop]) -> K.LeafFunc:
    """The leaf without these loops: what decides uniformity outside them, since a spread loop
    folds a uniform combination of its lanes into each accumulator."""
    return replace(leaf, body=[s for s in leaf.body if not any(s is r.loop for r in loops)])


def _reduction_loop(s: K.For, uniform: Uniformity) -> ReductionLoop | None:
    if not all(uniform.expr(x) for x in (s.start, s.stop, s.step)):
        return None
    if not s.body or not all(isinstance(st, K.Assign) and _pure(st.value) for st in s.body):
        return None
    assigns: list[K.Assign] = s.body  # type: ignore[assignment]
    targets = [st.target for st in assigns]
    if s.var in targets:
        return None
    accumulators: dict[str, Accumulator] = {}
    for st in assigns:
        if _reads(st.value, st.target):
            acc = _accumulator(st)
            if acc is None or targets.count(st.target) != 1:
                return None
            accumulators[st.target] = acc
    temporaries = set(targets) - set(accumulators)
    defined = {s.var}
    for st in assigns:
        acc = accumulators.get(st.target)
        for e in K.walk_exprs(st.value if acc is None else acc.element):
            if not isinstance(e, K.Var) or isinstance(e.type, PtrType):
                continue
            if e.name in accumulators:
                return None  # only an accumulator's own update reads it
            if e.name not in defined and (e.name in temporaries or not uniform.expr(e)):
                return None  # carried from another iteration, or a per-lane value from before
        defined.add(st.target)
    return ReductionLoop(s, tuple(accumulators.values()), frozenset(temporaries))


def _accumulator(st: K.Assign) -> Accumulator | None:
    """st as `acc = op(acc, e)` of a reassociable fold, if it is one."""
    v, t = st.value, st.value.type
    if not isinstance(t, ScalarType) or t.is_bool:
        return None
    if isinstance(v, K.MathCall) and v.name in ("max", "min"):
        # f16/bf16 results are rounded after every operation: left alone
        if t.is_float and t.bits < 32:
            return None
        operands, op = v.args, v.name
    elif isinstance(v, K.BinOp) and v.op in _INTEGER_OPS and not t.is_float:
        operands, op = [v.lhs, v.rhs], v.op
    else:
        return None
    own = [isinstance(x, K.Var) and x.name == st.target and x.type == t for x in operands]
    if own.count(True) != 1:
        return None
    element = operands[1] if own[0] else operands[0]
    return Accumulator(st.target, op, t, v, element, own[0])


def _pure(e: K.Expr) -> bool:
    """Evaluating e changes nothing (loads of this rank's buffers are fine)."""
    return not any(isinstance(x, (K.Atomic, K.CallHelper, K.Malloc)) or
                   (isinstance(x, K.Load) and x.rank is not None) for x in K.walk_exprs(e))


def _reads(e: K.Expr, name: str) -> bool:
    return any(isinstance(x, K.Var) and x.name == name for x in K.walk_exprs(e))
