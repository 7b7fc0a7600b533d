"""Uniformity: which values are the same for every instance of a group.

A group is the set of instances that one `forall` loop of the generated driver runs together:
all leaf instances of one parent instance (when the leaf has barriers or malloc), or a tile of
consecutive x in one or a few consecutive y rows (loop interchange without barriers). Uniform values
are built from constants, uniform scalar parameters, instance counts, instance ids of the levels
above and of the leaf dimensions the group does not span, and locals assigned only from uniform
values outside non-uniform control flow.
"""
from __future__ import annotations

from ..errors import VerificationError
from ..ir import kernel as K
from ..support.loc import Loc
from ..types import PtrType


class Uniformity:
    """Decides uniformity of expressions for one leaf and one kind of group."""

    def __init__(self, leaf: K.LeafFunc, input_modes: tuple[str, ...],
                 uniform_dims: frozenset[int], varying: frozenset[str] = frozenset()):
        self.uniform_dims = uniform_dims  # leaf dimensions the group does not span
        self.uniform_params = {p.name for p, mode in zip(leaf.params, input_modes)
                               if mode in ("uniform", "per_parent", "buffer")}
        self.locals = self._uniform_locals(leaf, varying)

    def expr(self, e: K.Expr) -> bool:
        return all(self._node(sub) for sub in K.walk_exprs(e))

    def _node(self, e: K.Expr, locals_: set[str] | None = None) -> bool:
        uniform_locals = self.locals if locals_ is None else locals_
        if isinstance(e, (K.Load, K.Atomic, K.CallHelper)):
            return False
        if isinstance(e, K.InstanceId) and e.level == 0:
            return e.dim in self.uniform_dims
        if isinstance(e, K.Var) and not isinstance(e.type, PtrType):
            return e.name in self.uniform_params or e.name in uniform_locals
        return True

    def _expr_with(self, e: K.Expr, uniform_locals: set[str]) -> bool:
        return all(self._node(sub, uniform_locals) for sub in K.walk_exprs(e))

    def _uniform_locals(self, leaf: K.LeafFunc, varying: frozenset[str]) -> set[str]:
        """Largest set of locals consistent with the definition (a fixed point from 'all'), where
        the caller may declare some locals varying (a backend that cannot keep them scalar)."""
        current = set(leaf.locals) - varying
        while True:
            kept = set(current)
            # what a pass discards counts at once: judged by `current`, a chain of n locals
            # (v1 = v0 ^ 1, v2 = v1 ^ 2...) lost one per pass, n passes over n statements
            self._visit(leaf.body, True, kept, kept)
            if kept == current:
                return current
            current = kept

    def _visit(self, block: K.Block, uniform_ctx: bool, assumed: set[str], kept: set[str]) -> None:
        for stmt in block:
            if isinstance(stmt, K.Assign):
                if isinstance(stmt.value, K.Malloc):
                    continue  # malloc: one pointer for the whole group
                if not (uniform_ctx and self._expr_with(stmt.value, assumed)):
                    kept.discard(stmt.target)
            elif isinstance(stmt, K.If):
                inner = uniform_ctx and self._expr_with(stmt.cond, assumed)
                self._visit(stmt.then, inner, assumed, kept)
                self._visit(stmt.orelse, inner, assumed, kept)
            elif isinstance(stmt, K.For):
                bounds = all(self._expr_with(e, assumed) for e in (stmt.start, stmt.stop, stmt.step))
                inner = uniform_ctx and bounds and self.jumps_uniform(stmt.body, assumed)
                if not inner:  # (a break some instances take leaves the variable per instance)
                    kept.discard(stmt.var)
                self._visit(stmt.body, inner, assumed, kept)
            elif isinstance(stmt, K.While):
                inner = uniform_ctx and self._expr_with(stmt.cond, assumed) and \
                    self.jumps_uniform(stmt.body, assumed)
                self._visit(stmt.body, inner, assumed, kept)

    def jumps_uniform(self, body: K.Block, assumed: set[str] | None = None) -> bool:
        """Whether every break/continue of this loop body is taken by all instances or none."""
        uniform_locals = self.locals if assumed is None else assumed
        for stmt in body:
            if isinstance(stmt, K.If):
                if escaping_jump(stmt) and not self._expr_with(stmt.cond, uniform_locals):
                    return False
                if not (self.jumps_uniform(stmt.then, assumed) and
                        self.jumps_uniform(stmt.orelse, assumed)):
                    return False
        return True


def escaping_jump(stmt: K.Stmt) -> bool:
    """Whether stmt contains a break/continue that leaves it (one not inside a loop within it)."""
    if isinstance(stmt, (K.Break, K.Continue)):
        return True
    if isinstance(stmt, K.If):
        return any(escaping_jump(s) for s in stmt.then + stmt.orelse)
    return False


def check_barriers(leaf: K.LeafFunc, input_modes: tuple[str, ...]) -> None:
    """Every barrier must be reached by all instances of a group or by none (rule barrier-uniform).

    The statements around a barrier may branch and loop only on uniform values, and a loop that
    holds one may leave or skip iterations only uniformly. A return that a barrier may follow (later
    in the body, or in a later iteration of a loop around the return) must be taken uniformly too:
    the instances that stayed would wait at that barrier for the ones that left (undefined in HPVM,
    a hang in CUDA).
    """
    if not any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body)):
        return
    uni = Uniformity(leaf, input_modes, frozenset())
    _check_block(leaf, leaf.body, [], False, uni)


def _check_block(leaf: K.LeafFunc, block: K.Block, enclosing: list[K.Stmt], barrier_after: bool,
                 uni: Uniformity) -> None:
    """barrier_after: a barrier may run once this block is done (later in an enclosing block, or
    in a later iteration of an enclosing loop)."""
    later = _barriers_after(block, barrier_after)
    for stmt, barrier_follows in zip(block, later):
        if isinstance(stmt, K.Barrier):
            reason = _divergence(enclosing, uni)
            if reason is not None:
                raise _barrier_error(
                    f"barrier() in {K.shown_name(leaf)} must be reached by every instance of its group or "
                    f"by none, but {reason}", stmt.loc)
        elif isinstance(stmt, K.Return) and barrier_follows:
            reason = _divergence(enclosing, uni)
            if reason is not None:
                raise _barrier_error(
                    f"this return in {K.shown_name(leaf)} is taken by some instances of a group and not "
                    f"others ({reason}), and a barrier() may run after it: the instances that stay "
                    "would wait there for the ones that returned. Return under a uniform condition, "
                    "or guard the work instead of returning", stmt.loc)
        for sub in K.child_blocks(stmt):
            loops = isinstance(stmt, (K.For, K.While))  # the body runs again after itself
            _check_block(leaf, sub, enclosing + [stmt],
                         barrier_follows or (loops and _has_barrier(sub)), uni)


def _barriers_after(block: K.Block, barrier_after: bool) -> list[bool]:
    """For each statement of block: whether a barrier may run after it."""
    flags = []
    for stmt in reversed(block):
        flags.append(barrier_after)
        barrier_after = barrier_after or _has_barrier([stmt])
    return flags[::-1]


def _has_barrier(block: K.Block) -> bool:
    return any(isinstance(s, K.Barrier) for s in K.walk_stmts(block))


def _barrier_error(message: str, loc: Loc) -> VerificationError:
    return VerificationError(
        f"{message}: around a barrier, conditions and loop ranges may use constants, uniform "
        "scalar parameters, instance counts, parent-level instance ids, and locals assigned only "
        "from such values", loc, rule="barrier-uniform")


def _divergence(enclosing: list[K.Stmt], uni: Uniformity) -> str | None:
    """Why the statements around a point may take different paths per instance, if they may."""
    for outer in enclosing:
        reason = _non_uniform(outer, uni)
        if reason is not None:
            return reason
    return None


def _non_uniform(stmt: K.Stmt, uni: Uniformity) -> str | None:
    if isinstance(stmt, K.If) and not uni.expr(stmt.cond):
        return "the if condition around it differs between instances"
    if isinstance(stmt, K.While):
        if not uni.expr(stmt.cond):
            return "the while condition around it differs between instances"
        if not uni.jumps_uniform(stmt.body):
            return "the loop around it breaks or continues differently per instance"
    if isinstance(stmt, K.For):
        if not all(uni.expr(e) for e in (stmt.start, stmt.stop, stmt.step)):
            return "the range of the loop around it differs between instances"
        if not uni.jumps_uniform(stmt.body):
            return "the loop around it breaks or continues differently per instance"
    return None
