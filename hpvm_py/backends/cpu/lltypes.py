"""How hpvm scalar types live in LLVM registers and in memory.

Registers: i1 and integers as themselves; f16 and bf16 as `float` values that are always exactly
representable in the 16-bit type (every operation computes in f32 and rounds back, per operation),
f32 as `float`, f64 as `double`. Memory: i1 as one byte (NumPy bool), f16 as `half`, bf16 as its
raw 16 bits (NumPy has no bfloat16, so buffers hold a uint16 view).
"""
from __future__ import annotations

import numpy as np
from llvmlite import ir

from ...ir.semantics import bf16_round, bf16_to_bits
from ...types import ScalarType

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
PTR = ir.PointerType()
VOID = ir.VoidType()


def reg_type(t: ScalarType) -> ir.Type:
    if t.is_float:
        return F64 if t.bits == 64 else F32
    return ir.IntType(t.bits)


def mem_type(t: ScalarType) -> ir.Type:
    if t.is_bool:
        return I8
    if t.name == "f16":
        return F16
    if t.name == "bf16":
        return I16
    return reg_type(t)


def zero(t: ScalarType) -> ir.Constant:
    return ir.Constant(reg_type(t), 0.0 if t.is_float else 0)


def const(t: ScalarType, value: int | float | bool) -> ir.Constant:
    """A constant in register form (16-bit floats rounded as the type would hold them)."""
    if t.is_float:
        return ir.Constant(reg_type(t), float(round_host(np.float64(value), t)))
    if t.is_bool:
        return ir.Constant(I1, int(bool(value)))
    return ir.Constant(ir.IntType(t.bits), signed_value(int(value), t.bits))


def signed_value(value: int, bits: int) -> int:
    """value wrapped to `bits` bits, written as the signed number LLVM's text form expects."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >> (bits - 1) else value


# -- rounding to the 16-bit float types, in generated code --------------------------------------


def round_bf16(b: ir.IRBuilder, v: ir.Value, name: str = "") -> ir.Value:
    """Round a float to the nearest bf16 (ties to even), keeping it in float form.

    The rounding adds 0x7fff plus the lowest kept bit, then clears the low half; NaN keeps its sign
    and becomes quiet instead (adding could carry a NaN into infinity).
    """
    bits = b.bitcast(v, I32)
    lsb = b.and_(b.lshr(bits, ir.Constant(I32, 16)), ir.Constant(I32, 1))
    rounded = b.add(b.add(bits, ir.Constant(I32, 0x7FFF)), lsb)
    quiet = b.or_(bits, ir.Constant(I32, 0x00400000))
    is_nan = b.fcmp_unordered("uno", v, v)
    chosen = b.select(is_nan, quiet, rounded)
    return b.bitcast(b.and_(chosen, ir.Constant(I32, 0xFFFF0000)), F32, name=name)


def round_to(b: ir.IRBuilder, v: ir.Value, t: ScalarType, name: str = "") -> ir.Value:
    """v (computed in f32) rounded to what the 16-bit type t holds; other types unchanged."""
    if t.name == "f16":
        return b.fpext(b.fptrunc(v, F16), F32, name=name)
    if t.name == "bf16":
        return round_bf16(b, v, name)
    return v


def to_mem(b: ir.IRBuilder, v: ir.Value, t: ScalarType) -> ir.Value:
    """A register value in its memory form (the 16-bit floats are already exact)."""
    if t.is_bool:
        return b.zext(v, I8)
    if t.name == "f16":
        return b.fptrunc(v, F16)
    if t.name == "bf16":
        return b.trunc(b.lshr(b.bitcast(v, I32), ir.Constant(I32, 16)), I16)
    return v


def load(b: ir.IRBuilder, address: ir.Value, t: ScalarType, name: str, align: int | None = None
         ) -> ir.Value:
    """Load a value of type t from memory into register form, named `name`."""
    converts = mem_type(t) != reg_type(t) or t.name == "f16"
    raw = b.load(address, typ=mem_type(t), align=align, name=f"{name}.bits" if converts else name)
    return from_mem(b, raw, t, name=name)


def from_mem(b: ir.IRBuilder, v: ir.Value, t: ScalarType, name: str = "") -> ir.Value:
    if t.is_bool:
        return b.icmp_unsigned("!=", v, ir.Constant(I8, 0), name=name)
    if t.name == "f16":
        return b.fpext(v, F32, name=name)
    if t.name == "bf16":
        return b.bitcast(b.shl(b.zext(v, I32), ir.Constant(I32, 16)), F32, name=name)
    return v


# -- the same conversions on the host (constants, scalar arguments) -----------------------------


def round_host(value: np.floating, t: ScalarType) -> np.floating:
    """A float value rounded to type t, as generated code would hold it (inf beyond its range)."""
    with np.errstate(over="ignore"):
        return _round_host(value, t)


def _round_host(value: np.floating, t: ScalarType) -> np.floating:
    if t.name == "bf16":
        return bf16_round(np.float32(value))
    if t.name == "f16":
        return np.float32(np.float16(value))
    return np.float32(value) if t.bits == 32 else np.float64(value)


def storage_bytes(t: ScalarType, value: object) -> bytes:
    """The memory form of one host scalar of type t (for an argument slot)."""
    if t.name == "bf16":
        if isinstance(value, np.uint16):
            return value.tobytes()
        return bf16_to_bits(np.array([value], dtype=np.float32)).tobytes()
    return np.array([value]).astype(t.numpy_dtype).tobytes()
