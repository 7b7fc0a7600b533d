"""Parse the hpvm-py textual IR (as written by printer.print_module) back into a Module.

The format is described, by example, in docs/textual-ir.md (tests/test_text_ir.py checks that the
example is what the printer writes); the grammar is grammar.lark. Every error (syntax, unknown
name / type / function / operation, duplicate name, malformed number) raises ParseError at its
position in the text.
"""
from __future__ import annotations

import functools
import json
import os
import re
import struct
import threading
from importlib import resources
from typing import Any

from lark import Lark, Token, Transformer, v_args
from lark.exceptions import UnexpectedInput

from ..errors import ParseError, VerificationError
from ..types import ScalarType, Type, VoidType, parse_type
from . import kernel as K
from .dfg import (ConstBind, DimBin, DimConst, DimExpr, DimParam, Edge, ExprBind, Function,
                  GraphFunc, InputBind, LibraryFunc, Module, Node, OutputBind)
from ..support.loc import UNKNOWN, Loc, TextLoc, register_source
from .operations import OPERATIONS
from .parse_errors import syntax_error, token_error
from .typecheck import MAX_EXPR_DEPTH, check_module
from .targets import canonical_target, target_problem
from .parse_state import Head, State, TupleOfOne
from .text_names import name_problem, path_problem, string_problem
from .text_version import version_problem

_PORT = re.compile(r"(.*)\.([0-9]+)")
_LOC = re.compile(r"@([0-9]+):([0-9]+):([0-9]+)")
# the largest line or column a location gives: code generators keep them as C ints (the python
# target's compile() of its generated source)
_MAX_POSITION = 2**31 - 1


def parse_module(text: str, source_name: str = "<hpvm-text>", check_types: bool = True) -> Module:
    """Parse textual IR; errors are ParseErrors located in `text` (named source_name). With
    check_types, the leaf and helper bodies are type checked too (typecheck.py: VerificationError);
    without it, any module the printer writes reads back (the printer's own tests)."""
    if not os.path.isfile(source_name):
        register_source(source_name, text)  # lets the error's snippet show the offending line
    parser, builder = _parser()
    # The transformer runs inside the LALR parser (no parse tree is built, which is much faster)
    # and keeps per-parse state, so one parse at a time uses the shared parser.
    with _lock:
        builder.state = State(source_name)
        try:
            module = parser.parse(text)
        except UnexpectedInput as exc:
            raise syntax_error(exc, text, source_name, _parser()[0]) from None
        else:
            # the bodies' types (a hand-edited file may break what the front end guarantees)
            if check_types:
                check_module(module)
            return module
        finally:
            builder.state = State(source_name)  # do not keep the module alive in the parser


_lock = threading.Lock()


@functools.cache
def _parser() -> tuple[Lark, "_Builder"]:
    """The LALR parser and its transformer, built once per process (the tables take a while)."""
    grammar = resources.files(__package__).joinpath("grammar.lark").read_text()
    builder = _Builder()
    lark = Lark(grammar, parser="lalr", lexer="contextual", maybe_placeholders=True,
                transformer=builder)
    return lark, builder


_ARG_KINDS = {"e": "a typed value", "v": "a %variable", "l": "a bare integer level"}


# ----------------------------------------------------------------------------------------------
# The transformer: one callback per grammar rule, called as the LALR parser reduces it


@v_args(inline=True)
class _Builder(Transformer):
    """Builds IR nodes bottom-up; `state` is replaced for every parse."""

    def __init__(self) -> None:
        super().__init__()
        self.state = State("<hpvm-text>")
        self._types: dict[str, Type] = {}

    # -- helpers --------------------------------------------------------------------------------

    def _fail(self, message: str, token: Token) -> ParseError:
        return token_error(message, token, self.state.source)

    def _name(self, token: Token, text: str | None = None) -> str:
        """The name in a %name or @name token (or in text, a part of that token)."""
        name = (token if text is None else text)[1:]
        if not name.startswith('"'):
            return name
        value = self._string(token, name)
        problem = name_problem(value, function=token.startswith("@"))
        if problem is not None:
            raise self._fail(problem, token)
        return value

    def _string(self, token: Token, text: str | None = None) -> str:
        try:
            value = json.loads(token if text is None else text)
        except ValueError as exc:
            raise self._fail(f"malformed string: {exc}", token) from None
        problem = string_problem(value)
        if problem is not None:
            raise self._fail(f"malformed string: {problem}", token)
        return value

    def _int(self, token: Token, text: str | None = None) -> int:
        digits = token if text is None else text
        if not (digits.isascii() and digits.isdigit()):
            raise self._fail(f"malformed number {str(digits)!r}: expected an integer", token)
        try:
            return int(digits)
        except ValueError:  # more digits than Python converts
            raise self._fail(f"malformed number: {digits[:20]}... is too long", token) from None

    def _port(self, token: Token) -> tuple[str, int]:
        """%node.N -> (node, N)."""
        match = _PORT.fullmatch(token)
        if match is None:
            raise self._fail(f"expected a port %node.N, got {str(token)!r}", token)
        return self._name(token, match.group(1)), self._int(token, match.group(2))

    def _node_ref(self, token: Token) -> tuple[str, int]:
        name, port = self._port(token)
        self.state.node_refs.append((name, token))
        return name, port

    def _var(self, token: Token) -> K.Var:
        name = self._name(token)
        t = self.state.scope.get(name)
        if t is None:
            raise self._fail(f"unknown variable %{name}: not a parameter or local of this function",
                             token)
        return K.Var(name=name, type=t)

    def _known_var(self, token: Token) -> str:
        return self._var(token).name

    def _open_scope(self, params: list[tuple[K.Param, Token]]) -> None:
        state = self.state
        state.scope, state.params, state.locals = {}, {}, {}
        state.nodes, state.node_refs = set(), []
        for index, (param, token) in enumerate(params):
            if param.name in state.scope:
                raise self._fail(f"duplicate parameter %{param.name}", token)
            state.scope[param.name] = param.type
            state.params[param.name] = index

    def _head(self, func: Token, params: list[tuple[K.Param, Token]], outputs: list[K.OutputPort],
              loc: Token | None, extra: Any = None, graph: bool = False) -> Head:
        if isinstance(outputs, TupleOfOne) and not graph:  # only a root's outputs form a value
            raise self._fail("only a graph's outputs may be `(T,)`, a tuple of one", func)
        self._open_scope(params)
        floc = self._loc(loc, func)
        plain = [p for p, _ in params]
        for item in plain + outputs:
            item.loc = floc
        return Head(self._name(func), func, plain, outputs, floc, extra)

    def _define(self, head: Head, fn: Function) -> Function:
        if head.name in self.state.functions:
            raise self._fail(f"duplicate function @{head.name}", head.token)
        self.state.functions[head.name] = fn
        return fn

    def _loc(self, token: Token | None, at: Token | None = None) -> Loc:
        """The location `@F:L:C` token gives; without one, at's position in the text (so that
        errors about an unlocated item still point at it), else UNKNOWN."""
        if token is None:
            return self._text_loc(at) if at is not None else UNKNOWN
        match = _LOC.fullmatch(token)
        assert match is not None  # the LOC terminal has this shape
        index, line, col = (self._int(token, group) for group in match.groups())
        if max(line, col) > _MAX_POSITION:
            raise self._fail(f"location {token}: a line or column is at most {_MAX_POSITION}", token)
        path = self.state.files.get(index)
        if path is None:
            raise self._fail(f"unknown file index {index} (no `file {index} \"...\"` line)", token)
        return Loc(path, line, col)

    def _stmt(self, stmt: K.Stmt, loc: Token | None, at: Token | None = None) -> K.Stmt:
        """Give stmt its location, and its expressions the same one; without one, its position
        in the text (at: its first token, else its first expression's position), while its
        expressions keep their own positions."""
        stmt.loc = self._loc(loc, at)
        if isinstance(stmt.loc, TextLoc):
            return stmt
        if stmt.loc != UNKNOWN:
            for child in K.child_exprs(stmt):
                for e in K.walk_exprs(child):
                    e.loc = stmt.loc
            return stmt
        for child in K.child_exprs(stmt):
            if isinstance(child.loc, TextLoc):
                stmt.loc = child.loc
                break
        return stmt

    def _at(self, item: Any, token: Token) -> Any:
        """Give item, which has no location yet, its position in the text (token: its start)."""
        if item.loc == UNKNOWN:
            item.loc = self._text_loc(token)
        return item

    def _text_loc(self, token: Token) -> Loc:
        if token.line is None or token.column is None:
            return UNKNOWN
        return TextLoc(self.state.source, token.line, token.column - 1)

    # -- module ---------------------------------------------------------------------------------

    def start(self, *items: Any) -> Module:
        # the file table and the functions are already in state, in text order
        root = next(item for item in items if isinstance(item, Token))
        state = self.state
        for token in [root] + state.func_refs:
            if self._name(token) not in state.functions:
                raise self._fail(f"unknown function @{self._name(token)}", token)
        return Module(root=self._name(root), functions=state.functions)

    def version_decl(self, number: Token) -> None:
        problem = version_problem(self._int(number))
        if problem is not None:
            raise self._fail(problem, number)

    def file_decl(self, index: Token, path: Token) -> None:
        number = self._int(index)
        if number in self.state.files:
            raise self._fail(f"duplicate file index {number}", index)
        self.state.files[number] = self._string(path)
        problem = path_problem(self.state.files[number])
        if problem is not None:
            raise self._fail(problem, path)
        if os.path.exists(self.state.files[number]) and not os.path.isfile(self.state.files[number]):
            # an error's snippet and a warning read the line a location names from its file: a
            # device or a pipe would be read without end
            raise self._fail(f"file {number}: {self.state.files[number]!r} is no regular file (a "
                             "location names a line of the source file)", path)

    # -- signatures -----------------------------------------------------------------------------

    def params(self, *items: tuple[K.Param, Token]) -> list[tuple[K.Param, Token]]:
        return list(items)

    def param(self, name: Token, direction: Token | None, t: Type) -> tuple[K.Param, Token]:
        return K.Param(name=self._name(name), type=t,
                       direction=str(direction) if direction is not None else None), name

    def outputs(self, *items: K.OutputPort) -> list[K.OutputPort]:
        return list(items)

    def tuple_of_one(self, item: K.OutputPort) -> list[K.OutputPort]:
        return TupleOfOne([item])

    def output(self, name: Token | None, t: Type) -> K.OutputPort:
        return K.OutputPort(name=self._name(name) if name is not None else None, type=t)

    def type(self, word: Token, inner: Type | None) -> Type:
        text = str(word) if inner is None else f"{word}<{inner.text()}>"
        t = self._types.get(text)
        if t is None:
            t = parse_type(text)
            if t is None:
                raise self._fail(f"unknown type {text}", word)
            self._types[text] = t
        return t

    def local_decl(self, name_token: Token, t: Type) -> None:
        name = self._name(name_token)
        if name in self.state.scope:
            raise self._fail(f"duplicate name %{name} (already a parameter or local)", name_token)
        self.state.scope[name] = t
        self.state.locals[name] = t

    # -- functions ------------------------------------------------------------------------------

    def graph_head(self, func: Token, params: list, outputs: list, loc: Token | None) -> Head:
        return self._head(func, params, outputs, loc, graph=True)

    def graph_func(self, head: Head, *items: Node | Edge | InputBind | ConstBind | OutputBind) -> GraphFunc:
        for name, token in self.state.node_refs:
            if name not in self.state.nodes:
                raise self._fail(f"unknown node %{name} in graph @{head.name}", token)
        fn = GraphFunc(name=head.name, params=head.params, outputs=head.outputs, loc=head.loc,
                       tuple_of_one=isinstance(head.outputs, TupleOfOne),
                       nodes=[i for i in items if isinstance(i, Node)],
                       edges=[i for i in items if isinstance(i, Edge)],
                       input_binds=[i for i in items if isinstance(i, InputBind)],
                       output_binds=[i for i in items if isinstance(i, OutputBind)],
                       const_binds=[i for i in items if isinstance(i, ConstBind)],
                       expr_binds=[i for i in items if isinstance(i, ExprBind)])
        return self._define(head, fn)

    def leaf_head(self, func: Token, params: list, outputs: list, target: tuple[str, Token],
                  loc: Token | None) -> Head:
        spec, token = target
        problem = target_problem(spec, leaf=True)
        if problem is not None:
            raise self._fail(f"unknown leaf target {spec}: {problem}", token)
        return self._head(func, params, outputs, loc, extra=canonical_target(spec))

    def leaf_func(self, head: Head, *items: K.Stmt | K.Note | None) -> K.LeafFunc:
        fn = K.LeafFunc(name=head.name, params=head.params, outputs=head.outputs,
                        locals=self.state.locals, body=[s for s in items if isinstance(s, K.Stmt)],
                        target=head.extra, loc=head.loc,
                        notes=[n for n in items if isinstance(n, K.Note)])
        return self._define(head, fn)

    def note_decl(self, name: Token, *items: tuple[str, K.NoteValue, Token]) -> K.Note:
        return K.Note(name=self._word_or_string(name), args=self.options(*items, what="note argument"))


    def helper_head(self, func: Token, params: list, result: Type, loc: Token | None) -> Head:
        if not isinstance(result, (ScalarType, VoidType)):
            raise self._fail(f"a helper returns a scalar type or void, not {result.text()}", func)
        return self._head(func, params, [], loc, extra=result if isinstance(result, ScalarType)
                          else None)

    def helper_func(self, head: Head, *items: K.Stmt | None) -> K.HelperFunc:
        fn = K.HelperFunc(name=head.name, params=head.params, result=head.extra,
                          locals=self.state.locals, body=[s for s in items if s is not None],
                          loc=head.loc)
        return self._define(head, fn)

    def library_func(self, func: Token, kind: Token, options: dict, params: list, outputs: list,
                     loc: Token | None) -> LibraryFunc:
        head = self._head(func, params, outputs, loc)
        fn = LibraryFunc(name=head.name, kind=self._word_or_string(kind), options=options,
                         params=head.params, outputs=head.outputs, loc=head.loc)
        return self._define(head, fn)

    def options(self, *items: tuple[str, Any, Token], what: str = "option") -> dict[str, Any]:
        result: dict[str, Any] = {}
        for key, value, token in items:
            if key in result:
                raise self._fail(f"duplicate {what} {key!r}", token)
            result[key] = value
        return result

    def option(self, key: Token, value: Any) -> tuple[str, Any, Token]:
        if isinstance(value, Token):  # a string (or a note's word); numbers arrive converted
            value = self._word_or_string(value)
        return self._word_or_string(key), value, key

    note_arg = option  # key=value in a note; expressions arrive built

    def _word_or_string(self, token: Token) -> str:
        return self._string(token) if token.type == "STRING" else str(token)

    # -- graph items ----------------------------------------------------------------------------

    def node_decl(self, name_token: Token, func: Token, dims: list[DimExpr] | None,
                  hint: str | None, loc: Token | None) -> Node:
        name = self._name(name_token)
        if name in self.state.nodes:
            raise self._fail(f"duplicate node %{name}", name_token)
        self.state.nodes.add(name)
        self.state.func_refs.append(func)
        return Node(name=name, func=self._name(func), dims=dims or [], hint=hint,
                    loc=self._loc(loc, name_token))

    def dims(self, *items: DimExpr) -> list[DimExpr]:
        return list(items)

    def hint(self, target: tuple[str, Token]) -> str:
        spec, token = target
        problem = target_problem(spec, leaf=False)
        if problem is not None:
            raise self._fail(f"unknown hint {spec}: {problem}", token)
        return canonical_target(spec)

    def target_spec(self, word: Token, index: Token | None) -> tuple[str, Token]:
        """A placement as written ("gpu" or "gpu:1") and the token errors point at."""
        return (str(word) if index is None else f"{word}:{index}"), word

    def dim_bin(self, lhs: DimExpr, op: Token, rhs: DimExpr) -> DimBin:
        # The depth is counted as the parser builds the tree bottom-up (constant time per
        # operator), so that a sum of thousands of terms is refused at the operator that goes too
        # deep rather than overflowing the stack of whatever recurses on it first.
        depths = self.state.dim_depths
        depth = 1 + max(depths.get(id(lhs), 0), depths.get(id(rhs), 0))
        if depth > MAX_EXPR_DEPTH:
            raise VerificationError(f"this integer expression nests operations more than "
                                    f"{MAX_EXPR_DEPTH} deep; compute it in a leaf or pass it as a "
                                    "parameter", self._text_loc(op), "instance-counts")
        expr = DimBin(str(op), lhs, rhs)
        depths[id(expr)] = depth
        return expr

    def dim_const(self, minus: Token | None, number: Token) -> DimConst:
        value = self._int(number)
        return DimConst(-value if minus is not None else value)

    def dim_param(self, token: Token) -> DimParam:
        return DimParam(self._known_var(token))

    def edge_decl(self, src: Token, dst: Token, kind: Token, stream: Token | None,
                  loc: Token | None) -> Edge:
        src_node, src_port = self._node_ref(src)
        dst_node, dst_port = self._node_ref(dst)
        return Edge(src=src_node, src_port=src_port, dst=dst_node, dst_port=dst_port,
                    kind=str(kind),
                    stream=stream is not None, loc=self._loc(loc, src))

    def bind_in(self, source: Token, dst: Token, stream: Token | None,
                loc: Token | None) -> InputBind:
        if source.type == "NUMBER":
            parent_port = self._int(source)
        else:
            parent_port = self.state.params[self._known_var(source)]  # a graph has no locals
        node, port = self._node_ref(dst)
        return InputBind(parent_port=parent_port, dst=node, dst_port=port,
                         stream=stream is not None, loc=self._loc(loc, source))

    def bind_const(self, value: K.Const, dst: Token, loc: Token | None) -> ConstBind:
        node, port = self._node_ref(dst)
        # unlocated, the bind is where its constant is (the `const` rule gave it that position)
        bind_loc = self._loc(loc) if loc is not None else value.loc
        return ConstBind(value=K.Const(value=value.value, type=value.type, loc=bind_loc), dst=node,
                         dst_port=port, loc=bind_loc)

    def bind_expr(self, expr: DimExpr, dst: Token, loc: Token | None) -> ExprBind:
        node, port = self._node_ref(dst)
        return ExprBind(expr=expr, dst=node, dst_port=port, loc=self._loc(loc, dst))

    def bind_out(self, src: Token, parent_port: Token, stream: Token | None,
                 loc: Token | None) -> OutputBind:
        node, port = self._node_ref(src)
        return OutputBind(src=node, src_port=port, parent_port=self._int(parent_port),
                          stream=stream is not None, loc=self._loc(loc, src))

    # -- statements -----------------------------------------------------------------------------

    def block(self, *stmts: K.Stmt) -> list[K.Stmt]:
        return list(stmts)

    def assign(self, target: Token, value: K.Expr, loc: Token | None) -> K.Stmt:
        return self._stmt(K.Assign(target=self._known_var(target), value=value), loc, target)

    def store(self, ptr: Token, index: K.Expr, value: K.Expr, rank: K.Expr | None,
              loc: Token | None) -> K.Stmt:
        return self._stmt(K.Store(ptr=self._at(self._var(ptr), ptr), index=index, value=value,
                                  rank=rank), loc, ptr)

    def do_stmt(self, value: K.Expr, loc: Token | None) -> K.Stmt:
        return self._stmt(K.ExprStmt(value=value), loc)

    def if_stmt(self, cond: K.Expr, loc: Token | None, then: list[K.Stmt],
                orelse: list[K.Stmt] | None) -> K.Stmt:
        return self._stmt(K.If(cond=cond, then=then, orelse=orelse or []), loc)

    def for_stmt(self, var: Token, start: K.Expr, stop: K.Expr, step: K.Expr, loc: Token | None,
                 body: list[K.Stmt]) -> K.Stmt:
        return self._stmt(K.For(var=self._known_var(var), start=start, stop=stop, step=step,
                                body=body), loc, var)

    def while_stmt(self, cond: K.Expr, loc: Token | None, body: list[K.Stmt]) -> K.Stmt:
        return self._stmt(K.While(cond=cond, body=body), loc)

    def break_stmt(self, word: Token, loc: Token | None) -> K.Stmt:
        return self._stmt(K.Break(), loc, word)

    def continue_stmt(self, word: Token, loc: Token | None) -> K.Stmt:
        return self._stmt(K.Continue(), loc, word)

    def barrier_stmt(self, word: Token, loc: Token | None) -> K.Stmt:
        return self._stmt(K.Barrier(), loc, word)

    def breakpoint_stmt(self, word: Token, loc: Token | None) -> K.Stmt:
        return self._stmt(K.Breakpoint(), loc, word)

    def return_stmt(self, word: Token, *items: Any) -> K.Stmt:
        *values, loc = items
        # at its first value; `return ()` has no other position than its keyword's
        return self._stmt(K.Return(values=values), loc, None if values else word)

    def print_stmt(self, word: Token, *items: Any) -> K.Stmt:
        *values, loc = items
        converted = [self._string(v) if isinstance(v, Token) else v for v in values]
        # at its first expression; `print("text")` at its keyword
        at = None if any(isinstance(v, K.Expr) for v in converted) else word
        return self._stmt(K.Print(values=converted), loc, at)

    # -- expressions ----------------------------------------------------------------------------

    def const(self, value: int | float | bool, t: Type) -> K.Const:
        number = self.state.number  # signed_number was reduced just before this rule
        const = K.Const(value=value, type=t)
        return self._at(const, number) if number is not None else const

    def signed_number(self, minus: Token | None, token: Token) -> int | float | bool:
        self.state.number = minus if minus is not None else token
        if token in ("true", "false"):
            if minus is not None:
                raise self._fail(f"malformed number -{token!s}", minus)
            return token == "true"
        if token.type == "NUMBER" and token.isdigit():
            value: int | float = self._int(token)
        elif token.type == "NAN_BITS":  # nan(0x...): the NaN of these bits, payload and sign kept
            value = struct.unpack(">d", bytes.fromhex(token[6:-1]))[0]
        else:
            value = float(token)  # the NUMBER terminal, inf and nan all read as floats
        return -value if minus is not None else value

    def var(self, token: Token) -> K.Var:
        return self._at(self._var(token), token)

    def callee(self, *words: Token) -> tuple[str, Token]:
        return ".".join(words), words[0]

    def op_call(self, callee: tuple[str, Token], t: Type | None, *args: K.Expr | Token) -> K.Expr:
        name, token = callee
        spec = OPERATIONS.get(name)
        if spec is None:
            raise self._fail(f"unknown operation {name}", token)
        if spec.typed and t is None:
            raise self._fail(f"{name} needs its result type: {name}<type>(...)", token)
        if not spec.typed and t is not None:
            raise self._fail(f"{name} takes no <type>: its result type is fixed", token)
        if len(args) != len(spec.args):
            raise self._fail(f"{name} takes {len(spec.args)} argument(s), got {len(args)}", token)
        values = [self._arg(kind, arg, name, token) for kind, arg in zip(spec.args, args)]
        return self._at(spec.build(t, values), token)

    def _arg(self, kind: str, arg: K.Expr | Token, name: str, token: Token) -> Any:
        if kind == "l" and isinstance(arg, Token):
            return self._int(arg)
        if kind == "e" and isinstance(arg, K.Expr):
            return arg
        if kind == "v" and isinstance(arg, K.Var):
            return arg
        raise self._fail(f"{name}: expected {_ARG_KINDS[kind]} as argument", token)

    def helper_call(self, func: Token, t: Type, *args: K.Expr | Token) -> K.CallHelper:
        self.state.func_refs.append(func)
        return self._at(K.CallHelper(func=self._name(func), args=list(args), type=t), func)
