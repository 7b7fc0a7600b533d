"""Lower the Python AST of a leaf (or an @hpvm.func helper) to typed kernel IR.

Typing follows DESIGN.md: parameters are typed by annotations; literals are weak (they take the
other operand's type; alone an int is i64 and a float f32); a variable's type is fixed by its first
assignment and later assignments may only widen; values stored to memory or returned take the
element/output type. Graph builders are rejected here (a leaf only computes), intrinsics are
rejected in helpers (the reference keeps them out of auxiliary functions).
"""
from __future__ import annotations

import ast
import builtins
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .. import types as T
from ..errors import FrontendError, VerificationError
from ..ir import kernel as K
from ..ir.loc import Loc
from ..types import PtrType, ScalarType, Type
from .decorators import LeafDef
from .intrinsics import INTRINSICS
from .source import FunctionSource, is_missing, output_types, param_type, resolve_annotation


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

_BINOPS = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.Pow: "pow", ast.BitAnd: "and", ast.BitOr: "or", ast.BitXor: "xor",
           ast.LShift: "shl", ast.RShift: "shr"}
_CMPOPS = {ast.Eq: "eq", ast.NotEq: "ne", ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge"}
_PY_CMP = {"eq": lambda a, b: a == b, "ne": lambda a, b: a != b, "lt": lambda a, b: a < b,
           "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b}

# Python callables that lower to MathCall, by identity.
_MATH_OBJECTS: dict[Any, str] = {}


def _register_math() -> None:
    from .. import math as hmath

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


class Lowerer:
    """Lowers one function. `kind` is "leaf" or "helper"."""

    def __init__(self, src: FunctionSource, kind: str, ir_name: str,
                 resolve_helper: Callable[[Any, Loc], K.HelperFunc | None],
                 is_builder: Callable[[Any], bool]):
        self.src = src
        self.kind = kind
        self.ir_name = ir_name
        self.resolve_helper = resolve_helper
        self.is_builder = is_builder
        self.params: dict[str, K.Param] = {}
        self.locals: dict[str, Type] = {}
        self.handles: dict[str, int] = {}
        self.outputs: list[K.OutputPort] = []
        self.output_class: type | None = None
        self.result_type: ScalarType | None = None
        self.assigned_names = self._collect_assigned(src.tree)
        self.depth = 0  # nesting of if/for/while around the statement being lowered
        self.temp_count = 0

    # -- errors -----------------------------------------------------------------------------

    def error(self, node: ast.AST | Loc, message: str, rule: str | None = None) -> FrontendError:
        loc = node if isinstance(node, Loc) else self.src.loc(node)
        return FrontendError(message, loc, rule)

    def verror(self, node: ast.AST, message: str, rule: str) -> VerificationError:
        return VerificationError(message, self.src.loc(node), rule)

    # -- signature --------------------------------------------------------------------------

    def lower_signature(self) -> None:
        fdef = self.src.tree
        func = self.src.func
        sig = inspect.signature(func)
        arg_nodes = {a.arg: a for a in fdef.args.args}
        special = [a for a in [fdef.args.vararg, fdef.args.kwarg] + fdef.args.kwonlyargs +
                   fdef.args.posonlyargs if a is not None]
        if special:
            raise self.error(special[0], f"{func.__name__}: node and helper functions take plain "
                             "positional parameters only (no *args, **kwargs, keyword-only)")
        for name, p in sig.parameters.items():
            node = arg_nodes.get(name, fdef)
            if p.default is not inspect.Parameter.empty:
                raise self.error(node, f"parameter {name!r} has a default value; node inputs come "
                                 "from edges and binds, so defaults are not supported")
            if p.annotation is inspect.Parameter.empty:
                raise self.error(node, f"parameter {name!r} needs a type annotation such as "
                                 "hpvm.f32, hpvm.i64 or In[Ptr[hpvm.f32]]")
            ann = resolve_annotation(self.src, p.annotation, node)
            resolved = param_type(ann)
            if resolved is None:
                raise self.error(node, f"parameter {name!r}: {ann!r} is not an hpvm type "
                                 "(use hpvm.i32, hpvm.f32, ..., or In/Out/InOut[Ptr[T]])")
            t, direction = resolved
            if self.kind == "helper" and direction is not None:
                direction = None  # helpers take plain pointers: the in/out rule is for nodes
            self.params[name] = K.Param(name=name, type=t, direction=direction, loc=self.src.loc(node))
        ret = sig.return_annotation
        ret = resolve_annotation(self.src, ret, fdef.returns) if ret is not inspect.Signature.empty else None
        ret_node = fdef.returns or fdef
        if self.kind == "helper":
            if ret is None or ret is type(None):
                self.result_type = None
            else:
                t = T.resolve_scalar(ret) if ret is not float else T.f64
                if t is None:
                    raise self.error(ret_node, f"a helper returns one scalar type, not {ret!r}")
                self.result_type = t
            return
        outs = output_types(ret)
        if outs is None:
            raise self.error(ret_node, f"cannot read the return annotation {ret!r}")
        if ret is not None and isinstance(ret, type) and hasattr(ret, "_fields"):
            self.output_class = ret
        for name, ann in outs:
            ann = resolve_annotation(self.src, ann, ret_node)
            resolved = param_type(ann)
            if resolved is None or resolved[1] is not None:
                raise self.error(ret_node, f"output {name or len(self.outputs)}: {ann!r} is not a "
                                 "scalar or pointer type")
            self.outputs.append(K.OutputPort(name=name, type=resolved[0], loc=self.src.loc(ret_node)))

    def params_list(self) -> list[K.Param]:
        return list(self.params.values())

    # -- body -------------------------------------------------------------------------------

    def lower_body(self) -> list[K.Stmt]:
        body = list(self.src.tree.body)
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]  # docstring
        stmts = self.block(body)
        if self.kind == "leaf" and self.outputs and not _ends_with_return(stmts):
            raise self.error(self.src.tree, f"{self.src.func.__name__} declares outputs but can "
                             "reach its end without a return", rule="leaf-returns-outputs")
        if self.kind == "helper":
            self._check_tail_returns(stmts, tail=True)
            if self.result_type is not None and not _ends_with_return(stmts):
                raise self.error(self.src.tree, f"helper {self.src.func.__name__} returns a value "
                                 "but can reach its end without a return")
        return stmts

    def _check_tail_returns(self, block: list[K.Stmt], tail: bool) -> None:
        for i, stmt in enumerate(block):
            last = tail and i == len(block) - 1
            if isinstance(stmt, K.Return) and not last:
                raise FrontendError("a helper may return only at its end (the last statement, or "
                                    "the last statement of a final if/else), because helpers are "
                                    "inlined", stmt.loc)
            if isinstance(stmt, K.If):
                self._check_tail_returns(stmt.then, last)
                self._check_tail_returns(stmt.orelse, last)
            elif isinstance(stmt, (K.For, K.While)):
                self._check_tail_returns(stmt.body, False)

    def block(self, nodes: list[ast.stmt]) -> list[K.Stmt]:
        out: list[K.Stmt] = []
        for node in nodes:
            out.extend(self.stmt(node))
        return out

    def nested(self, nodes: list[ast.stmt]) -> list[K.Stmt]:
        self.depth += 1
        try:
            return self.block(nodes)
        finally:
            self.depth -= 1

    def stmt(self, node: ast.stmt) -> list[K.Stmt]:
        loc = self.src.loc(node)
        if isinstance(node, ast.Assign):
            return self.assign(node.targets, node.value, loc)
        if isinstance(node, ast.AnnAssign):
            return self.ann_assign(node, loc)
        if isinstance(node, ast.AugAssign):
            return self.aug_assign(node, loc)
        if isinstance(node, ast.If):
            cond = self.truth(self.expr(node.test), node.test)
            return [K.If(cond=self.materialize(cond, T.i1, node.test), then=self.nested(node.body),
                         orelse=self.nested(node.orelse), loc=loc)]
        if isinstance(node, ast.For):
            return self.for_loop(node, loc)
        if isinstance(node, ast.While):
            if node.orelse:
                raise self.error(node, "`while ... else` is not supported in a leaf",
                                 rule="supported-python")
            cond = self.materialize(self.truth(self.expr(node.test), node.test), T.i1, node.test)
            return [K.While(cond=cond, body=self.nested(node.body), loc=loc)]
        if isinstance(node, ast.Break):
            return [K.Break(loc=loc)]
        if isinstance(node, ast.Continue):
            return [K.Continue(loc=loc)]
        if isinstance(node, ast.Pass):
            return []
        if isinstance(node, ast.Return):
            return [self.ret(node, loc)]
        if isinstance(node, ast.Expr):
            return self.expr_stmt(node, loc)
        raise self.error(node, f"{_construct_name(node)} is not supported in a leaf or helper body",
                         rule="supported-python")

    # -- assignments ------------------------------------------------------------------------

    def assign(self, targets: list[ast.expr], value_node: ast.expr, loc: Loc) -> list[K.Stmt]:
        if len(targets) > 1:
            # a = b = value: evaluate once into the first target, copy to the others
            first = self.assign([targets[0]], value_node, loc)
            out = list(first)
            for target in targets[1:]:
                out.extend(self.assign([target], targets[0], loc))
            return out
        target = targets[0]
        if isinstance(target, ast.Tuple):
            return self.unpack(target, value_node, loc)
        if isinstance(target, ast.Name) and self._is_malloc(value_node):
            return [self.malloc_assign(target, value_node, loc)]
        value = self.expr(value_node)
        if isinstance(target, ast.Name):
            return self.assign_var(target.id, value, target, loc)
        if isinstance(target, ast.Subscript):
            ptr, index = self.subscript(target)
            return [K.Store(ptr=ptr, index=index, value=self.to_type(value, ptr.type.elem, value_node,
                                                                      explicit=True), loc=loc)]
        raise self.error(target, f"cannot assign to {_construct_name(target)} in a leaf")

    def unpack(self, target: ast.Tuple, value_node: ast.expr, loc: Loc) -> list[K.Stmt]:
        if not isinstance(value_node, ast.Tuple) or len(value_node.elts) != len(target.elts):
            raise self.error(value_node, "tuple assignment needs a tuple of the same length on the right")
        out: list[K.Stmt] = []
        temps = []
        for elt in value_node.elts:  # evaluate every right-hand value before assigning any
            value = self.expr(elt)
            if isinstance(value, Weak):
                temps.append(value)
                continue
            if isinstance(value, Handle):
                raise self.error(elt, "node handles cannot be unpacked")
            name = self.new_temp(value.type)
            out.append(K.Assign(target=name, value=value, loc=loc))
            temps.append(K.Var(name=name, type=value.type, loc=value.loc))
        for elt_target, value in zip(target.elts, temps):
            if isinstance(elt_target, ast.Name):
                out.extend(self.assign_var(elt_target.id, value, elt_target, loc))
            elif isinstance(elt_target, ast.Subscript):
                ptr, index = self.subscript(elt_target)
                out.append(K.Store(ptr=ptr, index=index,
                                   value=self.to_type(value, ptr.type.elem, elt_target, explicit=True),
                                   loc=loc))
            else:
                raise self.error(elt_target, "cannot assign to this target in a leaf")
        return out

    def assign_var(self, name: str, value: Value, node: ast.AST, loc: Loc,
                   declared: Type | None = None) -> list[K.Stmt]:
        if name in self.params and isinstance(self.params[name].type, PtrType):
            raise self.error(node, f"pointer parameter {name!r} cannot be reassigned")
        if isinstance(self.locals.get(name), PtrType):
            raise self.error(node, f"{name!r} holds scratch memory from malloc and cannot be reassigned")
        if isinstance(value, Handle):
            if name in self.handles or name in self.locals or name in self.params:
                raise self.error(node, f"{name!r}: a node handle is assigned once, to a fresh name")
            self.handles[name] = value.level
            return []
        if name in self.handles:
            raise self.error(node, f"{name!r} holds a node handle and cannot be reassigned")
        current = self.params[name].type if name in self.params else self.locals.get(name)
        if current is None:
            current = declared if declared is not None else self.default_type(value)
            self.locals[name] = current
            expr = self.to_type(value, current, node, explicit=False)  # `x: i8 = ...` is no cast
        else:
            if declared is not None and declared != current:
                raise self.error(node, f"{name!r} is already {current} and cannot be redeclared as {declared}")
            expr = self.to_type(value, current, node, explicit=False, var_name=name)
        return [K.Assign(target=name, value=expr, loc=loc)]

    def ann_assign(self, node: ast.AnnAssign, loc: Loc) -> list[K.Stmt]:
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "annotated assignment needs a plain variable name")
        ann = resolve_annotation(self.src, self._eval_annotation(node.annotation), node.annotation)
        declared = T.resolve_scalar(ann) if ann is not float else T.f64
        if declared is None:
            raise self.error(node.annotation, f"{ann!r} is not a scalar hpvm type")
        name = node.target.id
        if node.value is None:
            if name in self.locals or name in self.params:
                raise self.error(node, f"{name!r} is already declared")
            self.locals[name] = declared
            return [K.Assign(target=name, value=_zero(declared, loc), loc=loc)]
        return self.assign_var(name, self.expr(node.value), node.target, loc, declared=declared)

    def _eval_annotation(self, node: ast.expr) -> Any:
        obj = self.resolve_object(node)
        if obj is None:
            raise self.error(node, "cannot resolve this annotation")
        return obj

    def aug_assign(self, node: ast.AugAssign, loc: Loc) -> list[K.Stmt]:
        op = _BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        if isinstance(node.target, ast.Name):
            current = self.expr(ast.Name(id=node.target.id, ctx=ast.Load(), lineno=node.lineno,
                                         col_offset=node.col_offset))
            result = self.binop(op, current, self.expr(node.value), node)
            return self.assign_var(node.target.id, result, node.target, loc)
        if isinstance(node.target, ast.Subscript):
            ptr, index = self.subscript(node.target)
            out: list[K.Stmt] = []
            if not isinstance(index, (K.Var, K.Const)):
                name = self.new_temp(index.type)
                out.append(K.Assign(target=name, value=index, loc=loc))
                index = K.Var(name=name, type=index.type, loc=index.loc)
            current = K.Load(ptr=ptr, index=index, type=ptr.type.elem, loc=loc)
            result = self.binop(op, current, self.expr(node.value), node)
            out.append(K.Store(ptr=ptr, index=index,
                               value=self.to_type(result, ptr.type.elem, node, explicit=True), loc=loc))
            return out
        raise self.error(node.target, "cannot assign to this target in a leaf")

    def _is_malloc(self, node: ast.expr) -> bool:
        if not isinstance(node, ast.Call):
            return False
        obj = self.resolve_object(node.func)
        return obj is not None and _intrinsic_kind(obj) == "malloc"

    def malloc_assign(self, target: ast.Name, call: ast.Call, loc: Loc) -> K.Stmt:
        if self.kind == "helper":
            raise self.verror(call, "malloc() is an HPVM intrinsic; helpers may not use intrinsics",
                              "helper-no-intrinsics")
        if self.depth:
            raise self.error(call, "malloc() must be called at the top level of the leaf body "
                             "(not inside if/for/while): every instance must reach it",
                             rule="malloc-uniform")
        if call.keywords or not 1 <= len(call.args) <= 2:
            raise self.error(call, "malloc(nbytes) or malloc(nbytes, dtype) expected")
        nbytes = self.to_type(self.expr(call.args[0]), T.i64, call.args[0], explicit=False)
        for sub in K.walk_exprs(nbytes):
            if isinstance(sub, (K.Load, K.Atomic, K.CallHelper)) or \
                    (isinstance(sub, K.InstanceId) and sub.level == 0) or \
                    (isinstance(sub, K.Var) and sub.name not in self.params):
                raise self.error(call.args[0], "the size given to malloc() must be the same for "
                                 "every instance: use constants, scalar parameters and instance counts",
                                 rule="malloc-uniform")
        elem = T.u8
        if len(call.args) == 2:
            obj = self.resolve_object(call.args[1])
            elem = T.resolve_scalar(obj) if obj is not None else None
            if elem is None:
                raise self.error(call.args[1], "the second argument of malloc() is an element type")
        name = target.id
        if name in self.locals or name in self.params or name in self.handles:
            raise self.error(target, f"{name!r} is already defined; malloc() needs a fresh name")
        ptr_type = PtrType(elem)
        self.locals[name] = ptr_type
        return K.Assign(target=name, value=K.Malloc(nbytes=nbytes, type=ptr_type, loc=loc), loc=loc)

    # -- control flow -----------------------------------------------------------------------

    def for_loop(self, node: ast.For, loc: Loc) -> list[K.Stmt]:
        if node.orelse:
            raise self.error(node, "`for ... else` is not supported in a leaf",
                             rule="supported-python")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a plain name")
        it = node.iter
        if not (isinstance(it, ast.Call) and self.resolve_object(it.func) is builtins.range):
            raise self.error(it, "leaf loops iterate over range(...) only", rule="supported-python")
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise self.error(it, "range() takes 1 to 3 positional arguments")
        args = [self.expr(a) for a in it.args]
        for a, arg_node in zip(args, it.args):
            t = a.kind if isinstance(a, Weak) else getattr(a, "type", None)
            if isinstance(a, Handle) or t == "float" or (isinstance(t, ScalarType) and t.is_float):
                raise self.error(arg_node, "range() arguments must be integers")
        strong = [a.type for a in args if isinstance(a, K.Expr)]
        loop_type: ScalarType = T.DEFAULT_INT
        if strong:
            loop_type = strong[0]
            for t in strong[1:]:
                loop_type = T.promote(loop_type, t)
            if loop_type.is_bool:
                loop_type = T.DEFAULT_INT
        name = node.target.id
        existing = self.params[name].type if name in self.params else self.locals.get(name)
        if name in self.handles or isinstance(existing, PtrType):
            raise self.error(node.target, f"{name!r} cannot be a loop variable")
        if existing is None:
            self.locals[name] = loop_type
            existing = loop_type
        elif not can_widen(loop_type, existing):
            raise self.error(node.target, f"loop variable {name!r} is {existing}, which cannot hold "
                             f"the {loop_type} values of this range")
        bounds = [self.to_type(a, existing, n, explicit=False) for a, n in zip(args, it.args)]
        if len(bounds) == 1:
            start, stop, step = _const(0, existing, loc), bounds[0], _const(1, existing, loc)
        elif len(bounds) == 2:
            start, stop, step = bounds[0], bounds[1], _const(1, existing, loc)
        else:
            start, stop, step = bounds
        body = self.nested(node.body)
        return [K.For(var=name, start=start, stop=stop, step=step, body=body, loc=loc)]

    def ret(self, node: ast.Return, loc: Loc) -> K.Return:
        if self.kind == "helper":
            if node.value is None:
                if self.result_type is not None:
                    raise self.error(node, f"helper must return a {self.result_type} value")
                return K.Return(values=[], loc=loc)
            if self.result_type is None:
                raise self.error(node, "this helper has no return annotation, so it returns nothing")
            return K.Return(values=[self.to_type(self.expr(node.value), self.result_type, node.value,
                                                 explicit=True)], loc=loc)
        value_nodes = self._return_values(node)
        if len(value_nodes) != len(self.outputs):
            raise self.error(node, f"returns {len(value_nodes)} value(s) but the annotation declares "
                             f"{len(self.outputs)} output(s)", rule="leaf-returns-outputs")
        values = []
        for vnode, port in zip(value_nodes, self.outputs):
            values.append(self.to_type(self.expr(vnode), port.type, vnode, explicit=True))
        return K.Return(values=values, loc=loc)

    def _return_values(self, node: ast.Return) -> list[ast.expr]:
        value = node.value
        if value is None:
            return []
        if isinstance(value, ast.Tuple):
            return list(value.elts)
        if isinstance(value, ast.Call) and self.output_class is not None and \
                self.resolve_object(value.func) is self.output_class:
            fields = list(self.output_class._fields)
            if len(value.args) > len(fields):
                raise self.error(value, f"{self.output_class.__name__} has {len(fields)} fields")
            given: dict[str, ast.expr] = dict(zip(fields, value.args))
            for kw in value.keywords:
                if kw.arg not in fields or kw.arg in given:
                    raise self.error(kw.value, f"unknown or repeated output field {kw.arg!r}")
                given[kw.arg] = kw.value
            missing = [f for f in fields if f not in given]
            if missing:
                raise self.error(value, f"output field(s) {', '.join(missing)} not given")
            return [given[f] for f in fields]
        return [value]  # one value: ret() checks it against the declared outputs

    def expr_stmt(self, node: ast.Expr, loc: Loc) -> list[K.Stmt]:
        value = node.value
        if isinstance(value, ast.Constant):
            return []  # a string used as a comment
        if isinstance(value, ast.Call):
            obj = self.resolve_object(value.func)
            kind = _intrinsic_kind(obj) if obj is not None else ""
            if kind == "barrier":
                self._no_intrinsics_in_helper(value, "barrier")
                if value.args or value.keywords:
                    raise self.error(value, "barrier() takes no arguments")
                return [K.Barrier(loc=loc)]
            if obj is builtins.print:
                return [self.print_stmt(value, loc)]
            if obj is builtins.breakpoint:
                return [K.Breakpoint(loc=loc)]
        lowered = self.expr(value)
        if isinstance(lowered, K.Expr) and any(isinstance(e, (K.Atomic, K.CallHelper))
                                               for e in K.walk_exprs(lowered)):
            return [K.ExprStmt(value=lowered, loc=loc)]
        return []  # a pure expression statement has no effect

    def print_stmt(self, call: ast.Call, loc: Loc) -> K.Print:
        if call.keywords:
            raise self.error(call, "print() in a leaf takes positional arguments only")
        items: list[K.Expr | str] = []
        for arg in call.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                items.append(arg.value)
                continue
            value = self.expr(arg)
            if isinstance(value, Handle):
                raise self.error(arg, "node handles cannot be printed")
            items.append(self.materialize_default(value))
        return K.Print(values=items, loc=loc)

    # -- expressions ------------------------------------------------------------------------

    def expr(self, node: ast.expr) -> Value:
        loc = self.src.loc(node)
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return Weak(node.value, loc)
            raise self.error(node, f"constant {node.value!r} is not a number", rule="supported-python")
        if isinstance(node, ast.Name):
            return self.name(node, loc)
        if isinstance(node, ast.BinOp):
            op = _BINOPS.get(type(node.op))
            if op is None:
                raise self.error(node, f"operator {type(node.op).__name__} is not supported")
            return self.binop(op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.UnaryOp):
            return self.unary(node, loc)
        if isinstance(node, ast.Compare):
            return self.compare(node, loc)
        if isinstance(node, ast.BoolOp):
            op = "land" if isinstance(node.op, ast.And) else "lor"
            values = [self.truth(self.expr(v), v) for v in node.values]
            result = values[0]
            for v in values[1:]:
                result = self.logical(op, result, v, loc)
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
        raise self.error(node, f"{_construct_name(node)} is not supported in a leaf or helper body",
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
                raise self.error(node, "the base of ** must not have side effects")
            exponent = int(b.value)
            if exponent == 0:
                return _const(1, t, loc)
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
        x, y = a.value, b.value
        try:
            if op == "add":
                r = x + y
            elif op == "sub":
                r = x - y
            elif op == "mul":
                r = x * y
            elif op == "div":
                r = x / y
            elif op == "floordiv":
                r = x // y if y != 0 else type(x + y)(0)
            elif op == "mod":
                r = x % y if y != 0 else type(x + y)(0)
            elif op == "pow":
                r = x ** y
            elif isinstance(x, float) or isinstance(y, float):
                raise self.error(node, "bitwise operator needs integers")
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
        if isinstance(r, bool) and op not in ("and", "or", "xor"):
            r = int(r)
        return Weak(r, self.src.loc(node))

    def common_type(self, a: Value, b: Value, node: ast.AST) -> ScalarType:
        """The operation type of two operands, at least one strongly typed."""
        for v in (a, b):
            if isinstance(v, K.Expr) and not isinstance(v.type, ScalarType):
                raise self.error(node, f"arithmetic on a {v.type} value (pointers can only be indexed)")
        if isinstance(a, Weak):
            a, b = b, a
        assert isinstance(a, K.Expr)
        if isinstance(b, Weak):
            if b.kind == "float" and not a.type.is_float:
                return T.DEFAULT_FLOAT
            return a.type
        return T.promote(a.type, b.type)

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
        operands = [self.expr(node.left)] + [self.expr(c) for c in node.comparators]
        result: Value | None = None
        for i, op_node in enumerate(node.ops):
            op = _CMPOPS.get(type(op_node))
            if op is None:
                raise self.error(node, f"comparison {type(op_node).__name__} is not supported")
            a, b = operands[i], operands[i + 1]
            if isinstance(a, Handle) or isinstance(b, Handle):
                raise self.error(node, "node handles cannot be compared")
            if isinstance(a, Weak) and isinstance(b, Weak):
                one: Value = Weak(bool(_PY_CMP[op](a.value, b.value)), loc)
            else:
                t = self.common_type(a, b, node)
                one = K.Compare(op=op, lhs=self.to_type(a, t, node, explicit=True),
                                rhs=self.to_type(b, t, node, explicit=True), type=T.i1, loc=loc)
            result = one if result is None else self.logical("land", result, one, loc)
        assert result is not None
        return result

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
        return K.Compare(op="ne", lhs=v, rhs=_zero(v.type, v.loc), type=T.i1, loc=v.loc)

    def select(self, node: ast.IfExp, loc: Loc) -> Value:
        cond = self.truth(self.expr(node.test), node.test)
        a, b = self.expr(node.body), self.expr(node.orelse)
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

    # -- calls ------------------------------------------------------------------------------

    def call(self, node: ast.Call, loc: Loc) -> Value:
        obj = self.resolve_object(node.func)
        if obj is None:
            raise self.error(node.func, "only casts, math functions, intrinsics and @hpvm.func "
                             "helpers can be called in a leaf", rule="supported-python")
        if not _hashable(obj):
            raise self.error(node.func, f"cannot call a {type(obj).__name__} in a leaf: only casts, "
                             "math functions, intrinsics and @hpvm.func helpers", rule="supported-python")
        if isinstance(obj, LeafDef):
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
            return Weak(min(a.value, b.value) if which == "min" else max(a.value, b.value), loc)
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
            target = self.expr(args[0])
            if not (isinstance(target, K.Var) and isinstance(target.type, PtrType)):
                raise self.error(args[0], f"the first argument of {name}() is a pointer")
            elem = target.type.elem
            if elem.is_float and detail in ("and", "or", "xor"):
                raise self.error(node, f"{name}() needs an integer element type, not {elem}")
            index = self.expr(args[1])
            if isinstance(index, Handle) or (isinstance(index, Weak) and index.kind == "float") or \
                    (isinstance(index, K.Expr) and not (isinstance(index.type, ScalarType) and index.type.is_int)):
                raise self.error(args[1], "an index must be an integer")
            index = self.to_type(index, T.i64, args[1], explicit=False) if isinstance(index, Weak) \
                else index
            value = self.to_type(self.expr(args[2]), elem, args[2], explicit=True)
            return K.Atomic(op=detail, ptr=target, index=index, value=value, type=elem, loc=loc)
        if kind == "malloc":
            raise self.error(node, "malloc() must be assigned to a variable at the top level of the "
                             "leaf body: `buf = hpvm.malloc(nbytes, hpvm.f32)`", rule="malloc-uniform")
        if kind == "barrier":
            raise self.error(node, "barrier() is a statement, not a value")
        raise self.error(node, f"{name}() cannot be used here")

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
            raise self.error(node, f"{helper.name}() takes {len(helper.params)} argument(s), "
                             f"got {len(node.args)}")
        args: list[K.Expr] = []
        for p, arg in zip(helper.params, node.args):
            value = self.expr(arg)
            if isinstance(p.type, PtrType):
                if not (isinstance(value, K.Var) and value.type == p.type):
                    raise self.error(arg, f"argument {p.name!r} of {helper.name}() is a {p.type}")
                args.append(value)
            else:
                args.append(self.to_type(value, p.type, arg, explicit=False))
        result = helper.result if helper.result is not None else T.void
        return K.CallHelper(func=helper.name, args=args, type=result, loc=loc)

    # -- typing helpers ---------------------------------------------------------------------

    def default_type(self, value: Value) -> Type:
        if isinstance(value, Weak):
            return {"bool": T.i1, "int": T.DEFAULT_INT, "float": T.DEFAULT_FLOAT}[value.kind]
        if isinstance(value, K.CallHelper) and value.type == T.void:
            raise FrontendError(f"{value.func}() returns nothing", value.loc)
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
            return K.Const(value=bool(v), type=t, loc=loc)
        if t.is_float:
            return K.Const(value=_float_in(t, float(v)), type=t, loc=loc)
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
                v = _wrap(v, t)
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
            return K.Compare(op="ne", lhs=value, rhs=_zero(value.type, value.loc), type=T.i1, loc=value.loc)
        return K.Cast(value=value, type=t, loc=value.loc)

    def new_temp(self, t: Type) -> str:
        while True:
            self.temp_count += 1
            name = f"_t{self.temp_count}"
            if name not in self.assigned_names and name not in self.params:
                break
        self.locals[name] = t
        return name

    @staticmethod
    def _collect_assigned(fdef: ast.FunctionDef) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(fdef):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
        return names


def _hashable(obj: Any) -> bool:
    try:
        hash(obj)
    except TypeError:
        return False
    return True


def _intrinsic_kind(obj: Any) -> str:
    return INTRINSICS.get(obj, ("",))[0] if _hashable(obj) else ""


def _float_in(t: ScalarType, value: float) -> float:
    """value rounded to float type t, so that every backend starts from the same constant."""
    from ..ir.semantics import cast

    with np.errstate(over="ignore"):  # beyond the type's range a literal is inf
        return float(cast(np.float64(value), T.f64, t))


def _const(value: int | float, t: Type, loc: Loc) -> K.Const:
    return K.Const(value=value, type=t, loc=loc)


def _zero(t: Type, loc: Loc) -> K.Const:
    assert isinstance(t, ScalarType)
    if t.is_bool:
        return K.Const(value=False, type=t, loc=loc)
    return K.Const(value=0.0 if t.is_float else 0, type=t, loc=loc)


def _wrap(v: int, t: ScalarType) -> int:
    mask = (1 << t.bits) - 1
    v &= mask
    if t.is_signed and v >= 1 << (t.bits - 1):
        v -= 1 << t.bits
    return v


def _ends_with_return(block: list[K.Stmt]) -> bool:
    if not block:
        return False
    last = block[-1]
    if isinstance(last, K.Return):
        return True
    if isinstance(last, K.If):
        return _ends_with_return(last.then) and _ends_with_return(last.orelse)
    if isinstance(last, K.While) and isinstance(last.cond, K.Const) and last.cond.value:
        return not any(isinstance(s, K.Break) for s in K.walk_stmts(last.body))
    return False


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


def _construct_name(node: ast.AST) -> str:
    return _CONSTRUCT_NAMES.get(type(node), type(node).__name__)
