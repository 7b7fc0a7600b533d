"""Expressions and statements of one leaf instance (or of the group-level code around foralls).

The Emitter evaluates kernel IR with an IRBuilder in an environment the driver sets up: parameter
values, the storage of each local, the instance ids and counts visible at that point, and the
current instance (`Frame`), which is None in group-level code. LLVM values are named after the user
variables they hold so that the generated IR reads like the leaf.
"""
from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...errors import CompileError
from ...ir import kernel as K
from ...types import PtrType, ScalarType
from . import arith, mathfns
from .lltypes import I1, I8, I64, const, mem_type, reg_type, to_mem, zero
from .lowering import Lowering
from .memory import Memory, Pointer


@dataclass
class Frame:
    """The instance being run: where its per-instance data sits and where it ends."""

    slot: ir.Value       # index into per-instance storage of the group
    lin: ir.Value        # leaf-linear index within the parent instance
    flat: ir.Value       # p * L + lin: index into per-instance inputs and outputs
    exit: ir.Block       # the next instance
    done: ir.Value | None  # this instance's "returned" flag, when later foralls must skip it


_LAUNCH_WIDE_NODES = (K.Var, K.Const, K.BinOp, K.UnaryOp, K.Cast)


def _divisor_names(divisors: list[K.Expr]) -> list[str]:
    """LLVM value names for launch-wide divisors: the parameter's, else divisor<k>."""
    return [d.name if isinstance(d, K.Var) else f"divisor{k}" for k, d in enumerate(divisors)]


def uniform_divisors(leaf: K.LeafFunc, input_modes: tuple[str, ...]) -> list[K.Expr]:
    """The divisors of the body's integer // and % that the whole launch shares: expressions of
    constants and of integer parameters passed once for the launch that the body never assigns
    nor loops over (`nbins`, `nx * ny`). What Emitter.by_divisors tests, each listed once."""
    assigned = {s.target if isinstance(s, K.Assign) else s.var for s in K.walk_stmts(leaf.body)
                if isinstance(s, (K.Assign, K.For))}
    fixed = {p.name for p, mode in zip(leaf.params, input_modes)
             if mode == "uniform" and isinstance(p.type, ScalarType) and not p.type.is_float
             and p.name not in assigned}

    def launch_wide(e: K.Expr) -> bool:
        parts = list(K.walk_exprs(e))
        return all(isinstance(x, _LAUNCH_WIDE_NODES) and (not isinstance(x, K.Var) or x.name in fixed)
                   for x in parts) and any(isinstance(x, K.Var) for x in parts)

    found: list[K.Expr] = []
    for e in K.walk_all_exprs(leaf.body):
        if isinstance(e, K.BinOp) and e.op in ("floordiv", "mod") and isinstance(e.type, ScalarType) \
                and not e.type.is_float and launch_wide(e.rhs) and e.rhs not in found:
            found.append(e.rhs)  # expressions compare by structure (their locations aside)
    return found


def divided_in_loops(leaf: K.LeafFunc, divisors: list[K.Expr]) -> bool:
    """Whether a loop of the body divides by one of `divisors` of at most 32 bits: there a
    reciprocal made once per instance pays for itself (nvptx, whose threads each make theirs with
    a 64-bit division, for a grid-stride loop's many values)."""
    for s in K.walk_stmts(leaf.body):
        if not isinstance(s, (K.For, K.While)):
            continue
        condition = K.walk_exprs(s.cond) if isinstance(s, K.While) else ()
        for e in itertools.chain(K.walk_all_exprs(s.body), condition):
            if isinstance(e, K.BinOp) and e.op in ("floordiv", "mod") and e.rhs in divisors \
                    and isinstance(e.type, ScalarType) and e.type.bits <= 32:
                return True
    return False


class Emitter:
    def __init__(self, b: ir.IRBuilder, leaf: K.LeafFunc, level_dims: tuple[int, ...],
                 output_modes: tuple[str, ...], memory: Memory, lowering: Lowering):
        self.b = b
        self.lowering = lowering
        self.leaf = leaf
        self.level_dims = level_dims
        self.output_modes = output_modes
        self.memory = memory
        self.scalars: dict[str, ir.Value] = {}   # scalar parameter values
        self.pointers: dict[str, Pointer] = {}   # pointer parameters and malloc scratch
        self.slots: dict[str, ir.Value] = {}     # address of each local's storage
        self.ids: dict[tuple[int, int], ir.Value] = {}     # (level, dim) -> instance id
        self.counts: dict[tuple[int, int], ir.Value] = {}  # (level, dim) -> instance count
        self.outputs: list[ir.Value] = []        # output array addresses (null when unused)
        self.parent: ir.Value | None = None      # p, the parent instance index
        self.frame: Frame | None = None
        self.loops: list[tuple[ir.Block, ir.Block]] = []  # (continue target, break target)
        self.local_types = leaf.locals
        self.powers_of_two: list[K.Expr] = []  # launch-wide divisors known to be 2**k
        self.reciprocals: list[tuple[K.Expr, arith.Reciprocal]] = []  # others, by_divisors'

    # -- expressions -------------------------------------------------------------------------

    def expr(self, e: K.Expr, name: str = "") -> ir.Value:
        method = getattr(self, "_" + type(e).__name__)
        return method(e, name)

    def _Const(self, e: K.Const, name: str) -> ir.Value:
        return const(e.type, e.value)

    def _Var(self, e: K.Var, name: str) -> ir.Value:
        if isinstance(e.type, PtrType):
            return self.pointers[e.name].base
        if e.name in self.scalars:
            return self.scalars[e.name]
        return self.b.load(self.slots[e.name], typ=reg_type(e.type), name=e.name)

    def _BinOp(self, e: K.BinOp, name: str) -> ir.Value:
        x, y = self.expr(e.lhs), self.expr(e.rhs)
        if e.op in ("floordiv", "mod"):
            assert isinstance(e.type, ScalarType)
            if self.powers_of_two and e.rhs in self.powers_of_two:
                return arith.power_of_two_divmod(self.b, x, y, e.op, e.type, name)
            for divisor, r in self.reciprocals:
                if e.rhs == divisor:
                    return arith.reciprocal_divmod(self.b, x, r, e.op, e.type,
                                                   self.lowering.high_product, name)
        return arith.binop(self.b, e.op, e.type, x, y, e.loc, self.lowering.math, name)

    def _UnaryOp(self, e: K.UnaryOp, name: str) -> ir.Value:
        return arith.unary(self.b, e.op, e.type, self.expr(e.operand), name)

    def _Compare(self, e: K.Compare, name: str) -> ir.Value:
        x, y = self.expr(e.lhs), self.expr(e.rhs)
        return arith.compare(self.b, e.op, e.lhs.type, x, y, name)

    def _Cast(self, e: K.Cast, name: str) -> ir.Value:
        return arith.cast(self.b, self.expr(e.value), e.value.type, e.type, name)

    def _Logical(self, e: K.Logical, name: str) -> ir.Value:
        # `a and b` is `b if a else False`; `a or b` is `True if a else b`: only one side runs.
        lhs = self.expr(e.lhs)
        short = ir.Constant(I1, 1 if e.op == "lor" else 0)
        if e.op == "land":
            return self._branch_value(lhs, lambda: self.expr(e.rhs), lambda: short, I1, name)
        return self._branch_value(lhs, lambda: short, lambda: self.expr(e.rhs), I1, name)

    def _Select(self, e: K.Select, name: str) -> ir.Value:
        cond = self.expr(e.cond)
        if not (_has_effects(e.if_true) or _has_effects(e.if_false)):
            # Both sides are cheap and cannot fault: a plain select vectorises better.
            return self.b.select(cond, self.expr(e.if_true), self.expr(e.if_false), name=name)
        return self._branch_value(cond, lambda: self.expr(e.if_true), lambda: self.expr(e.if_false),
                                  reg_type(e.type), name)

    def _branch_value(self, cond: ir.Value, on_true: Callable[[], ir.Value],
                      on_false: Callable[[], ir.Value], t: ir.Type, name: str) -> ir.Value:
        b = self.b
        then_bb = b.append_basic_block("sel.true")
        else_bb = b.append_basic_block("sel.false")
        merge_bb = b.append_basic_block("sel.end")
        b.cbranch(cond, then_bb, else_bb)
        b.position_at_end(then_bb)
        v_true = on_true()
        then_end = b.block
        b.branch(merge_bb)
        b.position_at_end(else_bb)
        v_false = on_false()
        else_end = b.block
        b.branch(merge_bb)
        b.position_at_end(merge_bb)
        phi = b.phi(t, name=name)
        phi.add_incoming(v_true, then_end)
        phi.add_incoming(v_false, else_end)
        return phi

    def _Load(self, e: K.Load, name: str) -> ir.Value:
        index = self.index(e.index)
        return self.memory.load(self.b, e, self.pointers[e.ptr.name], index, name or e.ptr.name,
                                self.rank(e.rank))

    def _Atomic(self, e: K.Atomic, name: str) -> ir.Value:
        index = self.index(e.index)
        value = self.expr(e.value)
        return self.memory.atomic(self.b, e, self.pointers[e.ptr.name], index, value, name,
                                  self.rank(e.rank))

    def _MathCall(self, e: K.MathCall, name: str) -> ir.Value:
        args = [self.expr(a) for a in e.args]
        arg_type = e.args[0].type
        assert isinstance(arg_type, ScalarType)
        return mathfns.call(self.b, e.name, e.type, args, arg_type, self.lowering.math, name)

    def _InstanceId(self, e: K.InstanceId, name: str) -> ir.Value:
        return self.ids[(e.level, e.dim)]

    def _NumInstances(self, e: K.NumInstances, name: str) -> ir.Value:
        return self.counts[(e.level, e.dim)]

    def _NumDims(self, e: K.NumDims, name: str) -> ir.Value:
        dims = self.level_dims[e.level] if e.level < len(self.level_dims) else 0
        return ir.Constant(reg_type(e.type), dims)

    def _Malloc(self, e: K.Malloc, name: str) -> ir.Value:
        raise CompileError("malloc() must be assigned to a variable at the top level of the leaf "
                           "body", e.loc, rule="malloc-uniform")

    def _CallHelper(self, e: K.CallHelper, name: str) -> ir.Value:
        raise CompileError(f"internal: the call of helper {e.func}() was not inlined", e.loc)

    def rank(self, e: K.Expr | None) -> ir.Value | None:
        """The rank of a remote access as i64 (None for a local access)."""
        return None if e is None else self.index(e)

    def index(self, e: K.Expr) -> ir.Value:
        """An index as i64: integer indices widen by their signedness."""
        v = self.expr(e)
        t = e.type
        assert isinstance(t, ScalarType)
        if t.bits == 64:
            return v
        return self.b.sext(v, I64) if t.is_signed else self.b.zext(v, I64)

    # -- statements --------------------------------------------------------------------------

    def block(self, stmts: K.Block) -> None:
        for stmt in stmts:
            if self.b.block.is_terminated:
                return  # after break/continue/return: unreachable
            self.stmt(stmt)

    def stmt(self, s: K.Stmt) -> None:
        method = getattr(self, "_s_" + type(s).__name__)
        method(s)

    def _s_Assign(self, s: K.Assign) -> None:
        value = self.expr(s.value, name=s.target)
        self.b.store(value, self.slots[s.target])

    def _s_Store(self, s: K.Store) -> None:
        index = self.index(s.index)
        value = self.expr(s.value)
        self.memory.store(self.b, s, self.pointers[s.ptr.name], index, value, self.rank(s.rank))

    def _s_ExprStmt(self, s: K.ExprStmt) -> None:
        self.expr(s.value)

    def _s_If(self, s: K.If) -> None:
        self.if_then_else(self.expr(s.cond, "cond"), lambda: self.block(s.then),
                          lambda: self.block(s.orelse))

    def _s_For(self, s: K.For) -> None:
        self.for_loop(s, lambda: self.block(s.body))

    def _s_While(self, s: K.While) -> None:
        self.while_loop(s, lambda: self.block(s.body))

    def _s_Break(self, s: K.Break) -> None:
        self.b.branch(self.loops[-1][1])

    def _s_Continue(self, s: K.Continue) -> None:
        self.b.branch(self.loops[-1][0])

    def _s_Return(self, s: K.Return) -> None:
        frame = self.frame
        assert frame is not None
        values = [self.expr(v) for v in s.values]
        for port, mode, value, out in zip(self.leaf.outputs, self.output_modes, values, self.outputs):
            if mode == "per_parent":
                first = self.b.icmp_unsigned("==", frame.lin, ir.Constant(I64, 0))
                self.if_then_else(first, lambda p=port, v=value, o=out: self._write_output(
                    p, v, o, self.parent), None)
            elif mode == "per_instance":
                self._write_output(port, value, out, frame.flat)
        if frame.done is not None:
            self.b.store(ir.Constant(I8, 1), frame.done)
        self.b.branch(frame.exit)

    def _write_output(self, port: K.OutputPort, value: ir.Value, out: ir.Value,
                      index: ir.Value) -> None:
        if isinstance(port.type, PtrType):
            stored, t = self.b.ptrtoint(value, I64), I64  # an address, as a 64-bit integer
        else:
            stored, t = to_mem(self.b, value, port.type), mem_type(port.type)
        self.b.store(stored, self.b.gep(out, [index], source_etype=t))

    def _s_Barrier(self, s: K.Barrier) -> None:
        if self.lowering.barrier is None:
            raise CompileError("internal: barrier() left inside a forall", s.loc)
        self.lowering.barrier(self.b)

    def by_divisors(self, divisors: list[K.Expr], emit: Callable[[], None],
                    reciprocals: bool = False) -> None:
        """emit() twice: where every one of `divisors` (uniform_divisors) is a power of two, with
        the // and % by them as shifts and masks; elsewhere as written, or, with `reciprocals`,
        by those of at most 32 bits through their arith.Reciprocal, computed there once. An
        integer division is tens of instructions (emulated on a GPU, 20-90 cycles on x86, never
        vectorised), and on a GPU its branches keep a loop's loads from being issued ahead; a bin
        count or a row width is often 2**k. The test runs once, ahead of the code, on values the
        whole launch shares."""
        if not divisors:
            emit()
            return
        tests = []
        for d, name in zip(divisors, _divisor_names(divisors)):
            assert isinstance(d.type, ScalarType)
            tests.append(arith.is_power_of_two(self.b, self.expr(d), d.type, name))
        cond = functools.reduce(self.b.and_, tests)

        def with_shifts() -> None:
            self.powers_of_two = divisors
            emit()
            self.powers_of_two = []

        def as_written() -> None:
            if reciprocals:
                self.reciprocals = [
                    (d, arith.reciprocal(self.b, self.expr(d), d.type, name))
                    for d, name in zip(divisors, _divisor_names(divisors))
                    if isinstance(d.type, ScalarType) and d.type.bits <= 32]
            emit()
            self.reciprocals = []

        self.if_then_else(cond, with_shifts, as_written)

    # -- control flow shared by statements and the group-level items --------------------------

    def if_then_else(self, cond: ir.Value, then: Callable[[], None],
                     orelse: Callable[[], None] | None) -> None:
        b = self.b
        then_bb = b.append_basic_block("if.then")
        else_bb = b.append_basic_block("if.else") if orelse is not None else None
        end_bb = b.append_basic_block("if.end")
        b.cbranch(cond, then_bb, else_bb or end_bb)
        b.position_at_end(then_bb)
        then()
        if not b.block.is_terminated:
            b.branch(end_bb)
        if else_bb is not None and orelse is not None:
            b.position_at_end(else_bb)
            orelse()
            if not b.block.is_terminated:
                b.branch(end_bb)
        b.position_at_end(end_bb)

    def while_loop(self, s: K.While, body: Callable[[], None]) -> None:
        b = self.b
        head = b.append_basic_block("while.cond")
        body_bb = b.append_basic_block("while.body")
        end = b.append_basic_block("while.end")
        b.branch(head)
        b.position_at_end(head)
        self.memory.leave_when_stopped(b, end)
        b.cbranch(self.expr(s.cond, "cond"), body_bb, end)
        b.position_at_end(body_bb)
        self.loops.append((head, end))
        body()
        self.loops.pop()
        if not b.block.is_terminated:
            b.branch(head)
        b.position_at_end(end)

    def for_loop(self, s: K.For, body: Callable[[], None]) -> None:
        """range(start, stop, step) with Python semantics, driven by a precomputed trip count."""
        b = self.b
        t = self.local_types[s.var]
        assert isinstance(t, ScalarType)
        start = self.expr(s.start, f"{s.var}.start")
        stop = self.expr(s.stop, f"{s.var}.stop")
        step = self.expr(s.step, f"{s.var}.step")
        count = trip_count(b, t, start, stop, step, s.step, f"{s.var}.trips")
        preheader = b.block
        head = b.append_basic_block(f"for.{s.var}")
        body_bb = b.append_basic_block(f"for.{s.var}.body")
        latch = b.append_basic_block(f"for.{s.var}.next")
        end = b.append_basic_block(f"for.{s.var}.end")
        b.branch(head)
        b.position_at_end(head)
        counter = b.phi(I64, name=f"{s.var}.iter")
        value = b.phi(reg_type(t), name=f"{s.var}.value")
        counter.add_incoming(ir.Constant(I64, 0), preheader)
        value.add_incoming(start, preheader)
        b.cbranch(b.icmp_unsigned("<", counter, count), body_bb, end)
        b.position_at_end(body_bb)
        self.memory.leave_when_stopped(b, end)
        b.store(value, self.slots[s.var])  # assigning the variable in the body changes nothing
        self.loops.append((latch, end))
        body()
        self.loops.pop()
        if not b.block.is_terminated:
            b.branch(latch)
        b.position_at_end(latch)
        counter.add_incoming(b.add(counter, ir.Constant(I64, 1), name=f"{s.var}.iter.next"), latch)
        value.add_incoming(b.add(value, step, name=f"{s.var}.next"), latch)
        b.branch(head)
        b.position_at_end(end)

    def zero_local(self, name: str) -> None:
        t = self.local_types[name]
        if isinstance(t, ScalarType):
            self.b.store(zero(t), self.slots[name])


def ancestor_ids(b: ir.IRBuilder, p: ir.Value, level_dims: tuple[int, ...],
                 level_counts: list[ir.Value], em: Emitter) -> None:
    """Decompose the parent index p (level 1 fastest) into the instance ids of every ancestor
    level, into em.ids; level_counts[k] is the instance count of level k, em.counts its extents."""
    rest = p
    levels = len(level_dims)
    for level in range(1, levels):
        ndims = level_dims[level]
        n = level_counts[level]
        if level < levels - 1:
            lin = b.urem(rest, n, name=f"lin{level}")
            rest = b.udiv(rest, n)
        else:
            lin = rest
        for d in range(ndims):
            value = lin
            if d > 0:
                stride = em.counts[(level, 0)]
                if d == 2:
                    stride = b.mul(stride, em.counts[(level, 1)])
                value = b.udiv(lin, stride)
            if d < ndims - 1:
                value = b.urem(value, em.counts[(level, d)])
            value.name = f"{'xyz'[d]}{level}"
            em.ids[(level, d)] = value


def trip_count(b: ir.IRBuilder, t: ScalarType, start: ir.Value, stop: ir.Value, step: ir.Value,
               step_expr: K.Expr, name: str) -> ir.Value:
    """The number of iterations of range(start, stop, step), as an unsigned i64.

    Widened to 64 bits by the type's signedness, the distance between start and stop always fits
    in an unsigned i64, as does the magnitude of the step, so nothing overflows.
    """
    def wide(v: ir.Value) -> ir.Value:
        if t.bits == 64:
            return v
        return b.sext(v, I64) if t.is_signed else b.zext(v, I64)

    start64, stop64, step64 = wide(start), wide(stop), wide(step)
    one = ir.Constant(I64, 1)
    zero64 = ir.Constant(I64, 0)
    cmp = b.icmp_signed if t.is_signed else b.icmp_unsigned

    def upward(divisor: ir.Value, out: str = "") -> ir.Value:
        span = b.sub(b.sub(stop64, start64), one)
        return b.select(cmp(">", stop, start), b.add(b.udiv(span, divisor), one), zero64,
                        name=out)

    def downward(divisor: ir.Value, out: str = "") -> ir.Value:
        span = b.sub(b.sub(start64, stop64), one)
        return b.select(cmp(">", start, stop), b.add(b.udiv(span, divisor), one), zero64,
                        name=out)

    if isinstance(step_expr, K.Const):
        value = int(step_expr.value)
        if value == 0:
            return zero64
        if value > 0:
            return upward(step64, name)
        return downward(b.sub(zero64, step64), name)
    positive = cmp(">", step, ir.Constant(step.type, 0))
    count = upward(b.select(positive, step64, one))
    if t.is_signed:
        negative = b.icmp_signed("<", step, ir.Constant(step.type, 0))
        down = downward(b.select(negative, b.sub(zero64, step64), one))
        return b.select(negative, down, b.select(positive, count, zero64), name=name)
    return b.select(positive, count, zero64, name=name)


def _has_effects(e: K.Expr) -> bool:
    """Whether evaluating e could fault, touch memory or cost a library call."""
    return any(isinstance(sub, (K.Load, K.Atomic, K.MathCall, K.Malloc)) for sub in K.walk_exprs(e))
