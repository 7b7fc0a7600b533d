"""Hunted bugs of torch tensors in launches and in hpvm.torch.op (hpvm_py/torch/op.py): tensors
the user tracked (docs/runtime.md, "Buffers") seen through strided inputs, tensors with no memory,
on every target, against torch references on fresh random inputs."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT, child_pythonpath

torch = pytest.importorskip("torch")

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, f32, i64  # noqa: E402
from hpvm_py.errors import LaunchError  # noqa: E402


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


# A launch on a zero tensor runs in a child: the kernel read (or wrote) address 0 and the process
# died of a segmentation fault. It prints whether the launch refused it, at which line, and why.
_ZERO_CHILD = """
import sys
import torch
import hpvm_py as hpvm
from hpvm_py.errors import LaunchError
sys.path.insert(0, "tests")
from test_torch_arguments_adversarial import ti_scale

target, which = sys.argv[1], sys.argv[2]
gen = torch.Generator().manual_seed(int(sys.argv[3]))
n = 64
x = torch.randn(n, generator=gen)
with hpvm.runtime(target):
    y = torch.zeros(n)
    hpvm.wait(hpvm.launch(ti_scale, x, x.nbytes, y, y.nbytes, 1.5, n))  # (its checks remembered)
    assert torch.equal(y, 1.5 * x)
    zero = torch._efficientzerotensor(n)
    args = (zero, x) if which == "in" else (x, zero)
    try:
        hpvm.wait(hpvm.launch(ti_scale, args[0], 4 * n, args[1], 4 * n, 1.5, n))
    except LaunchError as exc:
        print("refused", exc.loc.line, "zero tensor" in str(exc))
    else:
        print("ran")
"""


@pytest.mark.parametrize("which", ["in", "out"])
def test_a_zero_tensor_is_refused_not_dereferenced(target: str, which: str) -> None:
    """torch's efficient zero tensor (`torch._efficientzerotensor`, made by some gradient formulas)
    has a shape and a dtype but no memory (its data pointer is 0): the launch took it for a dense
    tensor and its kernel read or wrote address 0, a crash; it is the launch's LaunchError."""
    seed = int(torch.randint(0, 2**31, ()))
    done = subprocess.run([sys.executable, "-c", _ZERO_CHILD, target, which, str(seed)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(i for i, text in enumerate(_ZERO_CHILD.splitlines(), 1) if "args[0], 4 * n" in text)
    assert done.stdout.split() == ["refused", str(line), "True"]


def _add_op():
    if "add" not in _OPS:
        _OPS["add"] = hpvm.torch.op(ti_add, name="hpvm_ti::add", shapes={"y": "x"},
                                    scalars={"n": lambda x: x.numel()})
    return _OPS["add"]


def _refused_here(info: pytest.ExceptionInfo, what: str) -> None:
    exc = info.value
    assert what in str(exc) and exc.rule == "torch-op", str(exc)
    assert exc.loc is not None and exc.loc.file == __file__, exc.loc


@pytest.mark.parametrize("layout", [torch.strided, torch.jagged], ids=["strided", "jagged"])
def test_a_nested_tensor_is_the_ops_error(layout) -> None:
    """A nested tensor (In or InOut) failed inside torch's dispatcher, with its NotImplementedError
    ("Could not run 'hpvm::...' with arguments from the 'NestedTensorCPU' backend"), not at the
    op's checks."""
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    parts = [torch.randn(2, generator=gen), torch.randn(3, generator=gen)]
    nested = torch.nested.nested_tensor(parts, layout=layout)
    with pytest.raises(LaunchError) as info:
        _scale_op()(nested, 2.0)
    _refused_here(info, "nested tensor")
    with pytest.raises(LaunchError) as info:
        _add_op()(torch.ones(5), nested)
    _refused_here(info, "nested tensor")
    dense = torch.cat(nested.unbind())  # (what the error advises) runs as torch computes
    torch.testing.assert_close(_scale_op()(dense, 2.0), 2.0 * torch.cat(parts))


def test_an_inout_negative_view_or_zero_tensor_is_the_ops_error(target: str) -> None:
    """Written in place (InOut), a negative view (`z.conj().imag`) failed in torch's Negative
    fallback ("Expected Tensor but got None") and a zero tensor in torch's ZeroTensor one
    ("ZeroTensors are immutable"); as In tensors torch resolves both into new memory, and the op
    computes with their values."""
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    n = 9
    z = torch.randn(n, dtype=torch.complex64, generator=gen)
    x = torch.randn(n, generator=gen)
    with hpvm.runtime(target):
        for y, what in ((z.conj().imag[:1], "negative view"),
                        (torch._efficientzerotensor(n), "zero tensor")):
            with pytest.raises(LaunchError) as info:
                _add_op()(x[:y.numel()], y)
            _refused_here(info, what)
        torch.testing.assert_close(_scale_op()(z.conj().imag, 1.5), -1.5 * z.imag)
        torch.testing.assert_close(_scale_op()(torch._efficientzerotensor(n), 1.5), torch.zeros(n))
        y = z.conj().imag.resolve_neg().contiguous()  # (as the error advises)
        assert _add_op()(x, y) is None
        torch.testing.assert_close(y, x - z.imag)


def test_an_int_beyond_every_float_for_a_float_scalar_is_the_ops_error() -> None:
    """A Python int for a float parameter goes to torch as a double: one beyond the largest (as
    the launch says, "too large for a float") failed in torch's argument parsing ("Expected a value
    of type 'float' ... found type 'int'"), a RuntimeError; below it the op runs as torch does."""
    op = _scale_op()
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x = torch.randn(17, generator=gen)
    for value in (2**1024, -(3**700)):
        with pytest.raises(LaunchError) as info:
            op(x, value)
        _refused_here(info, "too large for a float")
    for value in (2**60, -(2**100), 2**1023):
        torch.testing.assert_close(op(x, value), x * float(value))


def test_an_int_for_a_float_scalar_is_rounded_once(target: str) -> None:
    """An int for a float parameter is rounded to it once, by the launch as by torch (`x * v`);
    the op handed it to torch as a double, rounding it twice: 2**60 + 2**36 + 1 became 2**60 as
    an f32 (2**60 + 2**36 in f64, then a tie to even), where the launch and torch give
    2**60 + 2**37."""
    op = _scale_op()
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x = torch.randn(8, generator=gen)
    with hpvm.runtime(target):
        for _ in range(6):
            k = int(torch.randint(54, 100, (), generator=gen))
            low = int(torch.randint(1, 2**20, (), generator=gen))  # below f64's last bit: sticky
            sign = 1 if torch.rand((), generator=gen) < 0.5 else -1
            value = sign * ((1 << k) + (1 << (k - 24)) + low)  # half an f32 step, and a little
            y = torch.zeros_like(x)
            hpvm.wait(hpvm.launch(ti_scale, x, x.nbytes, y, y.nbytes, value, x.numel()))
            if abs(value) < 2**63:  # (what torch takes as a number)
                assert torch.equal(y, x * value), value
            assert torch.equal(op(x, value), y), value


def test_an_int_for_a_float_scalar_is_rounded_once_under_torch_compile() -> None:
    """The same under torch.compile: the op skipped its rounding while Dynamo traced (its NumPy
    is not traceable), and torch passed the int on as a double; Dynamo now calls the rounding
    at trace time, the int being a constant there (as an argument or written in the code)."""
    op = _scale_op()
    gen = torch.Generator().manual_seed(int(torch.randint(0, 2**31, ())))
    x = torch.randn(8, generator=gen)
    k = int(torch.randint(54, 62, (), generator=gen))
    low = int(torch.randint(1, 2 ** (k - 53), (), generator=gen))  # below f64's last bit: sticky
    value = (1 << k) + (1 << (k - 24)) + low  # half an f32 step, and a little (within int64)
    with hpvm.runtime("cpu"):
        eager = op(x, value)
        assert torch.equal(eager, x * value)
        as_argument = torch.compile(lambda x, v: op(x, v), fullgraph=True)  # (inductor: with
        # aot_eager the int reached the op as it was, rounded by the launch)
        assert torch.equal(as_argument(x, value), eager)
        in_code = torch.compile(lambda x: op(x, value), fullgraph=True)
        assert torch.equal(in_code(x), eager)
