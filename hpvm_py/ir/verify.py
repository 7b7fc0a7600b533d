"""The verifier: every rule of the HPVM language reference, checked on the IR module.

Each rule has a short name (shown in the error as `[rule: name]`, listed in docs/language.md) and
every error points at the user's source line of the offending node, edge, bind or statement.
The same checks run on modules built from Python and on modules parsed from .hpvm text, so a
hand-written textual graph is held to the same language.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import VerificationError
from ..support.loc import Loc
from ..types import PtrType, ScalarType, i64
from . import dfg as D
from . import kernel as K
from .targets import target_problem
from .typecheck import MAX_EXPR_DEPTH
from .verify_binds import _check_const_bind, _check_expr_bind, _check_input_bind, fed_twice

RULES: dict[str, str] = {
    "dfg-acyclic": "the edges of a child graph form no cycle",
    "hierarchy-acyclic": "an internal node does not contain itself, directly or not",
    "edge-siblings": "edges connect nodes of the same child graph",
    "edge-unique-ports": "no two edges of a child graph share a source (Src, out) or a destination (Dst, in)",
    "one-to-one-grids": "a one-to-one edge joins nodes with identical grids (dimensions and extents)",
    "edge-types": "an edge's source output and destination input have the same type",
    "bind-types": "a bind's parent and child ports have the same type",
    "bind-direction": "a child may not write through a pointer its parent received as In",
    "bind-unique-dest": "no two binds of a graph share a destination",
    "input-single-source": "each node input is fed by exactly one edge or bind",
    "inputs-connected": "every input of every child node is connected",
    "outputs-bound": "every output of an internal node is bound exactly once",
    "pointer-direction": "pointer parameters carry In/Out/InOut and are used accordingly",
    "pointer-size": "every pointer parameter (and pointer output) is followed by an i64 size in bytes",
    "no-pointers-on-edges": "pointers travel through binds only, never on edges or out of the root",
    "max-three-dims": "nodes are replicated in at most three dimensions",
    "instance-counts": "instance counts are ints or expressions of integer graph parameters",
    "instance-query-dims": "instance queries name a dimension the node is replicated in",
    "single-instance-root": "the root has a single instance: it cannot be queried for instance ids",
    "internal-nodes-only-structure": "internal nodes only build structure",
    "leaf-no-graph-builders": "leaf nodes compute; they use no graph-building builders",
    "builders-in-internal-nodes": "graph builders are used inside @hpvm.graph bodies only",
    "host-intrinsics-in-host-code": ("init, cleanup, memory tracking, launch, wait, push and pop are "
                                     "host code: not called inside @hpvm.graph bodies"),
    "helper-no-intrinsics": "@hpvm.func helpers use no HPVM intrinsics",
    "node-function": "a node runs a leaf, graph or library function",
    "ports-exist": "edge and bind ports name existing parameters and outputs",
    "unique-node-names": "node names are unique within a graph",
    "hint-target": ("a leaf target or a node hint is cpu, gpu, nvptx, python (hints only) or any; "
                    "gpu:N / nvptx:N pick GPU number N"),
    "supported-python": "leaves use the supported subset of Python",
    "leaf-returns-outputs": "a leaf returns one value per declared output on every path",
    "typing-narrowing": "narrowing conversions need an explicit cast",
    "pointer-views": "a pointer variable (`p + k`, hpvm.view, a shaped malloc) keeps one base "
                     "pointer; it is indexed with as many indices as its shape has extents",
    "malloc-uniform": "malloc() is called by every instance, at the top level, with a uniform size",
    "barrier-uniform": "barrier() is reached by every instance of a group (uniform control flow)",
    "memory-in-bounds": "every load, store and atomic stays within its buffer (checked as the graph runs)",
    "remote-access": "remote_load/remote_store/remote_atomic_add access a pointer parameter of a leaf",
    "remote-rank": "a remote access names a rank of the world, 0 to world_size - 1 (checked as the graph runs)",
    "intrinsics-in-leaves": "leaf intrinsics are used inside leaves only",
    "node-inputs": "node inputs are graph parameters, sibling outputs or constants of a scalar input's type",
    "edge-kinds": "edges are one-to-one or all-to-all; stream flags are True or False",
    "kernel-types": ("the operands of every operation, assignment, store, loop bound and condition "
                     "of a leaf or helper body have the types it takes, and constants fit their type "
                     "(checked for the textual IR; the front end builds such bodies)"),
}


def _fail(message: str, loc: Loc, rule: str) -> VerificationError:
    assert rule in RULES, rule
    return VerificationError(message, loc, rule)


@dataclass(frozen=True)
class DeferredGridCheck:
    """A one-to-one edge whose grids are symbolic: compared when the graph is launched."""

    graph: str
    edge: D.Edge


def verify_module(module: D.Module) -> list[DeferredGridCheck]:
    """Raise the first rule violation; return the grid checks that must wait for launch."""
    if module.root not in module.functions or not isinstance(module.functions[module.root], D.GraphFunc):
        fn = module.functions.get(module.root)
        raise _fail(f"the root @{module.root} must be an internal node (a graph)",
                    fn.loc if fn is not None else Loc("<module>", 0), "node-function")
    deferred: list[DeferredGridCheck] = []
    helper_usage = _helper_pointer_usage(module)
    for fn in module.functions.values():
        if isinstance(fn, D.GraphFunc):
            _check_node_params(fn.params, fn.name)
            deferred.extend(_check_graph(fn, module))
        elif isinstance(fn, K.LeafFunc):
            _check_node_params(fn.params, fn.name)
            _check_leaf_pointer_use(fn, module, helper_usage)
            _check_remote_accesses(fn)
            problem = target_problem(fn.target, leaf=True)
            if problem is not None:
                raise _fail(f"leaf {K.shown_name(fn)}: {problem}", fn.loc, "hint-target")
        elif isinstance(fn, K.HelperFunc):
            _check_helper(fn)
    _check_hierarchy(module)
    _check_root_outputs(module.root_func)
    # after the graphs: a pointer output that an edge or the root carries is that rule's error
    for fn in module.functions.values():
        if isinstance(fn, (D.GraphFunc, K.LeafFunc)):
            _check_node_outputs(fn.outputs, fn.name, fn.loc)
    _check_instance_queries(module)
    return deferred


# ----------------------------------------------------------------------------------------------
# Parameters


def _check_node_params(params: list[K.Param], fname: str) -> None:
    for i, p in enumerate(params):
        if not isinstance(p.type, PtrType):
            if p.direction is not None:
                raise _fail(f"{fname}: scalar parameter {p.name!r} cannot have an in/out attribute",
                            p.loc, "pointer-direction")
            continue
        if p.direction not in ("in", "out", "inout"):
            raise _fail(f"{fname}: pointer parameter {p.name!r} needs In[...], Out[...] or InOut[...]",
                        p.loc, "pointer-direction")
        nxt = params[i + 1] if i + 1 < len(params) else None
        if nxt is None or nxt.type != i64 or isinstance(nxt.type, PtrType):
            raise _fail(f"{fname}: pointer parameter {p.name!r} must be followed by an i64 size in bytes "
                        f"(e.g. `{p.name}_bytes: hpvm.i64`)", p.loc, "pointer-size")


def _check_node_outputs(outputs: list[K.OutputPort], fname: str, loc: Loc) -> None:
    """A pointer output leaves through an output bind, and "when an edge/bind carries a pointer, it
    must be followed by an i64 size value" (the reference's limitations): as for parameters."""
    for i, out in enumerate(outputs):
        if isinstance(out.type, PtrType):
            nxt = outputs[i + 1] if i + 1 < len(outputs) else None
            if nxt is None or nxt.type != i64:
                what = repr(out.name) if out.name else str(i)
                raise _fail(f"{fname}: pointer output {what} must be followed by an i64 size in bytes "
                            f"(return `tuple[Ptr[...], hpvm.i64]`)", out.loc if out.loc.line else loc,
                            "pointer-size")


def _helper_pointer_usage(module: D.Module) -> dict[str, dict[str, set[str]]]:
    """For every helper: pointer parameter -> {"read", "write"} actually done, through calls too."""
    usage: dict[str, dict[str, set[str]]] = {}

    def visit(name: str, stack: tuple[str, ...]) -> dict[str, set[str]]:
        if name in usage:
            return usage[name]
        fn = module.functions.get(name)
        if not isinstance(fn, K.HelperFunc) or name in stack:
            return {}
        result = _pointer_usage(fn.body, lambda callee: visit(callee, stack + (name,)),
                                lambda callee: _helper_params(module, callee))
        usage[name] = result
        return result

    for fn in module.helpers():
        visit(fn.name, ())
    return usage


def _helper_params(module: D.Module, name: str) -> list[K.Param]:
    fn = module.functions.get(name)
    return fn.params if isinstance(fn, K.HelperFunc) else []


def _pointer_usage(body: K.Block, helper_usage, helper_params) -> dict[str, set[str]]:
    used: dict[str, set[str]] = {}

    def mark(ptr: K.Var, how: str) -> None:
        used.setdefault(ptr.name, set()).add(how)

    for stmt in K.walk_stmts(body):
        if isinstance(stmt, K.Store):
            mark(stmt.ptr, "write")
        for top in K.child_exprs(stmt):
            for e in K.walk_exprs(top):
                if isinstance(e, K.Load):
                    mark(e.ptr, "read")
                elif isinstance(e, K.Atomic):
                    mark(e.ptr, "read")
                    mark(e.ptr, "write")
                elif isinstance(e, K.CallHelper):
                    callee = helper_usage(e.func)
                    for p, arg in zip(helper_params(e.func), e.args):
                        if isinstance(arg, K.Var) and isinstance(arg.type, PtrType):
                            for how in callee.get(p.name, ()):
                                mark(arg, how)
    return used


def _check_leaf_pointer_use(leaf: K.LeafFunc, module: D.Module,
                            helper_usage: dict[str, dict[str, set[str]]]) -> None:
    directions = {p.name: p.direction for p in leaf.params if isinstance(p.type, PtrType)}

    def first_loc(name: str, how: str) -> Loc:
        for stmt in K.walk_stmts(leaf.body):
            if how == "write" and isinstance(stmt, K.Store) and stmt.ptr.name == name:
                return stmt.loc
            for top in K.child_exprs(stmt):
                for e in K.walk_exprs(top):
                    if isinstance(e, (K.Load, K.Atomic)) and e.ptr.name == name and \
                            (how == "read" or isinstance(e, K.Atomic)):
                        return e.loc
                    if isinstance(e, K.CallHelper) and any(isinstance(a, K.Var) and a.name == name
                                                           for a in e.args):
                        return e.loc
        return leaf.loc

    usage = _pointer_usage(leaf.body, lambda callee: helper_usage.get(callee, {}),
                           lambda callee: _helper_params(module, callee))
    for name, hows in usage.items():
        direction = directions.get(name)
        if direction is None:
            continue  # scratch memory from malloc
        if "write" in hows and direction == "in":
            raise _fail(f"{K.shown_name(leaf)} writes through {name!r}, declared In[...]; declare it "
                        "Out[...] or InOut[...]", first_loc(name, "write"), "pointer-direction")
        if "read" in hows and direction == "out":
            raise _fail(f"{K.shown_name(leaf)} reads {name!r}, declared Out[...] (write-only: its old "
                        "content "
                        "is not moved to the device); declare it InOut[...]",
                        first_loc(name, "read"), "pointer-direction")


def _check_remote_accesses(leaf: K.LeafFunc) -> None:
    """Remote accesses go through pointer parameters: only their buffers have twins on the other
    ranks (malloc() scratch is private to a group)."""
    params = {p.name for p in leaf.params if isinstance(p.type, PtrType)}
    for access in K.remote_accesses(leaf.body):
        if access.ptr.name not in params:
            raise _fail(f"{K.shown_name(leaf)}: remote access through {access.ptr.name!r}, which is not a "
                        "pointer "
                        "parameter (a buffer on the symmetric heap)", access.loc, "remote-access")
        rank_type = access.rank.type if access.rank is not None else None
        if not (isinstance(rank_type, ScalarType) and rank_type.is_int):
            raise _fail(f"{K.shown_name(leaf)}: the rank of a remote access must be an integer, not "
                        f"{rank_type}",
                        access.loc, "remote-access")


def _check_helper(fn: K.HelperFunc) -> None:
    for access in K.remote_accesses(fn.body):
        raise _fail(f"helper {K.shown_name(fn)} accesses {access.ptr.name!r} on another rank, an HPVM "
                    "intrinsic", access.loc, "helper-no-intrinsics")
    for stmt in K.walk_stmts(fn.body):
        if isinstance(stmt, K.Barrier):
            raise _fail(f"helper {K.shown_name(fn)} uses barrier(), an HPVM intrinsic", stmt.loc,
                        "helper-no-intrinsics")
        for top in K.child_exprs(stmt):
            for e in K.walk_exprs(top):
                if isinstance(e, (K.InstanceId, K.NumInstances, K.NumDims, K.Atomic, K.Malloc)):
                    raise _fail(f"helper {K.shown_name(fn)} uses an HPVM intrinsic "
                                f"({type(e).__name__})", e.loc,
                                "helper-no-intrinsics")


# ----------------------------------------------------------------------------------------------
# Graphs


# An instance count or bound expression may have this many operations written out (the text
# form, evaluation at launch): far more than any real one, far fewer than a traced `m = m + m`
# repeated makes of a few objects.
MAX_DIM_OPERATIONS = 100_000


def _check_dim_size(expr: D.DimExpr, what: str, loc: Loc) -> None:
    """Refuse an integer expression nested deeper than a kernel expression may be, or too large
    written out: everything after the verifier (printing, evaluation at launch) recurses on it
    and walks it as a tree."""
    depth, operations = D.dim_measure(expr)
    if depth > MAX_EXPR_DEPTH:
        raise _fail(f"{what}: the expression nests operations more than {MAX_EXPR_DEPTH} deep; "
                    "compute it in a leaf or pass it as a parameter", loc, "instance-counts")
    if operations > MAX_DIM_OPERATIONS:
        raise _fail(f"{what}: the expression has {operations} operations written out, more than "
                    f"{MAX_DIM_OPERATIONS}; compute it in a leaf or pass it as a parameter", loc,
                    "instance-counts")


def _check_graph(g: D.GraphFunc, module: D.Module) -> list[DeferredGridCheck]:
    nodes: dict[str, D.Node] = {}
    sigs: dict[str, tuple[list[K.Param], list[K.OutputPort]]] = {}
    param_names = {p.name: p for p in g.params}
    checked_dims: set[int] = set()  # nodes share their DimExpr objects: check each once
    for n in g.nodes:
        if n.name in nodes:
            raise _fail(f"graph {K.shown_name(g)} has two nodes named {n.name!r}", n.loc, "unique-node-names")
        nodes[n.name] = n
        fn = module.functions.get(n.func)
        if not isinstance(fn, (K.LeafFunc, D.GraphFunc, D.LibraryFunc)):
            what = "a helper" if isinstance(fn, K.HelperFunc) else "not defined"
            raise _fail(f"node {n.name} runs @{n.func}, which is {what}", n.loc, "node-function")
        sigs[n.name] = (fn.params, fn.outputs)
        if len(n.dims) > 3:
            raise _fail(f"node {n.name} is replicated in {len(n.dims)} dimensions; at most 3",
                        n.loc, "max-three-dims")
        for d in n.dims:
            if id(d) in checked_dims:
                continue
            checked_dims.add(id(d))
            _check_dim_size(d, f"instance count of node {n.name}", n.loc)
            for name in D.dim_params(d):
                p = param_names.get(name)
                if p is None or not (isinstance(p.type, ScalarType) and p.type.is_int and not p.type.is_bool):
                    raise _fail(f"instance count of node {n.name} uses {name!r}, which is not an integer "
                                f"parameter of graph {K.shown_name(g)}", n.loc, "instance-counts")
            if isinstance(d, D.DimConst) and d.value < 0:
                raise _fail(f"node {n.name} has a negative instance count", n.loc, "instance-counts")
        problem = None if n.hint is None else target_problem(n.hint, leaf=False)
        if problem is not None:
            raise _fail(f"node {n.name}: hint {problem}", n.loc, "hint-target")

    fed: dict[tuple[str, int], Any] = {}  # (node, input) -> the edge or bind that feeds it
    sources: set[tuple[str, int]] = set()
    deferred: list[DeferredGridCheck] = []
    typed_edges: set[tuple[str, int, str, int, str]] = set()  # checked combinations of ports
    for e in g.edges:
        src, dst = nodes.get(e.src), nodes.get(e.dst)
        if src is None or dst is None:
            raise _fail(f"edge names node {e.src if src is None else e.dst!r}, which is not a child of "
                        f"graph {K.shown_name(g)}; edges connect siblings", e.loc, "edge-siblings")
        combo = (src.func, e.src_port, dst.func, e.dst_port, e.kind)
        if combo not in typed_edges:
            _check_edge_types(e, sigs[e.src][1], sigs[e.dst][0])
            typed_edges.add(combo)
        source = (e.src, e.src_port)
        if source in sources:
            raise _fail(f"output {e.src_port} of {e.src} already feeds another edge; the reference "
                        "allows one edge per (Src, out)", e.loc, "edge-unique-ports")
        sources.add(source)
        key = (e.dst, e.dst_port)
        if key in fed:
            raise fed_twice(g, (fed[key], e), f"input {sigs[e.dst][0][e.dst_port].name!r} of {e.dst}",
                            "edge-unique-ports", "; the reference allows one edge per (Dst, in)")
        fed[key] = e
        if e.kind == D.ONE_TO_ONE and src.dims is not dst.dims and src.dims != dst.dims:
            deferred.extend(_check_grids(g, src, dst, e))

    checked: set[tuple[int, str, int]] = set()  # (parent port, function, input) already typed
    for b in g.input_binds:
        n = nodes.get(b.dst)
        if n is None:
            raise _fail(f"bind_input names node {b.dst!r}, which is not a child of graph {K.shown_name(g)}",
                        b.loc, "edge-siblings")
        combo = (b.parent_port, n.func, b.dst_port)
        if combo not in checked:
            _check_input_bind(g, b, sigs[b.dst][0])
            checked.add(combo)
        key = (b.dst, b.dst_port)
        if key in fed:
            child_p = sigs[b.dst][0][b.dst_port]
            rule = "bind-unique-dest" if isinstance(fed[key], D.InputBind) else "input-single-source"
            raise fed_twice(g, (fed[key], b), f"input {child_p.name!r} of {b.dst}", rule)
        fed[key] = b

    for c in g.const_binds:
        if c.dst not in nodes:
            raise _fail(f"a constant bind names node {c.dst!r}, which is not a child of graph "
                        f"{K.shown_name(g)}",
                        c.loc, "edge-siblings")
        params = sigs[c.dst][0]
        if not 0 <= c.dst_port < len(params):
            raise _fail(f"a constant bind: node {c.dst} has {len(params)} input(s), not port "
                        f"{c.dst_port}", c.loc, "ports-exist")
        _check_const_bind(c, params[c.dst_port])
        key = (c.dst, c.dst_port)
        if key in fed:
            raise fed_twice(g, (fed[key], c), f"input {params[c.dst_port].name!r} of {c.dst}",
                            "input-single-source")
        fed[key] = c

    for x in g.expr_binds:
        if x.dst not in nodes:
            raise _fail(f"an expression bind names node {x.dst!r}, which is not a child of graph "
                        f"{K.shown_name(g)}", x.loc, "edge-siblings")
        params = sigs[x.dst][0]
        if not 0 <= x.dst_port < len(params):
            raise _fail(f"an expression bind: node {x.dst} has {len(params)} input(s), not port "
                        f"{x.dst_port}", x.loc, "ports-exist")
        _check_dim_size(x.expr, f"the expression bound to input {params[x.dst_port].name!r} of "
                         f"{x.dst}", x.loc)
        _check_expr_bind(g, x, params[x.dst_port], param_names)
        key = (x.dst, x.dst_port)
        if key in fed:
            raise fed_twice(g, (fed[key], x), f"input {params[x.dst_port].name!r} of {x.dst}",
                            "input-single-source")
        fed[key] = x

    # every key of `fed` is a distinct, valid (node, input): as many keys as inputs means all fed
    if len(fed) != sum(len(sig[0]) for sig in sigs.values()):
        for n in g.nodes:
            for port, p in enumerate(sigs[n.name][0]):
                if (n.name, port) not in fed:
                    raise _fail(f"input {p.name!r} of node {n.name} is not connected: bind a graph "
                                "parameter to it or draw an edge from a sibling", n.loc, "inputs-connected")

    bound: dict[int, D.OutputBind] = {}
    bound_sources: set[tuple[str, int]] = set()
    for b in g.output_binds:
        if b.src not in nodes:
            raise _fail(f"bind_output names node {b.src!r}, which is not a child of graph {K.shown_name(g)}",
                        b.loc, "edge-siblings")
        outs = sigs[b.src][1]
        if not 0 <= b.src_port < len(outs):
            raise _fail(f"bind_output: node {b.src} has {len(outs)} output(s), not port {b.src_port}",
                        b.loc, "ports-exist")
        if not 0 <= b.parent_port < len(g.outputs):
            raise _fail(f"bind_output: graph {K.shown_name(g)} has {len(g.outputs)} output(s), not port "
                        f"{b.parent_port}", b.loc, "ports-exist")
        if outs[b.src_port].type != g.outputs[b.parent_port].type:
            raise _fail(f"bind_output {b.src}.{b.src_port} -> output {b.parent_port}: type "
                        f"{outs[b.src_port].type} does not match {g.outputs[b.parent_port].type}",
                        b.loc, "bind-types")
        if b.parent_port in bound:
            raise _fail(f"output {b.parent_port} of graph {K.shown_name(g)} is bound twice", b.loc,
                        "bind-unique-dest")
        if (b.src, b.src_port) in bound_sources:
            raise _fail(f"output {b.src_port} of {b.src} is bound to two graph outputs", b.loc,
                        "bind-unique-dest")
        bound[b.parent_port] = b
        bound_sources.add((b.src, b.src_port))
    for port, out in enumerate(g.outputs):
        if port not in bound:
            raise _fail(f"output {out.name or port} of graph {K.shown_name(g)} is not bound to a child's "
                        "output",
                        g.loc, "outputs-bound")
    _check_acyclic(g)
    return deferred


def _check_edge_types(e: D.Edge, src_outs: list[K.OutputPort], dst_params: list[K.Param]) -> None:
    if not 0 <= e.src_port < len(src_outs):
        raise _fail(f"edge source {e.src}.{e.src_port}: node {e.src} has {len(src_outs)} output(s)",
                    e.loc, "ports-exist")
    if not 0 <= e.dst_port < len(dst_params):
        raise _fail(f"edge destination {e.dst}.{e.dst_port}: node {e.dst} has {len(dst_params)} "
                    "input(s)", e.loc, "ports-exist")
    if e.kind not in (D.ONE_TO_ONE, D.ALL_TO_ALL):
        raise _fail(f"edge kind {e.kind!r}", e.loc, "edge-kinds")
    out_t, in_p = src_outs[e.src_port].type, dst_params[e.dst_port]
    if isinstance(out_t, PtrType) or isinstance(in_p.type, PtrType):
        raise _fail(f"edge {e.src}.{e.src_port} -> {e.dst}.{in_p.name} carries a pointer; pass "
                    "pointers with bind_input from the common parent", e.loc, "no-pointers-on-edges")
    if out_t is not in_p.type and out_t != in_p.type:
        raise _fail(f"edge {e.src}.{e.src_port} -> {e.dst}.{in_p.name}: output type {out_t} does not "
                    f"match input type {in_p.type}", e.loc, "edge-types")


def _check_grids(g: D.GraphFunc, src: D.Node, dst: D.Node, e: D.Edge) -> list[DeferredGridCheck]:
    def show(n: D.Node) -> str:
        return "[" + ", ".join(D.dim_text(d) for d in n.dims) + "]" if n.dims else "a single instance"

    if len(src.dims) != len(dst.dims):
        raise _fail(f"one-to-one edge {src.name} -> {dst.name} joins {show(src)} and {show(dst)}; "
                    "grids must be identical (use all_to_all for a barrier)", e.loc, "one-to-one-grids")
    symbolic = False
    for a, b in zip(src.dims, dst.dims):
        if a == b:
            continue
        if isinstance(a, D.DimConst) and isinstance(b, D.DimConst):
            raise _fail(f"one-to-one edge {src.name} -> {dst.name} joins {show(src)} and {show(dst)}; "
                        "grids must be identical", e.loc, "one-to-one-grids")
        symbolic = True
    return [DeferredGridCheck(g.name, e)] if symbolic else []


def _check_acyclic(g: D.GraphFunc) -> None:
    succ: dict[str, list[D.Edge]] = {n.name: [] for n in g.nodes}
    indeg = {n.name: 0 for n in g.nodes}
    for e in g.edges:
        succ[e.src].append(e)
        indeg[e.dst] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        name = ready.pop()
        seen += 1
        for e in succ[name]:
            indeg[e.dst] -= 1
            if indeg[e.dst] == 0:
                ready.append(e.dst)
    if seen != len(g.nodes):
        on_cycle = _closing_edge(g, {name for name, d in indeg.items() if d > 0})
        raise _fail(f"the edges of graph {K.shown_name(g)} form a cycle through {on_cycle.src} -> "
                    f"{on_cycle.dst}; "
                    "a dataflow graph must be acyclic", on_cycle.loc, "dfg-acyclic")


def _closing_edge(g: D.GraphFunc, left: set[str]) -> D.Edge:
    """The last-created edge that lies on a cycle among the nodes `left` by the topological sort
    (nodes downstream of a cycle are left too, so an edge between two of them is not enough)."""
    succ: dict[str, list[str]] = {}
    for e in g.edges:
        succ.setdefault(e.src, []).append(e.dst)

    def reaches(start: str, goal: str) -> bool:
        stack, seen = [start], set()
        while stack:
            name = stack.pop()
            if name == goal:
                return True
            if name not in seen:
                seen.add(name)
                stack.extend(succ.get(name, ()))
        return False

    return next(e for e in reversed(g.edges) if e.src in left and e.dst in left and reaches(e.dst, e.src))


def _check_hierarchy(module: D.Module) -> None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done

    def visit(name: str, loc: Loc) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise _fail(f"graph {name} contains itself through its children; the node hierarchy "
                        "must be finite", loc, "hierarchy-acyclic")
        fn = module.functions.get(name)
        if not isinstance(fn, D.GraphFunc):
            state[name] = 2
            return
        state[name] = 1
        for n in fn.nodes:
            visit(n.func, n.loc)
        state[name] = 2

    visit(module.root, module.root_func.loc)


def _check_root_outputs(root: D.GraphFunc) -> None:
    for port, out in enumerate(root.outputs):
        if isinstance(out.type, PtrType):
            bind = next((b for b in root.output_binds if b.parent_port == port), None)
            raise _fail(f"output {out.name or port} of the root graph {K.shown_name(root)} is a pointer; the "
                        "host receives values (it already holds its buffers)",
                        bind.loc if bind is not None else root.loc, "no-pointers-on-edges")


# ----------------------------------------------------------------------------------------------
# Instance queries, per instantiation of each leaf


def _check_instance_queries(module: D.Module) -> None:
    seen: set[tuple[str, tuple[int, ...]]] = set()
    summaries: dict[str, list[K.Expr]] = {}  # per leaf: its instance queries, found once

    def visit(graph: D.GraphFunc, ancestors: tuple[int, ...]) -> None:
        # ancestors: dims of the enclosing internal-node instances, innermost first (root excluded)
        if (graph.name, ancestors) in seen:
            return
        seen.add((graph.name, ancestors))
        for n in graph.nodes:
            fn = module.functions[n.func]
            if isinstance(fn, D.GraphFunc):
                visit(fn, (len(n.dims),) + ancestors)
            elif isinstance(fn, K.LeafFunc):
                queries = summaries.get(fn.name)
                if queries is None:
                    queries = summaries[fn.name] = [
                        e for e in K.walk_all_exprs(fn.body)
                        if isinstance(e, (K.InstanceId, K.NumInstances, K.NumDims))]
                if queries:
                    _check_leaf_queries(fn, queries, n, (len(n.dims),) + ancestors)

    visit(module.root_func, ())


def _check_leaf_queries(leaf: K.LeafFunc, queries: list[K.Expr], node: D.Node,
                        levels: tuple[int, ...]) -> None:
    for e in queries:
        if isinstance(e, (K.InstanceId, K.NumInstances)):
            what = "instance id" if isinstance(e, K.InstanceId) else "instance count"
            axis = "xyz"[e.dim]
            if e.level == len(levels):
                raise _fail(f"{K.shown_name(leaf)} (node {node.name}) asks the root for its {what} in "
                            f"{axis}; the "
                            "root has a single instance and is not replicated", e.loc, "single-instance-root")
            if e.level > len(levels):
                raise _fail(f"{K.shown_name(leaf)} (node {node.name}) goes {e.level} levels up with "
                            f"get_parent_node(), above the root", e.loc, "instance-query-dims")
            if e.dim >= levels[e.level]:
                who = f"node {node.name}" if e.level == 0 else f"its level-{e.level} ancestor"
                raise _fail(f"{K.shown_name(leaf)} asks for the {what} in {axis}, but {who} is replicated in "
                            f"{levels[e.level]} dimension(s)", e.loc, "instance-query-dims")
        elif isinstance(e, K.NumDims) and e.level > len(levels):
            raise _fail(f"{K.shown_name(leaf)} goes {e.level} levels up with get_parent_node(), above the "
                        "root",
                        e.loc, "instance-query-dims")
