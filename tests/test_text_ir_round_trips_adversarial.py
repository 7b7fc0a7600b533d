"""Textual IR as a property of the graphs the front end builds: what printing may lose (found by
a hunt): each graph's text reads back to a graph that prints the same and runs alike."""
from __future__ import annotations

import struct

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i64
from hpvm_py.ir.dfg import LibraryFunc

# NaNs with a payload other than the quiet one's: compiled code and the python target store them
# bit for bit, so the text must keep their bits (repr writes every NaN as `nan`)
_RNG = np.random.default_rng()
_PAYLOAD = int(_RNG.integers(1, 1 << 51))
NAN_SIGNALING = struct.unpack("<d", struct.pack("<Q", 0x7FF0000000000000 | _PAYLOAD))[0]
NAN_NEGATIVE = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000000 | _PAYLOAD))[0]


@hpvm.leaf
def nan_store(c: Out[Ptr[f64]], c_bytes: i64):
    c[0] = NAN_SIGNALING
    c[1] = NAN_NEGATIVE
    c[2] = -0.0


@hpvm.graph
def nan_root(c: Out[Ptr[f64]], c_bytes: i64):
    hpvm.node(nan_store, c=c, c_bytes=c_bytes)


def _run(graph: object, target: str) -> np.ndarray:
    c = _RNG.random(3)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, c, c.nbytes))
        hpvm.request_memory(c)
    return c.view(np.uint64)


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_nan_payloads_survive_the_text(target: str) -> None:
    text = hpvm.to_text(nan_root)
    back = hpvm.from_text(text, "nan.hpvm")
    assert hpvm.to_text(back) == text
    expected = np.array([NAN_SIGNALING, NAN_NEGATIVE, -0.0]).view(np.uint64)
    np.testing.assert_array_equal(_run(nan_root, target), expected)
    np.testing.assert_array_equal(_run(back, target), expected)


def test_a_numpy_float_option_prints_as_a_number() -> None:
    # np.float64 is a float (so the option check takes it), but its repr is `np.float64(...)`
    eps = np.float64(_RNG.uniform(1e-7, 1e-3))
    node = hpvm.comm.all_reduce_rmsnorm(f32, eps=eps)

    @hpvm.graph
    def norm(x: InOut[Ptr[f32]], x_bytes: i64, r: InOut[Ptr[f32]], r_bytes: i64,
             w: In[Ptr[f32]], w_bytes: i64, hidden: i64):
        hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                  weight_bytes=w_bytes, hidden=hidden)

    text = hpvm.to_text(norm)
    assert f"eps={float(eps)!r})" in text
    back = hpvm.from_text(text, "norm.hpvm")
    assert hpvm.to_text(back) == text
    (library,) = (fn for fn in back.module().functions.values() if isinstance(fn, LibraryFunc))
    assert library.options["eps"] == eps
