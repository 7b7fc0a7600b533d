"""The values the lowering works with (weak literals, node handles, typed IR expressions) and the
small helpers on them that every part of the lowering shares."""
from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import types as T
from ...ir import kernel as K
from ...ir.semantics import cast
from ...support.loc import Loc
from ...types import ScalarType, Type
from ..intrinsics import INTRINSICS


@dataclass
class Weak:
    """A Python literal (or a constant expression of literals) that has no type yet."""

    value: int | float | bool
    loc: Loc

    @property
    def kind(self) -> str:
        if isinstance(self.value, bool):
            return "bool"
        return "int" if isinstance(self.value, int) else "float"


@dataclass
class Handle:
    """A node handle, known statically: `level` steps up from the current leaf."""

    level: int
    loc: Loc


Value = K.Expr | Weak | Handle


def constant_truth(v: Value | None) -> bool | None:
    """v's truth where it is the same on every run (None where not): a literal's, a constant
    i1's, an and/or's whose operands' truths decide it (`x or True` is true, though x still runs)
    and its negation's; code that it excludes is never run, as in Python (maybe_dead)."""
    if isinstance(v, Weak):
        return bool(v.value)
    if isinstance(v, K.Const) and v.type == T.i1:
        return bool(v.value)
    if isinstance(v, K.Logical):
        decides = v.op == "lor"  # True decides an `or`, False an `and`
        sides = (constant_truth(v.lhs), constant_truth(v.rhs))
        if decides in sides:
            return decides
        return None if None in sides else not decides
    if isinstance(v, K.UnaryOp) and v.op == "not":
        truth = constant_truth(v.operand)
        return None if truth is None else not truth
    return None


def can_widen(src: Type, dst: Type) -> bool:
    """Whether a value of type src converts implicitly (without loss of range) to dst."""
    if src == dst:
        return True
    if not (isinstance(src, ScalarType) and isinstance(dst, ScalarType)):
        return False
    if src.is_bool:
        return not dst.is_bool
    if dst.is_float:
        if src.is_float:
            return dst.bits > src.bits
        return True  # any integer converts to a float implicitly, as in C and NumPy
    if src.is_float or dst.is_bool:
        return False
    if src.kind == dst.kind:
        return dst.bits > src.bits
    return src.kind == "uint" and dst.kind == "int" and dst.bits > src.bits


def hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def intrinsic_kind(obj: Any) -> str:
    return INTRINSICS.get(obj, ("",))[0] if hashable(obj) else ""


def float_in(t: ScalarType, value: float) -> float:
    """value rounded to float type t, so that every backend starts from the same constant."""
    with np.errstate(over="ignore"):  # beyond the type's range a literal is inf
        return float(cast(np.float64(value), T.f64, t))


def const(value: int | float, t: Type, loc: Loc) -> K.Const:
    return K.Const(value=value, type=t, loc=loc)


def wrap(v: int, t: ScalarType) -> int:
    mask = (1 << t.bits) - 1
    v &= mask
    if t.is_signed and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


_CONSTRUCT_NAMES = {
    ast.FunctionDef: "a nested function", ast.AsyncFunctionDef: "an async function",
    ast.ClassDef: "a class definition", ast.With: "`with`", ast.Try: "`try`", ast.Raise: "`raise`",
    ast.Assert: "`assert`", ast.Import: "`import`", ast.ImportFrom: "`import`",
    ast.Global: "`global`", ast.Nonlocal: "`nonlocal`", ast.Delete: "`del`",
    ast.Lambda: "a lambda", ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension",
    ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression",
    ast.List: "a list", ast.Dict: "a dict", ast.Set: "a set", ast.Tuple: "a tuple",
    ast.JoinedStr: "an f-string", ast.Await: "`await`", ast.Yield: "`yield`",
    ast.YieldFrom: "`yield from`", ast.Starred: "a starred expression",
    ast.NamedExpr: "an assignment expression (:=)", ast.Slice: "a slice",
    ast.Match: "`match`", ast.AsyncFor: "`async for`", ast.AsyncWith: "`async with`",
    ast.Attribute: "an attribute",
}


def construct_name(node: ast.AST) -> str:
    return _CONSTRUCT_NAMES.get(type(node), type(node).__name__)


BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
          ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
          ast.LShift: "shl", ast.RShift: "shr"}
