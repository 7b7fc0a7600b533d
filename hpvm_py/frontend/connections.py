"""What a graph body hands to `node` and `return`: a node's output, and a value wrapped with its
edge kind (`all_to_all`) and stream flag (`streaming`)."""
from __future__ import annotations

from typing import Any

from ..errors import VerificationError
from ..ir import dfg as D
from .callsite import caller_loc
from .symbols import DimSym, Sym, Symbolic

ONE_TO_ONE = D.ONE_TO_ONE
"""`edge(..., repl=ONE_TO_ONE)`: source instance i feeds destination instance i (equal grids)."""
ALL_TO_ALL = D.ALL_TO_ALL
"""`edge(..., repl=ALL_TO_ALL)`: a barrier: every destination instance after every source one."""


class OutRef(Symbolic):
    """Output `port` of a node, as given by `node.out.name` or `node.out[i]`. Its value exists only
    when the graph runs: comparing it, branching on it or computing with it in the graph body is
    computation (refused as for parameters), not a silent False or True."""

    def __init__(self, node: Any, port: int):  # a graph.NodeRef
        self.node = node
        self.port = port

    @property
    def builder(self) -> Any:
        return self.node.builder

    def _what(self) -> str:
        return f"output {self.port} of node {self.node.ir.name} (a value computed when the graph runs)"

    def as_count(self, what: str) -> D.DimExpr:
        raise VerificationError(f"{what} is {self._what()}; an instance count is an int or an "
                                "expression of integer graph parameters (bind the output to an "
                                "integer parameter of an internal node, whose body may count with it)",
                                caller_loc(), rule="instance-counts")

    def __repr__(self) -> str:
        return f"<output {self.port} of node {self.node.ir.name}>"


class Connection:
    """A value given to a node input or returned, with its edge kind and stream flag."""

    def __init__(self, source: Any, kind: str = ONE_TO_ONE, stream: bool = False):
        self.source = source
        self.kind = kind
        self.stream = stream


def all_to_all(value: Any) -> Connection:
    """Mark a sibling's output, given to `node`, as an all-to-all edge.

    Every instance of the destination then starts after every instance of the source has ended
    (a barrier between the two grids, which may differ).

    Args:
        value: a sibling node's output (`other.out.name`), possibly wrapped in `streaming`.

    Returns:
        The connection, to pass as an input of `node`.
    """
    conn = connection(value)
    if not isinstance(conn.source, OutRef):
        raise VerificationError("all_to_all() wraps a node output (node.out.x); binds are always "
                                "all-to-all", caller_loc(), rule="edge-kinds")
    return Connection(conn.source, ALL_TO_ALL, conn.stream)


def streaming(value: Any) -> Connection:
    """Mark an input given to `node` as streaming: a new value flows on every push of a stream.

    Args:
        value: a parameter of this graph (a streaming bind) or a sibling's output (a streaming
            edge), possibly wrapped in `all_to_all`.

    Returns:
        The connection, to pass as an input of `node`.
    """
    if isinstance(value, DimSym):
        raise VerificationError(f"streaming({D.dim_text(value.expr)}): an expression is computed from "
                                "the graph's parameters when the node fires, not streamed (in a "
                                "streaming launch it reads them as a non-streaming bind does)",
                                caller_loc(),
                                rule="node-inputs")
    conn = connection(value)
    return Connection(conn.source, conn.kind, True)


def connection(value: Any) -> Connection:
    if isinstance(value, Connection):
        return value
    if isinstance(value, (OutRef, Sym)):
        return Connection(value)
    raise VerificationError(f"a node input is a graph parameter, a sibling's output "
                            f"(node.out.name), a number or an integer expression of graph parameters "
                            f"(rows * cols), not {type(value).__name__}", caller_loc(),
                            rule="node-inputs")
