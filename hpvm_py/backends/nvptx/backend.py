"""NvptxBackend: compile a leaf for one NodeContext to a cubin, through two caches.

In memory, kernels are kept by (leaf IR, context, checked). On disk (support/cache.py) the PTX is kept under
a hash of everything it depends on, and the cubin under a hash of the PTX, the GPU architecture and
the ptxas version. Compiling needs no GPU (CI assembles every example); loading and launching do.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from pathlib import Path

from llvmlite import ir

from ...ir import kernel as K
from ...support.version import VERSION
from ...support import cache, settings, stats
from ..base import NodeContext
from ..cpu.accesses import sites
from ..cpu.plan import check_compilable
from ..cpu.prepare import localize_assigned_params
from . import device, toolchain
from .launch import NvptxKernel
from .scratch import scratch_of
from .simt import GROUP, build_kernel, mapping_of

_PTX_SUFFIX = ".ptx"
_CUBIN_SUFFIX = ".cubin"


def checks_forced() -> bool:
    """HPVM_GPU_CHECK=1: every nvptx kernel is bounds-checked, proven safe or not."""
    return settings.GPU_CHECK.on()


class NvptxBackend:
    name = "nvptx"

    _memory: dict[tuple[str, str, bool], NvptxKernel] = {}
    _lock = threading.Lock()

    def usable(self) -> bool:
        return device.unusable_reason() is None

    def can_compile(self) -> bool:
        """PTX and cubins are made without a GPU (llvmlite and the ptxas of the triton wheel)."""
        return toolchain.ptxas_path() is not None

    def why_unusable(self) -> str:
        return device.unusable_reason() or "usable"

    def compile_leaf(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> NvptxKernel:
        checked = checked or checks_forced()
        key = (repr(leaf), ctx.key(), checked)
        with self._lock:
            kernel = self._memory.get(key)
        if kernel is not None:
            stats.bump("nvptx_cache_memory_hits")
            return kernel if kernel.source is leaf else kernel.for_source(leaf)
        prepared = localize_assigned_params(leaf)
        check_compilable(prepared)
        arch = device.arch()
        ptx = self._ptx(prepared, ctx, checked, arch, key)
        cubin = _cubin(ptx, arch, prepared)
        mapping = mapping_of(prepared)
        scratch = scratch_of(prepared, ctx) if mapping == GROUP else None
        kernel = NvptxKernel(leaf, prepared, ctx, checked, cubin, mapping, scratch)
        with self._lock:
            self._memory.setdefault(key, kernel)
            return self._memory[key]

    def generated_source(self, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """What `hpvmc compile --emit ptx` writes."""
        return self.ptx(leaf, ctx)

    def ptx(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> str:
        prepared = localize_assigned_params(leaf)
        check_compilable(prepared)
        return self._ptx(prepared, ctx, checked, device.arch(), (repr(leaf), ctx.key(), checked))

    def llvm_ir(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> str:
        """The kernel's LLVM IR before optimisation and linking."""
        prepared = localize_assigned_params(leaf)
        check_compilable(prepared)
        return module_text(prepared, ctx, checked, device.arch())

    @staticmethod
    def _ptx(prepared: K.LeafFunc, ctx: NodeContext, checked: bool, arch: str,
             key: tuple[str, str, bool]) -> str:
        disk_key = cache.content_key(key[0], key[1], str(checked), arch, VERSION,
                                     _code_version())
        cached = cache.load(disk_key, _PTX_SUFFIX)
        if cached is not None:
            return cached.decode()
        text = module_text(prepared, ctx, checked, arch)
        ptx = toolchain.to_ptx(text, prepared.name, arch, prepared.loc)
        stats.bump("nvptx_compiles")
        cache.store(disk_key, _PTX_SUFFIX, ptx.encode())
        return ptx


def module_text(leaf: K.LeafFunc, ctx: NodeContext, checked: bool, arch: str) -> str:
    module = ir.Module(name=leaf.name)
    module.triple = toolchain.TRIPLE
    module.data_layout = toolchain.data_layout(arch)
    numbers = {id(node): i for i, node in enumerate(sites(leaf.body))}
    build_kernel(module, leaf, ctx, checked, numbers)
    return str(module)


def _cubin(ptx: str, arch: str, leaf: K.LeafFunc) -> bytes:
    disk_key = cache.content_key(ptx, arch, toolchain.ptxas_version())
    cubin = cache.load(disk_key, _CUBIN_SUFFIX)
    if cubin is None:
        cubin = toolchain.assemble(ptx, arch, leaf.name, leaf.loc)
        stats.bump("nvptx_assembles")
        cache.store(disk_key, _CUBIN_SUFFIX, cubin)
    return cubin


@functools.cache
def _code_version() -> str:
    """A hash of the code generators' source (this package and the shared cpu lowering)."""
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for path in sorted(here.glob("*.py")) + sorted((here.parent / "cpu").glob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()
