"""Launch leaves on a backend directly (without graphs): the cpu backend for the test_cpu_* tests,
the nvptx backend (device buffers as torch CUDA tensors) for test_nvptx_launch."""
from __future__ import annotations

import textwrap
from types import ModuleType
from typing import Any

import numpy as np

from hpvm_py.backends.base import BufferArg
from hpvm_py.ir.context import NodeContext, instance_counts
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.backends.nvptx import NvptxBackend
from hpvm_py.types import PtrType
from differential.data import load


def buffer(array: np.ndarray) -> BufferArg:
    return BufferArg(obj=array, address=array.ctypes.data, nbytes=array.nbytes,
                     array=array.reshape(-1))


def device_buffer(tensor: Any) -> BufferArg:
    """A torch CUDA tensor as the nvptx backend receives it."""
    return BufferArg(obj=tensor, address=tensor.data_ptr(), nbytes=tensor.numel() * tensor.element_size(),
                     array=None)


def run(leaf: Any, extents: list[tuple[int, ...]], *args: Any, modes: dict[str, str] | None = None,
        outputs: tuple[str, ...] = (), checked: bool = False, target: str = "cpu") -> list[np.ndarray]:
    """Run every instance of `leaf` over `extents` (level 0 first) on target cpu or nvptx.

    Arrays become buffers (and a following i64 size parameter may be given as None: it is filled
    in); scalars are uniform unless `modes` says per_parent / per_instance. Returns one array per
    output port, in the given output modes ("per_parent" / "per_instance" / "unused"). On nvptx the
    arrays are copied to the GPU and back after the launch.
    """
    ir = leaf.ir
    modes = modes or {}
    input_modes = []
    values: list[Any] = []
    copies: list[tuple[np.ndarray, Any]] = []  # (host array, device tensor) on nvptx
    previous: np.ndarray | None = None
    for param, arg in zip(ir.params, args):
        if isinstance(param.type, PtrType):
            input_modes.append("buffer")
            if target == "nvptx":
                import torch

                tensor = torch.from_numpy(arg.reshape(-1).view(np.uint8)).to("cuda")
                copies.append((arg, tensor))
                values.append(device_buffer(tensor))
            else:
                values.append(buffer(arg))
            previous = arg
            continue
        mode = modes.get(param.name, "uniform")
        input_modes.append(mode)
        if arg is None and previous is not None:
            arg = np.int64(previous.nbytes)
        elif mode == "uniform":
            arg = param.type(arg)
        values.append(arg)
        previous = None
    assert len(values) == len(ir.params), "wrong number of arguments"
    out_modes = outputs or tuple("unused" for _ in ir.outputs)
    ctx = NodeContext(level_dims=tuple(len(e) for e in extents), input_modes=tuple(input_modes),
                      output_modes=out_modes)
    backend = NvptxBackend() if target == "nvptx" else CpuBackend()
    kernel = backend.compile_leaf(ir, ctx, checked=checked)
    parents, leaves = instance_counts(extents)
    results = []
    for port, mode in zip(ir.outputs, out_modes):
        size = {"per_parent": parents, "per_instance": parents * leaves}.get(mode, 0)
        dtype = np.int64 if isinstance(port.type, PtrType) else port.type.numpy_dtype
        results.append(np.full(size, 0, dtype=dtype) if mode != "unused" else None)
    try:
        kernel.launch(values, results, extents)
    finally:
        for array, tensor in copies:
            array.reshape(-1).view(np.uint8)[:] = tensor.cpu().numpy()
    return results


# -- leaves generated from source text (the front end compiles leaves from files) ------------------


HEADER = """\
import math
import hpvm_py as hpvm
from hpvm_py import In, Out, InOut, Ptr, i1, i8, i16, i32, i64, u8, u16, u32, u64, f16, bf16, f32, f64
"""


def leaves_from_source(source: str) -> ModuleType:
    """Import `source` (the HEADER is prepended) as a module written to a real file."""
    return load(HEADER + textwrap.dedent(source))


# -- 16-bit floats and float comparison -------------------------------------------------------------


def bf16_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << np.uint32(16)).view(np.float32)


def f32_to_bf16(values: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaN stays NaN (quiet)."""
    values = np.asarray(values, dtype=np.float32)
    bits = values.view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    chosen = np.where(np.isnan(values), bits | np.uint32(0x00400000), rounded)
    return (chosen >> np.uint32(16)).astype(np.uint16)


def assert_floats(got: np.ndarray, want: np.ndarray, ulps: float = 0, what: str = "") -> None:
    """Equal bit for bit (NaN matches NaN, -0 differs from 0) or within `ulps` units in the last
    place of want's type."""
    got = np.asarray(got)
    want = np.asarray(want).astype(got.dtype)
    nan_got, nan_want = np.isnan(got), np.isnan(want)
    bad = nan_got != nan_want
    both = ~nan_got & ~nan_want
    if ulps == 0:
        same = (got == want) & (np.signbit(got) == np.signbit(want))
    else:
        with np.errstate(all="ignore"):
            tolerance = ulps * np.spacing(np.abs(want).astype(got.dtype))
            same = (got == want) | (np.abs(got.astype(np.float64) - want.astype(np.float64))
                                    <= np.abs(tolerance.astype(np.float64)))
    bad |= both & ~same
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise AssertionError(f"{what}: {int(bad.sum())} mismatches, first at {i}: got {got[i]!r}, "
                             f"want {want[i]!r}")
