"""Where a leaf sits, as far as its compiled code depends on it: the instance space and the layout
of its scalar values across instances (decided statically from the graph's edges, so code is
specialised for it). The execution plan decides it, the bounds proof reasons with it, and every
backend compiles for it.
(docs/architecture.md, "Module notes": ir/context.py)"""
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
