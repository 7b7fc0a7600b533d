"""The one compile path: front end → verifier → passes → plan + backend code, per target.

    graph object ──module()──▶ IR module ──verify──▶ rules ──run_passes──▶ inline, fold
                 ──build_plan──▶ node order, value layouts ──backend.compile_leaf──▶ kernels
"""
from __future__ import annotations

import functools
import threading
from dataclasses import dataclass
from typing import Any

from ..backends import registry
from ..backends.base import LeafKernel, NodeContext
from ..device import cuda_available
from ..errors import CompileError, LaunchError
from ..frontend.callsite import caller_loc
from ..frontend.decorators import GraphDef, LeafDef
from ..ir import kernel as K
from ..ir.dfg import Module
from ..ir.targets import is_gpu, split_target
from ..ir.verify import DeferredGridCheck, verify_module
from ..passes import run_passes
from ..support import profile, settings, stats
from .plan import GraphPlan, build_plan
from .replay import Replays

TARGETS = registry.TARGETS  # the one table of targets: name -> Backend subclass


class LoadedGraph:
    """A graph that comes from textual IR (from_text / load) rather than Python source."""

    def __init__(self, module: Module, origin: str):
        self._module = module
        self.name = module.root
        self.origin = origin
        self.compiled_for: dict[str, CompiledGraph] = {}  # by target: held by the graph (GraphDef's)

    def module(self) -> Module:
        return self._module

    def __repr__(self) -> str:
        return f"<hpvm graph {self.name} from {self.origin}>"


def module_of(root: Any) -> Module:
    if isinstance(root, (GraphDef, LoadedGraph)):
        return root.module()
    if isinstance(root, CompiledGraph):
        return root.module
    if isinstance(root, LeafDef):
        raise LaunchError(f"{K.shown_name(root)} is a leaf: launch an @hpvm.graph whose body creates it as a "
                          "node", caller_loc())
    raise LaunchError(f"expected an @hpvm.graph function (or a graph from hpvm.from_text / hpvm.load), "
                      f"got {type(root).__name__}", caller_loc())


def default_target() -> str:
    """HPVM_TARGET, else gpu when a CUDA GPU is here (and the gpu target can use it), else cpu.
    (Triton's interpreter, TRITON_INTERPRET=1, runs the gpu target without a GPU, when asked for
    by name: DESIGN.md's default is gpu "when CUDA is there".)"""
    env = settings.TARGET.text()
    if env:
        if env not in TARGETS:
            raise LaunchError(f"HPVM_TARGET={env!r} is not one of {', '.join(TARGETS)}")
        return env
    return "gpu" if _gpu_usable() else "cpu"


def _gpu_usable() -> bool:
    return cuda_available() and registry.available("gpu")


@dataclass
class CompiledGraph:
    """A graph compiled for one target: what launch() runs."""

    root: Any
    module: Module  # as written (before passes): what to_text prints
    lowered: Module  # after the passes: what the backends compiled
    deferred: list[DeferredGridCheck]
    plan: GraphPlan
    target: str
    output_shape: Any = None  # how wait() packages the outputs, worked out on first use
    replays: Any = None  # recorded launches (rt/replay.py)

    def __post_init__(self) -> None:
        self.replays = Replays()

    @functools.cached_property
    def replayable(self) -> bool:
        """Launches are recorded for replay on compiled targets, for graphs whose root nodes are
        leaves or internal nodes holding a chain down to one leaf (NodePlan.recorded_leaf), all on
        one device: the host on cpu; on a GPU target, leaves of that target only (one kind of
        prepared launch)."""
        leaves = [n.recorded_leaf for n in self.plan.nodes]
        backend = registry.get(self.target)
        if None in leaves or backend is None or not backend.replays:
            return False
        if is_gpu(self.target):
            return all(n.target == self.target and n.placement.index is None for n in leaves)
        return self.plan.host_only

    @property
    def name(self) -> str:
        return self.module.root

    def leaf_kernels(self) -> list[tuple[K.LeafFunc, NodeContext, LeafKernel]]:
        """Every compiled leaf with the context it was compiled for (one entry per node)."""
        out = []

        def visit(plan: GraphPlan) -> None:
            for node in plan.nodes:
                if node.kernel is not None and node.ctx is not None:
                    out.append((node.func, node.ctx, node.kernel))
                if node.child is not None:
                    visit(node.child)

        visit(self.plan)
        return out


_compiled_lock = threading.RLock()  # held while compiling: one thread compiles, others reuse


def compile_graph(root: Any, target: str | None = None) -> CompiledGraph:
    """Compile root for target (cached per graph object and target)."""
    if isinstance(root, CompiledGraph):
        if target is None or target == root.target:
            return root
        root = root.root
    target = target or default_target()
    # the hot path of a relaunch: a graph holds its compiled graphs (not a graph: module_of says
    # what it is)
    cached = root.compiled_for.get(target) if isinstance(root, (GraphDef, LoadedGraph)) else None
    if cached is not None and type(root) is GraphDef and cached.module is not root.module():
        cached = None  # a value its leaves or graphs read changed since: module() rebuilt the IR
    if cached is not None:
        stats.bump_one("graph_cache_hits")
        if profile.on:
            graph = K.shown_name(cached.module.root_func)
            profile.complete("cache", "graph cache hit", profile.now(), args={"graph": graph,
                                                                             "target": target})
        return cached
    if target not in TARGETS:
        raise LaunchError(f"target {target!r} is not one of {', '.join(TARGETS)}", caller_loc())
    module = module_of(root)  # rejects what is not a graph before it is used as a cache key
    with _compiled_lock:
        cached = root.compiled_for.get(target)
        if cached is not None and cached.module is module:
            stats.bump_one("graph_cache_hits")  # (another thread compiled it while this waited)
            return cached
        if profile.on:
            name = f"compile {K.shown_name(module.root_func)}"
            with profile.span("compile", name, args={"target": target}):
                compiled = _compile(root, module, target)
        else:
            compiled = _compile(root, module, target)
        root.compiled_for[target] = compiled
        return compiled


def _compile(root: Any, module: Module, target: str) -> CompiledGraph:
    deferred = verify_module(module)
    lowered = run_passes(module)
    plan = build_plan(lowered, deferred, target, _compile_leaf)
    compiled = CompiledGraph(root=root, module=module, lowered=lowered, deferred=deferred, plan=plan,
                             target=target)
    stats.bump("graph_compiles")
    return compiled


def _compile_leaf(leaf: K.LeafFunc, ctx: NodeContext, target: str, checked: bool) -> LeafKernel:
    if not registry.compilable(target):
        others = ", ".join(t for t in TARGETS if t != target and registry.available(t))
        marked = split_target(leaf.target)[0] == target
        why = f" (it is marked @hpvm.leaf(target={target!r}))" if marked else ""
        fix = "Mark it target='any' to run it" if marked else "Launch it"
        raise CompileError(f"leaf {K.shown_name(leaf)} runs on target {target!r}{why}, which is not "
                           "available "
                           f"here: {registry.why_unavailable(target)}. {fix} on a target available "
                           f"here ({others})", leaf.loc, rule="target-available")
    backend = registry.get(target)
    assert backend is not None  # compilable
    return backend.compile_leaf(leaf, ctx, checked=checked)
