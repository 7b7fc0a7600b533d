"""@hpvm.leaf, @hpvm.func and @hpvm.graph: wrap Python functions and lower them to IR on first use."""
from __future__ import annotations

import functools
import inspect
from typing import Any, Callable

from ..errors import FrontendError, LaunchError, VerificationError
from ..ir import kernel as K
from ..ir.dfg import GraphFunc, Module
from ..ir.targets import canonical_target, target_problem
from ..support.loc import Loc
from .callsite import caller_loc
from .defs import FRONTEND_LOCK, Definition, LibraryDef, NodeDef, unique_name
from .graph import BUILDERS, trace_graph
from .lower import Lowerer
from .module import build_module
from .source import Reads, Watch, function_loc, global_reads, read_function, source_lines

__all__ = ["GraphDef", "HelperDef", "LeafDef", "LibraryDef", "NodeDef", "func", "graph", "leaf",
           "unique_name"]


def _check_function(func: Any, decorator: str) -> None:
    if isinstance(func, Definition):
        raise FrontendError(f"{decorator} decorates a `def` function, but {K.shown_name(func)} is already an "
                            f"@hpvm.{func.kind if func.kind != 'helper' else 'func'}: a function "
                            "takes one hpvm decorator", caller_loc())
    if not inspect.isfunction(func):
        what = getattr(func, '__qualname__', None) or type(func).__name__
        hint = (f" ({type(func).__name__} goes outside: @{type(func).__name__} above {decorator})"
                if isinstance(func, (staticmethod, classmethod)) else "")
        raise FrontendError(f"{decorator} decorates a `def` function, not {what!s}{hint}",
                            caller_loc())


def _check_compiled_function(func: Callable[..., Any], decorator: str) -> None:
    """Leaves and helpers are compiled from the source of the function they decorate. A wrapper
    (functools.wraps sets __wrapped__) has the source of the function it wraps, not its own, so
    compiling it would silently drop what the wrapper does."""
    if getattr(func, "__wrapped__", None) is not None:
        raise FrontendError(f"{decorator} decorates {func.__qualname__}, a wrapper around another "
                            "function (it has __wrapped__): a leaf or helper is compiled from the "
                            "source of its own `def`, so the wrapper's code would not run; put "
                            f"{decorator} directly on the `def` (the innermost decorator)",
                            caller_loc(), rule="node-function")


class _Lowerable(Definition):
    """Shared lazy lowering of a decorated Python function (leaves and helpers)."""

    def __init__(self, func: Callable[..., Any]):
        decorator = f"@hpvm.{'leaf' if self.kind == 'leaf' else 'func'}"
        _check_function(func, decorator)
        _check_compiled_function(func, decorator)
        functools.update_wrapper(self, func)
        self.pyfunc = func
        self.source_lines = source_lines(func)  # the text it is compiled from, as defined
        self.name = unique_name(func.__name__)
        self.user_name = func.__name__
        self.loc = function_loc(func)
        self._ir: Any = None
        self._helpers: dict[str, HelperDef] = {}
        self._lowering = False
        self._reads: Reads | None = None  # what the lowered body read outside the function

    def _lower(self) -> None:
        if self._ir is not None:
            return
        with FRONTEND_LOCK:
            if self._ir is None:
                self._lower_now()

    def _lower_now(self) -> None:
        if self._lowering:
            raise FrontendError(f"{K.shown_name(self)} calls itself (directly or through helpers); "
                                "recursion cannot be inlined", self.loc)
        self._lowering = True
        try:
            src = read_function(self.pyfunc, self.source_lines)
            lowerer = Lowerer(src, self.kind, self.name, self._resolve_helper, is_builder)
            lowerer.lower_signature()
            body = lowerer.lower_body()
            self._ir = self._make_ir(lowerer, body)
            self._reads = src.reads
        finally:
            self._lowering = False

    def _resolve_helper(self, obj: Any, loc: Loc) -> K.HelperFunc | None:
        if not isinstance(obj, HelperDef):
            return None
        if obj._lowering:
            raise FrontendError(f"{obj.name} calls itself (directly or through helpers); recursion "
                                "cannot be inlined", loc)
        helper_ir = obj.ir  # lowers it, detecting recursion
        self._helpers[obj.name] = obj
        self._helpers.update(obj.helpers())
        return helper_ir

    def helpers(self) -> dict[str, "HelperDef"]:
        """Every helper this function calls, directly or not."""
        self._lower()
        return dict(self._helpers)

    def _make_ir(self, lowerer: Any, body: list[K.Stmt]) -> Any:
        raise NotImplementedError


class LeafDef(_Lowerable, NodeDef):
    """A leaf node function."""

    kind = "leaf"

    def __init__(self, func: Callable[..., Any], target: str = "any"):
        super().__init__(func)
        problem = target_problem(target, leaf=True)
        if problem is not None:
            raise FrontendError(f"@hpvm.leaf(target={target!r}): {problem}", self.loc, rule="hint-target")
        self.target = canonical_target(target)

    @property
    def ir(self) -> K.LeafFunc:
        self._lower()
        return self._ir

    def _make_ir(self, lowerer: Any, body: list[K.Stmt]) -> K.LeafFunc:
        return K.LeafFunc(name=self.name, user_name=self.user_name, params=lowerer.params_list(),
                          outputs=lowerer.outputs,
                          locals=dict(lowerer.locals), body=body, target=self.target,
                          loc=lowerer.src.loc(lowerer.src.tree))

    def signature(self) -> tuple[list[K.Param], list[K.OutputPort]]:
        ir = self._ir if self._ir is not None else self.ir
        return ir.params, ir.outputs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise FrontendError(f"{K.shown_name(self)} is a leaf node function: it runs as a node of a graph "
                            "(hpvm.node / create_node inside an @hpvm.graph), not as a call",
                            caller_loc(), rule="node-function")

    def __repr__(self) -> str:
        return f"<hpvm leaf {self.name}>"


class HelperDef(_Lowerable):
    """An @hpvm.func helper: inlined into leaves. Called from host code it runs as plain Python."""

    kind = "helper"

    @property
    def ir(self) -> K.HelperFunc:
        self._lower()
        return self._ir

    def _make_ir(self, lowerer: Any, body: list[K.Stmt]) -> K.HelperFunc:
        return K.HelperFunc(name=self.name, user_name=self.user_name, params=lowerer.params_list(),
                            result=lowerer.result_type,
                            locals=dict(lowerer.locals), body=body, loc=lowerer.src.loc(lowerer.src.tree))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.pyfunc(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<hpvm func {self.name}>"


class GraphDef(NodeDef):
    """An internal node function: its body is traced once to build the child graph."""

    kind = "graph"

    def __init__(self, func: Callable[..., Any]):
        _check_function(func, "@hpvm.graph")
        functools.update_wrapper(self, func)
        self.pyfunc = func
        self.source_lines = source_lines(func)  # the text it is compiled from, as defined
        self.name = unique_name(func.__name__)
        self.user_name = func.__name__
        self.loc = function_loc(func)
        self._ir: GraphFunc | None = None
        self._children: dict[str, NodeDef] = {}
        self._tracing = False
        self._module: Module | None = None
        self._reads: Reads | None = None  # what the body read from its globals when traced
        # every definition the module holds, with the Reads its IR was made from (module())
        self._watch: Watch | None = None
        # the runtime's compiled graphs of this graph, by target (rt/compiler.py). Held here, not
        # in a table keyed by the graph: a compiled graph refers to its root, so a table's entry
        # would keep every graph a program ever launched alive (a graph made per step, say)
        self.compiled_for: dict[str, Any] = {}

    @property
    def ir(self) -> GraphFunc:
        self._trace()
        assert self._ir is not None
        return self._ir

    def children(self) -> dict[str, NodeDef]:
        """The node functions the child graph instantiates, by IR name."""
        self._trace()
        return dict(self._children)

    def _trace(self) -> None:
        if self._ir is not None:
            return
        with FRONTEND_LOCK:
            if self._ir is None:
                self._trace_now()

    def _trace_now(self) -> None:
        if self._tracing:
            raise VerificationError(f"graph {K.shown_name(self)} contains itself: the node hierarchy must be "
                                    "finite", caller_loc(), rule="hierarchy-acyclic")
        self._tracing = True
        try:
            self._reads = global_reads(self.pyfunc)
            self._ir, self._children = trace_graph(self)
        finally:
            self._tracing = False

    def signature(self) -> tuple[list[K.Param], list[K.OutputPort]]:
        return self.ir.params, self.ir.outputs

    def module(self) -> Module:
        """The IR module rooted here: built once, and again when a global, closure variable or
        attribute that a leaf, helper or graph body of it read names something else now (the
        compiled code would hold the old value)."""
        module = self._module
        if module is not None and self._watch is not None and self._watch.current():
            return module
        with FRONTEND_LOCK:
            if self._module is not None and self._watch is not None and not self._watch.current():
                self._forget()
            if self._module is None:
                self._module = build_module(self)
                self._watch = Watch([(d, d._reads) for d in _tree(self)])
        return self._module

    def _forget(self) -> None:
        """Drop the IR made from values that changed, and every graph of the tree (they hold the
        leaves' IR in their modules and their signatures in their nodes): the next use rebuilds."""
        for definition, reads in self._watch.deps if self._watch is not None else []:
            if isinstance(definition, GraphDef):
                definition._ir, definition._children, definition._module = None, {}, None
                definition._reads, definition._watch = None, None
                definition._input_index = None
            elif definition._reads is reads and reads is not None and not reads.current():
                definition._ir, definition._helpers, definition._reads = None, {}, None
                definition._input_index = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise LaunchError(f"{K.shown_name(self)} is a graph: run it with hpvm.launch({K.shown_name(self)}, "
                          "...) and "
                          "hpvm.wait(handle)", caller_loc())

    def __repr__(self) -> str:
        return f"<hpvm graph {self.name}>"


def leaf(func: Callable[..., Any] | None = None, *, target: str = "any") -> Any:
    """Mark a function as a leaf node: `@hpvm.leaf` or `@hpvm.leaf(target="cpu")`.

    A leaf runs once per instance of the grid of each node that uses it. Its parameters are
    typed by annotations (scalars, and `In`/`Out`/`InOut[Ptr[T]]` buffers each followed by an
    `i64` size in bytes); its outputs are the return annotation (a scalar type, `tuple[...]` or a
    `NamedTuple`). For the compiled targets the body is parsed from source, never run; the
    `python` target calls the function itself. What a body may contain: docs/language.md.

    Args:
        func: the function (when used as `@hpvm.leaf` without arguments).
        target: where the leaf may run: "any" (the runtime's target, the default), "cpu",
            "gpu", "nvptx" or "python" (docs/placement.md).

    Returns:
        The leaf definition, used in `hpvm.node` / `create_node` (calling it from the host is
        an error).

    Raises:
        FrontendError: `@hpvm.leaf("cpu")` (the target must be given by keyword). Errors in the
            body (unsupported constructs, types) are raised when a graph using it is built.
    """
    if func is None:
        return lambda f: LeafDef(f, target)
    if isinstance(func, str):
        raise FrontendError("write @hpvm.leaf(target=...) with the keyword", caller_loc())
    return LeafDef(func, target)


def func(fn: Callable[..., Any]) -> HelperDef:
    """Mark a function as a helper that leaves and other helpers may call (it is inlined).

    Its body follows the rules of a leaf body; its parameters and return are typed by
    annotations. It runs as Python when called from the host.

    Args:
        fn: the function.

    Returns:
        The helper definition.
    """
    return HelperDef(fn)


def graph(fn: Callable[..., Any]) -> GraphDef:
    """Mark a function as an internal node whose body builds a child graph.

    The body runs once, when the graph is first needed (built, compiled or launched), with
    symbolic parameters; it may only create structure: `hpvm.node` and the reference-form
    builders, and `return` node outputs to bind them to the graph's outputs. Its parameters are
    typed as a leaf's; it is the root of a launch (`hpvm.launch(graph, ...)`) or a node of
    another graph.

    Args:
        fn: the function.

    Returns:
        The graph definition, for `hpvm.launch`, `hpvm.compile`, `hpvm.to_text` and as a node.
    """
    return GraphDef(fn)


def is_builder(obj: Any) -> bool:
    return obj in BUILDERS


def _tree(root: GraphDef) -> list[Any]:
    """The graphs, leaves and helpers a module rooted at root holds (each once)."""
    seen: dict[int, Any] = {}
    stack: list[Any] = [root]
    while stack:
        definition = stack.pop()
        if id(definition) in seen:
            continue
        seen[id(definition)] = definition
        if isinstance(definition, (LeafDef, HelperDef)):
            stack.extend(definition.helpers().values())
        elif isinstance(definition, GraphDef):
            stack.extend(definition.children().values())
    return [d for d in seen.values() if isinstance(d, (GraphDef, LeafDef, HelperDef))]
