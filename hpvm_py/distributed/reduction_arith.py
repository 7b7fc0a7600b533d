"""The arithmetic of the collectives, shared by the heap path and the engine path.

Reductions of f16 and bf16 accumulate in f32 and round once at the end; every rank combines the
ranks' contributions in rank order (0, 1, ...), so every rank ends with bit-identical results.
"""
from __future__ import annotations

from typing import Any, Sequence

from ..types import ScalarType

_TORCH = {"f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i8": "int8",
          "i16": "int16", "i32": "int32", "i64": "int64", "u8": "uint8", "i1": "bool",
          "u16": "uint16", "u32": "uint32", "u64": "uint64"}


def torch_dtype(t: ScalarType) -> Any:
    import torch

    return getattr(torch, _TORCH[t.name])


def accumulator_dtype(t: ScalarType) -> Any:
    """Where partial results live: f32 for the 16-bit floats, the type itself otherwise."""
    import torch

    return torch.float32 if t.name in ("f16", "bf16") else torch_dtype(t)


def reduce_all(parts: Sequence[Any], op: str, t: ScalarType) -> Any:
    """parts[0] op parts[1] op ... in order, as a new tensor of accumulator_dtype(t)."""
    import torch

    acc = parts[0].to(accumulator_dtype(t), copy=True)
    for part in parts[1:]:
        if op == "sum":
            acc.add_(part)
        elif op == "max":
            torch.maximum(acc, part.to(acc.dtype), out=acc)
        else:
            torch.minimum(acc, part.to(acc.dtype), out=acc)
    return acc


def add_rmsnorm(total: Any, residual: Any, weight: Any, hidden: int, eps: float) -> tuple[Any, Any]:
    """The fused step after the all-reduce: r = total + residual; x = r / sqrt(mean(r^2) + eps) * w
    over rows of `hidden` elements, in the accumulator type. Returns (x, r)."""
    import torch

    r = total + residual.to(total.dtype)
    rows = r.view(-1, hidden)
    scale = torch.rsqrt(rows.square().mean(dim=1, keepdim=True) + eps)
    return (rows * scale * weight.to(total.dtype)).view(-1), r
