"""The ranks this process has joined, as the layers below hpvm_py.distributed see them.

hpvm_py.distributed publishes its `World` here when `init()` joins and withdraws it on
`finalize()`, so that the device layer (the GPU of this rank) and the backends (the heap bases of
a remote access) read it without importing the layer above them.
"""
from __future__ import annotations

from typing import Any, Protocol


class World(Protocol):
    """What the lower layers read of hpvm_py.distributed.ranks.World."""

    rank: int
    size: int
    device: str  # where the heaps live: "host", or this rank's "cuda:N"
    heap: Any  # the symmetric heap (the protocol of backends/heapview.py)


_current: World | None = None


def publish(world: World | None) -> None:
    """The world just joined, or None once it is left (called by hpvm_py.distributed.ranks)."""
    global _current
    _current = world


def current() -> World | None:
    return _current
