"""The state of one function's lowering and its error constructors, shared by the parts of the
lowering (statements, expressions, calls, conversions)."""
from __future__ import annotations

import ast
from typing import Any, Callable, TypeVar

from ...errors import FrontendError, VerificationError
from ...ir import kernel as K
from ...support.loc import Loc
from ...types import ScalarType, Type
from ..source import FunctionSource

R = TypeVar("R")


class LowererBase:
    """Lowers one function. `kind` is "leaf", "helper" or "graph" (a graph's signature only)."""

    def __init__(self, src: FunctionSource, kind: str, ir_name: str,
                 resolve_helper: Callable[[Any, Loc], K.HelperFunc | None],
                 is_builder: Callable[[Any], bool]):
        self.src = src
        self.kind = kind
        self.ir_name = ir_name
        self.resolve_helper = resolve_helper
        self.is_builder = is_builder
        self.params: dict[str, K.Param] = {}
        self.locals: dict[str, Type] = {}
        self.handles: dict[str, int] = {}
        self.views: dict[str, Any] = {}  # pointer variables (lower/views.py)
        self.helper_names: dict[str, str] = {}  # IR name -> shown name of the helpers called
        self.outputs: list[K.OutputPort] = []
        self.output_class: type | None = None
        self.tuple_annotation = False  # the return annotation is `tuple[...]` (GraphFunc.tuple_of_one)
        self.result_type: ScalarType | None = None
        self.assigned_names = self._collect_assigned(src.tree)
        self.depth = 0  # nesting of if/for/while around the statement being lowered
        self.dead = 0  # > 0 inside code a constant condition excludes (maybe_dead)
        self.top_level: list[K.Stmt] = []  # the body's top-level statements lowered so far
        self.temp_count = 0

    def maybe_dead(self, runs: bool, lower: Callable[[], R]) -> R:
        """lower(), for code that a constant condition runs or excludes (`runs` False): excluded
        code is still lowered and checked, but its literal expressions are not evaluated, as
        Python never evaluates them (`1.0 / K if K else 0.0` with K = 0.0 is 0.0, not a division
        by zero in a constant expression)."""
        self.dead += not runs
        try:
            return lower()
        finally:
            self.dead -= not runs

    # -- errors -----------------------------------------------------------------------------

    def error(self, node: ast.AST | Loc, message: str, rule: str | None = None) -> FrontendError:
        loc = node if isinstance(node, Loc) else self.src.loc(node)
        return FrontendError(message, loc, rule)

    def verror(self, node: ast.AST, message: str, rule: str) -> VerificationError:
        return VerificationError(message, self.src.loc(node), rule)

    @staticmethod
    def _collect_assigned(fdef: ast.FunctionDef) -> set[str]:
        names: set[str] = set()
        for node in ast.walk(fdef):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
        return names

