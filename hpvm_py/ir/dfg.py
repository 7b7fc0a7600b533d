"""DFG IR: internal-node functions (graphs), the nodes they create, edges, binds, and the module.

A `GraphFunc` is the function of an internal node: its child graph. A `Node` instantiates a
function (leaf, graph or library node) with 0 to 3 replication dimensions whose extents are
`DimExpr`s over the parent's parameters, evaluated when the node fires. Ports are indices: inputs
are parameter indices of the node's function, outputs index its outputs.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Union

import numpy as np

from ..support.loc import UNKNOWN, Loc
from .kernel import Const, HelperFunc, LeafFunc, OutputPort, Param

_LOC = field(default=UNKNOWN, compare=False, repr=False)

ONE_TO_ONE = "one_to_one"
ALL_TO_ALL = "all_to_all"


# ----------------------------------------------------------------------------------------------
# Instance-count expressions


@dataclass(frozen=True)
class DimConst:
    value: int


@dataclass(frozen=True)
class DimParam:
    """A parameter of the enclosing graph function, by name."""

    name: str


DIM_OPS = {"+": "add", "-": "sub", "*": "mul", "//": "floordiv", "%": "mod"}


@dataclass(frozen=True)
class DimBin:
    op: str  # one of DIM_OPS' keys
    lhs: "DimExpr"
    rhs: "DimExpr"


DimExpr = Union[DimConst, DimParam, DimBin]


_RING = {"+": operator.add, "-": operator.sub, "*": operator.mul}  # (// and %: a zero divisor gives 0)


def eval_dim(expr: DimExpr, env: dict[str, int]) -> int:
    """Evaluate an instance count; env maps parameter names to their integer values."""
    if isinstance(expr, DimConst):
        return expr.value
    if isinstance(expr, DimParam):
        return int(env[expr.name])
    lhs, rhs = eval_dim(expr.lhs, env), eval_dim(expr.rhs, env)
    ring = _RING.get(expr.op)
    if ring is not None:
        return ring(lhs, rhs)
    if rhs == 0:
        return 0  # the kernel language's rule for a zero divisor, kept here too
    return lhs // rhs if expr.op == "//" else lhs % rhs


def eval_dim_array(expr: DimExpr, env: dict[str, Any]) -> np.ndarray:
    """eval_dim where a parameter may hold one value per parent instance (a NumPy array): the
    result has the same shape, an array of Python ints. Exact, as eval_dim is: docs/language.md
    promises that an input expression outside its input's type fails the launch, so a product
    that leaves i64 must not wrap back into range (it did, in int64 arrays, where the same
    values passed as uniform scalars were refused), and a u64 value above 2**63 stays itself."""
    if isinstance(expr, DimConst):
        return np.asarray(int(expr.value), dtype=object)
    if isinstance(expr, DimParam):
        # object arrays of Python ints: NumPy applies Python's own + - * // % to each element
        return np.asarray(env[expr.name]).astype(object)
    lhs, rhs = eval_dim_array(expr.lhs, env), eval_dim_array(expr.rhs, env)
    ring = _RING.get(expr.op)
    if ring is not None:
        return ring(lhs, rhs)
    zero = rhs == 0
    safe = np.where(zero, 1, rhs)
    value = lhs // safe if expr.op == "//" else lhs % safe
    return np.where(zero, 0, value)  # the kernel language's rule for a zero divisor


def dim_measure(expr: DimExpr) -> tuple[int, int]:
    """(how many operations deep expr nests, how many operations it has written out); both 0
    for a constant or a parameter. Walked without recursion, so that an expression deeper than
    Python's stack gets the verifier's error rather than a RecursionError, and once per object:
    tracing shares operands (`m = m + m` sixty times is 2**60 operations written out)."""
    measures: dict[int, tuple[int, int]] = {}
    stack: list[DimExpr] = [expr]
    while stack:
        e = stack[-1]
        if not isinstance(e, DimBin):
            measures[id(e)] = (0, 0)
            stack.pop()
            continue
        pending = [c for c in (e.lhs, e.rhs) if id(c) not in measures]
        if pending:
            stack.extend(pending)
            continue
        (ldepth, lsize), (rdepth, rsize) = measures[id(e.lhs)], measures[id(e.rhs)]
        measures[id(e)] = (1 + max(ldepth, rdepth), 1 + lsize + rsize)
        stack.pop()
    return measures[id(expr)]


def dim_params(expr: DimExpr) -> set[str]:
    if isinstance(expr, DimParam):
        return {expr.name}
    if isinstance(expr, DimBin):
        return dim_params(expr.lhs) | dim_params(expr.rhs)
    return set()


def dim_text(expr: DimExpr, parent_prec: int = 0) -> str:
    """Infix text with minimal parentheses; the textual IR and error messages use it."""
    if isinstance(expr, DimConst):
        return str(expr.value)
    if isinstance(expr, DimParam):
        return f"%{expr.name}"
    prec = 1 if expr.op in "+-" else 2
    # left-associative: the right operand of an equal-precedence operator keeps its parentheses
    text = f"{dim_text(expr.lhs, prec)} {expr.op} {dim_text(expr.rhs, prec + 1)}"
    return f"({text})" if prec < parent_prec else text


# ----------------------------------------------------------------------------------------------
# Graph structure


@dataclass(slots=True)  # positional too: graph builders create thousands
class Node:
    name: str
    func: str
    dims: list[DimExpr] = field(default_factory=list)
    hint: str | None = None
    loc: Loc = _LOC


@dataclass(slots=True)  # positional too: graph builders create thousands
class Edge:
    src: str
    src_port: int
    dst: str
    dst_port: int
    kind: str = ONE_TO_ONE
    stream: bool = False
    loc: Loc = _LOC


@dataclass(slots=True)  # positional too: graph builders create thousands
class InputBind:
    """Parent parameter `parent_port` feeds input `dst_port` of child `dst`."""

    parent_port: int
    dst: str
    dst_port: int
    stream: bool = False
    loc: Loc = _LOC


@dataclass(slots=True)
class ConstBind:
    """Constant `value` (typed as the input) feeds input `dst_port` of child `dst`."""

    value: Const
    dst: str
    dst_port: int
    loc: Loc = _LOC


@dataclass(slots=True)
class ExprBind:
    """An integer expression of the parent's integer parameters (`+ - * // %`, as instance counts
    take) feeds integer input `dst_port` of child `dst`; evaluated when the node fires."""

    expr: "DimExpr"
    dst: str
    dst_port: int
    loc: Loc = _LOC


@dataclass(slots=True)  # positional too: graph builders create thousands
class OutputBind:
    """Output `src_port` of child `src` becomes output `parent_port` of the parent."""

    src: str
    src_port: int
    parent_port: int
    stream: bool = False
    loc: Loc = _LOC


@dataclass(kw_only=True)
class GraphFunc:
    """The function of an internal node: parameters, outputs and the child graph it builds."""

    name: str
    params: list[Param]
    outputs: list[OutputPort]
    nodes: list[Node] = field(default_factory=list)
    edges: list[Edge] = field(default_factory=list)
    input_binds: list[InputBind] = field(default_factory=list)
    output_binds: list[OutputBind] = field(default_factory=list)
    const_binds: list[ConstBind] = field(default_factory=list)
    expr_binds: list[ExprBind] = field(default_factory=list)
    loc: Loc = _LOC
    # `-> tuple[T]`: a launch of this root gives a tuple of its one output, not the value; kept
    # in the text as `-> (T,)` so that a graph from hpvm.load returns what the Python one does
    tuple_of_one: bool = False
    user_name: str = field(default="", compare=False)  # see kernel.shown_name

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)


@dataclass(kw_only=True)
class LibraryFunc:
    """A node function provided by hpvm-py itself (communication collectives), by kind and options."""

    name: str
    kind: str
    options: dict[str, str | int | float]
    params: list[Param]
    outputs: list[OutputPort]
    loc: Loc = _LOC
    user_name: str = field(default="", compare=False)  # see kernel.shown_name


Function = Union[LeafFunc, GraphFunc, HelperFunc, LibraryFunc]


@dataclass(kw_only=True)
class Module:
    """Every function reachable from one root graph, by name; `root` names the root graph."""

    root: str
    functions: dict[str, Function] = field(default_factory=dict)

    @property
    def root_func(self) -> GraphFunc:
        fn = self.functions[self.root]
        assert isinstance(fn, GraphFunc)
        return fn

    def leaves(self) -> list[LeafFunc]:
        return [f for f in self.functions.values() if isinstance(f, LeafFunc)]

    def graphs(self) -> list[GraphFunc]:
        return [f for f in self.functions.values() if isinstance(f, GraphFunc)]

    def helpers(self) -> list[HelperFunc]:
        return [f for f in self.functions.values() if isinstance(f, HelperFunc)]
