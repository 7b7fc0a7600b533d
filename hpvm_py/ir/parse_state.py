"""The textual IR parser's state (parser.py): what its transformer knows so far in one parse,
and a function header read before the function's body."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lark import Token

from ..support.loc import Loc
from ..types import Type
from . import kernel as K
from .dfg import Function


@dataclass
class State:
    """What the transformer knows so far: files, functions, and the current function's names."""

    source: str
    files: dict[int, str] = field(default_factory=dict)
    functions: dict[str, Function] = field(default_factory=dict)
    func_refs: list[Token] = field(default_factory=list)  # @names used, checked at the end
    scope: dict[str, Type] = field(default_factory=dict)  # the current function's params + locals
    params: dict[str, int] = field(default_factory=dict)  # parameter name -> index
    locals: dict[str, Type] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)
    node_refs: list[tuple[str, Token]] = field(default_factory=list)  # checked at the graph's end
    # how deep each instance-count expression built so far nests (by id: DimExprs are values)
    dim_depths: dict[int, int] = field(default_factory=dict)
    number: Token | None = None  # the last number read (a constant's position)


@dataclass
class Head:
    """A function header, reduced before its body is read."""

    name: str
    token: Token
    params: list[K.Param]
    outputs: list[K.OutputPort]
    loc: Loc
    extra: Any = None  # a leaf's target, a helper's result type


class TupleOfOne(list):
    """Outputs written `(T,)`: a graph launched as a root gives a 1-tuple (GraphFunc.tuple_of_one)."""
