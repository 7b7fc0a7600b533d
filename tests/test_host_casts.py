"""A scalar type called in host code converts as the same cast does in a leaf (types.py)."""
from __future__ import annotations

import math

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.types import SCALAR_TYPES

# host values and the type a leaf's literal or argument of that value has
VALUES = [(300, "i64"), (-1, "i64"), (2**31, "i64"), (-(2**63), "i64"), (2**62 + 3, "i64"),
          (3.9, "f64"), (-3.9, "f64"), (1e20, "f64"), (-1e300, "f64"), (float("nan"), "f64"),
          (float("inf"), "f64"), (-0.0, "f64"), (1.2345678, "f64"), (65519.0, "f64"), (True, "i1")]

LEAF = """import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64, {src}, {dst}


@hpvm.leaf
def conv(x: In[Ptr[{src}]], x_bytes: i64, y: Out[Ptr[{dst}]], y_bytes: i64):
    y[0] = hpvm.{dst}(x[0])


@hpvm.graph
def root(x: In[Ptr[{src}]], x_bytes: i64, y: Out[Ptr[{dst}]], y_bytes: i64):
    hpvm.node(conv, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)
"""


def _bits(value) -> bytes:
    return np.asarray(value).tobytes()


@pytest.mark.parametrize("dst", sorted(set(SCALAR_TYPES) - {"i1"}))
def test_host_conversion_is_the_leafs_cast(dst: str) -> None:
    """Each value through `hpvm.<dst>(...)` on the host and through the same cast in a leaf on
    the python target (the oracle), bit for bit."""
    for src in ("i64", "f64"):
        module = load(LEAF.format(src=src, dst=dst))
        for value, kind in VALUES:
            if kind != src:
                continue
            x = np.array([value], SCALAR_TYPES[src].numpy_dtype)
            y = np.zeros(1, SCALAR_TYPES[dst].numpy_dtype)
            with hpvm.runtime("python"):
                hpvm.wait(hpvm.launch(module.root, x, x.nbytes, y, y.nbytes))
                hpvm.request_memory(y)
            host = getattr(hpvm, dst)(value)
            leaf = y[0] if dst != "bf16" else hpvm.types.bf16_from_bits(y[0])
            assert _bits(np.asarray(host, leaf.dtype)) == _bits(leaf) or \
                (isinstance(value, float) and math.isnan(value) and np.isnan(leaf) and np.isnan(host)), \
                (dst, value, host, leaf)


def test_host_conversion_refuses_what_is_no_number() -> None:
    with pytest.raises(TypeError, match=r"hpvm\.i64\(\) converts a number"):
        hpvm.i64("12")
    with pytest.raises(TypeError, match="not function"):
        hpvm.f32(lambda: 0)
    with pytest.raises(OverflowError, match="64 bits"):
        hpvm.i64(2**70)
    assert hpvm.u64(2**64 - 1) == np.uint64(2**64 - 1) and hpvm.i8(300) == 44
