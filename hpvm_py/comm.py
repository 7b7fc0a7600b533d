"""Communication nodes: factories of library nodes, used like leaves in create_node / node.

    ar = hpvm.comm.all_reduce(hpvm.f32)              # node (buf: InOut[Ptr[f32]], buf_bytes: i64)
    hpvm.node(ar, buf=x, buf_bytes=x_bytes)

The buffers must be on the symmetric heap (hpvm.symmetric.empty) when the ranks share a host.
Semantics, algorithms and limits: docs/distributed.md.
"""
from __future__ import annotations

from typing import Any

from .distributed.nodes import library_func
from .frontend.callsite import caller_loc
from .frontend.decorators import LibraryDef
from .rt.boundary import api_boundary
from .types import resolve_scalar

_defs: dict[tuple, LibraryDef] = {}


def _library(kind: str, dtype: Any, **options: Any) -> LibraryDef:
    elem = resolve_scalar(dtype)
    key = (kind, elem.name if elem is not None else repr(dtype), tuple(sorted(options.items())))
    found = _defs.get(key)
    if found is None:
        found = _defs[key] = LibraryDef(library_func(kind, dtype, caller_loc(), **options))
    return found


@api_boundary
def all_reduce(dtype: Any, op: str = "sum") -> LibraryDef:
    """All-reduce, in place on every rank: buf = buf(rank 0) op buf(rank 1) op ...

    Args:
        dtype: the element type: an hpvm, NumPy or torch dtype.
        op: "sum", "max" or "min".

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(buf: InOut[Ptr[T]], buf_bytes: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("all_reduce", dtype, op=op)


@api_boundary
def all_gather(dtype: Any) -> LibraryDef:
    """All-gather: dst = every rank's src, concatenated in rank order (dst holds world_size x src).

    Args:
        dtype: the element type: an hpvm, NumPy or torch dtype.

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(src: In[Ptr[T]], src_bytes: i64, dst: Out[Ptr[T]], dst_bytes: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("all_gather", dtype)


@api_boundary
def reduce_scatter(dtype: Any, op: str = "sum") -> LibraryDef:
    """Reduce-scatter: dst = block `rank` of (src(rank 0) op src(rank 1) op ...).

    src holds world_size x dst elements.

    Args:
        dtype: the element type: an hpvm, NumPy or torch dtype.
        op: "sum", "max" or "min".

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(src: In[Ptr[T]], src_bytes: i64, dst: Out[Ptr[T]], dst_bytes: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("reduce_scatter", dtype, op=op)


@api_boundary
def broadcast(dtype: Any, root: int = 0) -> LibraryDef:
    """Broadcast: buf = rank `root`'s buf, on every rank.

    Args:
        dtype: the element type: an hpvm, NumPy or torch dtype.
        root: the rank whose buffer is sent.

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(buf: InOut[Ptr[T]], buf_bytes: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("broadcast", dtype, root=root)


@api_boundary
def all_reduce_rmsnorm(dtype: Any, eps: float = 1e-6) -> LibraryDef:
    """Fused all-reduce and RMS norm: residual += all_reduce_sum(x); x = rmsnorm(residual) * weight.

    The norm is taken over rows of `hidden` elements.

    Args:
        dtype: a floating-point element type.
        eps: the epsilon added to the mean of squares.

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(x: InOut, x_bytes, residual: InOut, residual_bytes, weight: In,
        weight_bytes, hidden: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("all_reduce_rmsnorm", dtype, eps=eps)
