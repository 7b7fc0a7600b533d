"""The symmetric heap as a launch of a leaf with remote accesses sees it.
(docs/architecture.md, "Module notes": backends/heapview.py)"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import DistributedError
from ..ir import kernel as K
from ..support.world import current as current_world
from ..types import PtrType


@dataclass(frozen=True)
class RemoteView:
    """What a kernel needs for its remote accesses."""

    rank: int
    world_size: int
    bases: Any  # int64 bases by rank, where the kernel runs (NumPy array or CUDA tensor)

    @property
    def bases_address(self) -> int:
        bases = self.bases
        return int(bases.data_ptr()) if hasattr(bases, "data_ptr") else int(bases.ctypes.data)


_ONE_RANK_HOST = RemoteView(rank=0, world_size=1, bases=np.zeros(1, dtype=np.int64))


def world_size() -> int:
    """The number of ranks remote accesses may name (1 outside hpvm.distributed.init())."""
    world = current_world()
    return 1 if world is None else int(world.size)


def remote_params(leaf: K.LeafFunc) -> tuple[int, ...]:
    """Indices of the pointer parameters that the leaf accesses on other ranks."""
    names = K.remote_pointers(leaf.body)
    return tuple(i for i, p in enumerate(leaf.params) if p.name in names and isinstance(p.type, PtrType))


def for_launch(leaf: K.LeafFunc, args: list[Any], device: Any = None) -> RemoteView:
    """The heap bases and ranks for one launch of `leaf` (which has remote accesses), after
    checking its remotely accessed buffers. device: None for a host kernel, else the torch
    device the kernel runs on."""
    world = current_world()
    if world is None:
        return _ONE_RANK_HOST if device is None else _one_rank_device(str(device))
    heap = world.heap
    unmapped = [q for q, base in enumerate(heap.bases) if int(base) == 0]
    if unmapped:
        raise DistributedError(
            f"{K.shown_name(leaf)}: remote accesses need every rank's heap mapped here, but rank(s) "
            f"{unmapped} "
            "run on another host (or HPVM_COMM_FORCE_REMOTE is set): use the collectives between "
            "hosts", _first_remote_loc(leaf, None), rule="remote-host")
    for i in remote_params(leaf):
        arg = args[i]
        if not heap.contains(int(arg.address), int(arg.nbytes)):
            param = leaf.params[i]
            raise DistributedError(
                f"{K.shown_name(leaf)}: {param.name!r} is accessed on other ranks, but its buffer "
                f"({arg.nbytes} "
                f"bytes at {int(arg.address):#x}) is not on the symmetric heap: allocate it with "
                "hpvm.symmetric.empty() (the same sequence of allocations on every rank)",
                _first_remote_loc(leaf, param.name), rule="buffer-on-heap")
    if device is None:
        bases = heap.bases_array
    else:
        bases = getattr(heap, "bases_tensor", None)
        if bases is None:
            raise DistributedError(f"{K.shown_name(leaf)}: remote accesses on a GPU need the GPU symmetric "
                                   "heap; "
                                   "this world's heap is in host memory", _first_remote_loc(leaf, None),
                                   rule="buffer-on-heap")
    return RemoteView(rank=int(heap.rank), world_size=int(world.size), bases=bases)


@functools.cache
def _one_rank_device(device: str) -> RemoteView:
    import torch

    return RemoteView(rank=0, world_size=1, bases=torch.zeros(1, dtype=torch.int64, device=device))


def _first_remote_loc(leaf: K.LeafFunc, name: str | None) -> Any:
    for access in K.remote_accesses(leaf.body):
        if name is None or access.ptr.name == name:
            return access.loc
    return leaf.loc
