"""Hunted bugs of hpvm.torch.op around the runtime (hpvm_py/torch/op.py): tensors the user tracked
(docs/runtime.md, "Buffers"), strided inputs, on every target, against torch references on fresh
random inputs."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, f32, i64  # noqa: E402


@hpvm.leaf
def ti_scale_leaf(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i]


@hpvm.graph
def ti_scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(ti_scale_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def ti_add_leaf(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] + y[i]


@hpvm.graph
def ti_add(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, n: i64):
    hpvm.node(ti_add_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


_OPS: dict[str, object] = {}  # torch ops cannot be removed: one per graph for the module


def _scale_op():
    if "scale" not in _OPS:  # (no target=: the running runtime's)
        _OPS["scale"] = hpvm.torch.op(ti_scale, name="hpvm_ti::scale", shapes={"y": "x"},
                                      scalars={"n": lambda x: x.numel()})
    return _OPS["scale"]


@pytest.mark.parametrize("view", ["strided", "transposed"])
def test_a_strided_input_viewing_a_tracked_tensor_reads_its_newest_data(target: str,
                                                                        view: str) -> None:
    """A tensor the user tracked, written by a launch (on a GPU target its newest data stays on
    the device), passed to the op as a strided view: the op copied the view on the host before
    the launch, from the tracked tensor's stale home copy (zeros), where a contiguous view of it
    gets the newest data."""
    op = _scale_op()
    rows, cols = 6, 10
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    a = torch.randn(rows, cols, generator=gen)
    alpha = float(torch.randn((), generator=gen))
    with hpvm.runtime(target):
        base = torch.zeros(rows, cols)
        hpvm.track_memory(base)
        hpvm.wait(hpvm.launch(ti_add, a, a.nbytes, base, base.nbytes, a.numel()))  # base = a
        strided = base[:, 1::3] if view == "strided" else base.t()
        expected = (a[:, 1::3] if view == "strided" else a.t()) * alpha
        torch.testing.assert_close(op(strided, alpha), expected)
        hpvm.request_memory(base)
        torch.testing.assert_close(base, a)  # (the tracked tensor keeps its data)
