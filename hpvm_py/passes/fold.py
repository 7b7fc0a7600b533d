"""Pass `fold`: evaluate constant sub-expressions and drop branches decided by constants.

Folding uses hpvm_py.ir.semantics, the same rules the backends implement, so a folded program
computes exactly what the unfolded one would. Math functions are left to the backends.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..ir import kernel as K
from ..ir import semantics as S
from ..ir.dfg import Module
from ..types import ScalarType


def fold_constants(module: Module) -> Module:
    functions = {}
    for name, fn in module.functions.items():
        if isinstance(fn, (K.LeafFunc, K.HelperFunc)):
            fn = dataclasses.replace(fn, body=fold_block(fn.body))
        functions[name] = fn
    return Module(root=module.root, functions=functions)


def fold_block(block: K.Block) -> K.Block:
    out: K.Block = []
    for stmt in block:
        out.extend(_fold_stmt(stmt))
    return out


def _fold_stmt(stmt: K.Stmt) -> K.Block:
    changes: dict[str, object] = {}
    for f in dataclasses.fields(stmt):
        value = getattr(stmt, f.name)
        if isinstance(value, K.Expr):
            changes[f.name] = fold_expr(value)
        elif isinstance(value, list) and f.name in ("then", "orelse", "body"):
            changes[f.name] = fold_block(value)
        elif f.name == "values":
            changes[f.name] = [fold_expr(v) if isinstance(v, K.Expr) else v for v in value]
    stmt = dataclasses.replace(stmt, **changes)
    if isinstance(stmt, K.If) and isinstance(stmt.cond, K.Const):
        return stmt.then if stmt.cond.value else stmt.orelse
    if isinstance(stmt, K.While) and isinstance(stmt.cond, K.Const) and not stmt.cond.value:
        return []
    return [stmt]


def fold_expr(expr: K.Expr) -> K.Expr:
    children = K.child_exprs(expr)
    if not children:
        return expr
    folded = [fold_expr(c) for c in children]
    expr = K.rebuild(expr, folded)
    if isinstance(expr, K.Logical) and isinstance(expr.lhs, K.Const):
        decided = bool(expr.lhs.value) == (expr.op == "lor")
        return expr.lhs if decided else expr.rhs
    if isinstance(expr, K.Select) and isinstance(expr.cond, K.Const):
        return expr.if_true if expr.cond.value else expr.if_false
    if not all(isinstance(c, K.Const) for c in folded):
        return expr
    value = _evaluate(expr, [c for c in folded if isinstance(c, K.Const)])
    if value is None:
        return expr
    return K.Const(value=value, type=expr.type, loc=expr.loc)


def _np(c: K.Const) -> object:
    assert isinstance(c.type, ScalarType)
    with np.errstate(over="ignore"):  # 1e300 as an f16 is inf, as the backends make it
        return S.value_dtype(c.type).type(c.value)


def _evaluate(expr: K.Expr, args: list[K.Const]) -> int | float | bool | None:
    t = expr.type
    if not isinstance(t, ScalarType):
        return None
    if isinstance(expr, K.BinOp) and expr.op in S._NP_BINOPS:
        result = S.binop(expr.op, _np(args[0]), _np(args[1]), t)
    elif isinstance(expr, K.Compare):
        result = S.compare(expr.op, _np(args[0]), _np(args[1]))
    elif isinstance(expr, K.UnaryOp):
        result = S.unary(expr.op, _np(args[0]), t)
    elif isinstance(expr, K.Cast) and isinstance(args[0].type, ScalarType):
        result = S.cast(_np(args[0]), args[0].type, t)
    else:
        return None
    item = np.asarray(result).item()
    if t.is_bool:
        return bool(item)
    return float(item) if t.is_float else int(item)
