"""What the front end's modules share about definitions: the base classes of decorated functions and
node functions, library nodes, unique IR names and the lock that serializes lowering and tracing.

The modules that lower (lower/), trace (graph.py) and assemble (module.py) import this one, and
decorators.py imports them all: the front end reads in one direction.
"""
from __future__ import annotations

import threading
from typing import Any, Callable

from ..ir import kernel as K
from ..ir.dfg import LibraryFunc
from ..support.loc import Loc

# Lowering and tracing run one at a time: several threads may launch a graph for the first time
# together, and the "currently lowering" flags detect recursion within one thread only.
FRONTEND_LOCK = threading.RLock()
_names: dict[str, int] = {}  # base name -> how many functions asked for it
_taken: set[str] = set()  # every name given out: `leaf_2` may be a user's own name
_names_lock = threading.Lock()


def unique_name(base: str) -> str:
    """A function name unique in this process: IR names must not collide across modules."""
    with _names_lock:
        count = _names.get(base, 0)
        name = base if count == 0 else f"{base}_{count + 1}"
        while name in _taken:
            count += 1
            name = f"{base}_{count + 1}"
        _names[base] = count + 1
        _taken.add(name)
    return name


class Definition:
    """A function the front end knows; `kind` is "leaf", "helper", "graph" or "library"."""

    kind = ""
    name: str  # unique in the process: the IR's name
    user_name: str  # the name its `def` has, which messages give (kernel.shown_name)
    loc: Loc
    pyfunc: Callable[..., Any]  # the decorated Python function (library nodes have none)
    source_lines: list[str]  # its file's text when it was decorated (library nodes have none)


class NodeDef(Definition):
    """Something a node can instantiate: a leaf, a graph or a library node."""

    ir: Any  # the function's IR: LeafFunc, GraphFunc or LibraryFunc
    _input_index: dict[str, int] | None = None

    def signature(self) -> tuple[list[K.Param], list[K.OutputPort]]:
        raise NotImplementedError

    def input_index(self) -> dict[str, int]:
        """Parameter name -> input port (built once: graphs create many nodes of one function)."""
        if self._input_index is None:
            self._input_index = {p.name: i for i, p in enumerate(self.signature()[0])}
        return self._input_index

    def children(self) -> dict[str, "NodeDef"]:
        """The node functions this one instantiates, by IR name (a graph's children)."""
        return {}

    def helpers(self) -> dict[str, Any]:
        """The @hpvm.func helpers this one calls, directly or not, by IR name (a leaf's)."""
        return {}


class LibraryDef(NodeDef):
    """A node implemented by hpvm-py itself (a communication collective)."""

    kind = "library"

    def __init__(self, ir: LibraryFunc):
        self.ir = ir
        self.name = ir.name
        self.user_name = K.shown_name(ir)  # a collective has no `def`: its IR name
        self.loc = ir.loc

    def signature(self) -> tuple[list[K.Param], list[K.OutputPort]]:
        return self.ir.params, self.ir.outputs
