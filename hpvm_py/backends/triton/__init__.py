"""The `gpu` target: HPVM leaves as Triton block programs (codegen.py), launched on CUDA devices
(hpvm_py/device), or on the fake device through Triton's interpreter (TRITON_INTERPRET=1)."""
from __future__ import annotations

from typing import Any

import triton  # noqa: F401 - an ImportError here makes the target unavailable

from ...ir import kernel as K
from ..base import Backend, CacheKey, LeafKernel, NodeContext
from ...device.devices import cuda_available
from .codegen import dot_precision, generate
from .host_math import interpreting
from .kernel import MAX_BLOCK, TritonKernel


class TritonBackend(Backend):
    name = "gpu"
    emits = {"triton": ".triton.py"}
    # Triton's JIT builds a launch's kernels for its GPU (or its interpreter): without either, a
    # launch cannot compile them, although their source can still be generated (compilable)
    compiles_at_launch = True
    whole_items = True

    def available(self) -> bool:
        return interpreting() or cuda_available()

    def compilable(self) -> bool:
        """Triton source is generated, and kernels made with triton.jit, without a GPU (hpvmc
        compile --emit triton, and checks before a launch): the GPU is needed only to run them."""
        return True

    def why_unavailable(self) -> str:
        return ("target 'gpu' needs a CUDA GPU (torch.cuda.is_available() is false here); set "
                "TRITON_INTERPRET=1 to run it on the CPU through Triton's interpreter (slow), or use "
                "target='cpu'")

    def variant(self, checked: bool) -> tuple[Any, ...]:
        return checked, interpreting(), dot_precision()

    def build(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool, key: CacheKey) -> TritonKernel:
        interpreted, precision = interpreting(), key[-1]
        return TritonKernel(leaf, ctx, lambda fixed_grid, optimised, rows, quads: generate(
            leaf, ctx, checked, interpreted, fixed_grid, optimised, precision, rows, quads))

    def reusable(self, kernel: LeafKernel, leaf: K.LeafFunc) -> bool:
        """A kernel is kept for its own leaf only (its source names the leaf's lines)."""
        assert isinstance(kernel, TritonKernel)
        return kernel.leaf is leaf

    def emit(self, kind: str, leaf: K.LeafFunc, ctx: NodeContext) -> str:
        """`hpvmc compile --emit triton`: the unchecked kernel's file for the GPU."""
        return generate(leaf, ctx, False, interpreted=False, precision=dot_precision()).text

    def emit_variants(self, kind: str, leaf: K.LeafFunc, ctx: NodeContext) -> dict[str, str]:
        """The kernels TritonKernel.prepare may launch instead of emit()'s, where they differ
        from it (kernel.py `_variant`; docs/backends.md)."""
        precision = dot_precision()
        plain = generate(leaf, ctx, False, interpreted=False, precision=precision)
        wanted = dict(VARIANTS)
        if plain.row_guard is None:
            del wanted["rows"]
        if not plain.quad_groups:
            del wanted["quads"]
        found = {}
        for name, (when, checked, options) in wanted.items():
            text = generate(leaf, ctx, checked, interpreted=False, precision=precision, **options).text
            if text != plain.text:
                found[name] = f"# {leaf.name}, variant {name!r}: {when}\n{text}"
        return found


# hpvmc compile --emit triton --variants: name -> (when a launch runs it, checked, generate()'s
# options)
VARIANTS: dict[str, tuple[str, bool, dict[str, bool]]] = {
    "fixed": (f"the leaf's own extents are compile-time constants (a leaf of at most {MAX_BLOCK} "
              "instances)", False, {"fixed_grid": True}),
    "checked": ("each access is checked (a launch whose accesses are not proven in bounds)",
                True, {}),
    "literal": ("the literal translation (the optimised layout does not suit the launch)", False,
                {"optimised": False}),
    "rows": ("the trailing guard's loads masked by its row conjuncts (proven for the launch)", False,
             {"fixed_grid": True, "rows": True}),
    "quads": ("rows, with neighbouring loads from quads of lanes (x extents of multiples of four, "
              "proven centres)", False, {"fixed_grid": True, "rows": True, "quads": True}),
}
