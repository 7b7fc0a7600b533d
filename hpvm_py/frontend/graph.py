"""Tracing of @hpvm.graph bodies and the graph builders (reference form and keyword sugar).

A graph body runs once, with a symbolic value for each parameter. The symbols only support what an
internal node may do with its inputs: bind them to children, and combine integer parameters with
+ - * // % into instance counts. Anything else (indexing a pointer, branching on a value) is
computation, which the reference forbids in internal nodes.
"""
from __future__ import annotations

import threading
from typing import Any, Iterable

import numpy as np

from ..errors import FrontendError, HPVMError, VerificationError
from ..ir import dfg as D
from ..ir.kernel import shown_name
from ..ir.targets import canonical_target, target_problem
from ..support.loc import Loc
from ..types import ScalarType
from .callsite import caller_loc
from .connections import ALL_TO_ALL, ONE_TO_ONE, Connection, OutRef, all_to_all, connection, streaming
from .constants import input_constant, is_constant
from .defs import Definition, NodeDef
from .lower import Lowerer
from .node_options import NODE_OPTIONS, check_shadowed, shadow_note
from .source import read_function
from .symbols import DimSym, Sym, as_dim
from .trace_locs import return_loc, user_frame_loc

_local = threading.local()
_tracing = [0]  # graph bodies being traced now, in any thread


class _Outputs:
    """`node.out`: outputs by name (`.x`) or index (`[0]`)."""

    def __init__(self, node: "NodeRef"):
        self._node = node

    def __getattr__(self, name: str) -> OutRef:
        if name.startswith("__"):
            raise AttributeError(name)
        return OutRef(self._node, self._node.output_port(name))

    def __getitem__(self, index: int | str) -> OutRef:
        return OutRef(self._node, self._node.output_port(index))

    def __iter__(self) -> Iterable[OutRef]:
        return iter([OutRef(self._node, i) for i in range(len(self._node.outputs))])

    def __len__(self) -> int:
        return len(self._node.outputs)


class NodeRef:
    """A node created in the graph being traced."""

    __slots__ = ("builder", "ir", "definition", "params", "outputs")

    def __init__(self, builder: "GraphBuilder", ir: D.Node, definition: NodeDef):
        self.builder = builder
        self.ir = ir
        self.definition = definition
        self.params, self.outputs = definition.signature()

    @property
    def out(self) -> "_Outputs":
        """Outputs by name (`node.out.total`) or index (`node.out[0]`)."""
        return _Outputs(self)

    @property
    def name(self) -> str:
        return self.ir.name

    def input_port(self, port: int | str) -> int:
        return _port(port, [p.name for p in self.params], f"input of node {self.ir.name}")

    def output_port(self, port: int | str) -> int:
        return _port(port, [o.name for o in self.outputs], f"output of node {self.ir.name}")

    def __repr__(self) -> str:
        return f"<node {self.ir.name}: {self.ir.func}>"


def _port(port: Any, names: list[str | None], what: str) -> int:
    if isinstance(port, bool):
        raise VerificationError(f"{what}: port must be an index or a name", caller_loc(), rule="ports-exist")
    if isinstance(port, int):
        if 0 <= port < len(names):
            return port
        raise VerificationError(f"{what}: port {port} does not exist (there are {len(names)})",
                                caller_loc(), rule="ports-exist")
    if isinstance(port, str) and port in names:
        return names.index(port)
    known = ", ".join(n for n in names if n) or "none by name; use indices"
    raise VerificationError(f"{what}: no port named {port!r} (known: {known})", caller_loc(),
                            rule="ports-exist")


class GraphBuilder:
    """Collects the child graph of one internal-node function while its body runs."""

    def __init__(self, definition: NodeDef, ir: D.GraphFunc, src_file: str):
        self.definition = definition
        self.ir = ir
        self.src_file = src_file
        self.children: dict[str, NodeDef] = {}
        self._name_counts: dict[str, int] = {}
        self._names: set[str] = set()
        # nodes whose hpvm.node call took an input's name as its own option (grid=, name=, hint=)
        self.shadowed: list[tuple[NodeRef, list[str]]] = []

    def node_name(self, base: str) -> str:
        if base not in self._names and base not in self._name_counts:
            self._name_counts[base] = 1
            self._names.add(base)
            return base
        count = self._name_counts.get(base, 0)
        while True:
            name = base if count == 0 else f"{base}_{count}"
            count += 1
            if name not in self._names:
                break
        self._name_counts[base] = count
        self._names.add(name)
        return name

    def own(self, node: Any, what: str) -> NodeRef:
        if not isinstance(node, NodeRef):
            raise VerificationError(f"{what} must be a node created in this graph, not "
                                    f"{type(node).__name__}", caller_loc(), rule="edge-siblings")
        if node.builder is not self:
            raise VerificationError(f"{what}: node {node.ir.name} belongs to another graph; edges and "
                                    "binds connect children of the same internal node",
                                    caller_loc(), rule="edge-siblings")
        return node

    def parent_input(self, port: Any) -> int:
        if isinstance(port, Sym):
            if port.builder is not self:
                raise VerificationError("bind_input: that parameter belongs to another graph",
                                        caller_loc(), rule="edge-siblings")
            return port.index
        return _port(port, [p.name for p in self.ir.params], f"input of graph {shown_name(self.ir)}")

    def parent_output(self, port: Any) -> int:
        return _port(port, [o.name for o in self.ir.outputs], f"output of graph {shown_name(self.ir)}")


def current_builder(what: str) -> GraphBuilder:
    try:
        return _local.stack[-1]
    except (AttributeError, IndexError):
        pass
    stack = getattr(_local, "stack", None)
    if not stack:
        raise VerificationError(f"{what}() builds graph structure: use it inside an @hpvm.graph "
                                "body", caller_loc(), rule="builders-in-internal-nodes")
    return stack[-1]


def check_host_code(what: str) -> None:
    """Refuse a host operation (init, cleanup, memory tracking, launch, wait, push, pop) called
    while this thread traces a graph body: the reference keeps them to host code, and an internal
    node only builds structure (a cleanup() there would stop the runtime that is launching it)."""
    if not _tracing[0]:  # (no thread traces a graph: launch and wait ask this on every call)
        return
    stack = getattr(_local, "stack", None)
    if stack:
        raise VerificationError(f"{what}() is host code: the body of graph {shown_name(stack[-1].ir)} is an "
                                "internal node, which only builds structure; call it outside "
                                "@hpvm.graph bodies", caller_loc(), rule="host-intrinsics-in-host-code")


def _definition(fn: Any, loc: Loc) -> NodeDef:
    if isinstance(fn, Definition) and fn.kind == "helper":
        raise VerificationError(f"{shown_name(fn)} is an @hpvm.func helper; nodes run @hpvm.leaf or "
                                "@hpvm.graph functions", loc, rule="node-function")
    if isinstance(fn, NodeDef):
        return fn
    name = getattr(fn, "__qualname__", repr(fn))
    raise VerificationError(f"{name} is not a node function: decorate it with @hpvm.leaf or "
                            "@hpvm.graph", loc, rule="node-function")


# ----------------------------------------------------------------------------------------------
# Reference-form builders


def _create(fn: Any, dims: tuple[Any, ...], name: str | None = None, loc: Loc | None = None) -> NodeRef:
    builder = current_builder("create_node")
    loc = loc or caller_loc()
    definition = fn if isinstance(fn, NodeDef) else _definition(fn, loc)
    if len(dims) > 3:
        raise VerificationError(f"a node is replicated in at most 3 dimensions, got {len(dims)}",
                                loc, rule="max-three-dims")
    dim_exprs = []
    for i, d in enumerate(dims):
        if type(d) is Sym and d.builder is builder and d._dim_expr is not None:
            dim_exprs.append(d._dim_expr)  # a parameter already used as a count: checked then
            continue
        d = as_dim(d, builder, f"instance count {i}")
        if isinstance(d, D.DimConst) and d.value < 0:
            raise VerificationError(f"instance count {d.value} is negative", loc, rule="instance-counts")
        dim_exprs.append(d)
    if name is None:
        node_name = builder.node_name(definition.user_name)
    else:
        if not isinstance(name, str) or not name.isidentifier() or name in builder._names:
            raise VerificationError(f"node name {name!r} must be a fresh identifier in this graph",
                                    loc, rule="unique-node-names")
        builder._names.add(name)
        node_name = name
    ir = D.Node(node_name, definition.name, dim_exprs, None, loc)
    builder.ir.nodes.append(ir)
    builder.children[definition.name] = definition
    return NodeRef(builder, ir, definition)


def create_node(fn: Any) -> NodeRef:
    """Create a child node with one dynamic instance (reference form; `node` is the short one).

    Args:
        fn: an `@hpvm.leaf`, an `@hpvm.graph` (an internal node) or a library node
            (`hpvm.comm.*`).

    Returns:
        The node, for `edge`, `bind_input`, `bind_output`, `hint` and `node.out`.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    return _create(fn, ())


def create_node_1d(fn: Any, n1: Any) -> NodeRef:
    """Create a child node replicated `n1` times in x.

    Args:
        fn: the node's function, as for `create_node`.
        n1: the instance count: an int, a parameter of this graph, or `+ - * // %` of them
            (evaluated at launch).

    Returns:
        The node.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    return _create(fn, (n1,))


def create_node_2d(fn: Any, n1: Any, n2: Any) -> NodeRef:
    """Create a child node replicated `n1` × `n2` times (x, y).

    Args:
        fn: the node's function, as for `create_node`.
        n1: the instance count in x (as for `create_node_1d`).
        n2: the instance count in y.

    Returns:
        The node.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    return _create(fn, (n1, n2))


def create_node_3d(fn: Any, n1: Any, n2: Any, n3: Any) -> NodeRef:
    """Create a child node replicated `n1` × `n2` × `n3` times (x, y, z).

    Args:
        fn: the node's function, as for `create_node`.
        n1: the instance count in x (as for `create_node_1d`).
        n2: the instance count in y.
        n3: the instance count in z.

    Returns:
        The node.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    return _create(fn, (n1, n2, n3))


def _repl_kind(repl: Any) -> str:
    if repl in (ONE_TO_ONE, 0) and not isinstance(repl, bool):
        return ONE_TO_ONE
    if repl in (ALL_TO_ALL, 1) and not isinstance(repl, bool):
        return ALL_TO_ALL
    raise VerificationError(f"edge replication must be hpvm.ONE_TO_ONE or hpvm.ALL_TO_ALL, not {repl!r}",
                            caller_loc(), rule="edge-kinds")


def _stream_flag(stream: Any) -> bool:
    """The reference's i1 isStream: a bool, or 0/1 as `repl` takes them. Python's truth value
    would make stream="no" (or a node handle, or a misplaced port) a streaming edge silently."""
    if isinstance(stream, (bool, np.bool_)) or (isinstance(stream, (int, np.integer)) and stream in (0, 1)):
        return bool(stream)
    raise VerificationError(f"stream must be True or False (1 or 0), not {stream!r}", caller_loc(),
                            rule="edge-kinds")


def edge(src: Any, dst: Any, repl: Any, sp: int | str, dp: int | str, stream: bool = False) -> None:
    """Connect output `sp` of node `src` to input `dp` of node `dst`, two children of this graph.

    Args:
        src: the source node.
        dst: the destination node.
        repl: `hpvm.ONE_TO_ONE` (instance i feeds instance i: equal grids) or `hpvm.ALL_TO_ALL`
            (a barrier: every destination instance after every source instance).
        sp: the source's output, by index or name.
        dp: the destination's input, by index or parameter name.
        stream: a streaming edge: one value per item of a streaming launch.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    builder = current_builder("edge")
    s = builder.own(src, "edge source")
    d = builder.own(dst, "edge destination")
    builder.ir.edges.append(D.Edge(src=s.ir.name, src_port=s.output_port(sp), dst=d.ir.name,
                                   dst_port=d.input_port(dp), kind=_repl_kind(repl),
                                   stream=_stream_flag(stream), loc=caller_loc()))


def bind_input(node: Any, ip: Any, ic: int | str, stream: bool = False) -> None:
    """Pass input `ip` of this graph to input `ic` of a child node.

    Args:
        node: the child node.
        ip: this graph's parameter, by index or name (or the symbolic parameter itself).
        ic: the child's input, by index or parameter name.
        stream: a streaming bind: a new value on every push of a streaming launch.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    builder = current_builder("bind_input")
    n = builder.own(node, "bind_input node")
    streams = _stream_flag(stream)
    if isinstance(ip, DimSym):
        dp = n.input_port(ic)
        loc = caller_loc()
        if streams:
            raise VerificationError(f"bind_input: an expression ({D.dim_text(ip.expr)}) is computed "
                                    "from the graph's parameters when the node fires, not streamed",
                                    loc, rule="node-inputs")
        builder.ir.expr_binds.append(_expr_bind(builder, ip, n, dp, loc))
        return
    builder.ir.input_binds.append(D.InputBind(parent_port=builder.parent_input(ip), dst=n.ir.name,
                                              dst_port=n.input_port(ic), stream=streams, loc=caller_loc()))


def bind_output(node: Any, oc: int | str, op: int | str, stream: bool = False) -> None:
    """Make output `oc` of a child node output `op` of this graph.

    Args:
        node: the child node.
        oc: the child's output, by index or name.
        op: this graph's output, by index or name.
        stream: a streaming bind: one value per item of a streaming launch.

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    builder = current_builder("bind_output")
    n = builder.own(node, "bind_output node")
    builder.ir.output_binds.append(D.OutputBind(src=n.ir.name, src_port=n.output_port(oc),
                                                parent_port=builder.parent_output(op),
                                                stream=_stream_flag(stream), loc=caller_loc()))


def hint(node: Any, target: str) -> None:
    """Place a child node on a target other than the runtime's (docs/placement.md).

    Args:
        node: the child node.
        target: "cpu", "gpu", "nvptx", "python", "any" (no preference), or a GPU target with a
            device index, "gpu:1".

    Raises:
        VerificationError: outside an `@hpvm.graph` body, or a rule broken (named, at the line).
    """
    builder = current_builder("hint")
    _set_hint(builder.own(node, "hint node"), target)


def _set_hint(n: NodeRef, target: str) -> None:
    problem = target_problem(target, leaf=False)
    if problem is not None:
        raise VerificationError(f"hint for node {n.ir.name}: {problem}", caller_loc(), rule="hint-target")
    n.ir.hint = canonical_target(target)


# ----------------------------------------------------------------------------------------------
# Keyword sugar


_NO_FUNCTION = object()  # node() called without a positional function (`hpvm.node(fn=f, ...)`)


def node(fn: Any = _NO_FUNCTION, /, *args: Any, grid: Any = None, name: str | None = None,
         hint: str | None = None, **inputs: Any) -> NodeRef:
    """Create a child node and connect its inputs in one call.

    `n = hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, b=other.out.c, ...)`. Returning node
    outputs from the graph function (`return n.out.c`) binds them to the graph's outputs.

    Args:
        fn: an `@hpvm.leaf`, an `@hpvm.graph` (an internal node) or a library node
            (`hpvm.comm.*`), by position (`fn=` names it only when nothing is given by position;
            otherwise `fn=` is the node's input called `fn`).
        *args: the node's inputs by position.
        grid: None (one instance), an instance count, or a tuple of up to 3 counts (x, y, z); a
            count is an int, a parameter of this graph, or `+ - * // %` of them.
        name: the node's name in the IR and in errors (default: the function's name, numbered
            when repeated).
        hint: a target for this node, as for `hpvm.hint`.
        **inputs: the node's inputs by parameter name. Each input is a parameter of this graph
            (an input bind), a sibling's output, `other.out.name` or `other.out[i]` (a one-to-one
            edge; wrap it in `hpvm.all_to_all(...)` for an all-to-all edge, in
            `hpvm.streaming(...)` for a streaming edge or bind), or a number for a scalar input
            (a constant of the input's type). `grid=`, `name=` and `hint=` are always this
            call's own options, as `stream=` is `launch`'s: an input with one of these names goes
            by position (or through `bind_input` / `edge`).

    Returns:
        The node: `n.out.name` / `n.out[i]` are its outputs.

    Raises:
        VerificationError: called outside an `@hpvm.graph` body, an input missing, unknown or
            given twice, or another rule broken (named in the message, at the line).
    """
    if fn is _NO_FUNCTION:
        if args or "fn" not in inputs:
            raise VerificationError("hpvm.node takes the node's function first, by position: "
                                    "hpvm.node(f, ...)", caller_loc(), rule="node-function")
        fn = inputs.pop("fn")
    if grid is None:
        dims: tuple[Any, ...] = ()
    elif isinstance(grid, tuple):
        dims = grid
    elif isinstance(grid, list):
        dims = tuple(grid)
    else:
        dims = (grid,)
    loc = caller_loc()
    definition = fn if isinstance(fn, NodeDef) else _definition(fn, loc)
    index = definition.input_index()
    options = {"grid": grid, "name": name, "hint": hint}
    # an option named like one of the function's inputs and that input not given by position: the
    # keyword is the option (as launch's stream=), but the author may have meant the input
    shadowed = [o for o in NODE_OPTIONS if options[o] is not None and o in index and
                index[o] >= len(args)]
    try:
        created = _create(definition, dims, name, loc)
        if hint is not None:
            _set_hint(created, hint)
    except VerificationError as exc:
        if not shadowed:
            raise
        raise VerificationError(f"{exc.message}; {shadow_note(definition, shadowed)}", exc.loc,
                                rule=exc.rule) from None
    builder = created.builder
    if len(args) > len(index):
        raise VerificationError(f"{shown_name(created.definition)} takes {len(index)} input(s), got "
                                f"{len(args)} positional", loc, rule="node-inputs")
    given = dict(zip(index, args))
    for key, value in inputs.items():
        if key not in index:
            raise VerificationError(f"{shown_name(created.definition)} has no input named {key!r} (inputs: "
                                    f"{', '.join(index)})", loc, rule="ports-exist")
        if key in given:
            raise VerificationError(f"input {key!r} given twice", loc, rule="node-inputs")
        given[key] = value
    node_name = created.ir.name
    binds, edges = builder.ir.input_binds, builder.ir.edges
    for key, value in given.items():
        dp = index[key]
        if type(value) is Sym and value.builder is builder:  # the common case, kept cheap
            binds.append(D.InputBind(value.index, node_name, dp, False, loc))
            continue
        if is_constant(value):
            const = input_constant(value, created.params[dp], node_name, loc)
            builder.ir.const_binds.append(D.ConstBind(const, node_name, dp, loc))
            continue
        if isinstance(value, DimSym):
            builder.ir.expr_binds.append(_expr_bind(builder, value, created, dp, loc))
            continue
        conn = connection(value)
        if isinstance(conn.source, Sym):
            binds.append(D.InputBind(parent_port=builder.parent_input(conn.source), dst=node_name,
                                     dst_port=dp, stream=conn.stream, loc=loc))
        else:
            src = builder.own(conn.source.node, f"input {key!r}")
            edges.append(D.Edge(src=src.ir.name, src_port=conn.source.port, dst=node_name,
                                dst_port=dp, kind=conn.kind, stream=conn.stream, loc=loc))
    if shadowed:
        builder.shadowed.append((created, shadowed))
    return created


def _expr_bind(builder: GraphBuilder, value: DimSym, n: NodeRef, dp: int, loc: Loc) -> D.ExprBind:
    """An expression of the graph's integer parameters feeding an integer input of n."""
    param = n.params[dp]
    t = param.type
    text = D.dim_text(value.expr)
    if value.builder is not builder:
        raise VerificationError(f"input {param.name!r} of node {n.ir.name}: {text} uses parameters "
                                "of another graph", loc, rule="edge-siblings")
    if not isinstance(t, ScalarType):
        raise VerificationError(f"input {param.name!r} of node {n.ir.name} is a {t}: an expression "
                                f"({text}) feeds integer inputs only; bind a pointer parameter of the "
                                "graph as it is (offset it inside the leaf: `row = data + k`)", loc,
                                rule="node-inputs")
    if not t.is_int or t.is_bool:
        raise VerificationError(f"input {param.name!r} of node {n.ir.name} is a {t}: an expression "
                                f"({text}) of integer parameters feeds integer inputs only; compute "
                                "other values in a leaf", loc, rule="node-inputs")
    return D.ExprBind(value.expr, n.ir.name, dp, loc)


BUILDERS = {create_node, create_node_1d, create_node_2d, create_node_3d, edge, bind_input,
            bind_output, hint, node, all_to_all, streaming}


# ----------------------------------------------------------------------------------------------
# Tracing


def trace_graph(definition: NodeDef) -> tuple[D.GraphFunc, dict[str, NodeDef]]:
    """Run the body of an @hpvm.graph definition once: its IR and the node functions it uses."""
    src = read_function(definition.pyfunc, getattr(definition, "source_lines", None))
    lowerer = Lowerer(src, "graph", definition.name, lambda obj, loc: None, lambda obj: False)
    lowerer.lower_signature()
    ir = D.GraphFunc(name=definition.name, user_name=definition.user_name, params=lowerer.params_list(),
                     outputs=lowerer.outputs,
                     loc=src.loc(src.tree),  # the `def` line, not the decorator's
                     tuple_of_one=lowerer.tuple_annotation and len(lowerer.outputs) == 1)
    builder = GraphBuilder(definition, ir, src.file)
    symbols = [Sym(builder, i, p) for i, p in enumerate(ir.params)]
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    stack.append(builder)
    _tracing[0] += 1  # (under FRONTEND_LOCK, as every trace)
    try:
        result = definition.pyfunc(*symbols)
    except HPVMError:
        raise
    except Exception as exc:
        raise FrontendError(f"the body of graph {shown_name(definition)} raised {type(exc).__name__}: {exc}",
                            user_frame_loc(exc, definition.loc)) from None
    finally:
        stack.pop()
        _tracing[0] -= 1
    _bind_result(builder, result, return_loc(src) or definition.loc)
    check_shadowed(builder)
    return ir, builder.children


def _bind_result(builder: GraphBuilder, result: Any, loc: Loc) -> None:
    if result is None:
        return
    if isinstance(result, (OutRef, Connection)):
        values = [result]
    elif isinstance(result, tuple):
        values = list(result)
    else:
        raise VerificationError(f"graph {shown_name(builder.ir)} returns {type(result).__name__}; return "
                                "node "
                                "outputs (node.out.x), a tuple of them, or nothing", loc,
                                rule="outputs-bound")
    if len(values) != len(builder.ir.outputs):
        raise VerificationError(f"graph {shown_name(builder.ir)} returns {len(values)} value(s) but its "
                                f"annotation declares {len(builder.ir.outputs)} output(s)", loc,
                                rule="outputs-bound")
    for port, value in enumerate(values):
        # (checked before `connection`, whose error is about node inputs and at the caller's line)
        conn = connection(value) if isinstance(value, (Connection, OutRef, Sym)) else None
        if conn is None or not isinstance(conn.source, OutRef):
            what = "a graph parameter" if conn is not None else type(value).__name__
            raise VerificationError(f"output {port} of graph {shown_name(builder.ir)} must be a node output "
                                    f"(node.out.x), not {what}", loc, rule="outputs-bound")
        src = builder.own(conn.source.node, f"output {port}")
        builder.ir.output_binds.append(D.OutputBind(src=src.ir.name, src_port=conn.source.port,
                                                    parent_port=port, stream=conn.stream, loc=loc))
