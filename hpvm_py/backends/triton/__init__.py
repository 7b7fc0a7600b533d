"""The `gpu` target: HPVM leaves as Triton block programs (codegen.py), launched on CUDA devices
(hpvm_py/device), or on the fake device through Triton's interpreter (TRITON_INTERPRET=1)."""
from __future__ import annotations

import threading

import triton  # noqa: F401 - an ImportError here makes the target unavailable

from ...ir import kernel as K
from ..base import NodeContext
from ...device.devices import cuda_available
from .codegen import generate
from .host_math import interpreting
from .kernel import TritonKernel


class TritonBackend:
    name = "gpu"
    # Triton's JIT builds a launch's kernels for its GPU (or its interpreter): without either, a
    # launch cannot compile them, although their source can still be generated (can_compile)
    compiles_at_launch = True

    _memory: dict[tuple[str, str, bool, bool], TritonKernel] = {}
    _lock = threading.Lock()

    def usable(self) -> bool:
        return interpreting() or cuda_available()

    def can_compile(self) -> bool:
        """Triton source is generated, and kernels made with triton.jit, without a GPU (hpvmc
        compile --emit triton, and checks before a launch): the GPU is needed only to run them."""
        return True

    def why_unusable(self) -> str:
        return ("target 'gpu' needs a CUDA GPU (torch.cuda.is_available() is false here); set "
                "TRITON_INTERPRET=1 to run it on the CPU through Triton's interpreter (slow), or use "
                "target='cpu'")

    def compile_leaf(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool = False) -> TritonKernel:
        key = (repr(leaf), ctx.key(), checked, interpreting())
        with self._lock:
            kernel = self._memory.get(key)
        if kernel is not None and kernel.leaf is leaf:
            return kernel
        interpreted = interpreting()
        kernel = TritonKernel(leaf, ctx, lambda fixed_grid, optimised: generate(
            leaf, ctx, checked, interpreted, fixed_grid, optimised))
        with self._lock:
            self._memory[key] = kernel
        return kernel

    def generated_source(self, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """What `hpvmc compile --emit triton` writes: the unchecked kernel's file for the GPU."""
        return generate(leaf, ctx, False, interpreted=False).text
