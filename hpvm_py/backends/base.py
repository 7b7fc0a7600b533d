"""The contract between the executor and a backend (cpu, gpu, python).

The executor compiles one `LeafKernel` per (leaf function, NodeContext) and launches it once per
firing of the node, for all its dynamic instances, including all instances of replicated ancestors.

Where a leaf sits (its `NodeContext`: instance space and value layouts) is ir/context.py's.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..ir.context import NodeContext
from ..ir.kernel import LeafFunc


@dataclass
class BufferArg:
    """A pointer argument: the memory object as the backend's device sees it.

    `address` is the base address on the target device, `nbytes` the object's real size (the
    executor has already checked that the size argument the user passed does not exceed it), and
    `array` a flat NumPy view of its elements (host backends only; None for device memory).
    """

    obj: Any
    address: int
    nbytes: int
    array: np.ndarray | None


class LeafKernel(Protocol):
    """A leaf compiled for one NodeContext on one target."""

    def launch(self, args: list[Any], outputs: list[np.ndarray | None],
               extents: list[tuple[int, ...]]) -> None:
        """Run every dynamic instance.

        args: one per parameter: BufferArg for pointers, a NumPy scalar for uniform scalars, a
        NumPy array for per_parent / per_instance scalars. outputs: one per output port, an array
        of the output's dtype of length P (per_parent) or P * L (per_instance), or None (unused).
        extents: extents[k] is the tuple of extents of level k (len == level_dims[k]).
        """


class Backend(Protocol):
    name: str

    def compile_leaf(self, leaf: LeafFunc, ctx: NodeContext) -> LeafKernel:
        ...
