"""The execution plan of a verified module: node order, where every input comes from, how each
value is laid out across instances (backends/base.py's modes), and the compiled leaf kernels.

Everything here is decided once at compile time, so a launch only evaluates instance counts,
moves values between slots and calls kernels.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from ..ir import dfg as D
from ..ir import kernel as K
from ..ir.semantics import typed_value
from ..ir.targets import is_gpu
from ..ir.verify import DeferredGridCheck
from ..types import PtrType, ScalarType
from ..backends import heapview, registry
from ..backends.base import LeafKernel, NodeContext
from ..errors import CompileError, ExecutionError
from ..passes.bounds import BoundsProof
from ..passes.coverage import OutCoverage
from ..passes.passthrough import forwarded_outputs
from ..passes.uniform import check_barriers
from .library import compile_library
from .lowering_choice import LoweringChoice, choice_for
from .placement import HINT, Placement, fallback, place, require_compilable


@dataclass(frozen=True)
class InputExpr:
    """An integer expression of the parent's integer parameters feeding a node input (`hpvm.node(
    f, size=rows * cols)`), evaluated from the parent's values when the node fires."""

    expr: D.DimExpr
    ports: tuple[tuple[str, int], ...]  # (parameter name, parent parameter index)
    type: ScalarType  # the input's
    node: str
    input: str
    loc: Any

    def value(self, env: list[Any]) -> Any:
        """The input's value: a NumPy scalar of its type, or one per parent instance when a
        parameter it uses holds one (an array)."""
        values = {name: env[port] for name, port in self.ports}
        t = self.type
        if all(type(v) is int or np.ndim(v) == 0 for v in values.values()):
            result = D.eval_dim(self.expr, {k: int(v) for k, v in values.items()})
            if not t.min_value() <= result <= t.max_value():
                raise ExecutionError(f"input {self.input!r} of node {self.node} is "
                                     f"{D.dim_text(self.expr)} = {result}, outside its type {t} "
                                     f"[{t.min_value()}, {t.max_value()}]", self.loc,
                                     rule="node-inputs")
            return typed_value(result, t)
        result = D.eval_dim_array(self.expr, values)
        if np.any((result < t.min_value()) | (result > t.max_value())):
            raise ExecutionError(f"input {self.input!r} of node {self.node} is "
                                 f"{D.dim_text(self.expr)}, outside its type {t} in some parent "
                                 "instance", self.loc, rule="node-inputs")
        return result.astype(t.numpy_dtype)


@dataclass
class Source:
    """Where one node input comes from: a parent parameter, a sibling's output over an edge, a
    constant, or an expression of parent parameters."""

    bind_port: int | None = None  # parent parameter index
    const: Any = None  # the constant's NumPy value (not None: the input is a constant)
    expr: InputExpr | None = None  # an expression of parent parameters
    node: int | None = None  # sibling index in GraphPlan.nodes
    port: int | None = None
    edge_kind: str | None = None
    stream: bool = False


@dataclass
class NodePlan:
    node: D.Node
    func: Any  # LeafFunc | GraphFunc | LibraryFunc
    inputs: list[Source]
    input_modes: tuple[str, ...]
    output_modes: tuple[str, ...]
    placement: Placement  # where it runs and why (rt/placement.py)
    ctx: NodeContext | None = None
    kernel: LeafKernel | None = None  # compiled code; unchecked when `bounds` is set
    bounds: BoundsProof | None = None  # when set: unchecked code runs only where it is proven safe
    coverage: OutCoverage | None = None  # for a leaf with Out buffers: which a launch writes whole
    lowering: LoweringChoice | None = None  # a GPU leaf's choice of lowering (rt/lowering_choice.py)
    child: "GraphPlan | None" = None
    # the parent parameters its instance counts use: (name, parameter index), set with the plan
    dim_ports: tuple[tuple[str, int], ...] = ()
    _compile: "CompileLeaf | None" = None
    _checked: LeafKernel | None = None
    _reading: dict[tuple[int, ...], tuple[LeafKernel, BoundsProof]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def target(self) -> str:
        return self.placement.target

    @property
    def recorded_leaf(self) -> "NodePlan | None":
        """The leaf a replay records for this node (rt/replay.py): itself if it is a leaf; the
        leaf at the bottom of a chain of internal nodes whose child graphs each hold one node
        (HPVM-C's usual nesting: a wrapper, a grid of thread blocks, the leaf); else None."""
        chain = self.chain_to_leaf()
        if chain is None:
            return None
        return chain[-1].child.nodes[0] if chain else self

    def chain_to_leaf(self) -> "list[NodePlan] | None":
        """The internal nodes from this one down to recorded_leaf's parent (empty for a leaf), or
        None when some child graph on the way holds other than one node."""
        chain: list[NodePlan] = []
        node = self
        while node.kernel is None:
            if node.child is None or len(node.child.nodes) != 1:
                return None
            chain.append(node)
            node = node.child.nodes[0]
        return chain

    @functools.cached_property
    def unread_inputs(self) -> frozenset[int]:
        """A leaf's input ports its body never reads (an edge that only orders it after another
        node): their values need not reach it. Empty for other nodes."""
        if not isinstance(self.func, K.LeafFunc):
            return frozenset()
        read = K.names_read(self.func.body)
        return frozenset(i for i, p in enumerate(self.func.params) if p.name not in read)

    @functools.cached_property
    def forwarded(self) -> dict[int, int]:
        """Output port -> the uniform input port whose value it always is (passes/passthrough.py):
        a leaf's, or a chain's (each level binds its one child's outputs up and its inputs down);
        empty for other nodes."""
        chain = self.chain_to_leaf()
        leaf = self.recorded_leaf
        if chain is None or leaf is None or not isinstance(leaf.func, K.LeafFunc):
            return {}
        below = forwarded_outputs(leaf.func)  # leaf output -> leaf input
        found: dict[int, int] = {}
        for port in range(len(self.func.outputs)):
            out = port
            for level in chain:
                assert level.child is not None
                out = level.child.outputs[out][1]
            source = below.get(out)
            node = leaf
            for level in reversed(chain):  # from the leaf's input up to this node's
                if source is None or node.input_modes[source] != "uniform":
                    source = None
                    break
                source, node = node.inputs[source].bind_port, level
            if source is not None and self.input_modes[source] == "uniform":
                found[port] = source
        return found

    @property
    def leaf_count(self) -> int:
        """Leaf kernels one firing of this node launches."""
        return 1 if self.kernel is not None else (self.child.leaf_count if self.child else 0)

    @property
    def node_count(self) -> int:
        """Nodes one firing of this node runs: itself and every node of its child graph."""
        return 1 + (self.child.node_count if self.child else 0)

    def kernel_for(self, args: list[Any], extents: list[tuple[int, ...]]) -> LeafKernel:
        """The unchecked kernel when every access of this launch is proven in bounds, else the
        checked variant (compiled on first need)."""
        assert self.kernel is not None
        if self.bounds is None:
            return self.kernel
        world = heapview.world_size() if self.bounds.remote else 1
        if self.bounds.holds(args, extents, world):
            return self.kernel
        return self.checked_kernel()

    def reading_on_device(self, ports: tuple[int, ...]) -> tuple[LeafKernel, BoundsProof]:
        """The unchecked variant whose uniform inputs `ports` are read from device arrays (one
        value per parent: rt/stream/items.py hands it a producer's outputs), with its bounds proof, in
        which those inputs are unknown (compiled on first need)."""
        found = self._reading.get(ports)
        if found is None:
            assert self._compile is not None and self.ctx is not None
            modes = tuple("per_parent" if port in ports else mode
                          for port, mode in enumerate(self.ctx.input_modes))
            ctx = NodeContext(level_dims=self.ctx.level_dims, input_modes=modes,
                              output_modes=self.ctx.output_modes)
            found = self._reading[ports] = (self._compile(self.func, ctx, self.target, False),
                                            BoundsProof(self.func, ctx))
        return found

    def checked_kernel(self) -> LeafKernel:
        """The variant that checks every access (compiled on first need)."""
        if self._checked is None:
            assert self._compile is not None and self.ctx is not None
            self._checked = self._compile(self.func, self.ctx, self.target, True)
        return self._checked


@dataclass
class GraphPlan:
    func: D.GraphFunc
    param_modes: tuple[str, ...]  # "buffer" | "uniform" | "per_parent", as the children see them
    level_dims: tuple[int, ...]  # dims of the enclosing internal nodes, innermost first
    nodes: list[NodePlan] = field(default_factory=list)
    outputs: list[tuple[int, int]] = field(default_factory=list)  # (node index, port) per output
    grid_checks: list[tuple[int, int, D.Edge]] = field(default_factory=list)
    devices_for: dict[str, frozenset[str]] = field(default_factory=dict)  # rt/placement.py's cache

    @functools.cached_property
    def gpu_nodes(self) -> list[NodePlan]:
        """The nodes, at any depth, that run on a GPU target (asked once the plan is built): leaves
        and library nodes. An internal node runs nothing itself: its hint only places the children
        that inherit it, and those are here, so children that all hint elsewhere leave its GPU
        out of the launch's devices (and out of its checks)."""
        found = []
        for node in self.nodes:
            if node.child is not None:
                found.extend(node.child.gpu_nodes)
            elif is_gpu(node.target):
                found.append(node)
        return found

    def host_source(self, src: Source, ran: Callable[["NodePlan"], bool]) -> Source:
        """Where a uniform input's value is known on the host: an edge from a node that forwards
        one of its uniform inputs (NodePlan.forwarded) carries that input's value, so its source is
        that input's source, followed through every such producer; other sources as they are.
        A producer that ran no instance (`ran` says so) carries 0, not its input: the walk stops
        at its edge."""
        while src.node is not None:
            producer = self.nodes[src.node]
            port = producer.forwarded.get(src.port)
            if port is None or not ran(producer):
                return src
            src = producer.inputs[port]
        return src

    @property
    def host_only(self) -> bool:
        """Every node, at any depth, runs on the host (cpu or python)."""
        return not self.gpu_nodes

    @property
    def leaf_count(self) -> int:
        """Leaf nodes fired by one run of this graph (counted in stats once per launch)."""
        return sum(n.leaf_count for n in self.nodes)

    @property
    def node_count(self) -> int:
        """Nodes fired by one run of this graph, internal ones included (counted in stats)."""
        return sum(n.node_count for n in self.nodes)

    @property
    def single_parent(self) -> bool:
        """Statically one parent instance: every enclosing internal node has no dimensions."""
        return all(d == 0 for d in self.level_dims)


# (leaf, context, target, checked) -> kernel
CompileLeaf = Callable[[K.LeafFunc, NodeContext, str, bool], LeafKernel]


def build_plan(module: D.Module, deferred: list[DeferredGridCheck], default_target: str,
               compile_leaf: CompileLeaf) -> GraphPlan:
    root = module.root_func
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in root.params)
    checks = {(c.graph, id(c.edge)) for c in deferred}
    return _plan_graph(module, root, modes, (), default_target, compile_leaf, checks, None)


def _dim_ports(g: D.GraphFunc, node: D.Node) -> tuple[tuple[str, int], ...]:
    names = sorted(set().union(*(D.dim_params(d) for d in node.dims)))
    return tuple((name, next(i for i, p in enumerate(g.params) if p.name == name)) for name in names)


def _plan_graph(module: D.Module, g: D.GraphFunc, param_modes: tuple[str, ...],
                level_dims: tuple[int, ...], default_target: str, compile_leaf: CompileLeaf,
                checks: set[tuple[str, int]], inherited: Placement | None) -> GraphPlan:
    """inherited: the placement of the nearest hinted enclosing internal node (rt/placement.py)."""
    plan = GraphPlan(func=g, param_modes=param_modes, level_dims=level_dims)
    order = _topological(g)
    index = {name: i for i, name in enumerate(order)}
    consumers: dict[tuple[str, int], list[str]] = {}
    for e in g.edges:
        consumers.setdefault((e.src, e.src_port), []).append(e.kind)
    for b in g.output_binds:
        consumers.setdefault((b.src, b.src_port), []).append(D.ALL_TO_ALL)

    for name in order:
        node = g.node(name)
        func = module.functions[node.func]
        sources = [Source() for _ in func.params]
        for b in g.input_binds:
            if b.dst == name:
                sources[b.dst_port] = Source(bind_port=b.parent_port, stream=b.stream)
        for e in g.edges:
            if e.dst == name:
                sources[e.dst_port] = Source(node=index[e.src], port=e.src_port, edge_kind=e.kind,
                                             stream=e.stream)
        for c in g.const_binds:
            if c.dst == name:
                sources[c.dst_port] = Source(const=typed_value(c.value.value, c.value.type))
        for x in g.expr_binds:
            if x.dst == name:
                p = func.params[x.dst_port]
                ports = tuple((pname, next(i for i, q in enumerate(g.params) if q.name == pname))
                              for pname in sorted(D.dim_params(x.expr)))
                sources[x.dst_port] = Source(expr=InputExpr(x.expr, ports, p.type, name, p.name, x.loc))
        input_modes = tuple(_input_mode(p, s, param_modes, plan.single_parent, len(node.dims))
                            for p, s in zip(func.params, sources))
        output_modes = tuple(_output_mode(consumers.get((name, port), []))
                             for port in range(len(func.outputs)))
        placement = place(node, func, default_target, inherited)
        require_compilable(placement, node, func)
        nplan = NodePlan(node=node, func=func, inputs=sources, input_modes=input_modes,
                         output_modes=output_modes, placement=placement,
                         dim_ports=_dim_ports(g, node))
        target = placement.target
        if isinstance(func, K.LeafFunc):
            check_barriers(func, input_modes)  # a language rule: checked for every target
            ctx = NodeContext(level_dims=(len(node.dims),) + level_dims, input_modes=input_modes,
                              output_modes=output_modes)
            nplan.ctx = ctx
            nplan.kernel = _compile_placed(nplan, compile_leaf)
            nplan.lowering = choice_for(nplan.placement, func, ctx, compile_leaf)
            if any(p.direction == "out" for p in func.params):
                nplan.coverage = OutCoverage(func, input_modes)
            backend = registry.get(nplan.target)
            if backend is not None and not backend.checks_accesses:  # else no checked variant
                nplan.bounds = BoundsProof(func, ctx)
                nplan._compile = compile_leaf
        elif isinstance(func, D.GraphFunc):
            child_modes = tuple("buffer" if m == "buffer" else
                                ("uniform" if m == "uniform" else "per_parent") for m in input_modes)
            nplan.child = _plan_graph(module, func, child_modes, (len(node.dims),) + level_dims,
                                      default_target, compile_leaf, checks,
                                      placement if placement.origin == HINT else None)
        else:
            bound = [g.params[s.bind_port].name if s.bind_port is not None else None for s in sources]
            nplan.kernel = compile_library(func, node, target, bound, not plan.single_parent)
        plan.nodes.append(nplan)
    for e in g.edges:
        if (g.name, id(e)) in checks:
            plan.grid_checks.append((index[e.src], index[e.dst], e))
    for port in range(len(g.outputs)):
        b = next(b for b in g.output_binds if b.parent_port == port)
        plan.outputs.append((index[b.src], b.src_port))
    return plan


def _input_mode(param: K.Param, source: Source, parent_modes: tuple[str, ...], single_parent: bool,
                ndims: int) -> str:
    if isinstance(param.type, PtrType):
        return "buffer"
    if source.const is not None:
        return "uniform"
    if source.expr is not None:  # as its parameters: per parent if any of them is
        modes = {parent_modes[port] for _, port in source.expr.ports}
        return "per_parent" if "per_parent" in modes else "uniform"
    if source.bind_port is not None:
        return parent_modes[source.bind_port]
    if source.edge_kind == D.ONE_TO_ONE and not (single_parent and ndims == 0):
        return "per_instance"
    return "uniform" if single_parent else "per_parent"


def _output_mode(kinds: list[str]) -> str:
    if D.ONE_TO_ONE in kinds:
        return "per_instance"
    return "per_parent" if kinds else "unused"


def _compile_placed(nplan: NodePlan, compile_leaf: CompileLeaf) -> LeafKernel:
    """The leaf's kernel for its placement, or for its fallback placement (rt/placement.py)."""
    assert nplan.ctx is not None
    try:
        return compile_leaf(nplan.func, nplan.ctx, nplan.target, False)
    except CompileError as exc:
        moved = fallback(nplan.placement, exc)
        if moved is None:
            raise
        nplan.placement = moved
        return compile_leaf(nplan.func, nplan.ctx, moved.target, False)


def _topological(g: D.GraphFunc) -> list[str]:
    """Node names in dependency order, ties broken by creation order (deterministic)."""
    indeg = {n.name: 0 for n in g.nodes}
    succ: dict[str, list[str]] = {n.name: [] for n in g.nodes}
    for e in g.edges:
        indeg[e.dst] += 1
        succ[e.src].append(e.dst)
    position = {n.name: i for i, n in enumerate(g.nodes)}
    ready = sorted((n for n, d in indeg.items() if d == 0), key=position.__getitem__)
    order = []
    while ready:
        name = ready.pop(0)
        order.append(name)
        for nxt in succ[name]:
            indeg[nxt] -= 1
            if indeg[nxt] == 0:
                ready.append(nxt)
                ready.sort(key=position.__getitem__)
    return order
