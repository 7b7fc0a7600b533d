"""Scalar values in generated Triton code: register types, typed constants, operators and casts.

f16 and bf16 values live in f32 registers and are rounded back after every operation, as on the
CPU backend; bf16 memory holds its 16 bits (int16). Every rule that Triton's operators do not
follow goes through a helper of the prelude (prelude.py).
"""
from __future__ import annotations

import math
import struct
from typing import Any

from ...errors import CompileError
from ...support.loc import Loc
from ...types import ScalarType, bf16
from ..base import unparenthesized

REGISTER = {"i1": "tl.int1", "i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
            "u8": "tl.uint8", "u16": "tl.uint16", "u32": "tl.uint32", "u64": "tl.uint64",
            "f16": "tl.float32", "bf16": "tl.float32", "f32": "tl.float32", "f64": "tl.float64"}
MEMORY = {**REGISTER, "f16": "tl.float16", "bf16": "tl.int16"}


def reg(t: ScalarType) -> str:
    return REGISTER[t.name]


def constant(value: int | float | bool, t: ScalarType, shape: str = "[]") -> str:
    """A scalar (or a block of `shape`, filled) of type t holding value exactly."""
    if t.is_bool:
        return f"tl.full({shape}, {int(bool(value))}, tl.int1)"
    if not t.is_float:
        v = int(value)
        if v >= 1 << 63:  # beyond int64: through its bit pattern
            return f"tl.full({shape}, {v - (1 << 64)}, tl.int64).to(tl.uint64, bitcast=True)"
        return f"tl.full({shape}, {v}, {reg(t)})"
    f = float(value)
    # -0.0 goes through its bits too: triton 3.6's scalar_constant takes any value == 0 for the
    # type's null value, +0.0 (triton 3.9 keeps the sign)
    exact = math.isfinite(f) and (f != 0.0 or math.copysign(1.0, f) > 0)
    if t.bits == 64:
        if exact:
            return f"tl.full({shape}, {f!r}, tl.float64)"
        bits = struct.unpack("<q", struct.pack("<d", f))[0]
        return f"tl.full({shape}, {bits}, tl.int64).to(tl.float64, bitcast=True)"
    if exact:
        return f"tl.full({shape}, {f!r}, tl.float32)"
    bits = struct.unpack("<i", struct.pack("<f", f))[0]
    return f"tl.full({shape}, {bits}, tl.int32).to(tl.float32, bitcast=True)"


def choose(t: Any, cond: str, if_true: str, if_false: str) -> str:
    """`tl.where` of two values of type t; a float's goes through its bits (the prelude's
    _select_bits): ptxas 12.8 (triton 3.6) turned a float select of 1.0 and -0.0 (once Triton had
    made an integer argument of 1 a constant) into FSET.BF, whose false result is +0.0. The
    arguments lose their outer parentheses: a condition's implicit `(c != 0)` inside the call
    would nest two per level of the user's expression."""
    args = ", ".join(unparenthesized(code) for code in (cond, if_true, if_false))
    if isinstance(t, ScalarType) and t.is_float:
        return f"_select_bits({args})"
    return f"tl.where({args})"


def round_to(code: str, t: ScalarType) -> str:
    """An f32 result rounded to the 16-bit type t (unchanged for other types)."""
    if t.name == "f16":
        return f"_f16({unparenthesized(code)})"
    if t == bf16:
        return f"_bf16({unparenthesized(code)})"
    return code


def from_memory(code: str, t: ScalarType) -> str:
    """A loaded value (memory type) as a register value."""
    if t.name == "f16":
        return f"{code}.to(tl.float32)"
    if t == bf16:
        return f"_bf16_value({code})"
    return code


def to_memory(code: str, t: ScalarType) -> str:
    if t.name == "f16":
        return f"{code}.to(tl.float16)"
    if t == bf16:
        return f"_bf16_bits({code})"
    return code


_INFIX = {"add": "+", "sub": "-", "mul": "*", "and": "&", "or": "|", "xor": "^"}
_COMPARE = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def binop(op: str, t: ScalarType, x: str, y: str, loc: Loc, scalar_divisor: bool = False) -> str:
    """x op y; `scalar_divisor`: y is one scalar for every lane (an integer `%` then tests for a
    power of two once instead of dividing per lane)."""
    if t.is_float:
        if op in ("add", "sub", "mul"):
            return round_to(f"({x} {_INFIX[op]} {y})", t)
        helper = {"div": "_fdiv", "floordiv": "_ffloordiv", "mod": "_fmod_py", "pow": "_m_pow"}.get(op)
        if helper is None:
            raise CompileError(f"operator {op!r} needs integer operands", loc)
        return round_to(f"{helper}({x}, {y})", t)
    if op in _INFIX:
        return f"({x} {_INFIX[op]} {y})"
    if op == "mod" and scalar_divisor:
        if t.is_signed:
            return f"_smod_by({x}, {y}, {constant(t.min_value(), t)})"
        return f"_umod_by({x}, {y})"
    if op in ("floordiv", "mod"):
        if t.is_signed:
            name = "_sfloordiv" if op == "floordiv" else "_smod"
            return f"{name}({x}, {y}, {constant(t.min_value(), t)})"
        return f"{'_ufloordiv' if op == 'floordiv' else '_umod'}({x}, {y})"
    if op == "shl":
        return f"_shl({x}, {y}, {t.bits})"
    if op == "shr":
        return f"{'_ashr' if t.is_signed else '_lshr'}({x}, {y}, {t.bits})"
    raise CompileError(f"operator {op!r} is not defined on {t}", loc)


def unary(op: str, t: ScalarType, x: str) -> str:
    if op == "not":
        return f"({x} == 0)"
    if op == "neg":
        # Triton negates as 0 - x, which makes +0.0 from +0.0: a float negation flips the sign
        return f"({x} * -1.0)" if t.is_float else f"_ineg({x})"
    return f"(~{x})"


def compare(op: str, x: str, y: str, operands: Any) -> str:
    """x op y; float order compares go through the prelude's _flt.._fge (prelude.py says why)."""
    if isinstance(operands, ScalarType) and operands.is_float and op in ("lt", "le", "gt", "ge"):
        return f"_f{op}({unparenthesized(x)}, {unparenthesized(y)})"
    return f"({x} {_COMPARE[op]} {y})"


def cast(code: str, src: ScalarType, dst: ScalarType) -> str:
    if src == dst:
        return code
    if dst.is_bool:
        return f"({code} != 0)"
    if not src.is_float and not dst.is_float:
        return f"{code}.to({reg(dst)})"
    if not src.is_float:
        return round_to(f"{code}.to(tl.float32)", dst) if dst.bits == 16 else f"{code}.to({reg(dst)})"
    if not dst.is_float:
        lo, hi = dst.min_value(), dst.max_value()
        return (f"_f2i({code}, {constant(lo, dst)}, {constant(hi, dst)}, {float(lo)!r}, "
                f"{float(hi)!r})")
    # float -> float
    if dst.bits == 64:
        return f"{code}.to(tl.float64)"
    if dst.name == "f16":
        return f"_f16({code})" if src.bits != 64 else f"{code}.to(tl.float16).to(tl.float32)"
    narrowed = f"{code}.to(tl.float32)" if src.bits == 64 else code
    return f"_bf16({narrowed})" if dst == bf16 else narrowed
