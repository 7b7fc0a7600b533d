"""hpvm.torch.op under what torch users do to ops: fx tracing, grad mode, tensor layouts, every
scalar type, bf16 results, names torch cannot reach or that a later op takes over, and errors
that must name the user's line, not torch's dispatcher. Results against torch references on
seeded random inputs."""
from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, bf16, f32, i8, i64, u64  # noqa: E402
from hpvm_py.errors import HPVMError, LaunchError  # noqa: E402

HERE = __file__


@hpvm.leaf
def adv_scale_leaf(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i]


@hpvm.graph
def adv_scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(adv_scale_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def adv_shift_leaf(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha + x[i]


@hpvm.graph
def adv_shift(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(adv_shift_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def adv_axpy_leaf(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i] + y[i]


@hpvm.graph
def adv_axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(adv_axpy_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def adv_bf16_leaf(x: In[Ptr[bf16]], x_bytes: i64, y: Out[Ptr[bf16]], y_bytes: i64, s: bf16) -> bf16:
    i = hpvm.instance_id(0)
    y[i] = x[i] * s
    return s


@hpvm.graph
def adv_bf16(x: In[Ptr[bf16]], x_bytes: i64, y: Out[Ptr[bf16]], y_bytes: i64, s: bf16, n: i64) -> bf16:
    k = hpvm.node(adv_bf16_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, s=s)
    return k.out[0]


@hpvm.leaf
def adv_ints_leaf(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, a: i8, b: u64):
    i = hpvm.instance_id(0)
    y[i] = x[i] + f32(a) + f32(b)


@hpvm.graph
def adv_ints(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, a: i8, b: u64, n: i64):
    hpvm.node(adv_ints_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, a=a, b=b)


_OPS: dict[str, object] = {}  # torch ops cannot be removed: one per graph for the module


def _op(kind: str):
    if kind not in _OPS:
        n = {"n": lambda x: x.numel()}
        graph = {"scale": adv_scale, "axpy": adv_axpy, "bf16": adv_bf16, "ints": adv_ints}[kind]
        _OPS[kind] = hpvm.torch.op(graph, name=f"hpvm_adv::{kind}", shapes={"y": "x"}, scalars=n,
                                   target="cpu")
    return _OPS[kind]


def _at_this_file(exc: HPVMError) -> None:
    """The error names a line of this file (the user's), not torch's dispatcher or hpvm_py."""
    assert exc.loc is not None and exc.loc.file == HERE, (exc.loc, str(exc))


def test_fx_symbolic_trace_records_the_op() -> None:
    """symbolic_trace passes fx Proxies for the tensor and the float alike: the op is recorded,
    and the traced module computes what the op does."""
    op = _op("scale")

    class Model(torch.nn.Module):
        def forward(self, x: torch.Tensor, alpha: float) -> torch.Tensor:
            return op(x, alpha) + 1.0

    traced = torch.fx.symbolic_trace(Model())
    assert any(node.target is op.overload for node in traced.graph.nodes)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(37, generator=gen)
    torch.testing.assert_close(traced(x, 0.75), 0.75 * x + 1.0)


def test_layouts_match_torch() -> None:
    """Transposed, offset, expanded (stride 0), channels_last, 0-size and 0-d inputs."""
    op = _op("scale")
    gen = torch.Generator().manual_seed(2)
    base = torch.randn(6, 9, generator=gen)
    for x in (base.t(), base[2:5], base.flatten()[7:], torch.randn(9, generator=gen).expand(4, 9),
              torch.randn(2, 3, 4, 5, generator=gen).to(memory_format=torch.channels_last),
              torch.empty(0), torch.tensor(1.25)):
        y = op(x, -1.5)
        assert y.shape == x.shape and y.is_contiguous()
        torch.testing.assert_close(y, -1.5 * x)


def test_inout_parameter_updated_under_no_grad_and_refused_with_grad_mode_on() -> None:
    """An optimizer step writes a parameter that requires grad under torch.no_grad(), as torch
    allows `w.add_(g)` there; with grad mode on the op refuses at the user's line."""
    op = _op("axpy")
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(50, generator=gen, requires_grad=True)
    g = torch.randn(50, generator=gen)
    expected = w.detach() - 0.1 * g
    with torch.no_grad():
        assert op(g, w, -0.1) is None
    torch.testing.assert_close(w.detach(), expected)
    assert w.requires_grad and w.is_leaf
    with torch.inference_mode():
        y = torch.randn(50, generator=gen)
        reference = 2.0 * g + y
        op(g, y, 2.0)
    torch.testing.assert_close(y, reference)
    with pytest.raises(LaunchError, match="requires grad, and grad mode is on") as info:
        op(g, w, -0.1)
    _at_this_file(info.value)
    torch.testing.assert_close(w.detach(), expected)  # untouched


def test_errors_of_the_launch_name_the_users_line() -> None:
    """A launch error raised inside torch's dispatcher (the overload called directly, as compiled
    code calls it) names the user's line, not torch/_library/custom_ops.py."""
    op = _op("ints")
    with pytest.raises(LaunchError, match="out of its range") as info:
        op.overload(torch.ones(3), 300, 1)
    _at_this_file(info.value)


def test_integer_scalars_checked_at_the_call() -> None:
    """Each integer type's range, and u64 values beyond int64 (which torch cannot pass to an op:
    its own message would be "Expected a value of type 'int' ... found type 'int'")."""
    op = _op("ints")
    x = torch.randn(5, generator=torch.Generator().manual_seed(4))
    torch.testing.assert_close(op(x, -128, 2**20), (x - 128.0) + 2.0**20)
    torch.testing.assert_close(op(x, 127, 0), x + 127.0)
    for a, b, message in ((128, 0, "out of its range"), (-129, 0, "out of its range"),
                          (0, -1, "out of its range"), (0, 2**64, "out of its range"),
                          (0, 2**64 - 1, "largest integer torch passes")):
        with pytest.raises(LaunchError, match=message) as info:
            op(x, a, b)
        _at_this_file(info.value)


def test_bf16_graph_output_is_the_value_not_its_bits() -> None:
    op = _op("bf16")
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(16, generator=gen).to(torch.bfloat16)
    for s in (1.5, -0.375, 3.0e38):
        y, returned = op(x, s)
        assert returned.dtype == torch.bfloat16 and returned.shape == ()
        expected = torch.tensor(s, dtype=torch.bfloat16)
        assert returned.item() == expected.item(), (s, returned)
        torch.testing.assert_close(y, (x.float() * expected.float()).to(torch.bfloat16))


def test_a_later_op_of_the_same_name_takes_it_over() -> None:
    """torch lets a later custom op of a name replace the earlier (a notebook cell run again): the
    earlier op object must not run the later graph (same schema: a silent wrong answer) or fail
    in torch's schema check (another schema); it says what happened."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(8, generator=gen)
    n = {"n": lambda x: x.numel()}
    first = hpvm.torch.op(adv_scale, name="hpvm_adv::taken", shapes={"y": "x"}, scalars=n)
    torch.testing.assert_close(first(x, 3.0), 3.0 * x)
    second = hpvm.torch.op(adv_shift, name="hpvm_adv::taken", shapes={"y": "x"}, scalars=n)
    torch.testing.assert_close(second(x, 3.0), 3.0 + x)
    with pytest.raises(LaunchError, match="replaced by the op of the same name") as info:
        first(x, 3.0)
    _at_this_file(info.value)
    assert f"{HERE}:" in str(info.value)  # where the later op was made
    third = hpvm.torch.op(adv_axpy, name="hpvm_adv::taken", shapes={"y": "x"}, scalars=n)
    with pytest.raises(LaunchError, match="replaced"):
        second(x, 3.0)
    y = torch.zeros(8)
    third(x, y, 2.0)
    torch.testing.assert_close(y, 2.0 * x)


@pytest.mark.parametrize("name", ["hpvm_adv::name", "hpvm_adv::__init__", "load_library::f",
                                  "hpvm_adv::_dir"])
def test_names_torch_cannot_reach_are_refused(name: str) -> None:
    """torch.ops.NS.NAME finds torch's own attribute there (torch then fails inside custom_op
    with an AttributeError): refused when the op is made, at the user's line."""
    with pytest.raises(LaunchError, match="attribute of torch's own") as info:
        hpvm.torch.op(adv_scale, name=name, shapes={"y": "x"}, scalars={"n": lambda x: x.numel()})
    _at_this_file(info.value)


def test_a_name_that_is_no_string() -> None:
    with pytest.raises(LaunchError, match="name= is a int") as info:
        hpvm.torch.op(adv_scale, name=3, shapes={"y": "x"}, scalars={"n": lambda x: x.numel()})
    _at_this_file(info.value)


def test_requires_grad_input_without_backward() -> None:
    """The forward runs (its result has a grad_fn); backward through it is torch's clear refusal
    (documented in docs/torch.md, "Autograd")."""
    op = _op("scale")
    x = torch.randn(4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        y = op(x, 2.0)
    torch.testing.assert_close(y.detach(), 2.0 * x.detach())
    with pytest.raises(RuntimeError, match="no autograd formula"):
        y.sum().backward()


@pytest.mark.parametrize("spec", [lambda x: (x.shape[0] * 1.5,), lambda x: -3,
                                  lambda x: (x.shape[0], -1), lambda x: "abc", lambda x: (True,)],
                         ids=["float", "negative", "negative-dim", "str", "bool"])
def test_a_shape_function_that_gives_no_sizes(spec) -> None:
    """Not torch.empty's TypeError or RuntimeError from inside the op: the torch-op error at the
    call, naming the shape."""
    op = hpvm.torch.op(adv_scale, shapes={"y": spec}, scalars={"n": lambda x: x.numel()})
    with pytest.raises(LaunchError, match="the shape of 'y' came out as") as info:
        op(torch.randn(4), 2.0)
    _at_this_file(info.value)


def test_numpy_integer_sizes_are_sizes() -> None:
    op = hpvm.torch.op(adv_scale, shapes={"y": lambda x: (np.int64(x.shape[0]),)},
                       scalars={"n": lambda x: x.numel()})
    x = torch.randn(6, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(op(x, 2.0), 2.0 * x)


def test_a_users_folder_called_torch_is_the_users(tmp_path) -> None:
    """Errors name the first frame outside hpvm_py and the loaded torch package: a user's own
    folder called torch (`.../torch/train.py`) was taken for torch's, and its line skipped."""
    folder = tmp_path / "torch"
    folder.mkdir()
    script = folder / "train.py"
    script.write_text("def call(op, x):\n    return op(x, 300, 1)\n")
    namespace: dict = {}
    exec(compile(script.read_text(), str(script), "exec"), namespace)
    with pytest.raises(LaunchError, match="out of its range") as info:
        namespace["call"](_op("ints"), torch.ones(3))
    assert info.value.loc is not None and info.value.loc.file == str(script), info.value.loc
    assert info.value.loc.line == 2
