"""The kernel parameters of a leaf compiled for nvptx, in order (shared by codegen and launch):
(docs/architecture.md, "Module notes": backends/nvptx/abi.py)"""
from __future__ import annotations

from dataclasses import dataclass

from llvmlite import ir

from ...ir import kernel as K
from ...types import PtrType, ScalarType
from ..base import NodeContext
from ..cpu.abi import DIMS_PER_LEVEL
from ..cpu.lltypes import I64, PTR, mem_type


@dataclass(frozen=True)
class KernelLayout:
    n_params: int
    n_outputs: int
    buffers: tuple[int, ...]  # parameter indices of the pointer parameters
    levels: int
    remote: bool  # the heap parameters follow the error slot

    @staticmethod
    def of(leaf: K.LeafFunc, ctx: NodeContext) -> "KernelLayout":
        buffers = tuple(i for i, p in enumerate(leaf.params) if isinstance(p.type, PtrType))
        return KernelLayout(len(leaf.params), len(leaf.outputs), buffers, len(ctx.level_dims),
                            any(K.remote_accesses(leaf.body)))

    def output(self, j: int) -> int:
        return self.n_params + j

    def nbytes(self, param_index: int) -> int:
        return self.n_params + self.n_outputs + self.buffers.index(param_index)

    def extent(self, level: int, dim: int) -> int:
        return self.n_params + self.n_outputs + len(self.buffers) + level * DIMS_PER_LEVEL + dim

    @property
    def y_offset(self) -> int:
        return self.extent(self.levels, 0)

    @property
    def zp_offset(self) -> int:
        return self.y_offset + 1

    @property
    def error(self) -> int:
        return self.zp_offset + 1

    @property
    def heap(self) -> int:
        """The first heap parameter (bases, then rank and world size)."""
        return self.error + 1

    @property
    def count(self) -> int:
        return self.heap + (3 if self.remote else 0)

    def types(self, leaf: K.LeafFunc, ctx: NodeContext) -> list[ir.Type]:
        types: list[ir.Type] = []
        for param, mode in zip(leaf.params, ctx.input_modes):
            if isinstance(param.type, PtrType) or mode != "uniform":
                types.append(PTR)
            else:
                assert isinstance(param.type, ScalarType)
                types.append(mem_type(param.type))  # i1 travels as a byte
        types += [PTR] * self.n_outputs
        types += [I64] * (len(self.buffers) + self.levels * DIMS_PER_LEVEL + 2)
        types.append(PTR)
        if self.remote:
            types += [PTR, I64, I64]
        return types
