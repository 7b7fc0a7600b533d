"""NvptxBackend: compile a leaf for one NodeContext to a cubin, through the shared caches.

In memory, kernels are kept by (leaf IR, context, checked, architecture, libdevice and ptxas)
(backends/base.py). On disk the PTX is kept under a hash of everything it depends on, and the cubin
under a hash of the PTX, the GPU architecture and the ptxas version. Compiling needs no GPU (CI
assembles every example); loading and launching do.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from ...ir import kernel as K
from ...passes import Pipeline
from ...passes.lanes import LaneLoop, lane_loop
from ...support import settings
from ..base import Backend, CacheKey, LeafKernel, NodeContext, symbol_name
from ..cpu.accesses import sites
from ..cpu.loop_plan import check_compilable
from ..cpu.passes import localize
from . import device, toolchain
from .launch import NvptxKernel
from .scratch import scratch_of
from .simt import FLAT, GROUP, build_kernel, lanes_name, mapping_of

# its backend passes (HPVM_DUMP_IR=nvptx.localize): the SIMT kernel needs no other rewrite
PASSES = Pipeline("nvptx", (("localize", localize),))

_PTX_SUFFIX = ".ptx"
_CUBIN_SUFFIX = ".cubin"


def checks_forced() -> bool:
    """HPVM_GPU_CHECK=1: every nvptx kernel is bounds-checked, proven safe or not."""
    return settings.GPU_CHECK.on()


class NvptxBackend(Backend):
    name = "nvptx"
    emits = {"ptx": ".ptx"}
    memory_hits = "nvptx_cache_memory_hits"
    whole_items = True
    code_packages = ("nvptx", "cpu")  # the shared lowering is the cpu target's

    def available(self) -> bool:
        return device.unusable_reason() is None

    def compilable(self) -> bool:
        """PTX and cubins are made without a GPU (llvmlite and the ptxas of the triton wheel)."""
        return toolchain.ptxas_path() is not None

    def why_unavailable(self) -> str:
        return device.unusable_reason() or "usable"

    def compile_leaf(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> LeafKernel:
        return super().compile_leaf(leaf, ctx, checked or checks_forced())

    def variant(self, checked: bool) -> tuple[Any, ...]:
        # the architecture and the toolchain the cubin is made for and with, which may change
        # between compiles (HPVM_NVPTX_ARCH, HPVM_LIBDEVICE, HPVM_PTXAS)
        return checked, device.arch(), toolchain.libdevice_path(), toolchain.ptxas_path()

    def build(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool, key: CacheKey) -> NvptxKernel:
        prepared = PASSES.final(leaf, ctx, label="checked" if checked else "unchecked")
        check_compilable(prepared)
        arch = device.arch()
        mapping = mapping_of(prepared)
        lanes = lanes_of(prepared, ctx)
        ptx = self._ptx(prepared, ctx, checked, arch, key, lanes)
        cubin = self._cubin(ptx, arch, prepared)
        scratch = scratch_of(prepared, ctx) if mapping == GROUP else None
        return NvptxKernel(leaf, prepared, ctx, checked, cubin, mapping, scratch, lanes=lanes)

    def for_leaf(self, kernel: LeafKernel, leaf: K.LeafFunc) -> LeafKernel:
        assert isinstance(kernel, NvptxKernel)
        return kernel if kernel.source is leaf else kernel.for_source(leaf)

    def emit(self, kind: str, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """`hpvmc compile --emit ptx`: the checked kernel under HPVM_GPU_CHECK=1, as launches run."""
        return self.ptx(leaf, ctx, checks_forced())

    def ptx(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> str:
        prepared = PASSES.final(leaf, ctx)
        check_compilable(prepared)
        return self._ptx(prepared, ctx, checked, device.arch(), (repr(leaf), ctx.key(), checked),
                         lanes_of(prepared, ctx))

    def llvm_ir(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> str:
        """The kernel's LLVM IR before optimisation and linking."""
        prepared = PASSES.final(leaf, ctx)
        check_compilable(prepared)
        return module_text(prepared, ctx, checked, device.arch(), lanes_of(prepared, ctx))

    def _ptx(self, prepared: K.LeafFunc, ctx: NodeContext, checked: bool, arch: str,
             key: CacheKey, lanes: LaneLoop | None) -> str:
        names = (prepared.name,) + ((lanes_name(prepared),) if lanes else ())
        kernels = tuple(symbol_name(n) for n in names)  # PTX symbols are ASCII
        return self.disk_cached(
            (key[0], key[1], str(checked), arch, repr(lanes), *self.versions(),
             toolchain.ptx_signature()), _PTX_SUFFIX,
            lambda: toolchain.to_ptx(module_text(prepared, ctx, checked, arch, lanes), kernels,
                                     arch, prepared.loc).encode(), "nvptx_compiles",
            lambda data: toolchain.ptx_problem(data, kernels)).decode()

    def _cubin(self, ptx: str, arch: str, leaf: K.LeafFunc) -> bytes:
        return self.disk_cached((ptx, arch, toolchain.ptxas_version()), _CUBIN_SUFFIX,
                                lambda: toolchain.assemble(ptx, arch, leaf.name, leaf.loc),
                                "nvptx_assembles", toolchain.cubin_problem)


def lanes_of(leaf: K.LeafFunc, ctx: NodeContext) -> LaneLoop | None:
    """The loop nest a lanes kernel beside the leaf's own would share (flat mapping only: a group
    already is a block per parent instance)."""
    return lane_loop(leaf, ctx.input_modes) if mapping_of(leaf) == FLAT else None


def module_text(leaf: K.LeafFunc, ctx: NodeContext, checked: bool, arch: str,
                lanes: LaneLoop | None = None) -> str:
    module = ir.Module(name=leaf.name)
    module.triple = toolchain.TRIPLE
    module.data_layout = toolchain.data_layout(arch)
    numbers = {id(node): i for i, node in enumerate(sites(leaf.body))}
    build_kernel(module, leaf, ctx, checked, numbers, lanes)
    return str(module)

