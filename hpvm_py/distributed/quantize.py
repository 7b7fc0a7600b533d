"""The block codec of the quantized all-reduce and of the fused RMSNorm's fp8 output, in NumPy:
what CPU ranks and the engine path run, and what the GPU kernels (gpu/quant_kernels.py) compute
bit for bit. (docs/architecture.md, "Module notes": distributed/quantize.py)"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MODES = ("fp8", "int8", "int4")  # the payload formats of hpvm.comm.all_reduce(quantize=...)
GROUP = 32  # elements per scale (one f32 scale per group of consecutive elements)
QMAX = {"fp8": 448.0, "int8": 127.0, "int4": 7.0}  # the largest code magnitude of each format
BITS = {"fp8": 8, "int8": 8, "int4": 4}
SCALE_ALIGN = 256  # the scales start at a multiple of this many bytes of a payload
# payloads cover whole multiples of this many elements (codes and scales of zeros past n): the GPU
# kernel encodes whole chunks of a divisor of it, without masks
PAD = 8192
_FP8_MIN_NORMAL_EXP = -6  # e4m3fn: normals from 2^-6, subnormals are multiples of 2^-9


@dataclass(frozen=True)
class Layout:
    """One rank's payload of n elements: the codes of element i at byte i * BITS / 8 (int4: the
    even element in the low nibble), then the f32 scale of group k at `scales_offset + 4 k`.
    It covers n rounded up to a multiple of PAD elements; codes and scales past n are those of
    zeros."""

    n: int
    mode: str

    @property
    def padded(self) -> int:
        """Elements covered: n rounded up to a multiple of PAD."""
        return -(-self.n // PAD) * PAD

    @property
    def groups(self) -> int:
        return self.padded // GROUP

    @property
    def code_bytes(self) -> int:
        return self.padded * BITS[self.mode] // 8

    @property
    def scales_offset(self) -> int:
        return -(-self.code_bytes // SCALE_ALIGN) * SCALE_ALIGN

    @property
    def total(self) -> int:
        """Bytes of the whole payload."""
        return self.scales_offset + 4 * self.groups


def _grouped(values: np.ndarray, layout: Layout) -> np.ndarray:
    """values (f32, n) zero-padded to whole groups, as (groups, GROUP)."""
    padded = np.zeros(layout.groups * GROUP, dtype=np.float32)
    padded[:layout.n] = values
    return padded.reshape(-1, GROUP)


def scaled(groups: np.ndarray, qmax: float) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the scale s = absmax / qmax (f32, correctly rounded) and the row divided by it,
    clamped to [-qmax, qmax] (rows of zeros: s = 0 and zeros)."""
    qmax32 = np.float32(qmax)
    scale = np.max(np.abs(groups), axis=1) / qmax32
    safe = np.where(scale > 0, scale, np.float32(1.0)).astype(np.float32)
    y = np.where(scale[:, None] > 0, groups / safe[:, None], np.float32(0.0))
    return scale.astype(np.float32), np.clip(y, -qmax32, qmax32).astype(np.float32)


def fp8_e4m3(y: np.ndarray) -> np.ndarray:
    """The e4m3fn bytes of f32 values with |y| <= 448, rounded to nearest, ties to even (what
    Triton's and torch's conversions do): 3 mantissa bits, normals from 2^-6, subnormals in steps
    of 2^-9; the sign is kept (a negative value that rounds to zero is -0, byte 0x80)."""
    magnitude = np.abs(y).astype(np.float32)
    _, exponent = np.frexp(magnitude)  # magnitude = m * 2^exponent, m in [0.5, 1)
    quantum = np.maximum(exponent.astype(np.int32) - 4, _FP8_MIN_NORMAL_EXP - 3)  # log2 of the step
    rounded = np.ldexp(np.rint(np.ldexp(magnitude, -quantum)), quantum).astype(np.float32)
    mantissa, exponent = np.frexp(rounded)
    normal = rounded >= np.float32(2.0 ** _FP8_MIN_NORMAL_EXP)
    field = np.where(normal, exponent.astype(np.int32) + 6, 0)  # biased exponent (bias 7)
    bits = np.where(normal, np.ldexp(mantissa, 4) - 8, np.ldexp(rounded, 9)).astype(np.int32)
    return ((np.signbit(y).astype(np.int32) << 7) | (field << 3) | bits).astype(np.uint8)


def _fp8_table() -> np.ndarray:
    code = np.arange(256)
    field, mantissa = (code >> 3) & 15, (code & 7).astype(np.float64)
    value = np.where(field == 0, mantissa * 2.0 ** -9, (1 + mantissa / 8) * 2.0 ** (field - 7.0))
    value = np.where((code & 0x7F) == 0x7F, np.nan, value)
    return np.where(code >= 128, -value, value).astype(np.float32)


FP8_VALUES = _fp8_table()  # byte -> f32


def encode(values: np.ndarray, mode: str, codes: np.ndarray, scales: np.ndarray) -> None:
    """Quantize n f32 values into a payload's codes (uint8, Layout.code_bytes) and scales (f32,
    Layout.groups, both past n too): per group s = absmax / QMAX, code = round(v / s) to nearest even (int8 in
    [-127, 127], int4 in [-7, 7] stored as code + 8, two per byte), fp8: e4m3fn(v / s)."""
    layout = Layout(len(values), mode)
    scale, y = scaled(_grouped(values, layout), QMAX[mode])
    scales[:] = scale
    flat = y.reshape(-1)
    if mode == "fp8":
        codes[:] = fp8_e4m3(flat)
        return
    q = np.rint(flat).astype(np.int32)
    if mode == "int8":
        codes[:] = q.astype(np.int8).view(np.uint8)
    else:
        pairs = (q + 8).reshape(-1, 2)
        codes[:] = (pairs[:, 0] | (pairs[:, 1] << 4)).astype(np.uint8)


def decode(codes: np.ndarray, scales: np.ndarray, n: int, mode: str) -> np.ndarray:
    """The f32 values of a payload's first n elements: code * scale, one f32 product each."""
    if mode == "fp8":
        q = FP8_VALUES[codes]
    elif mode == "int8":
        q = codes.view(np.int8).astype(np.float32)
    else:
        q = np.empty(2 * len(codes), dtype=np.float32)
        q[0::2] = (codes & 15).astype(np.float32) - 8
        q[1::2] = (codes >> 4).astype(np.float32) - 8
    groups = len(scales)
    return (q[:groups * GROUP].reshape(groups, GROUP) * scales[:, None]).reshape(-1)[:n]


def rows_fp8(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The fused RMSNorm's fp8 copy of its output: per row of f32 values, s = absmax / 448 and
    codes e4m3fn(v / s). Returns (codes uint8 of rows' shape, scales f32 per row)."""
    scale, y = scaled(rows.astype(np.float32, copy=False), QMAX["fp8"])
    return fp8_e4m3(y), scale
