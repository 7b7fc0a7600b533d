"""Type checking of leaf and helper bodies read from the textual IR (parser.py calls it).

The Python front end builds well-typed kernel IR, and everything after it (passes, code
generators) relies on that; a hand-written `.hpvm` file may break it. This module checks that a
body is what the front end could have produced (kernel.py's node docstrings give the typing):

- an operation's operands have the types it takes: a binary operation's both operands its own
  type (and of i1 only and / or / xor, div only of floats, no neg of i1: the front end computes
  the others in i64 and f32); a compare's two operands one scalar type; land/lor, `not`,
  select's and if/while's conditions i1; a math function's arguments its type (isnan/isinf/isfinite: a float type, result
  i1); a cast from and to a scalar type;
- loads, stores and atomics go through a pointer with an integer index (and rank), loading /
  storing / exchanging values of the pointer's element type (bitwise atomics of an integer type);
  malloc makes a pointer of an integer byte count; a helper call passes its helper's parameter types and has its result type;
- an assignment's value, and a for loop's bounds, have the type of their variable (an integer
  for a loop);
- a constant's value fits its type: an integer (no float, NaN or infinity) within the range of an
  integer type, a boolean (or 0 / 1) for i1;
- `return` gives one value per leaf output (of its type), or the helper's result; `break` and
  `continue` sit inside a loop;
- a pointer variable holds what the front end lets it hold (the backends keep one base pointer
  per variable and allocate scratch before the instances run): a pointer parameter is never
  assigned, and a pointer local is assigned once, `%buf = malloc<ptr<T>>(size)` at the top level
  of a leaf body, before any use, with a size of constants, scalar parameters and instance
  queries above the leaf's own ids (`pointer-views`, `malloc-uniform`);
- expressions and blocks (and a leaf's notes' expressions) nest at most MAX_EXPR_DEPTH deep (the
  front end's limit; the later stages recurse on them), checked without recursing.

Violations raise VerificationError at the item's location: its `@F:L:C` when it has one, else its
position in the .hpvm text (a TextLoc, which the parser gives unlocated items), else the location
of the enclosing statement or function.
"""
from __future__ import annotations

import math

from ..errors import VerificationError
from ..support.loc import UNKNOWN, Loc
from ..types import PtrType, ScalarType, Type, VoidType, float_value
from . import dfg as D
from . import kernel as K
from .printer import literal

# The front end rejects Python expressions nested deeper than this (frontend/lower/lowerer.py
# imports it from here); a body read from text may nest expressions and blocks as deep, no deeper.
MAX_EXPR_DEPTH = 128

TYPE_RULE = "kernel-types"


def check_module(module: D.Module) -> None:
    """Raise VerificationError for the first ill-typed leaf or helper body of module."""
    checker = _Checker(module)
    for fn in module.functions.values():
        if isinstance(fn, (K.LeafFunc, K.HelperFunc)):
            checker.function(fn)


def check_depth(module: D.Module, fn: K.LeafFunc, when: str) -> None:
    """Raise VerificationError where fn nests blocks or expressions deeper than MAX_EXPR_DEPTH
    (`when` says at which stage: the inline pass checks a leaf again once helpers deepen it)."""
    checker = _Checker(module)
    checker.fn = fn
    checker.where = checker._loc(fn)
    try:
        checker._check_depth(fn.body)
    except VerificationError as exc:
        raise VerificationError(f"{exc.message} {when}", exc.loc, exc.rule) from None


class _Checker:
    def __init__(self, module: D.Module) -> None:
        self.module = module
        self.fn: K.LeafFunc | K.HelperFunc | None = None
        self.scope: dict[str, Type] = {}
        self.where: Loc = UNKNOWN  # the location of the statement being checked
        self._allocated: set[str] = set()  # the pointer locals given a malloc so far

    # -- errors -------------------------------------------------------------------------------

    def _loc(self, node: object) -> Loc:
        loc = getattr(node, "loc", UNKNOWN)
        if loc != UNKNOWN:
            return loc
        return self.where

    def fail(self, node: object, message: str, rule: str = TYPE_RULE) -> VerificationError:
        name = self.fn.name if self.fn is not None else "?"
        return VerificationError(f"@{name}: {message}", self._loc(node), rule)

    # -- functions and statements ---------------------------------------------------------------

    def function(self, fn: K.LeafFunc | K.HelperFunc) -> None:
        self.fn = fn
        self.scope = {p.name: p.type for p in fn.params}
        self.scope.update(fn.locals)
        self.where = self._loc(fn)
        # a leaf's notes are only printed, but the printer recurses on their expressions too
        notes = [v for n in fn.notes for v in n.args.values() if isinstance(v, K.Expr)] \
            if isinstance(fn, K.LeafFunc) else []
        self._check_depth(fn.body, notes)
        self.block(fn.body, loops=0)
        self.pointers(fn)

    def _check_depth(self, body: K.Block, exprs: list[K.Expr] | None = None) -> None:
        """Reject blocks or expressions (body's, and exprs) nested deeper than MAX_EXPR_DEPTH,
        without recursing."""
        stack: list[tuple[K.Stmt | K.Expr, int, int, Loc]] = [(s, 1, 0, self.where) for s in body]
        stack += [(e, 1, 0, self.where) for e in exprs or ()]
        while stack:
            node, blocks, exprs, where = stack.pop()
            if isinstance(node, K.Stmt):
                where = self._loc(node) if self._loc(node) != UNKNOWN else where
                if blocks > MAX_EXPR_DEPTH:
                    self.where = where
                    raise self.fail(node, f"statements nest more than {MAX_EXPR_DEPTH} blocks "
                                    "deep", "supported-python")
                for sub in K.child_blocks(node):
                    stack.extend((s, blocks + 1, 0, where) for s in sub)
            elif not isinstance(node, (K.Var, K.Const, K.Cast)):
                exprs += 1  # a cast is the front end's conversion, not a nested operation
            if exprs > MAX_EXPR_DEPTH:
                self.where = where
                raise self.fail(node, f"this expression nests operations more than "
                                f"{MAX_EXPR_DEPTH} deep; split it over several statements",
                                "supported-python")
            stack.extend((e, blocks, exprs, where) for e in K.child_exprs(node))

    def block(self, body: K.Block, loops: int) -> None:
        for stmt in body:
            outer = self.where
            if self._loc(stmt) != UNKNOWN:
                self.where = self._loc(stmt)
            self.stmt(stmt, loops)
            self.where = outer

    def stmt(self, s: K.Stmt, loops: int) -> None:
        if isinstance(s, K.Assign):
            self.expect(s.value, self.scope[s.target], f"the value assigned to %{s.target}")
        elif isinstance(s, K.Store):
            elem = self.access(s, s.ptr, s.index, s.rank, "store")
            self.expect(s.value, elem, f"the value stored through %{s.ptr.name}")
        elif isinstance(s, K.ExprStmt):
            self.expr(s.value)
        elif isinstance(s, K.If):
            self.condition(s.cond, "an if")
            self.block(s.then, loops)
            self.block(s.orelse, loops)
        elif isinstance(s, K.While):
            self.condition(s.cond, "a while")
            self.block(s.body, loops + 1)
        elif isinstance(s, K.For):
            t = self.scope[s.var]
            if not _integer(t):
                raise self.fail(s, f"the loop variable %{s.var} is {t.text()}, not an integer")
            for bound, what in ((s.start, "start"), (s.stop, "stop"), (s.step, "step")):
                self.expect(bound, t, f"the range {what} of loop variable %{s.var}")
            self.block(s.body, loops + 1)
        elif isinstance(s, (K.Break, K.Continue)):
            if loops == 0:
                word = "break" if isinstance(s, K.Break) else "continue"
                raise self.fail(s, f"`{word}` outside a loop", "supported-python")
        elif isinstance(s, K.Return):
            self.ret(s)
        elif isinstance(s, K.Print):
            for v in s.values:
                if isinstance(v, K.Expr):
                    self.expr(v)

    # -- pointer variables and malloc ---------------------------------------------------------

    def pointers(self, fn: K.LeafFunc | K.HelperFunc) -> None:
        """Refuse pointer assignments and mallocs that the front end could not have produced:
        the backends would meet a pointer local without scratch behind it (docs/language.md,
        `pointer-views` and `malloc-uniform`)."""
        params = {p.name for p in fn.params}
        self._allocated = set()
        mallocs = {id(s.value) for s in K.walk_stmts(fn.body)
                   if isinstance(s, K.Assign) and isinstance(s.value, K.Malloc)}
        for stmt in K.walk_stmts(fn.body):
            self.where = self._loc(stmt) if self._loc(stmt) != UNKNOWN else self._loc(fn)
            if isinstance(stmt, K.Assign) and isinstance(self.scope[stmt.target], PtrType):
                self._pointer_assign(stmt, params, top_level=any(stmt is s for s in fn.body))
            for child in K.child_exprs(stmt):
                for e in K.walk_exprs(child):
                    if isinstance(e, K.Malloc) and id(e) not in mallocs:
                        raise self.fail(e, "a malloc's pointer is assigned to a local: "
                                        "`%buf = malloc<ptr<T>>(size)`", "malloc-uniform")
        allocated: set[str] = set()
        for stmt in fn.body:  # in order: a pointer local is used after its malloc
            self.where = self._loc(stmt) if self._loc(stmt) != UNKNOWN else self._loc(fn)
            for inner in K.walk_stmts([stmt]):
                for child in K.child_exprs(inner):
                    for e in K.walk_exprs(child):
                        if isinstance(e, K.Var) and isinstance(e.type, PtrType) and \
                                e.name not in params and e.name not in allocated:
                            raise self.fail(e, f"%{e.name} is used before a malloc is assigned to "
                                            "it", "pointer-views")
            if isinstance(stmt, K.Assign) and isinstance(stmt.value, K.Malloc):
                allocated.add(stmt.target)

    def _pointer_assign(self, s: K.Assign, params: set[str], top_level: bool) -> None:
        if s.target in params:
            raise self.fail(s, f"%{s.target} is a pointer parameter: it keeps the buffer bound to "
                            "it (index it, or pass another buffer)", "pointer-views")
        if not isinstance(s.value, K.Malloc):
            raise self.fail(s, f"%{s.target} is a pointer local: only a malloc is assigned to it "
                            "(index a pointer parameter directly instead)", "pointer-views")
        if isinstance(self.fn, K.HelperFunc):
            raise self.fail(s, "malloc is an HPVM intrinsic; helpers may not use intrinsics",
                            "helper-no-intrinsics")
        if not top_level:
            raise self.fail(s, "malloc is called at the top level of the leaf body (not inside "
                            "if/for/while): every instance must reach it", "malloc-uniform")
        if s.target in self._allocated:
            raise self.fail(s, f"%{s.target} is assigned a second malloc; give each its own local",
                            "malloc-uniform")
        self._allocated.add(s.target)
        for e in K.walk_exprs(s.value.nbytes):
            local = isinstance(e, K.Var) and e.name not in params
            if local or isinstance(e, (K.Load, K.Atomic, K.CallHelper, K.Malloc)) or \
                    (isinstance(e, K.InstanceId) and e.level == 0):
                raise self.fail(s, "the size of a malloc is the same for every instance and known "
                                "before they run: constants, scalar parameters and instance "
                                "counts (no locals, loads, calls or the leaf's own instance ids)",
                                "malloc-uniform")

    def ret(self, s: K.Return) -> None:
        fn = self.fn
        if isinstance(fn, K.LeafFunc):
            wanted = [o.type for o in fn.outputs]
            what = f"leaf @{fn.name} has {len(wanted)} output(s)"
            rule = "leaf-returns-outputs"
        else:
            assert isinstance(fn, K.HelperFunc)
            wanted = [fn.result] if fn.result is not None else []
            what = f"helper @{fn.name} returns {fn.result.text() if fn.result else 'nothing'}"
            rule = TYPE_RULE
        if len(s.values) != len(wanted):
            raise self.fail(s, f"return gives {len(s.values)} value(s), but {what}", rule)
        for i, (value, t) in enumerate(zip(s.values, wanted)):
            self.expect(value, t, f"returned value {i}")

    # -- expressions ----------------------------------------------------------------------------

    def expect(self, e: K.Expr, t: Type, what: str) -> None:
        got = self.expr(e)
        if got != t:
            raise self.fail(e, f"{what} is {got.text()}, expected {t.text()}")

    def condition(self, e: K.Expr, what: str) -> None:
        got = self.expr(e)
        if not (isinstance(got, ScalarType) and got.is_bool):
            raise self.fail(e, f"the condition of {what} is {got.text()}, expected i1 "
                            "(compare it: ne(x, 0:T))")

    def scalar(self, e: K.Expr, what: str) -> ScalarType:
        got = self.expr(e)
        if not isinstance(got, ScalarType):
            raise self.fail(e, f"{what} is {got.text()}, expected a number")
        return got

    def integer(self, e: K.Expr, what: str, rule: str = TYPE_RULE) -> None:
        got = self.expr(e)
        if not _integer(got):
            raise self.fail(e, f"{what} is {got.text()}, expected an integer", rule)

    def access(self, node: K.Expr | K.Stmt, ptr: K.Var, index: K.Expr, rank: K.Expr | None,
               what: str) -> ScalarType:
        """Check ptr, index and rank of a load / store / atomic; return the element type."""
        pt = self.expr(ptr)
        if not isinstance(pt, PtrType):
            raise self.fail(node, f"{what} through %{ptr.name}, a {pt.text()}: not a pointer")
        self.integer(index, f"the index of a {what} through %{ptr.name}")
        if rank is not None:
            # (the language's own rule for remote accesses, as verify.py words it)
            self.integer(rank, f"the rank of a remote {what}", "remote-access")
        return pt.elem

    def expr(self, e: K.Expr) -> Type:
        """Check e (its operands first) and return its type."""
        t = e.type
        if isinstance(e, K.Const):
            self.const(e)
        elif isinstance(e, K.Var):
            declared = self.scope.get(e.name)
            if declared is not None and declared != t:
                raise self.fail(e, f"%{e.name} is {declared.text()}, used as {t.text()}")
        elif isinstance(e, K.BinOp):
            self._scalar_result(e)
            self.expect(e.lhs, t, f"the left operand of {e.op}<{t.text()}>")
            self.expect(e.rhs, t, f"the right operand of {e.op}<{t.text()}>")
            if e.op in ("and", "or", "xor", "shl", "shr") and not _integer(t):
                raise self.fail(e, f"{e.op} needs integers, not {t.text()}")
            # what the front end never makes, and the passes and targets do not compute alike
            if _is_i1(t) and e.op not in ("and", "or", "xor"):
                raise self.fail(e, f"{e.op}<i1>: of i1 operands only and, or and xor give an "
                                "i1 (the front end computes the other operators in i64)")
            if e.op == "div" and _integer(t):
                raise self.fail(e, f"div<{t.text()}>: div is a float division (the front end "
                                "divides integers with `/` in f32)")
        elif isinstance(e, K.UnaryOp):
            self._scalar_result(e)
            if e.op == "not" and not _is_i1(t):
                raise self.fail(e, f"not<{t.text()}>: `not` is i1")
            if e.op == "neg" and _is_i1(t):
                raise self.fail(e, "neg<i1>: the front end negates an i1 in i64")
            if e.op == "invert" and not _integer(t):
                raise self.fail(e, f"invert needs an integer, not {t.text()}")
            self.expect(e.operand, t, f"the operand of {e.op}<{t.text()}>")
        elif isinstance(e, K.Compare):
            lhs = self.scalar(e.lhs, f"the left operand of {e.op}")
            self.expect(e.rhs, lhs, f"the right operand of {e.op}")
            self._i1_result(e)
        elif isinstance(e, K.Logical):
            self.condition(e.lhs, f"the left operand of {e.op}")
            self.condition(e.rhs, f"the right operand of {e.op}")
            self._i1_result(e)
        elif isinstance(e, K.Select):
            self.condition(e.cond, "a select")
            self.expect(e.if_true, t, f"the first value of select<{t.text()}>")
            self.expect(e.if_false, t, f"the second value of select<{t.text()}>")
        elif isinstance(e, K.Cast):
            self._scalar_result(e)
            self.scalar(e.value, f"the operand of cast<{t.text()}>")
        elif isinstance(e, K.Load):
            elem = self.access(e, e.ptr, e.index, e.rank, "load")
            if t != elem:
                raise self.fail(e, f"load<{t.text()}> through %{e.ptr.name}, a "
                                f"{e.ptr.type.text()}: it loads {elem.text()}")
        elif isinstance(e, K.Atomic):
            elem = self.access(e, e.ptr, e.index, e.rank, "atomic")
            if t != elem:
                raise self.fail(e, f"atomic.{e.op}<{t.text()}> on %{e.ptr.name}, a "
                                f"{e.ptr.type.text()}: its type is {elem.text()}")
            self.expect(e.value, elem, f"the value of atomic.{e.op}")
            # what the front end refuses, and the targets do not compute (LLVM rejects the IR)
            if e.op in ("and", "or", "xor") and elem.is_float:
                raise self.fail(e, f"atomic.{e.op}<{t.text()}>: a bitwise atomic needs an integer "
                                "element type")
        elif isinstance(e, K.MathCall):
            self.math(e)
        elif isinstance(e, K.CallHelper):
            self.call(e)
        elif isinstance(e, K.Malloc):
            if not isinstance(t, PtrType):
                raise self.fail(e, f"malloc<{t.text()}>: malloc makes a pointer")
            self.integer(e.nbytes, "the size of a malloc")
        return t

    def _scalar_result(self, e: K.Expr) -> None:
        if not isinstance(e.type, ScalarType):
            raise self.fail(e, f"this operation computes numbers, not {e.type.text()}")

    def _i1_result(self, e: K.Expr) -> None:
        if not _is_i1(e.type):
            raise self.fail(e, f"a compare or land/lor is i1, not {e.type.text()}")

    def math(self, e: K.MathCall) -> None:
        t = e.type
        self._scalar_result(e)
        if e.name in K.PREDICATE_FUNCTIONS:
            if not _is_i1(t):
                raise self.fail(e, f"math.{e.name} is i1, not {t.text()}")
            arg = self.scalar(e.args[0], f"the argument of math.{e.name}")
            if not arg.is_float:
                raise self.fail(e, f"math.{e.name} takes a float, not {arg.text()}")
            return
        assert isinstance(t, ScalarType)
        if e.name not in ("abs", "min", "max") and not t.is_float:
            raise self.fail(e, f"math.{e.name} computes floats, not {t.text()}")
        for i, a in enumerate(e.args):
            self.expect(a, t, f"argument {i} of math.{e.name}<{t.text()}>")

    def call(self, e: K.CallHelper) -> None:
        helper = self.module.functions.get(e.func)
        if not isinstance(helper, K.HelperFunc):
            kind = type(helper).__name__ if helper is not None else "nothing"
            raise self.fail(e, f"call @{e.func}: calls go to helpers (`func`), and @{e.func} is a "
                            f"{kind}", "node-function")
        if len(e.args) != len(helper.params):
            raise self.fail(e, f"call @{e.func} passes {len(e.args)} argument(s); it takes "
                            f"{len(helper.params)}")
        for p, a in zip(helper.params, e.args):
            if isinstance(p.type, PtrType) and not isinstance(a, K.Var):
                raise self.fail(a, f"argument %{p.name} of @{e.func} is a pointer: pass a %variable")
            self.expect(a, p.type, f"argument %{p.name} of @{e.func}")
        result: Type = helper.result if helper.result is not None else VoidType()
        if e.type != result:
            raise self.fail(e, f"call @{e.func}<{e.type.text()}>: @{e.func} returns "
                            f"{result.text()}")

    def const(self, e: K.Const) -> None:
        t, v = e.type, e.value
        if not isinstance(t, ScalarType):
            raise self.fail(e, f"a constant is a number, not a {t.text()}")
        if t.is_bool:
            if not (isinstance(v, bool) or v in (0, 1)) or isinstance(v, float):
                raise self.fail(e, f"{v!r}:i1: an i1 constant is true or false")
        elif isinstance(v, bool):  # (a bool is an int to Python, and would pass as 1 or 0)
            raise self.fail(e, f"{str(v).lower()}:{t.text()}: true and false are i1 constants; "
                            f"write {int(v)}:{t.text()}")
        elif t.is_float:
            exact = float_value(v, t)
            if not (exact == v or math.isnan(exact)):  # (NaN == NaN is False)
                raise self.fail(e, f"{literal(v)}:{t.text()} is no {t.text()} value (the nearest is "
                                f"{literal(exact)}:{t.text()}): the targets would round it "
                                "differently")
        elif t.is_int:
            if isinstance(v, float):
                hint = "" if not math.isfinite(v) else f"; write cast<{t.text()}>({v!r}:f64)"
                raise self.fail(e, f"{v!r}:{t.text()}: an integer constant is written without a "
                                f"fraction or exponent{hint}")
            if not t.min_value() <= v <= t.max_value():
                raise self.fail(e, f"{v}:{t.text()} does not fit in {t.text()} "
                                f"[{t.min_value()}, {t.max_value()}]")


def _integer(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.is_int


def _is_i1(t: Type) -> bool:
    return isinstance(t, ScalarType) and t.is_bool
