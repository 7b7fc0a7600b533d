"""Pass `inline`: replace every call of an @hpvm.func helper by the helper's body.

Helpers return only in tail position (the front end and this pass check it), so a return becomes
an assignment to a result temporary. Python's evaluation order is kept: in a statement with a
call, every earlier memory read is evaluated into a temporary before the helper's body runs, and a
call inside `and`/`or`/a conditional expression stays conditional (the lazy operator becomes an if).
A call the front end shares between two operations (the middle operand of `a < f(x) < b`, once
in Python) is inlined once: its later uses read the first one's result wherever that one ran.
"""
from __future__ import annotations

import dataclasses
from ..errors import FrontendError
from ..ir import kernel as K
from ..ir.dfg import Module
from ..ir.typecheck import check_depth
from ..types import PtrType, ScalarType, Type, i1

# The most statements and operations the copies of helper bodies may add to one leaf: a helper
# that calls another at two places, nested 20 deep, is 2 ** 20 copies, and every later stage
# would take hours over them; a leaf at this limit takes about a minute to compile.
MAX_INLINED = 1 << 17


def inline_helpers(module: Module) -> Module:
    helpers = {f.name: f for f in module.helpers()}
    if not helpers:
        return module
    functions = {}
    for name, fn in module.functions.items():
        if isinstance(fn, K.HelperFunc):
            continue  # every call is inlined: helpers leave the module
        if isinstance(fn, K.LeafFunc) and _calls_helpers(fn.body):
            fn = _Inliner(fn, helpers).run()
            # each body was within the limit, the body with its helpers inside may not be: the
            # later stages recurse on it
            check_depth(module, fn, "once its helpers are inlined")
        functions[name] = fn
    return Module(root=module.root, functions=functions)


def _calls_helpers(block: K.Block) -> bool:
    return any(isinstance(e, K.CallHelper) for e in K.walk_all_exprs(block))


def _has_call(expr: K.Expr) -> bool:
    return any(isinstance(e, K.CallHelper) for e in K.walk_exprs(expr))


def _impure(expr: K.Expr) -> bool:
    """Reads memory or has effects: its value may change when a helper body runs first."""
    return any(isinstance(e, (K.Load, K.Atomic, K.Malloc, K.CallHelper)) for e in K.walk_exprs(expr))


class _Inliner:
    def __init__(self, leaf: K.LeafFunc, helpers: dict[str, K.HelperFunc]):
        self.leaf = leaf
        self.helpers = helpers
        self.locals: dict[str, Type] = dict(leaf.locals)
        # names a fresh local may not take: text may name a parameter as the inliner names its
        # temporaries (`%_v.1`), which a local of that name would hide
        self.params = {p.name for p in leaf.params}
        self.counter = 0
        self.stack: list[str] = []
        # calls inlined so far, by identity (the call is kept alive with its result), in the
        # blocks that enclose the current position: their results are assigned there
        self.inlined: dict[int, tuple[K.CallHelper, K.Expr]] = {}
        self.size = 0  # statements and operations the copies added so far

    def run(self) -> K.LeafFunc:
        body = self.block(self.leaf.body)
        return dataclasses.replace(self.leaf, body=body, locals=self.locals)

    def fresh(self, base: str, t: Type) -> str:
        while True:
            self.counter += 1
            name = f"{base}.{self.counter}"
            if name not in self.locals and name not in self.params:
                self.locals[name] = t
                return name

    # -- statements -------------------------------------------------------------------------

    def block(self, block: K.Block) -> K.Block:
        out: K.Block = []
        for stmt in block:
            out.extend(self.stmt(stmt))
        return out

    def nested(self, expr: K.Expr, pre: K.Block) -> K.Expr:
        """self.expr(expr, pre) where pre runs only sometimes: the calls inlined into it are
        forgotten afterwards (their results are not assigned where pre does not run)."""
        outer = dict(self.inlined)
        try:
            return self.expr(expr, pre)
        finally:
            self.inlined = outer

    def stmt(self, stmt: K.Stmt) -> K.Block:
        outer = dict(self.inlined)
        try:
            return self.stmt_inlined(stmt)
        finally:
            self.inlined = outer

    def stmt_inlined(self, stmt: K.Stmt) -> K.Block:
        pre: K.Block = []
        if isinstance(stmt, K.Assign):
            if not _has_call(stmt.value):
                return [stmt]
            value = self.expr(stmt.value, pre)
            return pre + [dataclasses.replace(stmt, value=value)]
        if isinstance(stmt, K.Store):
            operands = K.child_exprs(stmt)[1:]  # index, value and (remote) rank, in order
            if not any(_has_call(e) for e in operands):
                return [stmt]
            last = len(operands) - 1
            index, value, *rank = [self.operand(e, pre, spill=i < last) for i, e in enumerate(operands)]
            return pre + [dataclasses.replace(stmt, index=index, value=value,
                                              rank=rank[0] if rank else None)]
        if isinstance(stmt, K.ExprStmt):
            if isinstance(stmt.value, K.CallHelper) and stmt.value.type.text() == "void":
                self.call(stmt.value, pre)
                return pre
            if not _has_call(stmt.value):
                return [stmt]
            return pre + [dataclasses.replace(stmt, value=self.expr(stmt.value, pre))]
        if isinstance(stmt, (K.Return, K.Print)):
            if not any(isinstance(v, K.Expr) and _has_call(v) for v in stmt.values):
                return [stmt]
            values = [self.operand(v, pre, spill=True) if isinstance(v, K.Expr) else v
                      for v in stmt.values]
            return pre + [dataclasses.replace(stmt, values=values)]
        if isinstance(stmt, K.If):
            cond = self.expr(stmt.cond, pre)
            return pre + [dataclasses.replace(stmt, cond=cond, then=self.block(stmt.then),
                                              orelse=self.block(stmt.orelse))]
        if isinstance(stmt, K.For):
            start = self.operand(stmt.start, pre, spill=True)
            stop = self.operand(stmt.stop, pre, spill=True)
            step = self.expr(stmt.step, pre)
            return pre + [dataclasses.replace(stmt, start=start, stop=stop, step=step,
                                              body=self.block(stmt.body))]
        if isinstance(stmt, K.While):
            body = self.block(stmt.body)
            if not _has_call(stmt.cond):
                return [dataclasses.replace(stmt, body=body)]
            # the condition is re-evaluated on every iteration: move it into the loop
            cond_pre: K.Block = []
            cond = self.expr(stmt.cond, cond_pre)
            exit_if = K.If(cond=K.UnaryOp(op="not", operand=cond, type=i1, loc=stmt.loc),
                           then=[K.Break(loc=stmt.loc)], orelse=[], loc=stmt.loc)
            true = K.Const(value=True, type=i1, loc=stmt.loc)
            return [K.While(cond=true, body=cond_pre + [exit_if] + body, loc=stmt.loc)]
        return [stmt]

    # -- expressions ------------------------------------------------------------------------

    def operand(self, expr: K.Expr, pre: K.Block, spill: bool) -> K.Expr:
        """Lower expr; with spill, an impure result is saved in a temporary (evaluated now)."""
        value = self.expr(expr, pre)
        if spill and _impure(value):
            name = self.fresh("_v", value.type)
            pre.append(K.Assign(target=name, value=value, loc=expr.loc))
            return K.Var(name=name, type=value.type, loc=expr.loc)
        return value

    def expr(self, expr: K.Expr, pre: K.Block) -> K.Expr:
        """The expression with its helper calls moved into `pre` (in evaluation order)."""
        if not _has_call(expr):
            return expr
        if isinstance(expr, K.CallHelper):
            return self.call(expr, pre)
        if isinstance(expr, K.Logical) and _has_call(expr.rhs):
            return self.lazy_logical(expr, pre)
        if isinstance(expr, K.Select) and (_has_call(expr.if_true) or _has_call(expr.if_false)):
            return self.lazy_select(expr, pre)
        children = K.child_exprs(expr)
        last_call = max(i for i, c in enumerate(children) if _has_call(c))
        new_children = [self.operand(c, pre, spill=i < last_call) for i, c in enumerate(children)]
        return K.rebuild(expr, new_children)

    def lazy_logical(self, expr: K.Logical, pre: K.Block) -> K.Expr:
        name = self.fresh("_l", i1)
        loc = expr.loc
        pre.append(K.Assign(target=name, value=self.expr(expr.lhs, pre), loc=loc))
        rhs_pre: K.Block = []
        rhs = self.nested(expr.rhs, rhs_pre)
        var = K.Var(name=name, type=i1, loc=loc)
        cond = var if expr.op == "land" else K.UnaryOp(op="not", operand=var, type=i1, loc=loc)
        pre.append(K.If(cond=cond, then=rhs_pre + [K.Assign(target=name, value=rhs, loc=loc)],
                        orelse=[], loc=loc))
        return K.Var(name=name, type=i1, loc=loc)

    def lazy_select(self, expr: K.Select, pre: K.Block) -> K.Expr:
        name = self.fresh("_s", expr.type)
        loc = expr.loc
        cond = self.expr(expr.cond, pre)
        then_pre: K.Block = []
        then_value = self.nested(expr.if_true, then_pre)
        else_pre: K.Block = []
        else_value = self.nested(expr.if_false, else_pre)
        pre.append(K.If(cond=cond, then=then_pre + [K.Assign(target=name, value=then_value, loc=loc)],
                        orelse=else_pre + [K.Assign(target=name, value=else_value, loc=loc)], loc=loc))
        return K.Var(name=name, type=expr.type, loc=loc)

    def call(self, call: K.CallHelper, pre: K.Block) -> K.Expr:
        done = self.inlined.get(id(call))
        if done is not None:
            return done[1]
        helper = self.helpers.get(call.func)
        if helper is None:
            raise FrontendError(f"call of unknown helper @{call.func}", call.loc)
        if call.func in self.stack:
            raise FrontendError(f"helper {call.func} calls itself; recursion cannot be inlined", call.loc)
        _check_tail_returns(helper.body, helper.name, tail=True)
        if helper.result is not None and not K.ends_with_return(helper.body):
            # the front end's rule, kept for helpers read from text: a call in a loop would
            # otherwise give the previous call's result where it ends without one
            raise FrontendError(f"helper {K.shown_name(helper)} returns a value but can reach its end "
                                "without a return", helper.loc)
        args = [self.operand(a, pre, spill=True) for a in call.args]
        rename: dict[str, str] = {}
        pointer_args: dict[str, str] = {}
        for p, arg in zip(helper.params, args):
            if isinstance(p.type, PtrType):
                assert isinstance(arg, K.Var)
                pointer_args[p.name] = arg.name
                continue
            rename[p.name] = self.fresh(f"{p.name}.{helper.name}", p.type)
            pre.append(K.Assign(target=rename[p.name], value=arg, loc=call.loc))
        for name, t in helper.locals.items():
            if name not in rename:
                rename[name] = self.fresh(f"{name}.{helper.name}", t)
                # a call's locals start as zero, as a leaf's do: a call inlined in a loop would
                # otherwise read what the previous iteration's call left there
                if isinstance(t, ScalarType) and K.read_first(helper.body, name):
                    pre.append(K.Assign(target=rename[name], value=K.zero(t, call.loc), loc=call.loc))
        result = None
        if helper.result is not None:
            result = self.fresh(f"_r.{helper.name}", helper.result)
        body = _Renamer(rename, pointer_args, self.locals, result).block(helper.body)
        self.size += sum(1 for _ in K.walk_stmts(body)) + sum(1 for _ in K.walk_all_exprs(body))
        if self.size > MAX_INLINED:
            raise FrontendError(f"inlining its helpers makes leaf {self.leaf.name} more than "
                                f"{MAX_INLINED} operations (each call is a copy of the helper's "
                                "body, and the helpers it calls are copied again per call): call "
                                "helpers from fewer places, or loop over one call",
                                call.loc, rule="supported-python")
        self.stack.append(call.func)
        try:
            pre.extend(self.block(body))  # inline the helper's own calls too
        finally:
            self.stack.pop()
        value: K.Expr = K.Const(value=False, type=i1, loc=call.loc) if result is None else \
            K.Var(name=result, type=helper.result, loc=call.loc)
        self.inlined[id(call)] = (call, value)
        return value


def _check_tail_returns(block: K.Block, name: str, tail: bool) -> None:
    for i, stmt in enumerate(block):
        last = tail and i == len(block) - 1
        if isinstance(stmt, K.Return) and not last:
            raise FrontendError(f"helper {name} returns before its end; helpers may return only in "
                                "tail position, because they are inlined", stmt.loc)
        if isinstance(stmt, K.If):
            _check_tail_returns(stmt.then, name, last)
            _check_tail_returns(stmt.orelse, name, last)
        elif isinstance(stmt, (K.For, K.While)):
            _check_tail_returns(stmt.body, name, False)


class _Renamer:
    """Copy a helper body with its variables renamed and tail returns made assignments."""

    def __init__(self, rename: dict[str, str], pointers: dict[str, str], types: dict[str, Type],
                 result: str | None):
        self.rename = rename
        self.pointers = pointers
        self.types = types
        self.result = result
        # copies by identity: an operand the body shares stays shared (inlined once)
        self.copies: dict[int, tuple[K.Expr, K.Expr]] = {}

    def block(self, block: K.Block) -> K.Block:
        out: K.Block = []
        for stmt in block:
            out.extend(self.stmt(stmt))
        return out

    def stmt(self, stmt: K.Stmt) -> K.Block:
        if isinstance(stmt, K.Return):
            if self.result is None or not stmt.values:
                return []
            return [K.Assign(target=self.result, value=self.expr(stmt.values[0]), loc=stmt.loc)]
        changes: dict[str, object] = {}
        for f in dataclasses.fields(stmt):
            value = getattr(stmt, f.name)
            if isinstance(value, K.Expr):
                changes[f.name] = self.expr(value)
            elif isinstance(value, list) and value and isinstance(value[0], K.Stmt):
                changes[f.name] = self.block(value)
            elif isinstance(value, list) and f.name == "values":
                changes[f.name] = [self.expr(v) if isinstance(v, K.Expr) else v for v in value]
            elif f.name in ("target", "var") and isinstance(value, str):
                changes[f.name] = self.rename.get(value, value)
        return [dataclasses.replace(stmt, **changes)]

    def expr(self, expr: K.Expr) -> K.Expr:
        copied = self.copies.get(id(expr))
        if copied is None:
            copied = self.copies[id(expr)] = (expr, self.copy(expr))
        return copied[1]

    def copy(self, expr: K.Expr) -> K.Expr:
        if isinstance(expr, K.Var):
            if expr.name in self.pointers:
                return dataclasses.replace(expr, name=self.pointers[expr.name])
            return dataclasses.replace(expr, name=self.rename.get(expr.name, expr.name))
        children = K.child_exprs(expr)
        if not children:
            return expr
        return K.rebuild(expr, [self.expr(c) for c in children])
