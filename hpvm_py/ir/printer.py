"""Print a Module as textual IR (the format is described in parser.py, which reads it back).

The text is deterministic: functions in Module.functions order, statements and graph items in
list order, locals in dict order, and the `file` table in the order the printer first meets each
file. parse_module(print_module(m)) == m, and printing that again gives the same text.
"""
from __future__ import annotations

import json
import math
import os
import re
import struct

from ..types import Type
from . import kernel as K
from .dfg import (ConstBind, Edge, ExprBind, GraphFunc, InputBind, LibraryFunc, Module, Node, OutputBind,
                  dim_text)
from ..support.loc import UNKNOWN, Loc, TextLoc
from .text_version import IR_VERSION

# Bare words that the grammar reserves; a library kind or option key equal to one of them is
# printed as a string instead (tests/test_text_ir.py checks this list against grammar.lark).
KEYWORDS = frozenset({
    "module", "file", "graph", "leaf", "func", "library", "local", "target", "kind", "options",
    "in", "out", "inout", "node", "edge", "bind_in", "bind_out", "bind_const", "bind_expr", "hint",
    "stream", "one_to_one", "all_to_all", "store", "on", "do", "if", "else", "for", "range", "while", "break", "continue",
    "return", "barrier", "print", "breakpoint", "call", "inf", "nan", "true", "false", "note",
    "version",
})


_PLAIN_NAME = re.compile(r"[^\W\d][\w.]*")
_PLAIN_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DIM_LETTERS = "xyz"
_INDENT = "  "


def print_module(module: Module) -> str:
    """The textual IR of module."""
    printer = _Printer()
    functions = [printer.function(fn) for fn in module.functions.values()]
    header = ["; hpvm-py textual IR", f"version {IR_VERSION}", f"module {func_ref(module.root)}"]
    header += [f"file {index} {_string(path)}" for index, path in enumerate(printer.files)]
    return "\n\n".join(["\n".join(header)] + functions) + "\n"


# ----------------------------------------------------------------------------------------------
# Names and literals, public so that messages and tests can print single items


def var_ref(name: str) -> str:
    """`%name`, quoted as a JSON string when it is not a plain name."""
    return "%" + (name if _PLAIN_NAME.fullmatch(name) else _string(name))


def func_ref(name: str) -> str:
    return "@" + (name if _PLAIN_NAME.fullmatch(name) else _string(name))


def port_ref(node: str, port: int) -> str:
    return f"{var_ref(node)}.{port}"


def _word_or_string(text: str) -> str:
    """A library kind or option key: a bare word unless that would not read back as itself."""
    if _PLAIN_WORD.fullmatch(text) and text not in KEYWORDS:
        return text
    return _string(text)


def _string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def literal(value: int | float | bool | str) -> str:
    """A constant's value: repr for floats (exact, and inf / nan / -0.0 included; a NaN with its
    sign bit set is -nan, and one with another payload nan(0x<its bits>): compiled code stores
    the NaN as such, and repr writes every NaN as nan)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, float) and value != value:
        bits = struct.pack(">d", value).hex()
        return {_QUIET_NAN: "nan", _NEGATIVE_QUIET_NAN: "-nan"}.get(bits, f"nan(0x{bits})")
    if isinstance(value, float):
        return repr(float(value))  # (a NumPy float64 is a float whose repr is np.float64(...))
    return str(value)


_QUIET_NAN = struct.pack(">d", math.nan).hex()
_NEGATIVE_QUIET_NAN = struct.pack(">d", -math.nan).hex()


# ----------------------------------------------------------------------------------------------


class _Printer:
    """Prints functions, collecting the file table as it goes."""

    def __init__(self) -> None:
        self.files: list[str] = []
        self._file_index: dict[str, int] = {}
        self._cwd = os.getcwd()

    # -- locations ------------------------------------------------------------------------------

    def loc(self, loc: Loc) -> str:
        """` @F:LINE:COL`, or nothing for an unknown location or a mere position in the .hpvm
        text the item was read from (it was written without a location)."""
        if loc == UNKNOWN or isinstance(loc, TextLoc):
            return ""
        # Keyed by the printed path, so that two spellings of one file share an entry and the
        # table is the same when the parsed module is printed again.
        path = self._display_path(loc.file)
        index = self._file_index.get(path)
        if index is None:
            index = self._file_index[path] = len(self.files)
            self.files.append(path)
        return f" @{index}:{loc.line}:{loc.col}"

    def _display_path(self, path: str) -> str:
        """Paths under the working directory print relative to it, so the text is portable."""
        if os.path.isabs(path) and path.startswith(self._cwd + os.sep):
            return os.path.relpath(path, self._cwd)
        return path

    # -- functions ------------------------------------------------------------------------------

    def function(self, fn: K.LeafFunc | K.HelperFunc | GraphFunc | LibraryFunc) -> str:
        if isinstance(fn, GraphFunc):
            return self.graph(fn)
        if isinstance(fn, K.LeafFunc):
            head = (f"leaf {func_ref(fn.name)}{_params(fn.params)} -> {_outputs(fn.outputs)} "
                    f"target({fn.target}){self.loc(fn.loc)} {{")
            return self.body(head, fn.locals, fn.body, fn.notes)
        if isinstance(fn, K.HelperFunc):
            result = fn.result.text() if fn.result is not None else "void"
            head = f"func {func_ref(fn.name)}{_params(fn.params)} -> {result}{self.loc(fn.loc)} {{"
            return self.body(head, fn.locals, fn.body)
        options = ", ".join(f"{_word_or_string(key)}={literal(value)}"
                            for key, value in fn.options.items())
        return (f"library {func_ref(fn.name)} kind({_word_or_string(fn.kind)}) options({options}) "
                f"{_params(fn.params)} -> {_outputs(fn.outputs)}{self.loc(fn.loc)}")

    def graph(self, fn: GraphFunc) -> str:
        lines = [f"graph {func_ref(fn.name)}{_params(fn.params)} -> {_outputs(fn.outputs, fn.tuple_of_one)}"
                 f"{self.loc(fn.loc)} {{"]
        lines += [_INDENT + self.node(n) for n in fn.nodes]
        lines += [_INDENT + self.edge(e) for e in fn.edges]
        param_names = [p.name for p in fn.params]
        lines += [_INDENT + self.input_bind(b, param_names) for b in fn.input_binds]
        lines += [_INDENT + self.const_bind(b) for b in fn.const_binds]
        lines += [_INDENT + self.expr_bind(b) for b in fn.expr_binds]
        lines += [_INDENT + self.output_bind(b) for b in fn.output_binds]
        lines.append("}")
        return "\n".join(lines)

    def node(self, node: Node) -> str:
        text = f"node {var_ref(node.name)} = {func_ref(node.func)}"
        if node.dims:
            text += " [" + ", ".join(dim_text(d) for d in node.dims) + "]"
        if node.hint is not None:
            text += f" hint({node.hint})"
        return text + self.loc(node.loc)

    def edge(self, edge: Edge) -> str:
        stream = " stream" if edge.stream else ""
        return (f"edge {port_ref(edge.src, edge.src_port)} -> {port_ref(edge.dst, edge.dst_port)} "
                f"{edge.kind}{stream}{self.loc(edge.loc)}")

    def input_bind(self, bind: InputBind, param_names: list[str]) -> str:
        # The parent input prints as its parameter's name; an index that names no parameter (IR
        # not yet verified) prints as the bare index so that it can still be dumped and read back.
        if 0 <= bind.parent_port < len(param_names):
            source = var_ref(param_names[bind.parent_port])
        else:
            source = str(bind.parent_port)
        stream = " stream" if bind.stream else ""
        return (f"bind_in {source} -> {port_ref(bind.dst, bind.dst_port)}{stream}"
                f"{self.loc(bind.loc)}")

    def const_bind(self, bind: ConstBind) -> str:
        return f"bind_const {expr(bind.value)} -> {port_ref(bind.dst, bind.dst_port)}{self.loc(bind.loc)}"

    def expr_bind(self, bind: ExprBind) -> str:
        return f"bind_expr {dim_text(bind.expr)} -> {port_ref(bind.dst, bind.dst_port)}{self.loc(bind.loc)}"

    def output_bind(self, bind: OutputBind) -> str:
        stream = " stream" if bind.stream else ""
        return (f"bind_out {port_ref(bind.src, bind.src_port)} -> {bind.parent_port}{stream}"
                f"{self.loc(bind.loc)}")

    # -- leaf and helper bodies -----------------------------------------------------------------

    def body(self, head: str, locals_: dict[str, Type], body: K.Block,
             notes: list[K.Note] | None = None) -> str:
        lines = [head]
        lines += [f"{_INDENT}local {var_ref(name)}: {t.text()}" for name, t in locals_.items()]
        lines += [_INDENT + note(n) for n in notes or ()]
        self.block(body, 1, lines)
        lines.append("}")
        return "\n".join(lines)

    def block(self, block: K.Block, depth: int, lines: list[str]) -> None:
        for stmt in block:
            self.stmt(stmt, depth, lines)

    def stmt(self, stmt: K.Stmt, depth: int, lines: list[str]) -> None:
        pad = _INDENT * depth
        loc = self.loc(stmt.loc)
        if isinstance(stmt, K.If):
            lines.append(f"{pad}if {expr(stmt.cond)} {{{loc}")
            self.block(stmt.then, depth + 1, lines)
            if stmt.orelse:
                lines.append(f"{pad}}} else {{")
                self.block(stmt.orelse, depth + 1, lines)
            lines.append(pad + "}")
        elif isinstance(stmt, K.For):
            lines.append(f"{pad}for {var_ref(stmt.var)} = range({expr(stmt.start)}, "
                         f"{expr(stmt.stop)}, {expr(stmt.step)}) {{{loc}")
            self.block(stmt.body, depth + 1, lines)
            lines.append(pad + "}")
        elif isinstance(stmt, K.While):
            lines.append(f"{pad}while {expr(stmt.cond)} {{{loc}")
            self.block(stmt.body, depth + 1, lines)
            lines.append(pad + "}")
        else:
            lines.append(pad + _simple_stmt(stmt) + loc)


def _simple_stmt(stmt: K.Stmt) -> str:
    """A statement without a nested block, without its location."""
    if isinstance(stmt, K.Assign):
        return f"{var_ref(stmt.target)} = {expr(stmt.value)}"
    if isinstance(stmt, K.Store):
        rank = f" on {expr(stmt.rank)}" if stmt.rank is not None else ""
        return f"store {var_ref(stmt.ptr.name)}[{expr(stmt.index)}] = {expr(stmt.value)}{rank}"
    if isinstance(stmt, K.ExprStmt):
        return f"do {expr(stmt.value)}"
    if isinstance(stmt, K.Return):
        return f"return ({_args(stmt.values)})"
    if isinstance(stmt, K.Print):
        items = (_string(v) if isinstance(v, str) else expr(v) for v in stmt.values)
        return f"print({', '.join(items)})"
    keyword = _KEYWORD_STMTS.get(type(stmt))
    if keyword is None:
        raise TypeError(f"cannot print statement {type(stmt).__name__}")
    return keyword


_KEYWORD_STMTS: dict[type, str] = {
    K.Break: "break", K.Continue: "continue", K.Barrier: "barrier", K.Breakpoint: "breakpoint",
}


def expr(e: K.Expr) -> str:
    """An expression. Operations whose result type is fixed (compare, land/lor, instance queries)
    do not print it; every other operation names its result type in `<...>`."""
    if isinstance(e, K.Const):
        return f"{literal(e.value)}:{e.type.text()}"
    if isinstance(e, K.Var):
        return var_ref(e.name)
    t = e.type.text()
    if isinstance(e, K.BinOp):
        return f"{e.op}<{t}>({expr(e.lhs)}, {expr(e.rhs)})"
    if isinstance(e, K.UnaryOp):
        return f"{e.op}<{t}>({expr(e.operand)})"
    if isinstance(e, (K.Compare, K.Logical)):
        return f"{e.op}({expr(e.lhs)}, {expr(e.rhs)})"
    if isinstance(e, K.Select):
        return f"select<{t}>({expr(e.cond)}, {expr(e.if_true)}, {expr(e.if_false)})"
    if isinstance(e, K.Cast):
        return f"cast<{t}>({expr(e.value)})"
    if isinstance(e, K.Load):
        if e.rank is not None:
            return f"remote_load<{t}>({var_ref(e.ptr.name)}, {expr(e.index)}, {expr(e.rank)})"
        return f"load<{t}>({var_ref(e.ptr.name)}, {expr(e.index)})"
    if isinstance(e, K.MathCall):
        return f"math.{e.name}<{t}>({_args(e.args)})"
    if isinstance(e, K.CallHelper):
        return f"call {func_ref(e.func)}<{t}>({_args(e.args)})"
    if isinstance(e, K.InstanceId):
        return f"instance_id.{_DIM_LETTERS[e.dim]}({e.level})"
    if isinstance(e, K.NumInstances):
        return f"num_instances.{_DIM_LETTERS[e.dim]}({e.level})"
    if isinstance(e, K.NumDims):
        return f"num_dims({e.level})"
    if isinstance(e, K.Atomic):
        operands = f"{var_ref(e.ptr.name)}, {expr(e.index)}, {expr(e.value)}"
        if e.rank is not None:
            return f"remote_atomic.{e.op}<{t}>({operands}, {expr(e.rank)})"
        return f"atomic.{e.op}<{t}>({operands})"
    if isinstance(e, K.Malloc):
        return f"malloc<{t}>({expr(e.nbytes)})"
    raise TypeError(f"cannot print expression {type(e).__name__}")


def note(n: K.Note) -> str:
    """`note NAME(key=value, ...)`: a backend pass's decision (kernel.Note)."""
    return f"note {_word_or_string(n.name)}({', '.join(f'{_word_or_string(key)}={_note_value(v)}' for key, v in n.args.items())})"


def _note_value(value: K.NoteValue) -> str:
    if isinstance(value, K.Expr):
        return expr(value)
    if isinstance(value, str):
        return _word_or_string(value)
    return literal(value)  # true / false, or a number


def _args(values: list[K.Expr]) -> str:
    return ", ".join(expr(v) for v in values)


def _params(params: list[K.Param]) -> str:
    return "(" + ", ".join(_param(p) for p in params) + ")"


def _param(p: K.Param) -> str:
    direction = f"{p.direction} " if p.direction is not None else ""
    return f"{var_ref(p.name)}: {direction}{p.type.text()}"


def _outputs(outputs: list[K.OutputPort], tuple_of_one: bool = False) -> str:
    items = (f"{var_ref(o.name)}: {o.type.text()}" if o.name is not None else o.type.text()
             for o in outputs)
    # `(T,)` as in Python: a root annotated `-> tuple[T]` gives a 1-tuple, not the value
    return "(" + ", ".join(items) + ("," if tuple_of_one and len(outputs) == 1 else "") + ")"
