"""The execution plan of a leaf: how its body becomes loops over instances ("SIMT to loops").
(docs/architecture.md, "Module notes": backends/cpu/loop_plan.py)"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import CompileError
from ...ir import kernel as K
from ...types import PtrType
from ..base import NodeContext
from .clip import Bound
from .passes import clip_bounds
from ...passes.uniform import Uniformity, escaping_jump


@dataclass
class Forall:
    body: K.Block


@dataclass
class GroupIf:
    stmt: K.If
    then: list["Item"]
    orelse: list["Item"]


@dataclass
class GroupFor:
    stmt: K.For
    body: list["Item"]


@dataclass
class GroupWhile:
    stmt: K.While
    body: list["Item"]


@dataclass
class GroupAssign:
    stmt: K.Assign


@dataclass
class GroupJump:
    stmt: K.Break | K.Continue


Item = Forall | GroupIf | GroupFor | GroupWhile | GroupAssign | GroupJump

ROWS = 4  # y rows per group of the row kind, when the interchanged loops are uniform across rows

# Storage classes of locals.
REG = "reg"            # a register, zeroed at the start of each forall that uses it
INSTANCE = "instance"  # per-instance array: lives across foralls
GROUP = "group"        # one value per group: uniform locals the group-level items use
REMAT = "remat"        # recomputed from its single pure definition in each later forall


@dataclass
class Plan:
    kind: str
    items: list[Item]
    storage: dict[str, str]
    remat: dict[str, K.Assign] = field(default_factory=dict)  # in definition order
    mallocs: list[K.Assign] = field(default_factory=list)
    needs_done: bool = False  # a return inside a forall must hide the instance from later ones
    rows: int = 1  # row kind: y rows per group
    bounds: list[Bound] = field(default_factory=list)  # instance ranges from a guard (clip.py)
    body: K.Block = field(default_factory=list)  # the body the items run (clipped, no mallocs)

    def foralls(self) -> list[Forall]:
        return list(_foralls(self.items))


def _foralls(items: list[Item]):
    for item in items:
        if isinstance(item, Forall):
            yield item
        elif isinstance(item, GroupIf):
            yield from _foralls(item.then)
            yield from _foralls(item.orelse)
        elif isinstance(item, (GroupFor, GroupWhile)):
            yield from _foralls(item.body)


def check_compilable(leaf: K.LeafFunc) -> None:
    """What no compiled target runs: print(), breakpoint(), helper calls left by the passes."""
    for stmt in K.walk_stmts(leaf.body):
        if isinstance(stmt, (K.Print, K.Breakpoint)):
            what = "print()" if isinstance(stmt, K.Print) else "breakpoint()"
            raise CompileError(f"{what} is supported only by target='python'", stmt.loc)
    for e in K.walk_all_exprs(leaf.body):
        if isinstance(e, K.CallHelper):
            raise CompileError(f"internal: the call of helper {e.func}() was not inlined before "
                               "code generation", e.loc)


def make_plan(leaf: K.LeafFunc, ctx: NodeContext, interchange: bool = True) -> Plan:
    """The plan of a leaf that went through the cpu passes (passes.PASSES). `interchange`: uniform
    loops may be interchanged with the instance loop. Checked code keeps each instance's loops
    whole: interchanged, a later instance failing in an earlier trip failed first, where python
    names the first failing instance in sequential order (docs/language.md)."""
    check_compilable(leaf)
    mallocs = [s for s in leaf.body if isinstance(s, K.Assign) and isinstance(s.value, K.Malloc)]
    has_barrier = any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body))
    leaf_dims = ctx.level_dims[0] if ctx.level_dims else 0
    bounds: list[Bound] = []
    if has_barrier or mallocs:
        kind = "group"
    else:
        kind = "row" if leaf_dims >= 1 else "flat"
        bounds = clip_bounds(leaf)  # the clip pass (passes.py) took the guard out of the body
    body = [s for s in leaf.body if not any(s is m for m in mallocs)]
    rows = 1
    if kind == "row":
        splitter, rows = _row_splitter(leaf, body, ctx, leaf_dims, interchange)
        if not splitter.group_stmts:
            kind = "flat"
    else:
        splitter = _Splitter(body, Uniformity(leaf, ctx.input_modes, frozenset()), interchange)
    if kind == "flat":
        return Plan("flat", [Forall(body)], {name: REG for name in leaf.locals}, bounds=bounds,
                    body=body)
    items = splitter.items()
    plan = Plan(kind, items, {}, mallocs=mallocs, rows=rows, bounds=bounds, body=body)
    _assign_storage(plan, leaf, body, splitter.group_vars | {m.target for m in mallocs})
    plan.needs_done = _needs_done(plan)
    return plan


def _row_splitter(leaf: K.LeafFunc, body: K.Block, ctx: NodeContext, leaf_dims: int,
                  interchange: bool) -> tuple["_Splitter", int]:
    """Groups of several rows when the interchanged loops allow it (uniform across rows), else
    groups within one row."""
    if leaf_dims >= 2:
        block = _Splitter(body, Uniformity(leaf, ctx.input_modes, frozenset({2})), interchange)
        if block.group_stmts:
            return block, ROWS
    return _Splitter(body, Uniformity(leaf, ctx.input_modes, frozenset({1, 2})), interchange), 1


class _Splitter:
    """Chooses the group-level statements and splits the body into items around them."""

    def __init__(self, body: K.Block, uni: Uniformity, interchange: bool):
        self.body = body
        self.uni = uni
        self.single_defs = _single_definitions(body)
        self.candidates: set[int] = set()
        self.group_stmts: set[int] = set()
        self.group_vars: set[str] = set()
        if interchange:
            self._collect_candidates(body)
        self._fixed_point()
        self._check()

    # -- which statements run at group level -------------------------------------------------

    def _collect_candidates(self, block: K.Block) -> None:
        """Uniform for loops worth interchanging with the instance loop (anywhere; only those at
        group-level positions are used)."""
        for stmt in K.walk_stmts(block):
            if isinstance(stmt, K.For) and self._interchangeable(stmt):
                self.candidates.add(id(stmt))

    def _interchangeable(self, loop: K.For) -> bool:
        if not all(self.uni.expr(e) for e in (loop.start, loop.stop, loop.step)):
            return False
        if loop.var not in self.uni.locals:
            return False
        inner = list(K.walk_stmts(loop.body))
        if any(isinstance(s, (K.Return, K.Barrier)) for s in inner):
            return False
        if any(escaping_jump(s) for s in loop.body):
            return False
        return any(self._unit_stride(e.index, loop.var) for e in _accesses(loop.body))

    def _unit_stride(self, index: K.Expr, loop_var: str) -> bool:
        """Whether the index moves by one element from one x instance to the next."""
        return x_coefficient(index, self.single_defs, self.uni, {loop_var}, 0) == 1

    def _fixed_point(self) -> None:
        while True:
            before = (len(self.group_stmts), len(self.group_vars))
            self._mark(self.body, in_group_loop=False)
            self._collect_group_vars(self.body)
            if (len(self.group_stmts), len(self.group_vars)) == before:
                return

    def _needs_group(self, stmt: K.Stmt, in_group_loop: bool) -> bool:
        if any(isinstance(s, K.Barrier) for s in K.walk_stmts([stmt])):
            return True
        if id(stmt) in self.candidates:
            return True
        if in_group_loop and escaping_jump(stmt):
            return True
        return any(isinstance(s, (K.Assign, K.For)) and _target(s) in self.group_vars
                   for s in K.walk_stmts([stmt]))

    def _mark(self, block: K.Block, in_group_loop: bool) -> None:
        for stmt in block:
            if isinstance(stmt, K.Barrier) or not self._needs_group(stmt, in_group_loop):
                continue
            self.group_stmts.add(id(stmt))
            if isinstance(stmt, K.If):
                self._mark(stmt.then, in_group_loop)
                self._mark(stmt.orelse, in_group_loop)
            elif isinstance(stmt, (K.For, K.While)):
                self._mark(stmt.body, in_group_loop=True)

    def _collect_group_vars(self, block: K.Block) -> None:
        for stmt in block:
            if id(stmt) not in self.group_stmts:
                continue
            exprs: list[K.Expr] = []
            if isinstance(stmt, K.If):
                exprs = [stmt.cond]
                self._collect_group_vars(stmt.then)
                self._collect_group_vars(stmt.orelse)
            elif isinstance(stmt, K.While):
                exprs = [stmt.cond]
                self._collect_group_vars(stmt.body)
            elif isinstance(stmt, K.For):
                exprs = [stmt.start, stmt.stop, stmt.step]
                self.group_vars.add(stmt.var)
                self._collect_group_vars(stmt.body)
            elif isinstance(stmt, K.Assign):
                exprs = [stmt.value]
                self.group_vars.add(stmt.target)
            for e in exprs:
                self.group_vars.update(_local_reads(e, self.uni))

    # -- legality ----------------------------------------------------------------------------

    def _check(self) -> None:
        # Conditions first: a non-uniform one is the real cause, and is reported at its barrier.
        group = [s for s in K.walk_stmts(self.body) if id(s) in self.group_stmts]
        for stmt in group:
            if isinstance(stmt, (K.If, K.While)):
                self._require_uniform(stmt, [stmt.cond])
            elif isinstance(stmt, K.For):
                self._require_uniform(stmt, [stmt.start, stmt.stop, stmt.step])
        for stmt in group:
            if isinstance(stmt, (K.For, K.Assign)):
                self._require_uniform_var(stmt, _target(stmt) or "")

    def _require_uniform(self, stmt: K.Stmt, exprs: list[K.Expr]) -> None:
        if all(self.uni.expr(e) for e in exprs):
            return
        what = {K.If: "an if condition", K.While: "a while condition",
                K.For: "the range of a for loop"}[type(stmt)]
        raise self._error(stmt, f"{what} around it is not uniform")

    def _require_uniform_var(self, stmt: K.Stmt, name: str) -> None:
        if name not in self.uni.locals:
            raise self._error(stmt, f"the control flow around it depends on {name!r}, which is not "
                              "uniform")

    def _error(self, stmt: K.Stmt, reason: str) -> CompileError:
        barrier = next((s for s in K.walk_stmts([stmt]) if isinstance(s, K.Barrier)), None)
        jump = next((s for s in K.walk_stmts([stmt]) if isinstance(s, (K.Break, K.Continue))), None)
        subject = "barrier()" if barrier is not None else "break/continue of a loop with barrier()"
        loc = (barrier or jump or stmt).loc
        return CompileError(
            f"{subject} must be reached by every instance of the group or by none, but {reason}: "
            "conditions and loop ranges around a barrier may only use constants, uniform scalar "
            "parameters, instance counts, instance ids of parent levels, and locals assigned only "
            "from such values outside non-uniform control flow", loc, rule="barrier-uniform")

    # -- building the items ------------------------------------------------------------------

    def items(self) -> list[Item]:
        return self._build(self.body)

    def _build(self, block: K.Block) -> list[Item]:
        items: list[Item] = []
        run: K.Block = []

        def flush() -> None:
            if run:
                items.append(Forall(list(run)))
                run.clear()

        for stmt in block:
            if isinstance(stmt, K.Barrier):
                flush()
            elif id(stmt) in self.group_stmts:
                flush()
                items.append(self._group_item(stmt))
            else:
                run.append(stmt)
        flush()
        return items

    def _group_item(self, stmt: K.Stmt) -> Item:
        if isinstance(stmt, K.If):
            return GroupIf(stmt, self._build(stmt.then), self._build(stmt.orelse))
        if isinstance(stmt, K.For):
            return GroupFor(stmt, self._build(stmt.body))
        if isinstance(stmt, K.While):
            return GroupWhile(stmt, self._build(stmt.body))
        if isinstance(stmt, K.Assign):
            return GroupAssign(stmt)
        assert isinstance(stmt, (K.Break, K.Continue))
        return GroupJump(stmt)


# -- storage of locals ---------------------------------------------------------------------------


def _assign_storage(plan: Plan, leaf: K.LeafFunc, body: K.Block, group_vars: set[str]) -> None:
    foralls = plan.foralls()
    in_loop = {id(f) for f in _foralls_in_group_loops(plan.items, False)}
    single = _single_definitions(body)
    for name in leaf.locals:
        if name in group_vars:
            plan.storage[name] = GROUP
            continue
        users = [f for f in foralls if name in mentions(f.body)]
        if name in single and _remat_ok(name, single, body, group_vars):
            plan.storage[name] = REMAT
            plan.remat[name] = single[name]
        elif all(_defined_first(f.body, name) for f in users) or \
                (len(users) <= 1 and not any(id(f) in in_loop for f in users)):
            plan.storage[name] = REG
        else:
            plan.storage[name] = INSTANCE
    # definition order, so that recomputing one can read the ones it depends on
    order = {id(stmt): i for i, stmt in enumerate(body)}
    plan.remat = dict(sorted(plan.remat.items(), key=lambda item: order[id(item[1])]))


def _foralls_in_group_loops(items: list[Item], inside: bool):
    for item in items:
        if isinstance(item, Forall) and inside:
            yield item
        elif isinstance(item, GroupIf):
            yield from _foralls_in_group_loops(item.then, inside)
            yield from _foralls_in_group_loops(item.orelse, inside)
        elif isinstance(item, (GroupFor, GroupWhile)):
            yield from _foralls_in_group_loops(item.body, True)


def _single_definitions(body: K.Block) -> dict[str, K.Assign]:
    """Locals assigned exactly once, by a top-level statement, from a value without memory access."""
    counts = K.assignments(body)
    defs: dict[str, K.Assign] = {}
    for stmt in body:
        if isinstance(stmt, K.Assign) and counts[stmt.target] == 1 and not any(
                isinstance(e, (K.Load, K.Atomic, K.Malloc)) for e in K.walk_exprs(stmt.value)):
            defs[stmt.target] = stmt
    return defs


def _remat_ok(name: str, single: dict[str, K.Assign], body: K.Block, group_vars: set[str]) -> bool:
    """A single definition can be recomputed where used when it only reads parameters, ids,
    counts and earlier such locals, and nothing reads the local before it is assigned."""
    definition = single[name]
    position = next(i for i, s in enumerate(body) if s is definition)
    if any(name in mentions([s]) for s in body[:position]) or name in names(definition.value):
        return False
    for read in names(definition.value):
        if read in single and read not in group_vars:
            if not _remat_ok(read, single, body, group_vars):
                return False
            read_pos = next(i for i, s in enumerate(body) if s is single[read])
            if read_pos > position:
                return False
        elif read in _all_locals(body):
            return False
    return True


def _defined_first(block: K.Block, name: str) -> bool:
    """Whether the first statement of the block that mentions name assigns it without reading it."""
    for stmt in block:
        if name not in mentions([stmt]):
            continue
        return isinstance(stmt, K.Assign) and stmt.target == name and name not in names(stmt.value)
    return True


def _needs_done(plan: Plan) -> bool:
    foralls = plan.foralls()
    returns = any(isinstance(s, K.Return) for f in foralls for s in K.walk_stmts(f.body))
    in_loop = list(_foralls_in_group_loops(plan.items, False))
    return returns and (len(foralls) > 1 or bool(in_loop))


# -- small IR queries ----------------------------------------------------------------------------


def _target(stmt: K.Stmt) -> str | None:
    if isinstance(stmt, K.Assign):
        return stmt.target
    if isinstance(stmt, K.For):
        return stmt.var
    return None


def names(e: K.Expr) -> set[str]:
    return {sub.name for sub in K.walk_exprs(e) if isinstance(sub, K.Var)}


def mentions(block: K.Block) -> set[str]:
    """Every variable name read or written in the block."""
    found: set[str] = set()
    for stmt in K.walk_stmts(block):
        target = _target(stmt)
        if target is not None:
            found.add(target)
        for e in K.child_exprs(stmt):
            found |= names(e)
    return found


def _all_locals(body: K.Block) -> set[str]:
    return set(K.assignments(body))


def _local_reads(e: K.Expr, uni: Uniformity) -> set[str]:
    return {n for n in names(e) if n not in uni.uniform_params}


def _accesses(block: K.Block) -> list[K.Load | K.Store | K.Atomic]:
    found: list[K.Load | K.Store | K.Atomic] = []
    for stmt in K.walk_stmts(block):
        if isinstance(stmt, K.Store):
            found.append(stmt)
        for e in K.child_exprs(stmt):
            found.extend(sub for sub in K.walk_exprs(e) if isinstance(sub, (K.Load, K.Atomic)))
    return found


def x_coefficient(e: K.Expr, defs: dict[str, K.Assign], uni: Uniformity, invariant: set[str],
                  depth: int) -> int | None:
    """The coefficient of the leaf's x instance id in an affine index, None if not affine."""
    if depth > 16:
        return None
    if isinstance(e, K.InstanceId):  # other ids are constant along x
        return 1 if e.level == 0 and e.dim == 0 else 0
    if isinstance(e, K.Var):
        if e.name in invariant or e.name in uni.uniform_params:
            return 0
        if e.name in defs:
            return x_coefficient(defs[e.name].value, defs, uni, invariant, depth + 1)
        return 0 if e.name in uni.locals else None
    if isinstance(e, K.Cast) and not isinstance(e.type, PtrType) and e.type.is_int:
        return x_coefficient(e.value, defs, uni, invariant, depth + 1)
    if isinstance(e, K.BinOp) and e.op in ("add", "sub", "mul"):
        a = x_coefficient(e.lhs, defs, uni, invariant, depth + 1)
        b = x_coefficient(e.rhs, defs, uni, invariant, depth + 1)
        if a is None or b is None:
            return None
        if e.op == "add":
            return a + b
        if e.op == "sub":
            return a - b
        if a == 0 and b == 0:
            return 0
        constant = e.rhs if a != 0 else e.lhs
        if isinstance(constant, K.Const) and (a == 0 or b == 0):
            return (a or b) * int(constant.value)
        return None
    if uni.expr(e):
        return 0
    return None
