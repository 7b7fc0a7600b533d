"""Kernel IR → Python source for the python target.

The generated function keeps the user's variable names, and every line is mapped back to the
user's file and line before it is compiled, so pdb, breakpoint(), print() and tracebacks show the
leaf's own source. Two shapes:

- per-instance: one call per dynamic instance, with NumPy scalars; a body with barrier() becomes a
  generator that yields at each barrier, and the launcher steps the instances of a group in turns;
- vector: one call for all instances, with one array element per instance. Chosen when every
  branch on per-instance values can be turned into masks (if-conversion) and loops, breaks and
  returns are uniform; it runs a 100k-element vadd in milliseconds.
"""
from __future__ import annotations

import ast
import keyword
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import CompileError
from ...ir import kernel as K
from ...ir import semantics as S
from ...ir.printer import literal
from ...types import PtrType, ScalarType, Type, bf16
from ..base import NodeContext, unparenthesized
from . import ops, remote_access

# names the generated code defines itself: the runtime's helpers and the extra parameters (the
# malloc group, vector lanes, remote peers); instance queries (id_0x, n_1y) and temporaries (_t3)
# follow the patterns of _GENERATED; a user's name of either kind gets a prefix
_RUNTIME_NAMES = ("np", "hp_load", "hp_store", "hp_vload", "hp_vstore", "hp_atomic", "hp_vatomic",
                  "hp_range", "hp_where", "hp_rload", "hp_rstore", "hp_ratomic_add", "peers", "group", "lanes")
_GENERATED = re.compile(r"(id|n)_\d+[xyz]|_.*")


@dataclass
class GeneratedLeaf:
    """A compiled python-target leaf: the function and how to call it."""

    source: str
    function: Any
    vector: bool
    generator: bool
    id_params: list[tuple[str, int, int]]  # (name, level, dim) of instance ids, in call order
    count_params: list[tuple[str, int, int]]  # (name, level, dim) of instance counts
    uses_malloc: bool
    remote: bool  # the leaf has remote accesses: the function takes the launch's Peers last
    sites: list[K.Load | K.Store | K.Atomic]  # the accesses, by the index the ops helpers get
    namespace: dict[str, Any] = field(repr=False, default_factory=dict)


def vector_eligible(leaf: K.LeafFunc, ctx: NodeContext) -> bool:
    return _VectorCheck(leaf, ctx).ok


def generate(leaf: K.LeafFunc, ctx: NodeContext, vector: bool) -> GeneratedLeaf:
    return _Generator(leaf, ctx, vector).run()


# ----------------------------------------------------------------------------------------------
# Which values differ between instances, and can the body run on whole arrays?


class _VectorCheck:
    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext):
        self.leaf = leaf
        self.varying_params = {p.name for p, mode in zip(leaf.params, ctx.input_modes)
                               if mode in ("per_parent", "per_instance")}
        self.varying = varying_variables(leaf, self.varying_params)
        # remote accesses run instance by instance: ranks and peers' copies per access
        self.ok = not any(K.remote_accesses(leaf.body)) and self._block(leaf.body, masked=False, top=True)

    def is_varying(self, e: K.Expr) -> bool:
        return expr_varies(e, self.varying)

    def _block(self, block: K.Block, masked: bool, top: bool = False) -> bool:
        for i, stmt in enumerate(block):
            if not self._stmt(stmt, masked, last_top=top and i == len(block) - 1):
                return False
        return True

    def _stmt(self, stmt: K.Stmt, masked: bool, last_top: bool) -> bool:
        if isinstance(stmt, (K.Print, K.Breakpoint)):
            return False
        if isinstance(stmt, K.Return):
            return last_top
        if isinstance(stmt, (K.Break, K.Continue)):
            return not masked
        if isinstance(stmt, K.Barrier):
            return not masked
        for top in K.child_exprs(stmt):
            for e in K.walk_exprs(top):
                if isinstance(e, K.Malloc):
                    return False
                if isinstance(e, K.Atomic) and (e is not top or not isinstance(stmt, K.ExprStmt)
                                                or not ops.vector_atomic(e.op, e.type)):
                    return False
        if isinstance(stmt, K.If):
            inner = masked or self.is_varying(stmt.cond)
            return self._block(stmt.then, inner) and self._block(stmt.orelse, inner)
        if isinstance(stmt, K.For):
            # under a mask a load is an array (hp_vload), even at a uniform index: no Python range
            if any(self.is_varying(e) or (masked and reads_memory(e))
                   for e in (stmt.start, stmt.stop, stmt.step)):
                return False
            return self._block(stmt.body, masked)
        if isinstance(stmt, K.While):
            if masked or self.is_varying(stmt.cond):
                return False
            return self._block(stmt.body, masked)
        return True


def varying_variables(leaf: K.LeafFunc, varying_params: set[str]) -> set[str]:
    """Locals whose value may differ between instances (a fixpoint over assignments)."""
    varying = set(varying_params)
    changed = True
    while changed:
        changed = False
        for name in _assigned_varying(leaf.body, varying, masked=False):
            if name not in varying:
                varying.add(name)
                changed = True
    return varying


def _assigned_varying(block: K.Block, varying: set[str], masked: bool) -> set[str]:
    out: set[str] = set()
    for stmt in block:
        if isinstance(stmt, K.Assign) and (masked or expr_varies(stmt.value, varying)):
            out.add(stmt.target)
        elif isinstance(stmt, K.If):
            inner = masked or expr_varies(stmt.cond, varying)
            out |= _assigned_varying(stmt.then, varying, inner)
            out |= _assigned_varying(stmt.orelse, varying, inner)
        elif isinstance(stmt, K.For):
            if masked or any(expr_varies(e, varying) for e in (stmt.start, stmt.stop, stmt.step)):
                out.add(stmt.var)
            out |= _assigned_varying(stmt.body, varying, masked)
        elif isinstance(stmt, K.While):
            out |= _assigned_varying(stmt.body, varying, masked or expr_varies(stmt.cond, varying))
    return out


def reads_memory(e: K.Expr) -> bool:
    return any(isinstance(sub, K.Load) for sub in K.walk_exprs(e))


def expr_varies(e: K.Expr, varying: set[str]) -> bool:
    for sub in K.walk_exprs(e):
        if isinstance(sub, K.Var) and sub.name in varying:
            return True
        if isinstance(sub, (K.InstanceId, K.Atomic, K.Malloc)):
            return True
    return False


# ----------------------------------------------------------------------------------------------
# Code generation


def _identifier(name: str) -> str:
    ident = name.replace(".", "__")
    if (not ident.isidentifier() or keyword.iskeyword(ident) or ident in _RUNTIME_NAMES
            or _GENERATED.fullmatch(ident)):
        ident = f"v_{ident}" if ident.isidentifier() else "v_" + "".join(
            c if c.isalnum() else "_" for c in ident)
    return ident


class _Generator:
    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext, vector: bool):
        self.leaf = leaf
        self.ctx = ctx
        self.vector = vector
        self.lines: list[tuple[int, str]] = []  # (user line, text)
        self.indent = 1
        self.namespace: dict[str, Any] = {
            "np": np, "hp_load": ops.load, "hp_store": ops.store, "hp_vload": ops.vload,
            "hp_vstore": ops.vstore, "hp_atomic": ops.atomic, "hp_vatomic": ops.vatomic,
            "hp_range": ops.py_range, "hp_where": np.where, "hp_rload": remote_access.rload,
            "hp_rstore": remote_access.rstore, "hp_ratomic_add": remote_access.ratomic_add,
        }
        self.names: dict[str, str] = {}
        used = set()
        for name in [p.name for p in leaf.params] + list(leaf.locals):
            ident = _identifier(name)
            while ident in used:
                ident += "_"
            used.add(ident)
            self.names[name] = ident
        self.types: dict[str, Type] = {p.name: p.type for p in leaf.params}
        self.types.update(leaf.locals)
        self.id_params: dict[tuple[int, int], str] = {}
        self.count_params: dict[tuple[int, int], str] = {}
        self.temp = 0
        self.sites: list[K.Load | K.Store | K.Atomic] = []
        self.generator = any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body)) and not vector
        self.uses_malloc = any(isinstance(e, K.Malloc) for e in K.walk_all_exprs(leaf.body))
        # a malloc size names the node's inputs (the front end substituted the values the variables
        # it read held there), so a parameter the body reassigns is read from a copy made on entry
        sized = {v.name for e in K.walk_all_exprs(leaf.body) if isinstance(e, K.Malloc)
                 for v in K.walk_exprs(e.nbytes) if isinstance(v, K.Var)}
        self.inputs = {p.name: f"_in_{self.names[p.name]}" for p in leaf.params
                       if p.name in sized and p.name in K.assignments(leaf.body)}
        self.remote = any(K.remote_accesses(leaf.body))
        varying_params = {p.name for p, mode in zip(leaf.params, ctx.input_modes)
                          if mode in ("per_parent", "per_instance")}
        self.varying = varying_variables(leaf, varying_params) if vector else set()
        self._collect_queries()

    # -- helpers ----------------------------------------------------------------------------

    def emit(self, loc_line: int, text: str) -> None:
        self.lines.append((loc_line, "    " * self.indent + text))

    def fresh(self, base: str) -> str:
        self.temp += 1
        return f"_{base}{self.temp}"

    def constant(self, value: Any, t: ScalarType) -> str:
        """A module-level name for a typed constant (keeps per-instance code cheap and readable)."""
        # (as the text writes it: a NaN with its sign bit set is -nan, a name of its own)
        text = literal(value).replace("-", "m").replace(".", "p").replace("+", "").replace("'", "")
        name = f"{t.name}_{text}"
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        name = "c_" + name
        if name not in self.namespace:
            with np.errstate(over="ignore"):  # a literal beyond the type's range becomes inf
                self.namespace[name] = S.value_dtype(t).type(value) if not t.is_bool else np.bool_(value)
        return name

    def helper(self, prefix: str, obj: Any) -> str:
        name = f"hp_{prefix}"
        self.namespace.setdefault(name, obj)
        return name

    def _collect_queries(self) -> None:
        for e in K.walk_all_exprs(self.leaf.body):
            if isinstance(e, K.InstanceId):
                self.id_params.setdefault((e.level, e.dim), f"id_{e.level}{'xyz'[e.dim]}")
            elif isinstance(e, K.NumInstances):
                self.count_params.setdefault((e.level, e.dim), f"n_{e.level}{'xyz'[e.dim]}")

    # -- driver -----------------------------------------------------------------------------

    def run(self) -> GeneratedLeaf:
        leaf = self.leaf
        params = [self.names[p.name] for p in leaf.params]
        params += list(self.id_params.values()) + list(self.count_params.values())
        if self.vector:
            params.append("lanes")
        if self.uses_malloc:
            params.append("group")
        if self.remote:
            params.append("peers")
        header_line = leaf.loc.line
        self.lines.append((header_line, f"def {_identifier(leaf.name)}({', '.join(params)}):"))
        for name, copy in self.inputs.items():
            self.emit(header_line, f"{copy} = {self.names[name]}")
        for name, t in leaf.locals.items():
            if isinstance(t, ScalarType):
                self.emit(header_line, f"{self.names[name]} = {self.constant(0, t) if not t.is_bool else self.constant(False, t)}")
        self.block(leaf.body, mask=None)
        if self.generator:
            self.emit(header_line, "return None")
            self.emit(header_line, "yield")  # makes the function a generator even with no path to a barrier
        elif not self.lines[-1][1].strip() or len(self.lines) == 1:
            self.emit(header_line, "pass")
        source = "\n".join(text for _, text in self.lines) + "\n"
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise self.beyond_python(exc) from None
        line_map = [line for line, _ in self.lines]
        for node in ast.walk(tree):
            if hasattr(node, "lineno"):
                node.lineno = max(1, line_map[node.lineno - 1])
                end = getattr(node, "end_lineno", None)
                node.end_lineno = max(1, line_map[end - 1]) if end else node.lineno
                if node.end_lineno < node.lineno:
                    node.end_lineno = node.lineno
        filename = leaf.loc.file
        try:
            code = compile(tree, filename, "exec")
        except SyntaxError as exc:
            raise self.beyond_python(exc) from None
        exec(code, self.namespace)  # noqa: S102 - our own generated code
        function = self.namespace[_identifier(leaf.name)]
        return GeneratedLeaf(source=source, function=function, vector=self.vector,
                             generator=self.generator,
                             id_params=[(n, lvl, d) for (lvl, d), n in self.id_params.items()],
                             count_params=[(n, lvl, d) for (lvl, d), n in self.count_params.items()],
                             uses_malloc=self.uses_malloc, remote=self.remote, sites=self.sites,
                             namespace=self.namespace)

    def beyond_python(self, exc: SyntaxError) -> CompileError:
        """Python's own limits on the generated code (100 levels of indentation, 20 nested
        loops), which a body read from textual IR may pass: its blocks nest up to 128 deep."""
        return CompileError(f"the python target cannot run {K.shown_name(self.leaf)}: Python refuses the "
                            f"code it becomes ({exc.msg}); run it on cpu", self.leaf.loc)

    def site(self, access: K.Load | K.Store | K.Atomic) -> int:
        """The number by which the generated code names an access (its errors point at it)."""
        self.sites.append(access)
        return len(self.sites) - 1

    # -- statements -------------------------------------------------------------------------

    def block(self, block: K.Block, mask: str | None) -> None:
        start = len(self.lines)
        for stmt in block:
            self.stmt(stmt, mask)
        if len(self.lines) == start:
            line = block[0].loc.line if block else (self.lines[-1][0] if self.lines else 1)
            self.emit(line, "pass")

    def stmt(self, stmt: K.Stmt, mask: str | None) -> None:
        line = stmt.loc.line
        if isinstance(stmt, K.Assign):
            value = self.expr(stmt.value, mask, line)
            target = self.names[stmt.target]
            if mask is not None:
                value = f"hp_where({mask}, {unparenthesized(value)}, {target})"
            self.emit(line, f"{target} = {value}")
        elif isinstance(stmt, K.Store):
            self.store(stmt, mask, line)
        elif isinstance(stmt, K.ExprStmt):
            if isinstance(stmt.value, K.Atomic) and self.vector:
                a = stmt.value
                index = self.expr(a.index, mask, line)
                value = self.expr(a.value, mask, line)
                self.emit(line, f"hp_vatomic({self.site(a)}, {a.op!r}, {self.names[a.ptr.name]}, "
                                f"{index}, {value}, {mask or 'None'}, lanes)")
            else:
                self.emit(line, self.expr(stmt.value, mask, line))
        elif isinstance(stmt, K.If):
            self.if_stmt(stmt, mask, line)
        elif isinstance(stmt, K.For):
            self.for_stmt(stmt, mask, line)
        elif isinstance(stmt, K.While):
            self.emit(line, f"while {self.expr(stmt.cond, mask, line)}:")
            self.indent += 1
            self.block(stmt.body, mask)
            self.indent -= 1
        elif isinstance(stmt, K.Break):
            self.emit(line, "break")
        elif isinstance(stmt, K.Continue):
            self.emit(line, "continue")
        elif isinstance(stmt, K.Return):
            values = [self.expr(v, mask, line) for v in stmt.values]
            self.emit(line, f"return ({', '.join(values)}{',' if values else ''})")
        elif isinstance(stmt, K.Barrier):
            self.emit(line, "yield" if self.generator else "pass  # barrier: lockstep in vector mode")
        elif isinstance(stmt, K.Print):
            items = [repr(v) if isinstance(v, str) else self.expr(v, mask, line) for v in stmt.values]
            self.emit(line, f"print({', '.join(items)})")
        elif isinstance(stmt, K.Breakpoint):
            self.emit(line, "breakpoint()")
        else:
            raise CompileError(f"the python target cannot run {type(stmt).__name__}", stmt.loc)

    def store(self, stmt: K.Store, mask: str | None, line: int) -> None:
        ptr = self.names[stmt.ptr.name]
        index = self.expr(stmt.index, mask, line)
        value = self.expr(stmt.value, mask, line)
        if stmt.rank is not None:
            rank = self.expr(stmt.rank, mask, line)
            self.emit(line, f"hp_rstore({self.site(stmt)}, peers, {ptr}, {index}, {value}, {rank})")
            return
        varying = self.vector and (mask is not None or expr_varies(stmt.index, self.varying)
                                   or expr_varies(stmt.value, self.varying))
        if varying:
            self.emit(line, f"hp_vstore({self.site(stmt)}, {ptr}, {index}, {value}, {mask or 'None'}, "
                            "lanes)")
        else:
            self.emit(line, f"hp_store({self.site(stmt)}, {ptr}, {index}, {value})")

    def varies(self, e: K.Expr, mask: str | None) -> bool:
        """Whether `e` is an array in the generated code: a per-instance value, or, under a mask,
        anything that loads (a masked load is an hp_vload, one element per lane, even at a uniform
        index), which Python's `if`, `and` and `x if c else y` cannot test."""
        return self.vector and (expr_varies(e, self.varying) or (mask is not None and reads_memory(e)))

    def if_stmt(self, stmt: K.If, mask: str | None, line: int) -> None:
        cond = self.expr(stmt.cond, mask, line)
        if not self.varies(stmt.cond, mask):
            self.emit(line, f"if {cond}:")
            self.uniform_arms(stmt, mask)
            return
        # if-conversion: both sides run, each under its mask
        c = self.fresh("c")
        self.emit(line, f"{c} = {cond}")
        then_mask = self.fresh("m")
        self.emit(line, f"{then_mask} = {c}" if mask is None else f"{then_mask} = {mask} & {c}")
        self.block(stmt.then, then_mask)
        if stmt.orelse:
            else_mask = self.fresh("m")
            self.emit(line, f"{else_mask} = ~{c}" if mask is None else f"{else_mask} = {mask} & ~{c}")
            self.block(stmt.orelse, else_mask)

    def uniform_arms(self, stmt: K.If, mask: str | None) -> None:
        """The arms of an `if` whose condition is the same for every lane, after its `if` line.
        An `else` holding only another such `if` (an elif chain) is written `elif`, at the same
        depth: written `else: if`, a chain of 100 would pass Python's limit of 100 indentation
        levels. (A uniform condition emits no lines of its own: see uniform_select.)"""
        while True:
            self.indent += 1
            self.block(stmt.then, mask)
            self.indent -= 1
            inner = stmt.orelse[0] if len(stmt.orelse) == 1 else None
            if not isinstance(inner, K.If) or self.varies(inner.cond, mask):
                break
            self.emit(inner.loc.line, f"elif {self.expr(inner.cond, mask, inner.loc.line)}:")
            stmt = inner
        if stmt.orelse:
            self.emit(stmt.loc.line, "else:")
            self.indent += 1
            self.block(stmt.orelse, mask)
            self.indent -= 1

    def for_stmt(self, stmt: K.For, mask: str | None, line: int) -> None:
        start = self.expr(stmt.start, mask, line)
        stop = self.expr(stmt.stop, mask, line)
        step = self.expr(stmt.step, mask, line)
        counter = self.fresh("k")
        var_type = self.types[stmt.var]
        assert isinstance(var_type, ScalarType)
        convert = self.helper(f"to_{var_type.name}", S.value_dtype(var_type).type)
        self.emit(line, f"for {counter} in hp_range({start}, {stop}, {step}):")
        self.indent += 1
        var = self.names[stmt.var]
        if mask is not None:
            self.emit(line, f"{var} = hp_where({mask}, {convert}({counter}), {var})")
        else:
            self.emit(line, f"{var} = {convert}({counter})")
        self.block(stmt.body, mask)
        self.indent -= 1

    # -- expressions ------------------------------------------------------------------------

    def expr(self, e: K.Expr, mask: str | None, line: int) -> str:
        if isinstance(e, K.Const):
            assert isinstance(e.type, ScalarType)
            return self.constant(e.value, e.type)
        if isinstance(e, K.Var):
            return self.names[e.name]
        if isinstance(e, K.BinOp):
            symbol = _BINOP_SYMBOLS.get(e.op)
            if symbol is None:
                raise CompileError(f"operator {e.op} is not supported by the python target", e.loc)
            text = f"({self.expr(e.lhs, mask, line)} {symbol} {self.expr(e.rhs, mask, line)})"
            return self._round16(text, e.type)
        if isinstance(e, K.UnaryOp):
            operand = self.expr(e.operand, mask, line)
            if e.op == "not":
                return f"np.logical_not({unparenthesized(operand)})"
            text = f"(-{operand})" if e.op == "neg" else f"(~{operand})"
            return self._round16(text, e.type)
        if isinstance(e, K.Compare):
            return f"({self.expr(e.lhs, mask, line)} {_COMPARE_SYMBOLS[e.op]} {self.expr(e.rhs, mask, line)})"
        if isinstance(e, K.Logical):
            return self.logical(e, mask, line)
        if isinstance(e, K.Select):
            return self.select(e, mask, line)
        if isinstance(e, K.Cast):
            src = e.value.type
            assert isinstance(src, ScalarType) and isinstance(e.type, ScalarType)
            fn = self.helper(f"cast_{src.name}_{e.type.name}", ops.cast_function(src, e.type))
            return f"{fn}({unparenthesized(self.expr(e.value, mask, line))})"
        if isinstance(e, K.Load):
            ptr = self.names[e.ptr.name]
            index = unparenthesized(self.expr(e.index, mask, line))
            if e.rank is not None:
                return f"hp_rload({self.site(e)}, peers, {ptr}, {index}, {self.expr(e.rank, mask, line)})"
            if self.vector and (mask is not None or expr_varies(e.index, self.varying)):
                return f"hp_vload({self.site(e)}, {ptr}, {index}, {mask or 'None'})"
            return f"hp_load({self.site(e)}, {ptr}, {index})"
        if isinstance(e, K.MathCall):
            t = e.args[0].type
            assert isinstance(t, ScalarType)
            fn = self.helper(f"math_{e.name}_{t.name}", ops.math_function(e.name, t))
            return f"{fn}({', '.join(unparenthesized(self.expr(a, mask, line)) for a in e.args)})"
        if isinstance(e, K.InstanceId):
            return self.id_params[(e.level, e.dim)]
        if isinstance(e, K.NumInstances):
            return self.count_params[(e.level, e.dim)]
        if isinstance(e, K.NumDims):
            dims = self.ctx.level_dims[e.level] if e.level < len(self.ctx.level_dims) else 0
            return self.constant(dims, e.type)  # type: ignore[arg-type]
        if isinstance(e, K.Atomic):
            args = f"{self.names[e.ptr.name]}, {self.expr(e.index, mask, line)}, {self.expr(e.value, mask, line)}"
            if e.rank is not None:
                return f"hp_ratomic_{e.op}({self.site(e)}, peers, {args}, {self.expr(e.rank, mask, line)})"
            return f"hp_atomic({self.site(e)}, {e.op!r}, {args})"
        if isinstance(e, K.Malloc):
            assert isinstance(e.type, PtrType)
            site = self.fresh("site")
            self.namespace[site] = e  # the malloc itself: a negative size is reported at it
            names, self.names = self.names, {**self.names, **self.inputs}
            nbytes = self.expr(e.nbytes, mask, line)
            self.names = names
            return f"group.malloc({site}, {nbytes}, {e.type.elem.name!r})"
        if isinstance(e, K.CallHelper):
            raise CompileError(f"helper call {e.func} reached the backend (the inline pass runs first)", e.loc)
        raise CompileError(f"the python target cannot evaluate {type(e).__name__}", e.loc)

    def _round16(self, text: str, t: Type) -> str:
        if t == bf16:
            return f"{self.helper('bf16_round', S.bf16_round)}({unparenthesized(text)})"
        return text

    def _pure(self, e: K.Expr) -> bool:
        return not any(isinstance(s, (K.Load, K.Atomic, K.Malloc)) for s in K.walk_exprs(e))

    def logical(self, e: K.Logical, mask: str | None, line: int) -> str:
        lhs = self.expr(e.lhs, mask, line)
        vary = self.varies(e.lhs, mask) or self.varies(e.rhs, mask)
        if not vary:
            return f"({lhs} {'and' if e.op == 'land' else 'or'} {self.expr(e.rhs, mask, line)})"
        if self._pure(e.rhs):
            op = "&" if e.op == "land" else "|"
            return f"({lhs} {op} {self.expr(e.rhs, mask, line)})"
        # the right side reads memory: evaluate it only for the lanes that need it
        left = self.fresh("l")
        self.emit(line, f"{left} = {lhs}")
        lanes = self.fresh("m")
        need = left if e.op == "land" else f"~{left}"
        self.emit(line, f"{lanes} = {need}" if mask is None else f"{lanes} = {mask} & {need}")
        right = self.expr(e.rhs, lanes, line)
        op = "&" if e.op == "land" else "|"
        return f"({left} {op} {right})"

    def select(self, e: K.Select, mask: str | None, line: int) -> str:
        cond = self.expr(e.cond, mask, line)
        if not self.varies(e.cond, mask):
            return self.uniform_select(e, cond, mask, line)
        c = self.fresh("c")
        self.emit(line, f"{c} = {cond}")
        if self._pure(e.if_true) and self._pure(e.if_false):
            return f"hp_where({c}, {unparenthesized(self.expr(e.if_true, mask, line))}, {unparenthesized(self.expr(e.if_false, mask, line))})"
        m_true, m_false = self.fresh("m"), self.fresh("m")
        self.emit(line, f"{m_true} = {c}" if mask is None else f"{m_true} = {mask} & {c}")
        self.emit(line, f"{m_false} = ~{c}" if mask is None else f"{m_false} = {mask} & ~{c}")
        a = self.expr(e.if_true, m_true, line)
        b = self.expr(e.if_false, m_false, line)
        return f"hp_where({c}, {unparenthesized(a)}, {unparenthesized(b)})"


    def uniform_select(self, e: K.Select, cond: str, mask: str | None, line: int) -> str:
        """`x if c else y` with c the same for every instance. An arm that varies may need lines of
        its own (a lazy `and` / `or` or a select that evaluates its sides under masks); emitted
        before the statement, they would run whatever c is, and read where the arm not taken
        would not: such arms go under an `if` on c, the result in a temporary."""
        start = len(self.lines)
        self.indent += 1
        arms = []
        for arm in (e.if_true, e.if_false):
            text = self.expr(arm, mask, line)
            arms.append((text, self.lines[start:]))
            del self.lines[start:]
        self.indent -= 1
        (a, a_lines), (b, b_lines) = arms
        if not a_lines and not b_lines:
            return f"({a} if {cond} else {b})"
        # never inside a `while` condition (evaluated once here): those are uniform, and a uniform
        # expression's arms are uniform too, so they emit nothing
        result = self.fresh("s")
        self.emit(line, f"if {cond}:")
        self.lines += a_lines
        self.emit(line, f"    {result} = {a}")
        self.emit(line, "else:")
        self.lines += b_lines
        self.emit(line, f"    {result} = {b}")
        return result


_BINOP_SYMBOLS = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%",
                  "and": "&", "or": "|", "xor": "^", "shl": "<<", "shr": ">>"}
_COMPARE_SYMBOLS = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
