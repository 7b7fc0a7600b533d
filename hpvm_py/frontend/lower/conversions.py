"""Typing of values: giving weak literals a type, implicit and explicit conversions."""
from __future__ import annotations

import ast
import math

from ... import types as T
from ...errors import FrontendError
from ...ir import kernel as K
from ...types import PtrType, ScalarType, Type
from .base import LowererBase
from .values import Handle, Value, Weak, can_widen, float_in, wrap


class TypeConversions(LowererBase):
    """Typing of values: literal types and implicit or explicit conversions."""

    def default_type(self, value: Value) -> Type:
        if isinstance(value, Weak):
            return {"bool": T.i1, "int": T.DEFAULT_INT, "float": T.DEFAULT_FLOAT}[value.kind]
        if isinstance(value, K.CallHelper) and value.type == T.void:
            raise FrontendError(f"{self.helper_names[value.func]}() returns nothing", value.loc)
        return value.type

    def materialize_default(self, value: Value) -> K.Expr:
        if isinstance(value, Weak):
            return self.materialize(value, self.default_type(value), None)
        assert isinstance(value, K.Expr)
        return value

    def materialize(self, value: Value, t: Type, node: ast.AST | None, explicit: bool = False,
                    cast: bool = False) -> K.Expr:
        """Give a weak literal the type t. An integer literal must fit in t unless it is the operand
        of a cast such as hpvm.i8(300), which wraps (an operand, a store or a declaration does not:
        `x + 300` with an i8 x is an error, as it is for NumPy scalars); explicit lets a float
        literal become an integer."""
        if not isinstance(value, Weak):
            assert isinstance(value, K.Expr)
            return value
        loc = value.loc if node is None else self.src.loc(node)
        if not isinstance(t, ScalarType):
            raise FrontendError(f"a number cannot be used as a {t}", loc)
        v = value.value
        if t.is_bool:
            # only True, False, 1 and 0 are i1 values: `flag = 5` would silently be True
            if not explicit and not (isinstance(v, int) and v in (0, 1)):
                raise FrontendError(f"the literal {v!r} is not an i1 value (True, False, 1 or 0); "
                                    f"write bool({v!r}) for its truth", loc, rule="typing-narrowing")
            return K.Const(value=bool(v), type=t, loc=loc)
        if t.is_float:
            # an int literal rounds once, as `hpvm.f32(k)` of an i64 k does at run time
            rounded = T.int_to_float(v, t) if isinstance(v, int) else float_in(t, v)
            return K.Const(value=rounded, type=t, loc=loc)
        if isinstance(v, float):
            if not explicit:
                raise FrontendError(f"the float literal {v!r} cannot become a {t} implicitly; "
                                    f"write hpvm.{t}({v!r}) to convert it", loc, rule="typing-narrowing")
            if math.isnan(v):
                v = 0
            elif math.isinf(v):
                v = t.max_value() if v > 0 else t.min_value()
            v = max(t.min_value(), min(t.max_value(), int(v)))  # saturating, as the cast is
        v = int(v)
        if not t.min_value() <= v <= t.max_value():
            if cast:
                v = wrap(v, t)
            else:
                raise FrontendError(f"the literal {v} does not fit in {t} "
                                    f"[{t.min_value()}, {t.max_value()}]", loc)
        return K.Const(value=v, type=t, loc=loc)

    def to_type(self, value: Value, t: Type, node: ast.AST, explicit: bool,
                var_name: str | None = None) -> K.Expr:
        """Convert value to t: any numeric conversion when explicit, widening only otherwise."""
        if isinstance(value, Handle):
            raise self.error(node, "node handles only go to the graph-query intrinsics")
        if isinstance(value, Weak):
            return self.materialize(value, t, node, explicit)
        if value.type == T.void:
            raise self.error(node, "this call returns nothing")
        if value.type == t:
            return value
        if isinstance(value.type, PtrType) or isinstance(t, PtrType):
            raise self.error(node, f"cannot convert {value.type} to {t}")
        if not explicit and not can_widen(value.type, t):
            what = f"{var_name!r} is {t} (fixed by its first assignment)" if var_name else f"expected {t}"
            raise self.error(node, f"{what}; a {value.type} value does not convert implicitly "
                             f"(narrowing needs an explicit cast such as hpvm.{t}(...))",
                             rule="typing-narrowing")
        if isinstance(t, ScalarType) and t.is_bool:
            return K.Compare(op="ne", lhs=value, rhs=K.zero(value.type, value.loc), type=T.i1, loc=value.loc)
        return K.Cast(value=value, type=t, loc=value.loc)

    def new_temp(self, t: Type) -> str:
        while True:
            self.temp_count += 1
            name = f"_t{self.temp_count}"
            if name not in self.assigned_names and name not in self.params:
                break
        self.locals[name] = t
        return name

    def common_type(self, a: Value, b: Value, node: ast.AST) -> ScalarType:
        """The operation type of two operands, at least one strongly typed."""
        for v in (a, b):
            if isinstance(v, K.Expr) and not isinstance(v.type, ScalarType):
                raise self.error(node, f"arithmetic on a {v.type} value (pointers can only be indexed, "
                                 "or offset into a pointer variable: `row = p + k`)", rule="pointer-views")
        if isinstance(a, Weak):
            a, b = b, a
        assert isinstance(a, K.Expr)
        if isinstance(b, Weak):
            if b.kind == "float" and not a.type.is_float:
                return T.DEFAULT_FLOAT
            if b.kind == "int" and a.type.is_bool:
                return T.DEFAULT_INT  # a bool meets an int as the int 0 or 1: `flag == 2` is False
            return a.type
        return T.promote(a.type, b.type)

