"""Hypothesis strategies for random IR modules (for the textual IR round-trip tests).

The modules are structurally valid (unique names, references that resolve, which is what the
parser checks) but not well-typed: the text must reproduce any IR the dataclasses can hold.
Every kernel IR node type, every scalar type and the awkward floats and integers are drawn.
"""
from __future__ import annotations

import math
import os

from hypothesis import strategies as st

from hpvm_py import types as T
from hpvm_py.ir import kernel as K
from hpvm_py.ir.dfg import (ALL_TO_ALL, DIM_OPS, ONE_TO_ONE, ConstBind, DimBin, DimConst, ExprBind,
                            DimParam, Edge, GraphFunc, InputBind, LibraryFunc, Module, Node,
                            OutputBind)
from hpvm_py.support.loc import UNKNOWN, Loc
from hpvm_py.ir.printer import var_ref
from hpvm_py.ir.targets import hint_targets

SCALARS = list(T.SCALAR_TYPES.values())
POINTERS = [T.PtrType(t) for t in SCALARS]
I64_MIN, U64_MAX = -(1 << 63), (1 << 64) - 1

# Plain names, names with dots (which look like ports), and names that must be quoted.
plain_names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}(\.[A-Za-z0-9_]{1,3}){0,2}", fullmatch=True)
odd_names = st.sampled_from(["", "a b", "ünï", "x\"y", "back\\slash", "new\nline", "0lead", "%",
                             "a.", "é.1"])
names = st.one_of(plain_names, plain_names, plain_names, odd_names)
# @names become symbols of the generated code: the parser refuses control characters in them
function_names = names.filter(lambda name: not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in name))

# Files: relative, absolute inside the working directory (printed relative), absolute outside it.
FILES = ["examples/vadd.py", os.path.join(os.getcwd(), "pkg", "mod.py"), "/elsewhere/x.py",
         "<string>", "with space/ü.py"]
locs = st.one_of(st.just(UNKNOWN), st.builds(Loc, st.sampled_from(FILES),
                                             st.integers(0, 10_000), st.integers(0, 200)))

SPECIAL_FLOATS = [math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-300, 0.1, 5e-324,
                  1.7976931348623157e308]
SPECIAL_INTS = [0, 1, -1, U64_MAX, I64_MIN, (1 << 63) - 1, 255, -128]
floats = st.one_of(st.sampled_from(SPECIAL_FLOATS), st.floats(allow_nan=True, allow_infinity=True))
ints = st.one_of(st.sampled_from(SPECIAL_INTS), st.integers(I64_MIN, U64_MAX))
values = st.one_of(st.sampled_from(SPECIAL_INTS + SPECIAL_FLOATS + [True, False]), ints, floats,
                   st.booleans())
scalar_types = st.sampled_from(SCALARS)
value_types = st.sampled_from(SCALARS + POINTERS)


def unique(strategy: st.SearchStrategy, min_size: int = 0, max_size: int = 4) -> st.SearchStrategy:
    return st.lists(strategy, min_size=min_size, max_size=max_size, unique=True)


# ----------------------------------------------------------------------------------------------
# Kernel IR


def exprs(scope: dict[str, T.Type], funcs: list[str]) -> st.SearchStrategy[K.Expr]:
    """Expressions over the variables of scope, calling functions named in funcs."""
    const = st.builds(lambda v, t: K.Const(value=v, type=t), values, scalar_types)
    leaves = [const, const,
              st.builds(lambda d, lv: K.InstanceId(dim=d, level=lv, type=T.i64),
                        st.integers(0, 2), st.integers(0, 3)),
              st.builds(lambda d, lv: K.NumInstances(dim=d, level=lv, type=T.i64),
                        st.integers(0, 2), st.integers(0, 3)),
              st.builds(lambda lv: K.NumDims(level=lv, type=T.i32), st.integers(0, 3))]
    if scope:
        leaves += [variables(scope), variables(scope)]
    return st.recursive(st.one_of(leaves), lambda sub: _compound(sub, scope, funcs), max_leaves=6)


def variables(scope: dict[str, T.Type]) -> st.SearchStrategy[K.Var]:
    return st.sampled_from(sorted(scope)).map(lambda n: K.Var(name=n, type=scope[n]))


def _compound(sub: st.SearchStrategy[K.Expr], scope: dict[str, T.Type],
              funcs: list[str]) -> st.SearchStrategy[K.Expr]:
    options = [
        st.builds(lambda op, t, a, b: K.BinOp(op=op, lhs=a, rhs=b, type=t),
                  st.sampled_from(K.BINARY_OPS), scalar_types, sub, sub),
        st.builds(lambda op, t, a: K.UnaryOp(op=op, operand=a, type=t),
                  st.sampled_from(K.UNARY_OPS), scalar_types, sub),
        st.builds(lambda op, a, b: K.Compare(op=op, lhs=a, rhs=b, type=T.i1),
                  st.sampled_from(K.COMPARE_OPS), sub, sub),
        st.builds(lambda op, a, b: K.Logical(op=op, lhs=a, rhs=b, type=T.i1),
                  st.sampled_from(K.LOGICAL_OPS), sub, sub),
        st.builds(lambda t, c, a, b: K.Select(cond=c, if_true=a, if_false=b, type=t),
                  scalar_types, sub, sub, sub),
        st.builds(lambda t, a: K.Cast(value=a, type=t), scalar_types, sub),
        st.sampled_from(sorted(K.MATH_FUNCTIONS)).flatmap(
            lambda name: st.builds(lambda t, args: K.MathCall(name=name, args=args, type=t),
                                   scalar_types, st.lists(sub, min_size=K.MATH_FUNCTIONS[name],
                                                          max_size=K.MATH_FUNCTIONS[name]))),
        st.builds(lambda t, n: K.Malloc(nbytes=n, type=t), value_types, sub),
    ]
    if funcs:
        options.append(st.builds(lambda f, t, args: K.CallHelper(func=f, args=args, type=t),
                                 st.sampled_from(funcs), st.sampled_from(SCALARS + [T.void]),
                                 st.lists(sub, max_size=3)))
    if scope:
        options += [
            st.builds(lambda t, p, i: K.Load(ptr=p, index=i, type=t), scalar_types,
                      variables(scope), sub),
            st.builds(lambda op, t, p, i, v: K.Atomic(op=op, ptr=p, index=i, value=v, type=t),
                      st.sampled_from(K.ATOMIC_OPS), scalar_types, variables(scope), sub, sub),
        ]
    return st.one_of(options)


def blocks(scope: dict[str, T.Type], funcs: list[str],
           depth: int = 2) -> st.SearchStrategy[list[K.Stmt]]:
    """Statement lists using every statement type, with if / for / while nested depth levels."""
    e = exprs(scope, funcs)
    stmts = [
        st.builds(lambda v, loc: K.ExprStmt(value=v, loc=loc), e, locs),
        st.builds(lambda loc: K.Break(loc=loc), locs),
        st.builds(lambda loc: K.Continue(loc=loc), locs),
        st.builds(lambda vs, loc: K.Return(values=vs, loc=loc), st.lists(e, max_size=3), locs),
        st.builds(lambda loc: K.Barrier(loc=loc), locs),
        st.builds(lambda vs, loc: K.Print(values=vs, loc=loc),
                  st.lists(st.one_of(st.text(max_size=8), e), max_size=4), locs),
        st.builds(lambda loc: K.Breakpoint(loc=loc), locs),
    ]
    if scope:
        stmts += [
            st.builds(lambda n, v, loc: K.Assign(target=n, value=v, loc=loc),
                      st.sampled_from(sorted(scope)), e, locs),
            st.builds(lambda p, i, v, loc: K.Store(ptr=p, index=i, value=v, loc=loc),
                      variables(scope), e, e, locs),
        ]
    if depth > 0:
        inner = blocks(scope, funcs, depth - 1)
        stmts += [
            st.builds(lambda c, a, b, loc: K.If(cond=c, then=a, orelse=b, loc=loc), e, inner, inner,
                      locs),
            st.builds(lambda c, b, loc: K.While(cond=c, body=b, loc=loc), e, inner, locs),
        ]
        if scope:
            stmts.append(st.builds(
                lambda v, a, b, s, body, loc: K.For(var=v, start=a, stop=b, step=s, body=body,
                                                    loc=loc),
                st.sampled_from(sorted(scope)), e, e, e, inner, locs))
    return st.lists(st.one_of(stmts), max_size=4)


directions = st.sampled_from([None, "in", "out", "inout"])


@st.composite
def signatures(draw: st.DrawFn) -> tuple[list[K.Param], dict[str, T.Type]]:
    """Parameters and locals with distinct names."""
    all_names = draw(unique(names, max_size=6))
    split = draw(st.integers(0, len(all_names)))
    params = [K.Param(name=n, type=draw(value_types), direction=draw(directions))
              for n in all_names[:split]]
    locals_ = {n: draw(st.sampled_from(SCALARS + POINTERS + [T.node_handle]))
               for n in all_names[split:]}
    return params, locals_


outputs = st.lists(st.builds(lambda n, t: K.OutputPort(name=n, type=t),
                             st.one_of(st.none(), names), value_types), max_size=3)


@st.composite
def leaf_funcs(draw: st.DrawFn, name: str, funcs: list[str]) -> K.LeafFunc:
    params, locals_ = draw(signatures())
    scope = {p.name: p.type for p in params} | locals_
    return K.LeafFunc(name=name, params=params, outputs=draw(outputs), locals=locals_,
                      body=draw(blocks(scope, funcs)), loc=draw(locs),
                      target=draw(st.sampled_from(["any", "cpu", "gpu"])))


@st.composite
def helper_funcs(draw: st.DrawFn, name: str, funcs: list[str]) -> K.HelperFunc:
    params, locals_ = draw(signatures())
    scope = {p.name: p.type for p in params} | locals_
    return K.HelperFunc(name=name, params=params, result=draw(st.one_of(st.none(), scalar_types)),
                        locals=locals_, body=draw(blocks(scope, funcs)), loc=draw(locs))


# ----------------------------------------------------------------------------------------------
# DFG IR


def dim_exprs(params: list[str]) -> st.SearchStrategy:
    base = [st.integers(-(1 << 70), 1 << 70).map(DimConst), st.integers(-3, 64).map(DimConst)]
    if params:
        base.append(st.sampled_from(params).map(DimParam))
    return st.recursive(st.one_of(base), lambda sub: st.builds(
        DimBin, st.sampled_from(sorted(DIM_OPS)), sub, sub), max_leaves=6)


@st.composite
def graph_funcs(draw: st.DrawFn, name: str, funcs: list[str]) -> GraphFunc:
    param_names = draw(unique(names, max_size=5))
    params = [K.Param(name=n, type=draw(value_types), direction=draw(directions))
              for n in param_names]
    # dfg.dim_text writes parameters without quoting, so instance counts use plain names only
    dim_params = [n for n in param_names if var_ref(n) == "%" + n]
    node_names = draw(unique(names, max_size=5))
    nodes = [Node(name=n, func=draw(st.sampled_from(funcs)),
                  dims=draw(st.lists(dim_exprs(dim_params), max_size=3)),
                  hint=draw(st.one_of(st.none(), st.sampled_from(hint_targets()))), loc=draw(locs))
             for n in node_names]
    ports = st.integers(0, 12)
    flags = st.booleans()
    edges: list[Edge] = []
    input_binds: list[InputBind] = []
    output_binds: list[OutputBind] = []
    const_binds: list[ConstBind] = []
    expr_binds: list[ExprBind] = []
    if node_names:
        node = st.sampled_from(node_names)
        edges = draw(st.lists(st.builds(
            lambda s, sp, d, dp, k, f, loc: Edge(src=s, src_port=sp, dst=d, dst_port=dp, kind=k,
                                                stream=f, loc=loc),
            node, ports, node, ports, st.sampled_from([ONE_TO_ONE, ALL_TO_ALL]), flags, locs),
            max_size=4))
        # parent ports mostly name a parameter; some do not (unverified IR prints the index)
        parent_ports = st.integers(0, len(params) + 1)
        input_binds = draw(st.lists(st.builds(
            lambda pp, d, dp, f, loc: InputBind(parent_port=pp, dst=d, dst_port=dp, stream=f,
                                                loc=loc),
            parent_ports, node, ports, flags, locs), max_size=4))
        output_binds = draw(st.lists(st.builds(
            lambda s, sp, pp, f, loc: OutputBind(src=s, src_port=sp, parent_port=pp, stream=f,
                                                 loc=loc),
            node, ports, ports, flags, locs), max_size=3))
        const_binds = draw(st.lists(st.builds(
            lambda v, t, d, dp, loc: ConstBind(value=K.Const(value=v, type=t), dst=d, dst_port=dp,
                                               loc=loc),
            values, scalar_types, node, ports, locs), max_size=3))
        expr_binds = draw(st.lists(st.builds(
            lambda e, d, dp, loc: ExprBind(expr=e, dst=d, dst_port=dp, loc=loc),
            dim_exprs(dim_params), node, ports, locs), max_size=2))
    return GraphFunc(name=name, params=params, outputs=draw(outputs), nodes=nodes, edges=edges,
                     input_binds=input_binds, output_binds=output_binds, const_binds=const_binds,
                     expr_binds=expr_binds, loc=draw(locs))


option_values = st.one_of(st.text(max_size=8), ints, floats)
# kinds and option keys: words, and texts that must be quoted (keywords, non-words)
library_keys = st.one_of(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True),
                         st.sampled_from(["kind", "in", "stream", "nan", "a-b", "", "x.y"]))


@st.composite
def library_funcs(draw: st.DrawFn, name: str, funcs: list[str]) -> LibraryFunc:
    params = [K.Param(name=n, type=draw(value_types), direction=draw(directions))
              for n in draw(unique(names, max_size=4))]
    return LibraryFunc(name=name, kind=draw(st.one_of(library_keys, st.just("all_reduce"))),
                       options=draw(st.dictionaries(library_keys, option_values, max_size=4)),
                       params=params, outputs=draw(outputs), loc=draw(locs))


FUNCTION_KINDS = [graph_funcs, leaf_funcs, helper_funcs, library_funcs]


@st.composite
def modules(draw: st.DrawFn) -> Module:
    """A root graph and up to four other functions of any kind, referring to each other by name."""
    func_names = draw(unique(function_names, min_size=1, max_size=5))
    kinds = [graph_funcs] + draw(st.lists(st.sampled_from(FUNCTION_KINDS),
                                          min_size=len(func_names) - 1,
                                          max_size=len(func_names) - 1))
    functions = {n: draw(kind(n, func_names)) for n, kind in zip(func_names, kinds)}
    return Module(root=func_names[0], functions=functions)
