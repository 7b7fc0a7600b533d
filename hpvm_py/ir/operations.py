"""The operations of the textual IR's expressions, `name<type>(args)`: for each name, whether it
takes a <type>, the kinds of its arguments, and how it builds its kernel IR node (parser.py)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..types import parse_type
from . import kernel as K

_DIMS = {"x": 0, "y": 1, "z": 2}


@dataclass(frozen=True)
class OpSpec:
    """How `name<type>(args)` reads: whether it takes <type>, its argument kinds, its builder.

    Argument kinds, one letter each: e an expression, v a %variable, l a bare integer (a level).
    """

    typed: bool
    args: str
    build: Callable[[Any, list[Any]], K.Expr]


def _operations() -> dict[str, OpSpec]:
    specs: dict[str, OpSpec] = {}
    for op in K.BINARY_OPS:
        specs[op] = OpSpec(True, "ee", lambda t, a, op=op: K.BinOp(op=op, lhs=a[0], rhs=a[1],
                                                                   type=t))
    for op in K.UNARY_OPS:
        specs[op] = OpSpec(True, "e", lambda t, a, op=op: K.UnaryOp(op=op, operand=a[0], type=t))
    for op in K.COMPARE_OPS:
        specs[op] = OpSpec(False, "ee", lambda t, a, op=op: K.Compare(op=op, lhs=a[0], rhs=a[1],
                                                                      type=_I1))
    for op in K.LOGICAL_OPS:
        specs[op] = OpSpec(False, "ee", lambda t, a, op=op: K.Logical(op=op, lhs=a[0], rhs=a[1],
                                                                      type=_I1))
    for name, arity in K.MATH_FUNCTIONS.items():
        specs[f"math.{name}"] = OpSpec(True, "e" * arity, lambda t, a, name=name: K.MathCall(
            name=name, args=a, type=t))
    for op in K.ATOMIC_OPS:
        specs[f"atomic.{op}"] = OpSpec(True, "vee", lambda t, a, op=op: K.Atomic(
            op=op, ptr=a[0], index=a[1], value=a[2], type=t))
    specs["remote_atomic.add"] = OpSpec(True, "veee", lambda t, a: K.Atomic(
        op="add", ptr=a[0], index=a[1], value=a[2], rank=a[3], type=t))
    for letter, dim in _DIMS.items():
        specs[f"instance_id.{letter}"] = OpSpec(False, "l", lambda t, a, dim=dim: K.InstanceId(
            dim=dim, level=a[0], type=_I64))
        specs[f"num_instances.{letter}"] = OpSpec(False, "l", lambda t, a, dim=dim: K.NumInstances(
            dim=dim, level=a[0], type=_I64))
    specs["num_dims"] = OpSpec(False, "l", lambda t, a: K.NumDims(level=a[0], type=_I32))
    specs["select"] = OpSpec(True, "eee", lambda t, a: K.Select(cond=a[0], if_true=a[1],
                                                                if_false=a[2], type=t))
    specs["cast"] = OpSpec(True, "e", lambda t, a: K.Cast(value=a[0], type=t))
    specs["load"] = OpSpec(True, "ve", lambda t, a: K.Load(ptr=a[0], index=a[1], type=t))
    specs["remote_load"] = OpSpec(True, "vee", lambda t, a: K.Load(ptr=a[0], index=a[1], rank=a[2],
                                                                   type=t))
    specs["malloc"] = OpSpec(True, "e", lambda t, a: K.Malloc(nbytes=a[0], type=t))
    return specs


_I1, _I32, _I64 = parse_type("i1"), parse_type("i32"), parse_type("i64")
OPERATIONS = _operations()
