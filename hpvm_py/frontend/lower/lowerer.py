"""Lower the Python AST of a leaf (or an @hpvm.func helper) to typed kernel IR.

Typing follows DESIGN.md: parameters are typed by annotations; literals are weak (they take the
other operand's type; alone an int is i64 and a float f32); a variable's type is fixed by its first
assignment and later assignments may only widen; values stored to memory or returned take the
element/output type. Graph builders are rejected here (a leaf only computes), intrinsics are
rejected in helpers (the reference keeps them out of auxiliary functions).
"""
from __future__ import annotations

import ast
import inspect
import typing

from ... import types as T
from ...errors import FrontendError
from ...ir import kernel as K
from ...ir.typecheck import MAX_EXPR_DEPTH as _MAX_EXPR_DEPTH
from ..source import output_types, param_type, resolve_annotation
from .stmts import StmtLowering


# How deep operations may nest in one expression of a leaf or helper (a sum of 128 terms).
MAX_EXPR_DEPTH = _MAX_EXPR_DEPTH  # shared with the textual IR's check (ir/typecheck.py)


class Lowerer(StmtLowering):
    """Lowers one function: its signature, then its body."""

    def lower_signature(self) -> None:
        fdef = self.src.tree
        func = self.src.func
        sig = inspect.signature(func)
        # positional-only parameters (before a `/`) are ordinary inputs: node inputs are ports
        # named by parameter name, and calls in a leaf pass arguments by position anyway
        arg_nodes = {a.arg: a for a in fdef.args.posonlyargs + fdef.args.args}
        special = [(a, f"*{a.arg}") for a in [fdef.args.vararg] if a is not None] + \
            [(a, f"**{a.arg}") for a in [fdef.args.kwarg] if a is not None] + \
            [(a, f"the keyword-only parameter {a.arg!r}") for a in fdef.args.kwonlyargs]
        if special:
            node, what = special[0]
            raise self.error(node, f"{func.__name__}: {what} is not a fixed positional parameter; a "
                             "node or helper function has a fixed list of typed parameters (its "
                             "inputs), so *args, **kwargs and keyword-only parameters (after a `*`) "
                             "are not supported: list each input before any `*`")
        for name, p in sig.parameters.items():
            node = arg_nodes.get(name, fdef)
            if p.default is not inspect.Parameter.empty:
                raise self.error(node, f"parameter {name!r} has a default value; node inputs come "
                                 "from edges and binds, so defaults are not supported (feed a "
                                 "constant instead: hpvm.node(f, k=3))")
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
        self.tuple_annotation = typing.get_origin(ret) is tuple
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
        self._check_nesting(body)
        stmts = self.block(body)
        if self.kind == "leaf" and self.outputs and not K.ends_with_return(stmts):
            raise self.error(self.src.tree, f"{self.src.func.__name__} declares outputs but can "
                             "reach its end without a return", rule="leaf-returns-outputs")
        if self.kind == "helper":
            self._check_tail_returns(stmts, tail=True)
            if self.result_type is not None and not K.ends_with_return(stmts):
                raise self.error(self.src.tree, f"helper {self.src.func.__name__} returns a value "
                                 "but can reach its end without a return")
        return stmts

    def _check_nesting(self, body: list[ast.stmt]) -> None:
        """Reject expressions, and statements, nested deeper than MAX_EXPR_DEPTH (walked without
        recursion): every stage after this one (the passes, the code generators, the Python parser
        that reads the python target's generated code, which allows 200 nested parentheses)
        recurses on them. Blocks count as the textual IR counts them (ir/typecheck.py): each
        `elif` is an `if` inside the `else` of the one before."""
        stack: list[tuple[ast.AST, int, ast.AST | None, int]] = [(stmt, 0, None, 1) for stmt in body]
        while stack:
            node, depth, outer, blocks = stack.pop()
            if isinstance(node, ast.stmt) and blocks > MAX_EXPR_DEPTH:
                raise self.error(node, f"statements nest more than {MAX_EXPR_DEPTH} blocks deep "
                                 "(each elif counts as one more); split a long elif chain in "
                                 "halves (if n < 64: ... else: ...)",
                                 rule="supported-python")
            if isinstance(node, ast.expr):
                # `a and b and c`, `a < b < c` and `max(a, b, c)` are one node each in Python's
                # tree but a chain of operations once lowered
                chained = len(node.values) if isinstance(node, ast.BoolOp) else \
                    len(node.comparators) + 1 if isinstance(node, ast.Compare) else \
                    len(node.args) if isinstance(node, ast.Call) else 0
                depth += 1 + max(0, chained - 2)
                outer = outer or node
                if depth > MAX_EXPR_DEPTH:
                    raise self.error(outer, f"this expression nests operations more than "
                                     f"{MAX_EXPR_DEPTH} deep; split it over several statements "
                                     "(acc = a + b, then acc = acc + c)", rule="supported-python")
            else:
                depth, outer = 0, None
            stack.extend((child, depth, outer, blocks + isinstance(child, ast.stmt))
                         for child in ast.iter_child_nodes(node))

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

