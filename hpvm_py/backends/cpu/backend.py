"""CpuBackend: compile a leaf for one NodeContext to native code, through two caches.

In memory, kernels are kept by (leaf IR, context, checked). On disk (runtime.cache) the object code
is kept under a hash of everything it depends on; a hit loads the object into an engine without
generating or optimising any LLVM IR. The plan and site tables a launch needs are cheap analyses
of the IR and are recomputed, never stored.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path

from llvmlite import ir

from ... import __version__
from ...ir import kernel as K
from ...runtime import cache, stats
from ..base import NodeContext
from . import jit
from .accesses import Access, privatizable, sites
from .driver import build_drivers
from .kernel import CpuKernel, KernelInfo
from .plan import Plan, make_plan
from .prepare import localize_assigned_params

_OBJECT_SUFFIX = ".cpu.o"


class CpuBackend:
    name = "cpu"

    _memory: dict[tuple[str, str, bool], CpuKernel] = {}
    _lock = threading.Lock()

    def compile_leaf(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> CpuKernel:
        key = (repr(leaf), ctx.key(), checked)
        with self._lock:
            kernel = self._memory.get(key)
        if kernel is not None:
            stats.bump("cpu_cache_memory_hits")
            # Equal IR from elsewhere (locations are not part of it) shares the machine code but
            # reports errors at its own lines.
            return kernel if kernel.source is leaf else kernel.for_source(leaf, _sites_of(leaf))
        prepared, plan = _analyse(leaf, ctx)
        info = _info(prepared, plan)
        disk_key = cache.content_key(key[0], key[1], str(checked), __version__, _code_version(),
                                     jit.host_signature())
        obj = cache.load(disk_key, _OBJECT_SUFFIX)
        if obj is None:
            module = jit.optimize(_module_text(prepared, ctx, plan, info, checked))
            obj = jit.emit_object(module)
            stats.bump("cpu_compiles")
            cache.store(disk_key, _OBJECT_SUFFIX, obj)
        kernel = CpuKernel(leaf, prepared, ctx, checked, jit.LoadedObject(obj), info)
        with self._lock:
            self._memory.setdefault(key, kernel)
            return self._memory[key]

    def generated_source(self, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """What `hpvmc compile --emit llvm` writes (every backend answers this for its own code)."""
        return self.llvm_ir(leaf, ctx)

    def llvm_ir(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> str:
        """The optimised LLVM IR of the leaf's drivers (what `hpvmc compile --emit llvm` shows)."""
        prepared, plan = _analyse(leaf, ctx)
        info = _info(prepared, plan)
        return str(jit.optimize(_module_text(prepared, ctx, plan, info, checked)))


@functools.cache
def _code_version() -> str:
    """A hash of this backend's source: objects built by other code generators never match."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _info(prepared: K.LeafFunc, plan: Plan) -> KernelInfo:
    loops = any(isinstance(s, (K.For, K.While)) for s in K.walk_stmts(prepared.body))
    return KernelInfo(splittable=plan.kind != "group", private=privatizable(prepared),
                      sites=sites(prepared.body), loops=loops)


def _sites_of(leaf: K.LeafFunc) -> list[Access]:
    return sites(localize_assigned_params(leaf).body)


def _analyse(leaf: K.LeafFunc, ctx: NodeContext) -> tuple[K.LeafFunc, Plan]:
    prepared = localize_assigned_params(leaf)
    return prepared, make_plan(prepared, ctx)


def _module_text(leaf: K.LeafFunc, ctx: NodeContext, plan: Plan, info: KernelInfo,
                 checked: bool) -> str:
    module = ir.Module(name=leaf.name)
    numbers = {id(node): i for i, node in enumerate(info.sites)}
    build_drivers(module, leaf, ctx, plan, checked, numbers, info.private)
    return str(module)
