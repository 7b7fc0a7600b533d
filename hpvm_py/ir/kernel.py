"""Kernel IR: the typed, structured body of a leaf node (and of @hpvm.func helpers).
(docs/architecture.md, "Module notes": ir/kernel.py)"""
from __future__ import annotations

import struct
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Iterator, Protocol, Union

from ..support.loc import UNKNOWN, Loc
from ..types import PtrType, ScalarType, Type

_LOC = field(default=UNKNOWN, compare=False, repr=False)


# ----------------------------------------------------------------------------------------------
# Expressions


@dataclass(kw_only=True)
class Expr:
    type: Type
    loc: Loc = _LOC


@dataclass(kw_only=True)
class Const(Expr):
    value: int | float | bool

    def __repr__(self) -> str:
        # a leaf's repr is its compiled code's cache key (backends/base.py), and compiled code keeps
        # a NaN's sign and payload, which repr() drops (every NaN is 'nan'): a NaN is its bits
        value = self.value
        text = f"nan:{struct.pack('<d', value).hex()}" if value != value else repr(value)
        return f"Const(type={self.type!r}, value={text})"

    def __eq__(self, other: object) -> bool:
        # by the value's bits for floats: 0.0 == -0.0 and NaN != NaN would merge or split
        # expressions that compute different values (1.0 / (x * -0.0) is not 1.0 / (x * 0.0))
        if not isinstance(other, Const):
            return NotImplemented
        return self.type == other.type and _bits(self.value) == _bits(other.value)


def _bits(value: int | float | bool) -> int | bytes:
    return struct.pack("<d", value) if isinstance(value, float) else value


@dataclass(kw_only=True)
class Var(Expr):
    name: str


BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "mod", "pow", "and", "or", "xor", "shl", "shr")
UNARY_OPS = ("neg", "not", "invert")
COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")
LOGICAL_OPS = ("land", "lor")


@dataclass(kw_only=True)
class BinOp(Expr):
    """Both operands already have the result type (the front end inserts the casts)."""

    op: str
    lhs: Expr
    rhs: Expr


@dataclass(kw_only=True)
class UnaryOp(Expr):
    op: str  # neg: arithmetic negation; not: logical (i1); invert: bitwise ~
    operand: Expr


@dataclass(kw_only=True)
class Compare(Expr):
    """Result i1; both operands have the same type."""

    op: str
    lhs: Expr
    rhs: Expr


@dataclass(kw_only=True)
class Logical(Expr):
    """Short-circuit `and` (land) / `or` (lor) of two i1 values."""

    op: str
    lhs: Expr
    rhs: Expr


@dataclass(kw_only=True)
class Select(Expr):
    """`a if cond else b`, evaluating only the chosen side."""

    cond: Expr
    if_true: Expr
    if_false: Expr


@dataclass(kw_only=True)
class Cast(Expr):
    value: Expr


@dataclass(kw_only=True)
class Load(Expr):
    """ptr[index]; with a `rank`, the element of rank `rank`'s copy of the symmetric buffer."""

    ptr: Var
    index: Expr
    rank: Expr | None = None  # remote_load: the rank whose copy is read


# Math functions: name -> number of arguments. All take and return one float type (f16/bf16 are
# computed in f32 and rounded back), except abs/min/max, which also take integers.
MATH_FUNCTIONS: dict[str, int] = {
    "sqrt": 1, "rsqrt": 1, "exp": 1, "exp2": 1, "expm1": 1, "log": 1, "log2": 1, "log10": 1,
    "log1p": 1, "sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1,
    "cosh": 1, "tanh": 1, "asinh": 1, "acosh": 1, "atanh": 1, "erf": 1, "erfc": 1, "fabs": 1,
    "floor": 1, "ceil": 1, "trunc": 1, "round": 1, "isnan": 1, "isinf": 1, "isfinite": 1,
    "pow": 2, "atan2": 2, "fmod": 2, "copysign": 2, "hypot": 2, "fmin": 2, "fmax": 2, "fma": 3,
    "abs": 1, "min": 2, "max": 2,
}
PREDICATE_FUNCTIONS = ("isnan", "isinf", "isfinite")  # these return i1


@dataclass(kw_only=True)
class MathCall(Expr):
    name: str
    args: list[Expr]


@dataclass(kw_only=True)
class CallHelper(Expr):
    """A call of an @hpvm.func helper; the inline pass replaces every one of them."""

    func: str
    args: list[Expr]


@dataclass(kw_only=True)
class InstanceId(Expr):
    """getNodeInstanceID.{x,y,z} of the node `level` steps up from the current leaf (0 = itself)."""

    dim: int
    level: int


@dataclass(kw_only=True)
class NumInstances(Expr):
    dim: int
    level: int


@dataclass(kw_only=True)
class NumDims(Expr):
    level: int


ATOMIC_OPS = ("add", "sub", "min", "max", "xchg", "and", "or", "xor")


@dataclass(kw_only=True)
class Atomic(Expr):
    """Atomic read-modify-write of ptr[index]; the value is the old content. With a `rank`
    (remote_atomic_add), the element of that rank's copy of the symmetric buffer."""

    op: str
    ptr: Var
    index: Expr
    value: Expr
    rank: Expr | None = None


@dataclass(kw_only=True)
class Malloc(Expr):
    """Scratch memory shared by the instances of the current leaf within one parent instance."""

    nbytes: Expr


# ----------------------------------------------------------------------------------------------
# Statements


@dataclass(kw_only=True)
class Stmt:
    loc: Loc = _LOC


@dataclass(kw_only=True)
class Assign(Stmt):
    target: str
    value: Expr


@dataclass(kw_only=True)
class Store(Stmt):
    """ptr[index] = value; with a `rank` (remote_store), into that rank's copy of the buffer."""

    ptr: Var
    index: Expr
    value: Expr
    rank: Expr | None = None


@dataclass(kw_only=True)
class ExprStmt(Stmt):
    """An expression evaluated for its side effects (an atomic whose old value is unused)."""

    value: Expr


@dataclass(kw_only=True)
class If(Stmt):
    cond: Expr
    then: list[Stmt]
    orelse: list[Stmt]


@dataclass(kw_only=True)
class For(Stmt):
    """`for var in range(start, stop, step)` with Python's semantics; a zero step runs nothing.

    `var` keeps the value of the last iteration after the loop, as in Python.
    """

    var: str
    start: Expr
    stop: Expr
    step: Expr
    body: list[Stmt]


@dataclass(kw_only=True)
class While(Stmt):
    cond: Expr
    body: list[Stmt]


@dataclass(kw_only=True)
class Break(Stmt):
    pass


@dataclass(kw_only=True)
class Continue(Stmt):
    pass


@dataclass(kw_only=True)
class Return(Stmt):
    values: list[Expr]


@dataclass(kw_only=True)
class Barrier(Stmt):
    pass


@dataclass(kw_only=True)
class Print(Stmt):
    """print(...) inside a leaf: supported by the python target only. Items are values or text."""

    values: list[Expr | str]


@dataclass(kw_only=True)
class Breakpoint(Stmt):
    """breakpoint() inside a leaf: supported by the python target only."""


Block = list[Stmt]


# ----------------------------------------------------------------------------------------------
# Functions


@dataclass(kw_only=True)
class Param:
    name: str
    type: Type
    direction: str | None = None  # "in" | "out" | "inout" for pointers, None for scalars
    loc: Loc = _LOC


@dataclass(kw_only=True)
class OutputPort:
    name: str | None  # None for the positional outputs of `-> tuple[...]` or a scalar
    type: Type
    loc: Loc = _LOC


NoteValue = Union[Expr, bool, int, float, str]


@dataclass(kw_only=True)
class Note:
    """A backend pass's decision about a leaf, kept in the IR so that the textual form shows it:
    `note NAME(key=value, ...)` after the locals (values: expressions over the leaf's parameters,
    numbers, booleans, words). The pass that records it and the code generator that reads it
    agree on its keys (backends/*/passes.py); nothing before the backends' passes makes one."""

    name: str
    args: dict[str, NoteValue] = field(default_factory=dict)


@dataclass(kw_only=True)
class LeafFunc:
    """The function of a leaf node: parameters, outputs, typed locals and the body; `notes`, the
    decisions of the backend passes that ran on it (empty before them)."""

    name: str
    params: list[Param]
    outputs: list[OutputPort]
    locals: dict[str, Type]
    body: Block
    target: str = "any"  # "any" | "cpu" | "gpu"
    loc: Loc = _LOC
    notes: list[Note] = field(default_factory=list)
    user_name: str = field(default="", compare=False)  # see shown_name

    def noted(self, name: str) -> list[Note]:
        """The notes of one pass, in order."""
        return [n for n in self.notes if n.name == name]


@dataclass(kw_only=True)
class HelperFunc:
    """An @hpvm.func helper: inlined into the leaves that call it; no HPVM intrinsics."""

    name: str
    params: list[Param]
    result: ScalarType | None
    locals: dict[str, Type]
    body: Block
    loc: Loc = _LOC
    user_name: str = field(default="", compare=False)  # see shown_name


class _Named(Protocol):
    name: str
    user_name: str


def shown_name(func: _Named) -> str:
    """The name messages give a function: the one its Python `def` has, not the IR name, which
    gets a suffix (a second `leaf` is `leaf_2`) to stay unique in the process. Functions read
    from textual IR have only their IR name."""
    return func.user_name or func.name


# ----------------------------------------------------------------------------------------------
# Traversal helpers shared by passes and backends


ExprLike = Union[Expr, Stmt]


def child_exprs(node: ExprLike) -> list[Expr]:
    """The direct sub-expressions of an expression or statement, in evaluation order."""
    if isinstance(node, (BinOp, Compare, Logical)):
        return [node.lhs, node.rhs]
    if isinstance(node, UnaryOp):
        return [node.operand]
    if isinstance(node, Select):
        return [node.cond, node.if_true, node.if_false]
    if isinstance(node, Cast):
        return [node.value]
    if isinstance(node, Load):
        return [node.ptr, node.index] + _rank(node)
    if isinstance(node, (MathCall, CallHelper)):
        return list(node.args)
    if isinstance(node, Atomic):
        return [node.ptr, node.index, node.value] + _rank(node)
    if isinstance(node, Malloc):
        return [node.nbytes]
    if isinstance(node, Assign):
        return [node.value]
    if isinstance(node, Store):
        return [node.ptr, node.index, node.value] + _rank(node)
    if isinstance(node, ExprStmt):
        return [node.value]
    if isinstance(node, If):
        return [node.cond]
    if isinstance(node, For):
        return [node.start, node.stop, node.step]
    if isinstance(node, While):
        return [node.cond]
    if isinstance(node, Return):
        return list(node.values)
    if isinstance(node, Print):
        return [v for v in node.values if isinstance(v, Expr)]
    return []


def _rank(access: Load | Store | Atomic) -> list[Expr]:
    """The rank operand of a remote access (evaluated last), as a list."""
    return [] if access.rank is None else [access.rank]


def child_blocks(stmt: Stmt) -> list[Block]:
    if isinstance(stmt, If):
        return [stmt.then, stmt.orelse]
    if isinstance(stmt, (For, While)):
        return [stmt.body]
    return []


def rebuild(expr: Expr, children: list[Expr]) -> Expr:
    """expr with its direct sub-expressions replaced (same order as kernel.child_exprs)."""
    if isinstance(expr, (BinOp, Compare, Logical)):
        return replace(expr, lhs=children[0], rhs=children[1])
    if isinstance(expr, UnaryOp):
        return replace(expr, operand=children[0])
    if isinstance(expr, Select):
        return replace(expr, cond=children[0], if_true=children[1], if_false=children[2])
    if isinstance(expr, Cast):
        return replace(expr, value=children[0])
    if isinstance(expr, Load):
        return replace(expr, ptr=children[0], index=children[1], rank=_rank_of(expr, children, 2))
    if isinstance(expr, (MathCall, CallHelper)):
        return replace(expr, args=children)
    if isinstance(expr, Atomic):
        return replace(expr, ptr=children[0], index=children[1], value=children[2],
                       rank=_rank_of(expr, children, 3))
    if isinstance(expr, Malloc):
        return replace(expr, nbytes=children[0])
    return expr


def _rank_of(access: Load | Atomic, children: list[Expr], position: int) -> Expr | None:
    return children[position] if access.rank is not None else None


def walk_exprs(expr: Expr) -> Iterator[Expr]:
    """expr and all its sub-expressions, pre-order (without recursion: a hand-written .hpvm file
    may nest deeper than Python's stack before its type check refuses it)."""
    stack = [expr]
    while stack:
        e = stack.pop()
        yield e
        stack.extend(reversed(child_exprs(e)))


def walk_stmts(block: Block) -> Iterator[Stmt]:
    """Every statement of a block, nested ones included, pre-order."""
    for stmt in block:
        yield stmt
        for sub in child_blocks(stmt):
            yield from walk_stmts(sub)


def assignments(block: Block) -> Counter[str]:
    """How many statements assign each name, nested ones included: an Assign its target and a For
    its variable (which holds the last iteration's value after the loop), so that a pass looking
    through a local "assigned once" does not miss a loop reusing its name."""
    counts: Counter[str] = Counter()
    for stmt in walk_stmts(block):
        if isinstance(stmt, Assign):
            counts[stmt.target] += 1
        elif isinstance(stmt, For):
            counts[stmt.var] += 1
    return counts


def zero(t: Type, loc: Loc) -> Const:
    """The zero of scalar type t (false for i1): what a local holds before its first assignment."""
    assert isinstance(t, ScalarType)
    if t.is_bool:
        return Const(value=False, type=t, loc=loc)
    return Const(value=0.0 if t.is_float else 0, type=t, loc=loc)


def ends_with_return(block: Block) -> bool:
    """Whether every path through block returns: some statement of it always returns (what follows
    that statement is dead code, as Python allows: `if c: return 1 / else: return 2 / x = 5`)."""
    return any(_always_returns(stmt) for stmt in block)


def _always_returns(stmt: Stmt) -> bool:
    if isinstance(stmt, Return):
        return True
    if isinstance(stmt, If):
        return ends_with_return(stmt.then) and ends_with_return(stmt.orelse)
    if isinstance(stmt, While) and isinstance(stmt.cond, Const) and stmt.cond.value:
        return not any(isinstance(s, Break) for s in walk_stmts(stmt.body))
    return False


def read_first(block: Block, name: str) -> bool | None:
    """Whether running block may read local `name` before assigning it: True (it may), False
    (every path assigns it first), None (neither: it may run without touching it)."""
    for stmt in block:
        if any(isinstance(x, Var) and x.name == name for e in child_exprs(stmt) for x in walk_exprs(e)):
            return True
        if isinstance(stmt, Assign) and stmt.target == name:
            return False
        if isinstance(stmt, If):
            branches = [read_first(stmt.then, name), read_first(stmt.orelse, name)]
            if True in branches:
                return True
            if branches == [False, False]:
                return False
        elif isinstance(stmt, While) or (isinstance(stmt, For) and stmt.var != name):
            if read_first(stmt.body, name):  # the body may not run: it assigns nothing for sure
                return True
    return None


def walk_all_exprs(block: Block) -> Iterator[Expr]:
    for stmt in walk_stmts(block):
        for e in child_exprs(stmt):
            yield from walk_exprs(e)


def names_read(block: Block) -> set[str]:
    """The variables a body reads anywhere (its parameters among them): a parameter outside this
    set cannot change what the body does."""
    return {e.name for e in walk_all_exprs(block) if isinstance(e, Var)}


def remote_accesses(block: Block) -> Iterator[Load | Store | Atomic]:
    """The remote loads, stores and atomics of a body (those with a rank)."""
    for stmt in walk_stmts(block):
        if isinstance(stmt, Store) and stmt.rank is not None:
            yield stmt
        for top in child_exprs(stmt):
            for e in walk_exprs(top):
                if isinstance(e, (Load, Atomic)) and e.rank is not None:
                    yield e


def remote_pointers(block: Block) -> set[str]:
    """The pointers a body accesses on other ranks (remote_load/store/atomic_add)."""
    return {access.ptr.name for access in remote_accesses(block)}


def is_pointer(t: Type) -> bool:
    return isinstance(t, PtrType)
