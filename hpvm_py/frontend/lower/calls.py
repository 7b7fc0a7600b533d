"""Lowering of calls: casts, math functions, intrinsics and @hpvm.func helpers."""
from __future__ import annotations

import ast
import builtins
import math
from typing import Any

import numpy as np

from ... import math as hmath
from ... import types as T
from ...ir import kernel as K
from ...support.loc import Loc
from ...types import PtrType, ScalarType
from ..defs import Definition
from ..intrinsics import INTRINSICS
from .views import ViewLowering
from .values import Handle, Value, Weak, hashable

_MATH_OBJECTS: dict[Any, str] = {}


def _register_math() -> None:
    for name, fn in hmath.FUNCTIONS.items():
        _MATH_OBJECTS[fn] = name
    for name in K.MATH_FUNCTIONS:
        if hasattr(math, name) and name not in ("pow",):
            _MATH_OBJECTS[getattr(math, name)] = name
    _MATH_OBJECTS[math.pow] = "pow"
    numpy_names = {"sqrt": "sqrt", "exp": "exp", "exp2": "exp2", "expm1": "expm1", "log": "log",
                   "log2": "log2", "log10": "log10", "log1p": "log1p", "sin": "sin", "cos": "cos",
                   "tan": "tan", "arcsin": "asin", "arccos": "acos", "arctan": "atan", "sinh": "sinh",
                   "cosh": "cosh", "tanh": "tanh", "arcsinh": "asinh", "arccosh": "acosh",
                   "arctanh": "atanh", "fabs": "fabs", "floor": "floor", "ceil": "ceil",
                   "trunc": "trunc", "rint": "round", "isnan": "isnan", "isinf": "isinf",
                   "isfinite": "isfinite", "power": "pow", "arctan2": "atan2", "fmod": "fmod",
                   "copysign": "copysign", "hypot": "hypot", "fmin": "fmin", "fmax": "fmax",
                   "abs": "abs", "absolute": "abs", "minimum": "min", "maximum": "max"}
    for np_name, name in numpy_names.items():
        _MATH_OBJECTS[getattr(np, np_name)] = name
    _MATH_OBJECTS[builtins.abs] = "abs"


_register_math()


class CallLowering(ViewLowering):
    """Calls in a leaf or helper body."""

    def call(self, node: ast.Call, loc: Loc) -> Value:
        obj = self.resolve_object(node.func)
        if obj is None:
            raise self.error(node.func, "only casts, math functions, intrinsics and @hpvm.func "
                             "helpers can be called in a leaf", rule="supported-python")
        if not hashable(obj):
            raise self.error(node.func, f"cannot call a {type(obj).__name__} in a leaf: only casts, "
                             "math functions, intrinsics and @hpvm.func helpers", rule="supported-python")
        if isinstance(obj, Definition) and obj.kind == "leaf":
            raise self.error(node.func, f"{obj.name} is a leaf node function: it runs as a node of a "
                             "graph, not as a call (move shared code into an @hpvm.func helper)",
                             rule="node-function")
        if self.is_builder(obj):
            raise self.verror(node, f"{getattr(obj, '__name__', obj)}() builds graph structure; leaf "
                              "nodes compute and only internal nodes (@hpvm.graph) build structure",
                              "leaf-no-graph-builders")
        if node.keywords:
            raise self.error(node, "calls in a leaf take positional arguments only",
                             rule="supported-python")
        if isinstance(obj, ScalarType):
            return self.cast(obj, node, loc)
        if obj in INTRINSICS:
            return self.intrinsic(obj, node, loc)
        if obj in _MATH_OBJECTS:
            return self.math_call(_MATH_OBJECTS[obj], node, loc)
        if obj is builtins.min or obj is builtins.max:
            if len(node.args) < 2:
                raise self.error(node, f"{obj.__name__}() in a leaf takes two or more values")
            result = self.expr(node.args[0])
            for arg in node.args[1:]:
                result = self.minmax(obj.__name__, result, self.expr(arg), node, loc)
            return result
        if obj is builtins.int or obj is builtins.float or obj is builtins.bool:
            target = {builtins.int: T.i64, builtins.float: T.f64, builtins.bool: T.i1}[obj]
            return self.cast(target, node, loc)
        if obj is builtins.round:
            if len(node.args) != 1:
                raise self.error(node, "round() in a leaf takes one value (it rounds half to even "
                                 "and returns an i64, as Python's does)")
            arg = self.expr(node.args[0])
            if isinstance(arg, Weak) and arg.kind != "float":
                return Weak(int(arg.value), loc)
            if isinstance(arg, K.Expr) and isinstance(arg.type, ScalarType) and not arg.type.is_float:
                # an integer is already round, as in Python: no trip through f32, which loses
                # every integer above 2**24
                return self.to_type(arg, T.i64, node, explicit=True)
            value = self.math_call("round", node, loc)
            return K.Cast(value=value, type=T.i64, loc=loc)
        if obj is builtins.print or obj is builtins.breakpoint:
            raise self.error(node, f"{obj.__name__}() is a statement in a leaf, not a value")
        helper = self.resolve_helper(obj, loc)
        if helper is not None:
            return self.helper_call(helper, node, loc)
        what = getattr(obj, "__qualname__", repr(obj))
        raise self.error(node.func, f"cannot call {what} in a leaf: only casts, math functions, "
                         "intrinsics and @hpvm.func helpers", rule="supported-python")

    def cast(self, t: ScalarType, node: ast.Call, loc: Loc) -> Value:
        if len(node.args) != 1:
            raise self.error(node, f"the cast {t}() takes one value")
        value = self.expr(node.args[0])
        if isinstance(value, Handle):
            raise self.error(node, "node handles cannot be cast")
        if isinstance(value, Weak):
            return self.materialize(value, t, node, explicit=True, cast=True)
        if not isinstance(value.type, ScalarType):
            raise self.error(node, f"cannot cast a {value.type} to {t}")
        if t.is_bool:
            return self.truth(value, node)
        if value.type == t:
            return value
        return K.Cast(value=value, type=t, loc=loc)

    def minmax(self, which: str, a: Value, b: Value, node: ast.AST, loc: Loc) -> Value:
        if isinstance(a, Weak) and isinstance(b, Weak):
            return Weak(_literal_minmax(which, a.value, b.value), loc)
        t = self.common_type(a, b, node)
        return K.MathCall(name=which, args=[self.to_type(a, t, node, explicit=True),
                                            self.to_type(b, t, node, explicit=True)], type=t, loc=loc)

    def math_call(self, name: str, node: ast.Call, loc: Loc) -> Value:
        arity = K.MATH_FUNCTIONS[name]
        if len(node.args) != arity:
            raise self.error(node, f"{name}() takes {arity} argument(s)")
        args = [self.expr(a) for a in node.args]
        for a, n in zip(args, node.args):
            if isinstance(a, Handle) or (isinstance(a, K.Expr) and not isinstance(a.type, ScalarType)):
                raise self.error(n, f"{name}() takes numbers")
        if name in ("abs", "min", "max"):
            if len(args) == 1:
                a = args[0]
                if isinstance(a, Weak):
                    return Weak(abs(a.value), loc)
                if a.type.is_bool:
                    raise self.error(node, "abs() of a boolean")
                return K.MathCall(name="abs", args=[a], type=a.type, loc=loc)
            return self.minmax(name, args[0], args[1], node, loc)
        strong = [a.type for a in args if isinstance(a, K.Expr)]
        t: ScalarType = T.DEFAULT_FLOAT
        floats = [s for s in strong if s.is_float]
        if floats:
            t = floats[0]
            for s in floats[1:]:
                t = T.promote(t, s)
        converted = [self.to_type(a, t, n, explicit=True) for a, n in zip(args, node.args)]
        result = T.i1 if name in K.PREDICATE_FUNCTIONS else t
        return K.MathCall(name=name, args=converted, type=result, loc=loc)

    def intrinsic(self, obj: Any, node: ast.Call, loc: Loc) -> Value:
        kind, detail = INTRINSICS[obj]
        name = obj.__name__
        self._no_intrinsics_in_helper(node, name)
        args = node.args
        if kind == "get_node":
            self._arity(node, 0, name)
            return Handle(0, loc)
        if kind == "get_parent_node":
            self._arity(node, 1, name)
            return Handle(self.handle_arg(args[0], name).level + 1, loc)
        if kind == "num_dims":
            self._arity(node, 1, name)
            return K.NumDims(level=self.handle_arg(args[0], name).level, type=T.i32, loc=loc)
        if kind in ("instance_id", "num_instances"):
            self._arity(node, 1, name)
            level = self.handle_arg(args[0], name).level
            cls = K.InstanceId if kind == "instance_id" else K.NumInstances
            return cls(dim=detail, level=level, type=T.i64, loc=loc)
        if kind in ("instance_id_short", "num_instances_short"):
            self._arity(node, 1, name)
            dim = self.expr(args[0])
            if not (isinstance(dim, Weak) and dim.kind == "int" and 0 <= dim.value <= 2):
                raise self.error(args[0], f"{name}() takes a constant dimension 0, 1 or 2",
                                 rule="max-three-dims")
            cls = K.InstanceId if kind == "instance_id_short" else K.NumInstances
            return cls(dim=int(dim.value), level=0, type=T.i64, loc=loc)
        if kind == "atomic":
            self._arity(node, 3, name)
            if not self.is_pointer_expr(args[0]):
                raise self.error(args[0], f"the first argument of {name}() is a pointer")
            target, offset = self.pointer_arg(args[0], f"{name}()")
            elem = target.type.elem
            if elem.is_float and detail in ("and", "or", "xor"):
                raise self.error(node, f"{name}() needs an integer element type, not {elem}")
            index = self.offset_index(offset, self.integer_arg(args[1], "an index"), loc)
            value = self.to_type(self.expr(args[2]), elem, args[2], explicit=True)
            return K.Atomic(op=detail, ptr=target, index=index, value=value, type=elem, loc=loc)
        if kind == "remote":
            if detail == "store":
                raise self.error(node, "remote_store() is a statement, not a value")
            access = self.remote_access(node, detail, loc)
            assert not isinstance(access, K.Store)
            return access
        if kind == "malloc":
            raise self.error(node, "malloc() must be assigned to a variable at the top level of the "
                             "leaf body: `buf = hpvm.malloc(nbytes, hpvm.f32)`", rule="malloc-uniform")
        if kind == "barrier":
            raise self.error(node, "barrier() is a statement, not a value")
        if kind == "view":
            raise self.error(node, "hpvm.view() makes a pointer: assign it to a name "
                             "(`t = hpvm.view(p, (rows, cols))`) or index it", rule="pointer-views")
        raise self.error(node, f"{name}() cannot be used here")

    def integer_arg(self, node: ast.expr, what: str) -> K.Expr:
        """An index or rank argument: any integer type (a literal becomes an i64)."""
        value = self.expr(node)
        if isinstance(value, Handle) or (isinstance(value, Weak) and value.kind == "float") or \
                (isinstance(value, K.Expr) and not (isinstance(value.type, ScalarType) and value.type.is_int)):
            raise self.error(node, f"{what} must be an integer")
        return self.to_type(value, T.i64, node, explicit=False) if isinstance(value, Weak) else value

    def remote_access(self, node: ast.Call, detail: str, loc: Loc) -> K.Load | K.Store | K.Atomic:
        """remote_load(ptr, index, rank), remote_store(ptr, index, value, rank) or
        remote_atomic_add(ptr, index, value, rank): ptr is a pointer parameter (its buffer lies on
        the symmetric heap, at the same offset on every rank)."""
        name = f"remote_{detail}"
        self._no_intrinsics_in_helper(node, name)
        args = node.args
        self._arity(node, 3 if detail == "load" else 4, name)
        target, offset = (self.pointer_arg(args[0], f"{name}()") if self.is_pointer_expr(args[0])
                          else (self.expr(args[0]), None))
        if not (isinstance(target, K.Var) and isinstance(target.type, PtrType)
                and target.name in self.params):
            raise self.verror(args[0], f"the first argument of {name}() is a pointer parameter of the "
                              "leaf (a buffer on the symmetric heap; malloc() scratch has no peers)",
                              "remote-access")
        elem = target.type.elem
        if detail == "atomic_add" and elem.is_bool:
            raise self.error(node, f"{name}() needs a numeric element type, not {elem}")
        index = self.offset_index(offset, self.integer_arg(args[1], "an index"), loc)
        rank = self.integer_arg(args[-1], "a rank")
        if detail == "load":
            return K.Load(ptr=target, index=index, rank=rank, type=elem, loc=loc)
        value = self.to_type(self.expr(args[2]), elem, args[2], explicit=True)
        if detail == "store":
            return K.Store(ptr=target, index=index, value=value, rank=rank, loc=loc)
        return K.Atomic(op="add", ptr=target, index=index, value=value, rank=rank, type=elem, loc=loc)

    def _no_intrinsics_in_helper(self, node: ast.AST, name: str) -> None:
        if self.kind == "helper":
            raise self.verror(node, f"{name}() is an HPVM intrinsic; @hpvm.func helpers may not use "
                              "intrinsics (the reference keeps them out of auxiliary functions)",
                              "helper-no-intrinsics")

    def _arity(self, node: ast.Call, n: int, name: str) -> None:
        if len(node.args) != n:
            raise self.error(node, f"{name}() takes {n} argument(s)")

    def handle_arg(self, node: ast.expr, name: str) -> Handle:
        value = self.expr(node)
        if not isinstance(value, Handle):
            raise self.error(node, f"{name}() takes a node handle from get_node() or get_parent_node()")
        return value

    def helper_call(self, helper: K.HelperFunc, node: ast.Call, loc: Loc) -> Value:
        if len(node.args) != len(helper.params):
            raise self.error(node, f"{K.shown_name(helper)}() takes {len(helper.params)} argument(s), "
                             f"got {len(node.args)}")
        args: list[K.Expr] = []
        for p, arg in zip(helper.params, node.args):
            value = self.expr(arg)
            if isinstance(p.type, PtrType):
                if not (isinstance(value, K.Var) and value.type == p.type):
                    raise self.error(arg, f"argument {p.name!r} of {K.shown_name(helper)}() is a {p.type}")
                args.append(value)
            else:
                args.append(self.to_type(value, p.type, arg, explicit=False))
        result = helper.result if helper.result is not None else T.void
        self.helper_names[helper.name] = K.shown_name(helper)
        return K.CallHelper(func=helper.name, args=args, type=result, loc=loc)


def _literal_minmax(which: str, a: int | float, b: int | float) -> int | float:
    """min/max of two literals by the language's rule, `a if a < b or isnan(a) else b` (`>` for
    max), as the targets compute it: Python's min/max return the first of two equal values
    (`min(0.0, -0.0)` is 0.0, not -0.0) and skip a NaN after the first operand."""
    better = a < b if which == "min" else a > b
    return a if better or (isinstance(a, float) and math.isnan(a)) else b
