"""Lowering of statements: assignments, malloc, control flow, returns, barrier and print."""
from __future__ import annotations

import ast
import builtins
from typing import Any

import numpy as np

from ... import types as T
from ...ir import kernel as K
from ...support.loc import Loc
from ...types import PtrType, ScalarType, Type
from ..intrinsics import INTRINSICS
from ..source import resolve_annotation
from .calls import CallLowering
from .sizes import size_at
from .values import (BINOPS, Handle, Value, Weak, can_widen, const, constant_truth, construct_name,
                     intrinsic_kind)


class StmtLowering(CallLowering):
    """Statements of a leaf or helper body."""

    def block(self, nodes: list[ast.stmt]) -> list[K.Stmt]:
        out: list[K.Stmt] = []
        for node in nodes:
            lowered = self.stmt(node)
            out.extend(lowered)
            if self.depth == 0:
                self.top_level.extend(lowered)  # what a malloc size may read the locals of
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
            runs = constant_truth(cond)
            return [K.If(cond=self.materialize(cond, T.i1, node.test),
                         then=self.maybe_dead(runs is not False, lambda: self.nested(node.body)),
                         orelse=self.maybe_dead(runs is not True, lambda: self.nested(node.orelse)),
                         loc=loc)]
        if isinstance(node, ast.For):
            return self.for_loop(node, loc)
        if isinstance(node, ast.While):
            if node.orelse:
                raise self.error(node, "`while ... else` is not supported in a leaf",
                                 rule="supported-python")
            test = self.truth(self.expr(node.test), node.test)
            runs = constant_truth(test) is not False
            cond = self.materialize(test, T.i1, node.test)
            return [K.While(cond=cond, body=self.maybe_dead(runs, lambda: self.nested(node.body)),
                            loc=loc)]
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
        raise self.error(node, f"{construct_name(node)} is not supported in a leaf or helper body",
                         rule="supported-python")

    # -- assignments ------------------------------------------------------------------------

    def assign(self, targets: list[ast.expr], value_node: ast.expr, loc: Loc) -> list[K.Stmt]:
        if len(targets) > 1 and (any(isinstance(t, ast.Tuple) for t in targets) or
                                 self._is_malloc(value_node) or self.is_pointer_expr(value_node)):
            # a = b = pointer: the first target names it, the others copy that name
            first = self.assign([targets[0]], value_node, loc)
            out = list(first)
            for target in targets[1:]:
                out.extend(self.assign([target], targets[0], loc))
            return out
        if len(targets) > 1:
            return self.assign_each(targets, value_node, loc)
        target = targets[0]
        if isinstance(target, ast.Tuple):
            return self.unpack(target, value_node, loc)
        if isinstance(target, ast.Name) and self._is_malloc(value_node):
            return self.malloc_assign(target, value_node, loc)
        if isinstance(target, ast.Name) and self.is_pointer_expr(value_node):
            return self.assign_view(target, value_node, loc)
        return self.assign_value(target, self.expr(value_node), value_node, loc)

    def assign_each(self, targets: list[ast.expr], value_node: ast.expr, loc: Loc) -> list[K.Stmt]:
        """`x = y = value`: the value evaluated once, then given to each target from left to right
        as if assigned alone (a literal stays a literal, so `y` does not take `x`'s type, and a
        store's conversion to its element type does not reach the names after it)."""
        value = self.expr(value_node)
        out: list[K.Stmt] = []
        if isinstance(value, K.Expr) and not isinstance(value, (K.Var, K.Const)):
            name = self.new_temp(self.default_type(value))
            out.append(K.Assign(target=name, value=value, loc=loc))
            value = K.Var(name=name, type=value.type, loc=value.loc)
        for target in targets:
            out.extend(self.assign_value(target, value, value_node, loc))
        return out

    def assign_value(self, target: ast.expr, value: Value, value_node: ast.expr,
                     loc: Loc) -> list[K.Stmt]:
        if isinstance(target, ast.Name):
            return self.assign_var(target.id, value, target, loc)
        if isinstance(target, ast.Subscript):
            ptr, index = self.subscript(target)
            return [K.Store(ptr=ptr, index=index, value=self.to_type(value, ptr.type.elem, value_node,
                                                                      explicit=True), loc=loc)]
        raise self.error(target, f"cannot assign to {construct_name(target)} in a leaf")

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
            return [K.Assign(target=name, value=K.zero(declared, loc), loc=loc)]
        return self.assign_var(name, self.expr(node.value), node.target, loc, declared=declared)

    def _eval_annotation(self, node: ast.expr) -> Any:
        obj = self.resolve_object(node)
        if obj is None:
            raise self.error(node, "cannot resolve this annotation")
        return obj

    def aug_assign(self, node: ast.AugAssign, loc: Loc) -> list[K.Stmt]:
        op = BINOPS.get(type(node.op))
        if op is None:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported")
        if isinstance(node.target, ast.Name) and self.is_pointer_expr(node.target):
            if not isinstance(node.op, (ast.Add, ast.Sub)):
                raise self.error(node, "a pointer moves by += or -= an integer", rule="pointer-views")
            moved = ast.copy_location(ast.BinOp(left=ast.Name(id=node.target.id, ctx=ast.Load()),
                                                 op=node.op, right=node.value), node)
            ast.fix_missing_locations(moved)
            return self.assign_view(node.target, moved, loc)
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
        return obj is not None and intrinsic_kind(obj) == "malloc"

    def malloc_assign(self, target: ast.Name, call: ast.Call, loc: Loc) -> list[K.Stmt]:
        if self.kind == "helper":
            raise self.verror(call, "malloc() is an HPVM intrinsic; helpers may not use intrinsics",
                              "helper-no-intrinsics")
        if self.depth:
            raise self.error(call, "malloc() must be called at the top level of the leaf body "
                             "(not inside if/for/while): every instance must reach it",
                             rule="malloc-uniform")
        shape_node = next((k.value for k in call.keywords if k.arg == "shape"), None)
        if any(k.arg != "shape" for k in call.keywords) or not 1 <= len(call.args) <= 2:
            raise self.error(call, "malloc(nbytes), malloc(nbytes, dtype) or malloc(nbytes, dtype, "
                             "shape=(rows, cols)) expected")
        nbytes = self.uniform_size(call.args[0])
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
        out: list[K.Stmt] = [K.Assign(target=name, value=K.Malloc(nbytes=nbytes, type=ptr_type, loc=loc),
                                      loc=loc)]
        if shape_node is not None:
            out += self.shape_scratch(name, ptr_type, nbytes, shape_node, loc)
        return out

    def uniform_size(self, node: ast.expr) -> K.Expr:
        """A malloc size as the same expression for every instance, its locals replaced by the
        values they hold here (the backends allocate before the instances run)."""
        written = self.to_type(self.expr(node), T.i64, node, explicit=False)
        nbytes, unknown = size_at(written, self.top_level, self.locals,
                                  {name: p.type for name, p in self.params.items()})
        if unknown is not None:
            raise self.error(node, f"the size given to malloc() must be known before the instances "
                             f"run, but {unknown}: compute it at the top level (or in ifs) from "
                             "constants, scalar parameters and instance counts", rule="malloc-uniform")
        for sub in K.walk_exprs(nbytes):
            if isinstance(sub, (K.Load, K.Atomic, K.CallHelper)) or \
                    (isinstance(sub, K.InstanceId) and sub.level == 0):
                raise self.error(node, "the size given to malloc() must be the same for every "
                                 "instance: use constants, scalar parameters, instance counts and "
                                 "locals assigned only from those (outside conditions that differ "
                                 "between instances)", rule="malloc-uniform")
        return nbytes

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
        elif not can_widen(loop_type, existing) or existing.is_float:
            # range() gives integers: a float counter would lose counts beyond its precision
            raise self.error(node.target, f"loop variable {name!r} is {existing}, which cannot hold "
                             f"the {loop_type} values of this range")
        bounds = [self.to_type(a, existing, n, explicit=False) for a, n in zip(args, it.args)]
        if len(bounds) == 1:
            start, stop, step = const(0, existing, loc), bounds[0], const(1, existing, loc)
        elif len(bounds) == 2:
            start, stop, step = bounds[0], bounds[1], const(1, existing, loc)
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
            unpacked = [a for a in value.args if isinstance(a, ast.Starred)] + \
                [kw.value for kw in value.keywords if kw.arg is None]
            if unpacked:  # (`**d` read as a field named None, `*t` as the first field)
                raise self.error(unpacked[0], f"name the fields of {self.output_class.__name__} "
                                 "one by one: `*` and `**` unpacking is not supported in a leaf",
                                 rule="supported-python")
            if len(value.args) > len(fields):
                raise self.error(value, f"{self.output_class.__name__} has {len(fields)} fields")
            given: dict[str, ast.expr] = dict(zip(fields, value.args))
            for kw in value.keywords:
                if kw.arg not in fields or kw.arg in given:
                    raise self.error(kw.value, f"unknown or repeated output field {kw.arg!r}")
                given[kw.arg] = kw.value
            defaults = getattr(self.output_class, "_field_defaults", {})
            for f in fields:
                # a field left out takes its NamedTuple default, as in Python: the number, as if
                # written in the return (converted to the output's type the same way)
                if f not in given and f in defaults:
                    given[f] = self._default_field(value, f, defaults[f])
            missing = [f for f in fields if f not in given]
            if missing:
                raise self.error(value, f"output field(s) {', '.join(missing)} not given")
            return [given[f] for f in fields]
        return [value]  # one value: ret() checks it against the declared outputs

    def _default_field(self, call: ast.Call, field: str, default: Any) -> ast.expr:
        """The default of an output field left out of `Name(...)`, as a literal at the call."""
        number = default.item() if isinstance(default, np.generic) else default
        if not isinstance(number, (bool, int, float)):
            raise self.error(call, f"output field {field!r} is left out and its default "
                             f"{default!r} is not a number; give the field a value",
                             rule="leaf-returns-outputs")
        literal: ast.expr = ast.Constant(value=abs(number) if number < 0 else number)
        if number < 0:  # a literal is never negative in Python's tree: -1 is USub(1)
            literal = ast.UnaryOp(op=ast.USub(), operand=literal)
        for node in ast.walk(literal):
            ast.copy_location(node, call)
        return literal

    def expr_stmt(self, node: ast.Expr, loc: Loc) -> list[K.Stmt]:
        value = node.value
        if isinstance(value, ast.Constant):
            return []  # a string used as a comment
        if isinstance(value, ast.Call):
            obj = self.resolve_object(value.func)
            kind = intrinsic_kind(obj) if obj is not None else ""
            if kind == "barrier":
                self._no_intrinsics_in_helper(value, "barrier")
                if value.args or value.keywords:
                    raise self.error(value, "barrier() takes no arguments")
                return [K.Barrier(loc=loc)]
            if kind == "remote" and INTRINSICS[obj][1] == "store":
                return [self.remote_access(value, "store", loc)]
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

