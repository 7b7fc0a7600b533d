"""The calling convention between a launch (Python) and a generated driver function.

    void driver(ptr args, ptr extents, i64 p_begin, i64 p_end, i64 o_begin, i64 o_end, ptr error)

args: 8-byte slots: one per parameter (a buffer's address, a uniform scalar's value in its memory
form, or the address of a per_parent / per_instance array), then one per output (the output
array's address, null when unused), then the real size in bytes of each buffer parameter, then,
for a leaf with remote accesses, the address of the heap bases (int64, one per rank), this
process's rank and the world size (backends/heapview.py).
extents: three i64 per level (x, y, z; 1 for missing dimensions), level 0 (the leaf) first.
[p_begin, p_end) is the range of parent instances to run and [o_begin, o_end) the range of the
leaf's outermost dimension (z, y or x); error points at the error slot (memory.ERROR_SLOT_WORDS).
A driver is pure with respect to its arguments, so disjoint ranges run in parallel.
"""
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
