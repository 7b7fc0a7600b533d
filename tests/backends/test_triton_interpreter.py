"""Triton's interpreter as the gpu target uses it without a GPU (backends/triton/host_math.py's
fix_interpreter): the fixes hold on whichever Triton is installed (3.6 to 3.9), and kernels that
needed them give the python target's answer.

On triton 3.6-3.8 with NumPy 2.4, without the fixes, kernels failed: 3.7 and 3.8 refused a
32-bit sum that wrapped, 3.6-3.8 `~` of an unsigned integer, and 3.6 `range()` over a scalar
argument.
"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i32, i64, u32
from hpvm_py.backends import registry
from hpvm_py.backends.triton.host_math import fix_interpreter

pytestmark = pytest.mark.skipif(not registry.available("gpu"), reason="no triton")


def test_a_scalar_reduction_wraps_to_its_type() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    fix_interpreter()
    reduce = interpreter.ReduceScanOpInterface.to_tensor
    cases = [(2**31 + 5, tl.int32, -2**31 + 5), (-2**31 - 1, tl.int32, 2**31 - 1),
             (2**32 + 9, tl.uint32, 9), (7, tl.int64, 7)]
    for value, dtype, wrapped in cases:
        out = reduce(None, value, dtype)
        assert out.handle.data.tolist() == [wrapped], (value, dtype)


def test_a_one_element_scalar_is_an_index() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    fix_interpreter()
    scope = interpreter._LangPatchScope()
    interpreter._patch_lang_tensor(tl.tensor, scope)
    try:
        one = tl.tensor(interpreter.TensorHandle(np.array([7], np.int64), tl.int64), tl.int64)
        assert list(range(one)) == list(range(7))
        many = tl.tensor(interpreter.TensorHandle(np.array([1, 2], np.int64), tl.int64), tl.int64)
        with pytest.raises(TypeError):
            int(many)  # still no index: only a one-element array is a scalar
    finally:
        scope.restore()


@hpvm.leaf
def wrapping_sums(x: In[Ptr[i32]], x_bytes: i64, y: In[Ptr[u32]], y_bytes: i64, n: i64,
                  out: Out[Ptr[i64]], out_bytes: i64):
    s = hpvm.i32(0)
    t = hpvm.u32(0)
    for i in range(n):
        s += x[i]
        t += y[i]
    out[0] = hpvm.i64(s)
    out[1] = hpvm.i64(t)


@hpvm.graph
def wrapping_root(x: In[Ptr[i32]], x_bytes: i64, y: In[Ptr[u32]], y_bytes: i64, n: i64,
                  out: Out[Ptr[i64]], out_bytes: i64):
    hpvm.node(wrapping_sums, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, n=n, out=out,
              out_bytes=out_bytes)


@pytest.mark.parametrize("n", [0, 1, 77, 300])
def test_sums_that_wrap_and_loops_over_a_scalar_match_python(n: int, rng) -> None:
    x = rng.integers(-2**31, 2**31, max(n, 1), dtype=np.int64).astype(np.int32)
    y = rng.integers(0, 2**32, max(n, 1), dtype=np.uint64).astype(np.uint32)
    results = {}
    for target in ("python", "gpu"):
        out = np.full(2, -1, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(hpvm.compile(wrapping_root), x, y, n, out))
        results[target] = out
    expected = [int(np.sum(x[:n], dtype=np.int64).astype(np.int32)) if n else 0,
                int(np.sum(y[:n], dtype=np.uint64) % 2**32) if n else 0]
    assert results["python"].tolist() == expected
    assert results["gpu"].tolist() == expected


def test_all_ones_of_an_unsigned_type_is_its_largest_value() -> None:
    import triton.language as tl
    from triton.runtime import interpreter

    fix_interpreter()
    builder = interpreter.InterpreterBuilder()
    for dtype, ones in ((tl.uint8, 255), (tl.uint32, 2**32 - 1), (tl.uint64, 2**64 - 1),
                        (tl.int16, -1), (tl.int64, -1)):
        assert builder.get_all_ones_value(dtype).data.tolist() == [ones], dtype
