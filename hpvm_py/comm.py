"""Communication nodes: factories of library nodes, used like leaves in create_node / node.

    ar = hpvm.comm.all_reduce(hpvm.f32)              # node (buf: InOut[Ptr[f32]], buf_bytes: i64)
    hpvm.node(ar, buf=x, buf_bytes=x_bytes)

The buffers must be on the symmetric heap (hpvm.symmetric.empty) when the ranks share a host.
Semantics, algorithms and limits: docs/distributed.md.
"""
from __future__ import annotations

from typing import Any

from .distributed.nodes import check_moe_options, library_func
from .errors import FrontendError
from .frontend.callsite import caller_loc
from .frontend.decorators import LibraryDef
from .rt.boundary import api_boundary
from .types import resolve_scalar

_defs: dict[tuple, LibraryDef] = {}


def _library(kind: str, dtype: Any, **options: Any) -> LibraryDef:
    elem = resolve_scalar(dtype)
    key = (kind, elem.name if elem is not None else repr(dtype), tuple(sorted(options.items())))
    try:
        found = _defs.get(key)
    except TypeError:  # an unhashable option value: library_func raises, naming it
        return LibraryDef(library_func(kind, dtype, caller_loc(), **options))
    if found is None:
        found = _defs[key] = LibraryDef(library_func(kind, dtype, caller_loc(), **options))
    return found


def _quantized(quantize: str | None) -> dict[str, str]:
    """The quantize option as the library function holds it: absent when not quantized, so that
    a plain node is the same function (and text) as before the option existed."""
    return {} if quantize is None else {"quantize": quantize}


@api_boundary
def all_reduce(dtype: Any, op: str = "sum", quantize: str | None = None) -> LibraryDef:
    """All-reduce, in place on every rank: buf = buf(rank 0) op buf(rank 1) op ...

    Args:
        dtype: the element type: an hpvm, NumPy or torch dtype.
        op: "sum", "max" or "min".
        quantize: None (exact), or "fp8", "int8", "int4": a sum whose ranks' contributions
            cross quantized, per block of 32 elements with an f32 scale (f16, bf16 and f32
            only), from HPVM_COMM_QUANTIZE_BYTES on; semantics and error bound in
            docs/distributed.md, "Quantized all-reduce".

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(buf: InOut[Ptr[T]], buf_bytes: i64)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("all_reduce", dtype, op=op, **_quantized(quantize))


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
def all_reduce_rmsnorm(dtype: Any, eps: float = 1e-6, quantize: str | None = None) -> LibraryDef:
    """Fused all-reduce and RMS norm: residual += all_reduce_sum(x); x = rmsnorm(residual) * weight.

    The norm is taken over rows of `hidden` elements.

    Args:
        dtype: a floating-point element type.
        eps: the epsilon added to the mean of squares.
        quantize: None, or "fp8": also write an fp8 (e4m3fn) copy of the new x with one f32
            scale per row (f16, bf16 and f32 only): out = e4m3fn(x / scale), scale =
            max|x| / 448 per row (docs/distributed.md).

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(x: InOut, x_bytes, residual: InOut, residual_bytes, weight: In,
        weight_bytes, hidden: i64)`, and with quantize="fp8" then
        `(out: Out[Ptr[u8]], out_bytes, scales: Out[Ptr[f32]], scales_bytes)`.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _library("all_reduce_rmsnorm", dtype, eps=eps, **_quantized(quantize))


@api_boundary
def moe_dispatch(dtype: Any, hidden: int, experts: int, capacity: int) -> LibraryDef:
    """Mixture-of-experts dispatch (top-1): every token row goes to the rank of its expert.

    Each rank holds T rows of `hidden` elements and one expert id per row (-1: the row goes
    nowhere); expert e lives on rank e // (experts / world_size). Each rank receives the rows
    routed to its experts, grouped by local expert and ordered by (source rank, source row), at
    most `capacity` rows per expert (later rows are dropped; see docs/distributed.md).

    Args:
        dtype: the element type of the rows (any collective element type; moved bit for bit).
        hidden: elements per row.
        experts: experts in the whole world (a multiple of the world size).
        capacity: rows each expert can receive.

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(tokens: In[Ptr[T]], tokens_bytes, expert: In[Ptr[i32]], expert_bytes,
        recv: Out[Ptr[T]], recv_bytes, counts: Out[Ptr[i32]], counts_bytes,
        origin: Out[Ptr[i32]], origin_bytes, slot: Out[Ptr[i32]], slot_bytes)`: recv holds
        experts_per_rank x capacity rows, counts[s, e] the rows rank s routed to local expert e
        (world_size x experts_per_rank), origin the (source rank, source row) of each received
        row ((-1, -1) where none), slot where each of this rank's rows went (expert x capacity +
        position, or -1).

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _moe("moe_dispatch", dtype, hidden, experts, capacity)


@api_boundary
def moe_combine(dtype: Any, hidden: int, experts: int, capacity: int) -> LibraryDef:
    """Mixture-of-experts combine, the inverse of moe_dispatch: every rank gets its rows back.

    out[i] = gate[i] x (the expert's output row at slot[i], on the expert's rank), and 0 for rows
    whose slot is -1 (routed nowhere or dropped). With gate_bytes = 0 there is no gate (x 1).

    Args:
        dtype: a floating-point element type (the rows').
        hidden: elements per row.
        experts: experts in the whole world (a multiple of the world size).
        capacity: rows each expert can receive.

    Returns:
        A library node for `hpvm.node` / `create_node`, with the parameters
        `(expert_out: In[Ptr[T]], expert_out_bytes, slot: In[Ptr[i32]], slot_bytes,
        gate: In[Ptr[f32]], gate_bytes, out: Out[Ptr[T]], out_bytes)`: expert_out laid out as
        moe_dispatch's recv (it may be recv itself), slot as moe_dispatch wrote it.

    Raises:
        FrontendError: an element type or option the collective does not take.
    """
    return _moe("moe_combine", dtype, hidden, experts, capacity)


def _moe(kind: str, dtype: Any, hidden: Any, experts: Any, capacity: Any) -> LibraryDef:
    options = {"hidden": hidden, "experts": experts, "capacity": capacity}
    loc = caller_loc()
    check_moe_options(options, lambda msg: FrontendError(f"hpvm.comm.{kind}(): {msg}", loc,
                                                         rule="collective-options"))
    return _library(kind, dtype, **options)
