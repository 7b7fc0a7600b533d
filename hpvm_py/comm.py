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
    """In place on every rank: buf = buf(rank 0) op buf(rank 1) op ... (op: sum, max, min)."""
    return _library("all_reduce", dtype, op=op)


@api_boundary
def all_gather(dtype: Any) -> LibraryDef:
    """dst = concatenation of every rank's src, in rank order (dst holds world_size x src)."""
    return _library("all_gather", dtype)


@api_boundary
def reduce_scatter(dtype: Any, op: str = "sum") -> LibraryDef:
    """dst = block `rank` of (src(rank 0) op src(rank 1) op ...) (src holds world_size x dst)."""
    return _library("reduce_scatter", dtype, op=op)


@api_boundary
def broadcast(dtype: Any, root: int = 0) -> LibraryDef:
    """buf = root's buf on every rank."""
    return _library("broadcast", dtype, root=root)


@api_boundary
def all_reduce_rmsnorm(dtype: Any, eps: float = 1e-6) -> LibraryDef:
    """Fused: residual += all_reduce_sum(x); x = rmsnorm(residual) * weight, by rows of `hidden`."""
    return _library("all_reduce_rmsnorm", dtype, eps=eps)
