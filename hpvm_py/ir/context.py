"""Where a leaf sits, as far as its compiled code depends on it: the instance space and the layout
of its scalar values across instances (decided statically from the graph's edges, so code is
specialised for it). The execution plan decides it, the bounds proof reasons with it, and every
backend compiles for it.

Instance space. A leaf at depth d (a child of the root has depth 1) sits under ancestors at levels
1..d-1 (level 0 is the leaf itself; the root is not counted: it has one instance). Level k has
`level_dims[k]` dimensions (0 to 3) with extents `extents[k]`. Linear numbering, used for every
per-instance array:
  - within a level, x is fastest: lin = x + nx * (y + ny * z);
  - the parent index p numbers all ancestor instances with level 1 fastest:
    p = lin_1 + n_1 * (lin_2 + n_2 * (...)), where n_k is the instance count of level k;
  - a leaf instance has the flat index p * L + lin_0, L being the leaf's own instance count.

Scalar inputs arrive in one of three modes (static per node, from the graph's structure):
  uniform      one value for every instance;
  per_parent   a NumPy array of length P (one value per parent instance), e.g. a value that crosses
               an all-to-all edge or a bind inside a replicated internal node;
  per_instance a NumPy array of length P * L (a one-to-one edge from a replicated sibling).
Outputs are written in one of two modes (or not at all):
  per_parent   only the leaf instance with lin_0 == 0 of each parent instance writes out[p]; this is
               the value that crosses an all-to-all edge or an output bind (docs/language.md);
  per_instance every instance writes out[p * L + lin_0].
"""
from __future__ import annotations

import math
from dataclasses import dataclass

INPUT_MODES = ("buffer", "uniform", "per_parent", "per_instance")
OUTPUT_MODES = ("unused", "per_parent", "per_instance")


@dataclass(frozen=True)
class NodeContext:
    """Where a leaf sits, as far as its compiled code depends on it."""

    level_dims: tuple[int, ...]  # dims of level 0 (the leaf), 1 (its parent), ... up to depth-1
    input_modes: tuple[str, ...]  # one per parameter; "buffer" for pointers
    output_modes: tuple[str, ...]  # one per output

    def key(self) -> str:
        return f"dims={self.level_dims};in={','.join(self.input_modes)};out={','.join(self.output_modes)}"


# Instance ids and counts are signed 64-bit values in compiled code: no launch may have more.
MAX_INSTANCES = (1 << 63) - 1


def instance_counts(extents: list[tuple[int, ...]]) -> tuple[int, int]:
    """(P, L): parent instances and leaf instances for the given extents."""
    leaf = math.prod(extents[0]) if extents else 1
    parents = 1
    for level in extents[1:]:
        parents *= math.prod(level)
    return parents, leaf
