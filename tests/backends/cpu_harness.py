"""Launch leaves on the cpu backend directly (without graphs), for the test_cpu_* tests."""
from __future__ import annotations

from typing import Any

import numpy as np

from hpvm_py.backends.base import BufferArg, NodeContext, instance_counts
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.types import PtrType


def buffer(array: np.ndarray) -> BufferArg:
    return BufferArg(obj=array, address=array.ctypes.data, nbytes=array.nbytes,
                     array=array.reshape(-1))


def run(leaf: Any, extents: list[tuple[int, ...]], *args: Any, modes: dict[str, str] | None = None,
        outputs: tuple[str, ...] = (), checked: bool = False) -> list[np.ndarray]:
    """Run every instance of `leaf` over `extents` (level 0 first).

    Arrays become buffers (and a following i64 size parameter may be given as None: it is filled
    in); scalars are uniform unless `modes` says per_parent / per_instance. Returns one array per
    output port, in the given output modes ("per_parent" / "per_instance" / "unused").
    """
    ir = leaf.ir
    modes = modes or {}
    input_modes = []
    values: list[Any] = []
    previous: np.ndarray | None = None
    for param, arg in zip(ir.params, args):
        if isinstance(param.type, PtrType):
            input_modes.append("buffer")
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
    kernel = CpuBackend().compile_leaf(ir, ctx, checked=checked)
    parents, leaves = instance_counts(extents)
    results = []
    for port, mode in zip(ir.outputs, out_modes):
        size = {"per_parent": parents, "per_instance": parents * leaves}.get(mode, 0)
        dtype = np.int64 if isinstance(port.type, PtrType) else port.type.numpy_dtype
        results.append(np.full(size, 0, dtype=dtype) if mode != "unused" else None)
    kernel.launch(values, results, extents)
    return results
