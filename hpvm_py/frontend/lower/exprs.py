"""Lowering of expressions: names, constants, subscripts and operators."""
from __future__ import annotations

import ast
import itertools
from typing import Any

import numpy as np

from ... import types as T
from ...errors import FrontendError
from ...ir import kernel as K
from ...ir import semantics as S
from ...ir.typecheck import MAX_EXPR_DEPTH
from ...support.loc import Loc
from ...types import PtrType, ScalarType
from ..source import is_missing
from .conversions import TypeConversions
from .values import BINOPS, Handle, Value, Weak, const, constant_truth, construct_name

# The most bits an integer folded from literals may have: Python's exact arithmetic would take
# minutes (or all memory) for `10 ** 10 ** 9`, and no type holds a value near this anyway.
FOLD_BITS = 1 << 16

_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}




class ExprLowering(TypeConversions):
    """Expressions: names, constants, subscripts and operators."""

    def expr(self, node: ast.expr) -> Value:
        loc = self.src.loc(node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return Weak(node.value, loc)
            raise self.error(node, f"constant {node.value!r} is not a number", rule="supported-python")
        if isinstance(node, ast.Name):
            return self.name(node, loc)
        if isinstance(node, ast.BinOp):
            op = BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            return self.binop(op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            return self.unary(node, loc)
        if isinstance(node, ast.Compare):
            return self.compare(node, loc)
        if isinstance(node, ast.BoolOp):
            op = "land" if isinstance(node.op, ast.And) else "lor"
            values: list[Value] = []
            decided = False  # a constant operand short-circuits the ones after it
            for v in node.values:
                value = self.maybe_dead(not decided, lambda v=v: self.truth(self.expr(v), v))
                decided = decided or constant_truth(value) == (op == "lor")
                values.append(value)
            result = values[0]
            for value in values[1:]:
                result = self.logical(op, result, value, loc)
            return result
        if isinstance(node, ast.IfExp):
            return self.select(node, loc)
        if isinstance(node, ast.Subscript):
            ptr, index = self.subscript(node)
            return K.Load(ptr=ptr, index=index, type=ptr.type.elem, loc=loc)
        if isinstance(node, ast.Call):
            return self.call(node, loc)
        if isinstance(node, ast.Attribute):
            obj = self.resolve_object(node)
            if obj is not None:
                return self.constant_object(obj, node, loc)
        raise self.error(node, f"{construct_name(node)} is not supported in a leaf or helper body",
                         rule="supported-python")

    def name(self, node: ast.Name, loc: Loc) -> Value:
        name = node.id
        if name in self.handles:
            return Handle(self.handles[name], loc)
        if name in self.params:
            return K.Var(name=name, type=self.params[name].type, loc=loc)
        if name in self.locals:
            return K.Var(name=name, type=self.locals[name], loc=loc)
        if name in self.assigned_names:
            raise self.error(node, f"{name!r} is used before it is assigned")
        obj = self.src.lookup(name)
        if is_missing(obj):
            raise self.error(node, f"name {name!r} is not defined")
        return self.constant_object(obj, node, loc)

    def constant_object(self, obj: Any, node: ast.AST, loc: Loc) -> Value:
        if isinstance(obj, (bool, int, float)):
            return Weak(obj, loc)
        if isinstance(obj, np.generic) and not isinstance(obj, np.str_):
            t = T.resolve_scalar(obj.dtype)
            if t is not None:
                return K.Const(value=obj.item(), type=t, loc=loc)
        name = getattr(node, "id", None) or getattr(node, "attr", "?")
        raise self.error(node, f"{name!r} is not a numeric constant, a parameter or a local variable; "
                         "leaves may read module-level numbers only", rule="supported-python")

    def resolve_object(self, node: ast.expr) -> Any | None:
        """The Python object a Name/Attribute chain names in the function's namespace."""
        if isinstance(node, ast.Name):
            if node.id in self.params or node.id in self.locals or node.id in self.handles \
                    or node.id in self.assigned_names:
                return None
            obj = self.src.lookup(node.id)
            return None if is_missing(obj) else obj
        if isinstance(node, ast.Attribute):
            base = self.resolve_object(node.value)
            if base is None:
                return None
            chain = _dotted(node)
            if chain is not None:  # remembered whole: `cfg.K = 3` after compiling makes it stale
                obj = self.src.lookup_chain(chain)
                return None if is_missing(obj) else obj
            return getattr(base, node.attr, None)
        return None

    def subscript(self, node: ast.Subscript) -> tuple[K.Var, K.Expr]:
        base = self.expr(node.value)
        if not (isinstance(base, K.Var) and isinstance(base.type, PtrType)):
            raise self.error(node.value, "only pointers can be indexed")
        if isinstance(node.slice, (ast.Slice, ast.Tuple)):
            raise self.error(node.slice, "pointers take one integer index (memory is flat: "
                             "compute row * width + col)")
        index = self.expr(node.slice)
        if isinstance(index, Handle) or (isinstance(index, Weak) and index.kind == "float") or \
                (isinstance(index, K.Expr) and not (isinstance(index.type, ScalarType) and
                                                    index.type.is_int)):
            raise self.error(node.slice, "an index must be an integer")
        if isinstance(index, Weak):
            index = self.materialize(index, T.i64, node.slice)
        elif index.type.is_bool:
            index = K.Cast(value=index, type=T.i64, loc=index.loc)
        return base, index

    # -- operators --------------------------------------------------------------------------

    def binop(self, op: str, a: Value, b: Value, node: ast.AST) -> Value:
        loc = self.src.loc(node)
        if isinstance(a, Handle) or isinstance(b, Handle):
            raise self.error(node, "node handles only go to the graph-query intrinsics")
        if isinstance(a, Weak) and isinstance(b, Weak):
            return self.fold_binop(op, a, b, node)
        t = self.common_type(a, b, node)
        if op == "div" and not t.is_float:
            t = T.DEFAULT_FLOAT
        if op in ("and", "or", "xor", "shl", "shr") and t.is_float:
            raise self.error(node, f"bitwise operator needs integers, got {t}")
        if op in ("shl", "shr") and t.is_bool:
            t = T.DEFAULT_INT
        if op == "pow":
            return self.power(a, b, t, node)
        if t.is_bool and op in ("add", "sub", "mul", "floordiv", "mod"):
            t = T.DEFAULT_INT  # True + True is 2, as in Python
        lhs = self.to_type(a, t, node, explicit=True)
        rhs = self.to_type(b, t, node, explicit=True)
        return K.BinOp(op=op, lhs=lhs, rhs=rhs, type=t, loc=loc)

    def power(self, a: Value, b: Value, t: ScalarType, node: ast.AST) -> Value:
        loc = self.src.loc(node)
        if isinstance(b, Weak) and b.kind != "float" and b.value == 2 or \
                (not t.is_float and isinstance(b, Weak) and b.kind == "int" and 0 <= b.value <= 8):
            base = self.to_type(a, t, node, explicit=True)
            if any(isinstance(e, (K.Atomic, K.CallHelper, K.Malloc)) for e in K.walk_exprs(base)):
                # each copy of a call would run (and be inlined) again: nested helpers that power
                # their callee's result would multiply their bodies per level
                raise self.error(node, "the base of ** is repeated once per factor, so it may not "
                                 "call a helper or an atomic: assign it to a variable first",
                                 rule="supported-python")
            exponent = int(b.value)
            if exponent >= 2:
                self._check_repeated(base, node, "the base of ** (a product of its copies)")
            if exponent == 0:
                return const(1, t, loc)
            result: K.Expr = base
            for _ in range(exponent - 1):
                result = K.BinOp(op="mul", lhs=result, rhs=base, type=t, loc=loc)
            return result
        if not t.is_float:
            raise self.error(node, "integer ** needs a constant exponent from 0 to 8; use a loop "
                             "or float operands")
        return K.MathCall(name="pow", args=[self.to_type(a, t, node, explicit=True),
                                            self.to_type(b, t, node, explicit=True)], type=t, loc=loc)

    def fold_binop(self, op: str, a: Weak, b: Weak, node: ast.AST) -> Weak:
        if op in ("and", "or", "xor", "shl", "shr") and (a.kind == "float" or b.kind == "float"):
            # a type error, refused in excluded code too (only evaluation is skipped there)
            raise self.error(node, "bitwise operator needs integers")
        try:
            return self._fold_binop(op, a, b, node)
        except FrontendError:
            if self.dead:  # never evaluated, as in Python: a zero of the kind it would have
                x, y = a.value, b.value
                floating = op == "div" or isinstance(x, float) or isinstance(y, float) or \
                    (op == "pow" and y < 0)
                return Weak(0.0 if floating else 0, a.loc)
            raise

    def _fold_binop(self, op: str, a: Weak, b: Weak, node: ast.AST) -> Weak:
        x, y = a.value, b.value
        if _folds_too_big(op, x, y):
            raise self.error(node, f"constant expression overflows (an integer of more than {FOLD_BITS} bits)")
        try:
            if op == "add":
                r = x + y
            elif op == "sub":
                r = x - y
            elif op == "mul":
                r = x * y
            elif op == "div":
                r = x / y
            elif op in ("floordiv", "mod") and y == 0:
                r = _by_zero(op, x, y)
            elif op == "floordiv":
                r = x // y
            elif op == "mod":
                r = x % y
            elif op == "pow":
                r = x ** y
            elif op == "and":
                r = x & y
            elif op == "or":
                r = x | y
            elif op == "xor":
                r = x ^ y
            elif op == "shl":
                r = x << y if 0 <= y < 64 else 0
            else:
                r = x >> y if 0 <= y < 64 else (-1 if x < 0 else 0)
        except ZeroDivisionError:
            raise self.error(node, "division by zero in a constant expression") from None
        except OverflowError:
            raise self.error(node, "constant expression overflows") from None
        if isinstance(r, complex):
            raise self.error(node, "constant expression has no real value")
        if isinstance(r, int) and r.bit_length() > FOLD_BITS:
            raise self.error(node, f"constant expression overflows (an integer of more than {FOLD_BITS} bits)")
        if isinstance(r, bool) and op not in ("and", "or", "xor"):
            r = int(r)
        return Weak(r, self.src.loc(node))

    def unary(self, node: ast.UnaryOp, loc: Loc) -> Value:
        operand = self.expr(node.operand)
        if isinstance(operand, Handle):
            raise self.error(node, "node handles only go to the graph-query intrinsics")
        if isinstance(node.op, ast.Not):
            v = self.truth(operand, node.operand)
            if isinstance(v, Weak):
                return Weak(not v.value, loc)
            return K.UnaryOp(op="not", operand=v, type=T.i1, loc=loc)
        if isinstance(node.op, ast.UAdd):
            return operand
        if isinstance(operand, Weak):
            if isinstance(node.op, ast.USub):
                return Weak(-operand.value, loc)
            if operand.kind == "float":
                raise self.error(node, "~ needs an integer")
            return Weak(~int(operand.value), loc)
        if not isinstance(operand.type, ScalarType):
            raise self.error(node, f"cannot apply a unary operator to {operand.type}")
        if isinstance(node.op, ast.USub):
            t = T.DEFAULT_INT if operand.type.is_bool else operand.type
            return K.UnaryOp(op="neg", operand=self.to_type(operand, t, node, explicit=True), type=t, loc=loc)
        if operand.type.is_float or operand.type.is_bool:
            raise self.error(node, f"~ needs a (non-boolean) integer, got {operand.type}; use `not` for i1")
        return K.UnaryOp(op="invert", operand=operand, type=operand.type, loc=loc)

    def compare(self, node: ast.Compare, loc: Loc) -> Value:
        a = self.expr(node.left)
        result: Value | None = None
        for i, (op_node, right) in enumerate(zip(node.ops, node.comparators)):
            # as `and`: Python evaluates no operand after a comparison found false
            decided = constant_truth(result) is False
            b = self.maybe_dead(not decided, lambda right=right: self.expr(right))
            if i + 1 < len(node.ops) and isinstance(b, K.Expr):
                if _has_effects(b):
                    # `a < f() < b` is `a < f() and f() < b` in the IR: the call would run twice
                    raise self.error(right, "the middle operand of a chained comparison is used "
                                     "by two comparisons, so it must not have side effects (an "
                                     "atomic, a helper given a pointer): assign it to a variable "
                                     "first", rule="supported-python")
                self._check_repeated(b, right, "the middle operand of a chained comparison (one "
                                     "copy per comparison)")
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise self.error(node, f"comparison {type(op_node).__name__} is not supported")
            if isinstance(a, Handle) or isinstance(b, Handle):
                raise self.error(node, "node handles cannot be compared")
            if isinstance(a, Weak) and isinstance(b, Weak):
                one: Value = Weak(bool(_PY_CMP[op](a.value, b.value)), loc)
            else:
                t = self.common_type(a, b, node)
                one = K.Compare(op=op, lhs=self.to_type(a, t, node, explicit=True),
                                rhs=self.to_type(b, t, node, explicit=True), type=T.i1, loc=loc)
            result = one if result is None else self.logical("land", result, one, loc)
            a = b
        assert result is not None
        return result

    def _check_repeated(self, operand: K.Expr, node: ast.AST, what: str) -> None:
        """Refuse an operand that the IR repeats when it holds more than MAX_EXPR_DEPTH operations:
        the IR is a tree, so repeated operands nested in each other (`((x ** 2) ** 2) ** 2`, 128
        deep) would double it per level, and every later stage would walk 2 ** 128 nodes."""
        if next(itertools.islice(K.walk_exprs(operand), MAX_EXPR_DEPTH, None), None) is not None:
            raise self.error(node, f"{what} holds more than {MAX_EXPR_DEPTH} operations; assign it "
                             "to a variable first", rule="supported-python")

    def logical(self, op: str, a: Value, b: Value, loc: Loc) -> Value:
        if isinstance(a, Weak):
            # a constant left side decides statically, as Python's short circuit does
            if (op == "land") == bool(a.value):
                return b
            return a
        if isinstance(b, Weak):
            b = K.Const(value=bool(b.value), type=T.i1, loc=b.loc)
        return K.Logical(op=op, lhs=a, rhs=b, type=T.i1, loc=loc)

    def truth(self, v: Value, node: ast.AST) -> Value:
        """Python truthiness as an i1 (or a weak bool)."""
        if isinstance(v, Handle):
            raise self.error(node, "a node handle has no truth value")
        if isinstance(v, Weak):
            return Weak(bool(v.value), v.loc)
        if not isinstance(v.type, ScalarType):
            raise self.error(node, f"a {v.type} has no truth value")
        if v.type.is_bool:
            return v
        return K.Compare(op="ne", lhs=v, rhs=K.zero(v.type, v.loc), type=T.i1, loc=v.loc)

    def select(self, node: ast.IfExp, loc: Loc) -> Value:
        cond = self.truth(self.expr(node.test), node.test)
        runs = constant_truth(cond)
        a = self.maybe_dead(runs is not False, lambda: self.expr(node.body))
        b = self.maybe_dead(runs is not True, lambda: self.expr(node.orelse))
        if isinstance(cond, Weak):
            return a if cond.value else b
        if isinstance(a, Handle) or isinstance(b, Handle):
            raise self.error(node, "node handles cannot be chosen at run time")
        if isinstance(a, Weak) and isinstance(b, Weak):
            kinds = {a.kind, b.kind}
            t = T.DEFAULT_FLOAT if "float" in kinds else (T.i1 if kinds == {"bool"} else T.DEFAULT_INT)
        else:
            t = self.common_type(a, b, node)
        return K.Select(cond=cond, if_true=self.to_type(a, t, node.body, explicit=True),
                        if_false=self.to_type(b, t, node.orelse, explicit=True), type=t, loc=loc)


def _has_effects(expr: K.Expr) -> bool:
    """Whether evaluating expr twice differs from evaluating it once: an atomic, or a helper
    given a pointer (the only way a helper reaches memory)."""
    return any(isinstance(e, K.Atomic) or
               (isinstance(e, K.CallHelper) and any(isinstance(a.type, PtrType) for a in e.args))
               for e in K.walk_exprs(expr))


def _by_zero(op: str, x: int | float | bool, y: int | float | bool) -> int | float:
    """`x // 0` or `x % 0` of literals: what the operation gives at run time, not Python's
    ZeroDivisionError. Integers give 0; floats follow NumPy (`//` gives x / y, an infinity or
    NaN, and `%` NaN), as a typed float operation does (docs/language.md, "Arithmetic")."""
    if not (isinstance(x, float) or isinstance(y, float)):
        return 0
    return float(S.binop(op, np.float64(x), np.float64(y), T.f64))


def _dotted(node: ast.expr) -> tuple[str, ...] | None:
    """("cfg", "K") for `cfg.K`; None when the chain does not start at a name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return tuple(reversed(parts))


def _folds_too_big(op: str, x: Any, y: Any) -> bool:
    """Whether folding the integers x op y would give more than FOLD_BITS bits, told before
    computing it (a product has at least the operands' bits less one; a power |x| ** y at least
    (bits of |x| - 1) * y)."""
    if not (isinstance(x, int) and isinstance(y, int)):
        return False
    if op == "mul":
        return x.bit_length() + y.bit_length() - 1 > FOLD_BITS
    return op == "pow" and y > 0 and (abs(x).bit_length() - 1) * y > FOLD_BITS
