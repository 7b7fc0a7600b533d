"""Kernels run by Triton's interpreter (TRITON_INTERPRET=1): math functions, and a bug fix.

libdevice functions have no interpreter implementation; the generated helpers call `call()`
instead when interpreting. It applies the NumPy function the python target uses to the values the
interpreter holds (NumPy arrays inside its tensors). Never used by compiled GPU code.
"""
from __future__ import annotations

import os
from typing import Any

import numpy as np

from ..python.ops import _MATH


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def call(name: str, *args: Any) -> Any:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    data = [np.asarray(a.handle.data) for a in args]
    with np.errstate(all="ignore"):
        result = np.asarray(_MATH[name](*data)).astype(data[0].dtype)
    widest = max(args, key=lambda a: np.ndim(a.handle.data))
    return tl.tensor(TensorHandle(result, widest.dtype.scalar), widest.type)


def fix_interpreter() -> None:
    """Work around a bug of Triton's interpreter (3.6-3.9): a comparison of scalars gets its
    operands' dtype instead of i1, so broadcasting the result (`scalar_cond & block_mask`) turns it
    into integers that loads then reject as masks. Comparison results are made i1 again."""
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.binary_op
    if getattr(original, "hpvm_fixed", False):
        return

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        out = original(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return interpreter.TensorHandle(out.data, tl.int1)
        return out

    binary_op.hpvm_fixed = True  # type: ignore[attr-defined]
    builder.binary_op = binary_op
