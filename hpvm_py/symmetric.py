"""The symmetric heap: `hpvm.symmetric.empty(shape, dtype)` allocates the same buffer on every rank
(call it in the same order on all ranks). On CPU ranks it returns a CPU torch tensor in shared
memory that the other ranks on the host can read and write; on GPU ranks a CUDA tensor on the
rank's GPU that the other local ranks map (hpvm.distributed.init(device=...) decides). See
docs/distributed.md.
"""
from __future__ import annotations

import math
import operator
from typing import Any

from .distributed import ranks
from .distributed.reduction_arith import torch_dtype
from .errors import DistributedError
from .frontend.callsite import caller_loc
from .rt.boundary import api_boundary
from .types import resolve_scalar


def _heap() -> Any:
    world = ranks.current()
    if world is None:
        raise DistributedError("the symmetric heap needs the ranks: call hpvm.distributed.init() "
                               "first", caller_loc(), rule="distributed-init")
    return world.heap


@api_boundary
def empty(shape: int | tuple[int, ...], dtype: Any) -> Any:
    """A tensor on this rank's symmetric heap, at the same offset on every rank.

    Call it in the same order, with the same shapes, on every rank. Its contents are unspecified
    (fresh heap memory reads as zeros).

    Args:
        shape: an element count or a tuple of them.
        dtype: an hpvm (`hpvm.f32`), NumPy or torch dtype.

    Returns:
        A torch tensor: on the rank's GPU on GPU ranks, in shared host memory on CPU ranks.

    Raises:
        DistributedError: `hpvm.distributed.init()` has not been called.
        DistributedError: a bad shape or dtype, or a heap too small (`HPVM_HEAP_BYTES`).
    """
    dims = _dims(shape)
    if dims is None or not all(d >= 0 for d in dims):
        raise DistributedError(f"hpvm.symmetric.empty(): shape {shape!r} must be non-negative ints",
                               caller_loc(), rule="heap-shape")
    elem = resolve_scalar(dtype)
    if elem is None:
        raise DistributedError(f"hpvm.symmetric.empty(): {dtype!r} is not a dtype hpvm knows",
                               caller_loc(), rule="heap-shape")
    heap = _heap()
    count = math.prod(dims)
    offset = heap.allocate(count * elem.nbytes, caller_loc())
    return heap.tensor(heap.rank, offset, count, torch_dtype(elem)).view(dims)


def _dims(shape: Any) -> tuple[int, ...] | None:
    """A shape's element counts, NumPy's integers too (np.int64(3) was iterated as a tuple, as
    were 2.5 and None: internal TypeErrors); None when it is no count or sequence of counts."""
    parts = (shape,) if hasattr(type(shape), "__index__") else shape
    try:
        if any(isinstance(d, bool) for d in parts):
            return None
        return tuple(operator.index(d) for d in parts)
    except TypeError:
        return None


@api_boundary
def zeros(shape: int | tuple[int, ...], dtype: Any) -> Any:
    """`empty(shape, dtype)`, filled with zeros.

    Args:
        shape: an element count or a tuple of them.
        dtype: an hpvm, NumPy or torch dtype.

    Returns:
        The tensor.

    Raises:
        DistributedError: as `empty` raises it.
    """
    return empty(shape, dtype).zero_()


@api_boundary
def free_bytes() -> int:
    """Bytes left on this rank's heap (`HPVM_HEAP_BYTES` sets its size).

    Returns:
        The count of free bytes.

    Raises:
        DistributedError: `hpvm.distributed.init()` has not been called.
    """
    return _heap().free_bytes
