"""Kernels run by Triton's interpreter (TRITON_INTERPRET=1): math functions, and fixes of its bugs.

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
    """Work around bugs of Triton's interpreter, each fixed at most once per process:
    - (3.6-3.9) a comparison of scalars gets its operands' dtype instead of i1, so broadcasting
      the result (`scalar_cond & block_mask`) turns it into integers that loads then reject as
      masks. Comparison results are made i1 again.
    - (3.6-3.8) a reduction to a scalar builds its result with `np.array([value], dtype=...)`,
      which NumPy 2 refuses for a 32-bit integer sum that wrapped: the compiled reduction wraps,
      so the value is narrowed as 3.9's interpreter narrows it.
    - (3.6) a scalar tensor used as an int (`range(0, n)`) is `int()` of a one-element array,
      which NumPy 2.4 refuses: it is read as that element, as 3.7's interpreter reads it.
    - (3.6-3.8) `~x` of an unsigned integer builds its all-ones operand as `np.full(1, -1,
      dtype=...)`, which NumPy 2 refuses for unsigned types: it is the type's largest value.
    - (3.6-3.9) `tl.atomic_xchg` on an f32 or f64 buffer raises "Unsupported data type" (its
      exchange takes integers only; a GPU exchanges any 32- or 64-bit word): the bits are
      exchanged as unsigned integers of the same width."""
    from triton.runtime import interpreter

    if getattr(interpreter, "hpvm_fixed", False):
        return
    _comparisons_give_i1(interpreter)
    _reductions_wrap(interpreter)
    _scalars_index(interpreter)
    _unsigned_all_ones(interpreter)
    _float_exchange(interpreter)
    interpreter.hpvm_fixed = True


def _comparisons_give_i1(interpreter: Any) -> None:
    import triton.language as tl

    builder = interpreter.InterpreterBuilder
    original = builder.binary_op

    def binary_op(self: Any, lhs: Any, rhs: Any, op: Any) -> Any:
        out = original(self, lhs, rhs, op)
        if out.data.dtype == np.bool_ and out.dtype != tl.int1:
            return interpreter.TensorHandle(out.data, tl.int1)
        return out

    builder.binary_op = binary_op


def _reductions_wrap(interpreter: Any) -> None:
    reductions = getattr(interpreter, "ReduceScanOpInterface", None)
    np_dtype = getattr(interpreter, "_get_np_dtype", None)
    if reductions is None or np_dtype is None:
        return  # another interpreter: nothing known to fix
    original = reductions.to_tensor

    def to_tensor(self: Any, ret: Any, dtype: Any) -> Any:
        if not (hasattr(ret, "shape") and ret.shape):  # a scalar result: wrapped to its type
            ret = np.array([ret]).astype(np_dtype(dtype))[0]
        return original(self, ret, dtype)

    reductions.to_tensor = to_tensor


def _scalars_index(interpreter: Any) -> None:
    patch = getattr(interpreter, "_patch_lang_tensor", None)
    if patch is None:
        return

    def patch_lang_tensor(tensor: Any, scope: Any) -> None:
        patch(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    interpreter._patch_lang_tensor = patch_lang_tensor


def _unsigned_all_ones(interpreter: Any) -> None:
    builder = interpreter.InterpreterBuilder
    np_dtype = getattr(interpreter, "_get_np_dtype", None)
    original = getattr(builder, "get_all_ones_value", None)
    if np_dtype is None or original is None:
        return

    def get_all_ones_value(self: Any, t: Any) -> Any:
        kind = np.dtype(np_dtype(t))
        if kind.kind == "u":
            return interpreter.TensorHandle(np.full(1, np.iinfo(kind).max, dtype=kind), t.scalar)
        return original(self, t)

    builder.get_all_ones_value = get_all_ones_value


def _float_exchange(interpreter: Any) -> None:
    builder = interpreter.InterpreterBuilder
    original = getattr(builder, "create_atomic_rmw", None)
    xchg = getattr(getattr(interpreter, "_ir", None), "ATOMIC_OP", None)
    if original is None or xchg is None:
        return
    xchg = xchg.XCHG

    def create_atomic_rmw(self: Any, rmwOp: Any, ptr: Any, val: Any, mask: Any, sem: Any,
                          scope: Any) -> Any:
        kind = val.data.dtype
        if rmwOp != xchg or kind.kind != "f":
            return original(self, rmwOp, ptr, val, mask, sem, scope)
        word = np.dtype(f"u{kind.itemsize}")
        bits = interpreter.TensorHandle(val.data.view(word), val.dtype)
        old = original(self, rmwOp, ptr, bits, mask, sem, scope)
        return interpreter.TensorHandle(old.data.view(kind), old.dtype)

    builder.create_atomic_rmw = create_atomic_rmw
