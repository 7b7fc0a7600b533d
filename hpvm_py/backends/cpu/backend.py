"""CpuBackend: compile a leaf for one NodeContext to native code, through the shared caches.

In memory, kernels are kept by (leaf IR, context, checked, HPVM_CPU_LEVEL) (backends/base.py). On
disk the object code is kept under a hash of everything it depends on; a hit loads the object into
an engine without generating or optimising any LLVM IR. The plan and site tables a launch needs
are cheap analyses of the IR and are recomputed, never stored. The driver with non-temporal stores
(nontemporal.py) is a second object, compiled (or loaded) when a launch of the kernel first wants
it.
"""
from __future__ import annotations

from typing import Any, Callable

import llvmlite.binding as llvm
from llvmlite import ir

from ...ir import kernel as K
from ...support import settings
from ..base import Backend, CacheKey, LeafKernel, NodeContext
from .. import jit
from .accesses import Access, sites
from .driver import build_drivers, build_nontemporal_driver
from .abi import PRIVATE_SUFFIX
from .kernel import CpuKernel, KernelInfo, LazyCode
from .nontemporal import SUFFIX as NT_SUFFIX
from .nontemporal import mark_nontemporal, nt_bytes, nt_stores
from .loop_plan import Plan, make_plan
from .passes import PASSES, private_buffers
from .privatise import MERGE_SUFFIX
from .prepare import localize_assigned_params

_OBJECT_SUFFIX = ".cpu.o"


class CpuBackend(Backend):
    name = "cpu"
    emits = {"llvm": ".ll"}
    memory_hits = "cpu_cache_memory_hits"
    code_packages = ("cpu",)

    def variant(self, checked: bool) -> tuple[Any, ...]:
        # the code is for HPVM_CPU_LEVEL's level (jit.code_cpu), which may change between compiles
        return checked, settings.CPU_LEVEL.text()

    def build(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool, key: CacheKey) -> CpuKernel:
        prepared, plan = _analyse(leaf, ctx, "checked" if checked else "unchecked", checked)
        info = _info(prepared, ctx, plan)
        # the level the memory cache keys this kernel by (variant): its driver with non-temporal
        # stores, compiled later, is for it too, whatever HPVM_CPU_LEVEL says by then
        cpu = jit.code_cpu()
        obj = self._object(key, str(checked), cpu, lambda: jit.optimize(
            _module_text(prepared, ctx, plan, info, checked), cpu), _driver_names(prepared, info))
        # checked launches are for finding bugs: they keep the plain driver
        nontemporal = None if checked or not info.nt_bytes else LazyCode(
            lambda: jit.LoadedObject(self._object(
                key, "nontemporal", cpu, lambda: _nontemporal_module(prepared, ctx, plan, cpu),
                (prepared.name + NT_SUFFIX,)), cpu))
        return CpuKernel(leaf, prepared, ctx, checked, jit.LoadedObject(obj, cpu), info, cpu,
                         nontemporal)

    def for_leaf(self, kernel: LeafKernel, leaf: K.LeafFunc) -> LeafKernel:
        assert isinstance(kernel, CpuKernel)
        return kernel if kernel.source is leaf else kernel.for_source(leaf, _sites_of(leaf))

    def emit(self, kind: str, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """`hpvmc compile --emit llvm`: the optimised LLVM IR of the leaf's drivers."""
        return self.llvm_ir(leaf, ctx)

    def llvm_ir(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False,
                nontemporal: bool = False) -> str:
        """The optimised LLVM IR of the leaf's drivers (what `hpvmc compile --emit llvm` shows),
        or of its driver with non-temporal stores."""
        prepared, plan = _analyse(leaf, ctx, checked=checked)
        info = _info(prepared, ctx, plan)
        if nontemporal:
            return str(_nontemporal_module(prepared, ctx, plan))
        return str(jit.optimize(_module_text(prepared, ctx, plan, info, checked)))

    def _object(self, key: CacheKey, variant: str, cpu: jit.Cpu,
                optimized: Callable[[], llvm.ModuleRef], names: tuple[str, ...]) -> bytes:
        """The object code for `cpu` of one variant of a kernel (which defines the functions
        `names`), from the disk cache or compiled."""
        return self.disk_cached((key[0], key[1], variant, *self.versions(),
                                 jit.host_signature(cpu)), _OBJECT_SUFFIX,
                                lambda: jit.emit_object(optimized(), cpu), "cpu_compiles",
                                lambda data: jit.object_problem(data, names))


def _driver_names(prepared: K.LeafFunc, info: KernelInfo) -> tuple[str, ...]:
    """The functions CpuKernel looks up in a kernel's object (a cached object without one of them
    is not used)."""
    private = (prepared.name + PRIVATE_SUFFIX,) if info.private else ()
    return (prepared.name, *private, *(prepared.name + MERGE_SUFFIX + name for name in info.private))


def _info(prepared: K.LeafFunc, ctx: NodeContext, plan: Plan) -> KernelInfo:
    loops = any(isinstance(s, (K.For, K.While)) for s in K.walk_stmts(prepared.body))
    return KernelInfo(splittable=plan.kind != "group", private=private_buffers(prepared),
                      sites=sites(prepared.body), loops=loops,
                      nt_bytes=nt_bytes(prepared, nt_stores(prepared, ctx, plan)))


def _sites_of(leaf: K.LeafFunc) -> list[Access]:
    return sites(localize_assigned_params(leaf).body)


def _analyse(leaf: K.LeafFunc, ctx: NodeContext, label: str = "",
             checked: bool = False) -> tuple[K.LeafFunc, Plan]:
    """The leaf before clipping, whose accesses the checked variant numbers (with the privatise
    pass's notes), and the plan of the leaf after every pass (passes.py); a checked one
    interchanges no loop (loop_plan.make_plan)."""
    after = PASSES.run(leaf, ctx, label=label)
    return after["privatise"], make_plan(after["clip"], ctx, interchange=not checked)


def _module_text(leaf: K.LeafFunc, ctx: NodeContext, plan: Plan, info: KernelInfo,
                 checked: bool) -> str:
    module = ir.Module(name=leaf.name)
    numbers = {id(node): i for i, node in enumerate(info.sites)}
    build_drivers(module, leaf, ctx, plan, checked, numbers, info.private)
    return str(module)


def _nontemporal_module(leaf: K.LeafFunc, ctx: NodeContext, plan: Plan,
                        cpu: jit.Cpu | None = None) -> llvm.ModuleRef:
    """The optimised driver with non-temporal stores (marked stores become so after optimising),
    for `cpu` (default: jit.code_cpu()'s)."""
    module = ir.Module(name=leaf.name)
    build_nontemporal_driver(module, leaf, ctx, plan, leaf.name + NT_SUFFIX)
    return jit.parse(mark_nontemporal(str(jit.optimize(str(module), cpu))))
