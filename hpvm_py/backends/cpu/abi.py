"""The calling convention between a launch (Python) and a generated driver function.
(docs/architecture.md, "Module notes": backends/cpu/abi.py)"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import kernel as K
from ...types import PtrType

DIMS_PER_LEVEL = 3
HEAP_SLOTS = 3
PRIVATE_SUFFIX = ".private"  # the driver variant whose privatised buffers are thread-owned copies


@dataclass(frozen=True)
class ArgLayout:
    n_params: int
    n_outputs: int
    buffers: tuple[int, ...]  # parameter indices of the pointer parameters
    remote: bool  # the three heap slots follow

    @staticmethod
    def of(leaf: K.LeafFunc) -> "ArgLayout":
        buffers = tuple(i for i, p in enumerate(leaf.params) if isinstance(p.type, PtrType))
        return ArgLayout(len(leaf.params), len(leaf.outputs), buffers,
                         any(K.remote_accesses(leaf.body)))

    def output_slot(self, j: int) -> int:
        return self.n_params + j

    def nbytes_slot(self, param_index: int) -> int:
        return self.n_params + self.n_outputs + self.buffers.index(param_index)

    @property
    def heap_slot(self) -> int:
        """The first of the heap slots: bases address, rank, world size."""
        return self.n_params + self.n_outputs + len(self.buffers)

    @property
    def slots(self) -> int:
        return self.heap_slot + (HEAP_SLOTS if self.remote else 0)
