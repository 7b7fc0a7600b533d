"""hpvm.torch.op: a graph as a torch custom op. Results against torch references on fresh random
inputs, torch.compile(fullgraph=True) with one graph and no break (aot_eager, inductor), autograd
(gradcheck, a torch reference), torch.library.opcheck, mutation, the errors, the example."""
from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i64  # noqa: E402
from hpvm_py.errors import LaunchError  # noqa: E402
from programs import pep563_outputs as summary  # noqa: E402

import torch_layer  # noqa: E402  (examples/)

CPU_TARGETS = ["cpu", "python"]


@hpvm.leaf
def axpy_leaf(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    i = hpvm.instance_id(0)
    if i < n:
        y[i] = alpha * x[i] + y[i]


@hpvm.graph
def axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, alpha: f32, n: i64):
    hpvm.node(axpy_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha, n=n)


@hpvm.leaf
def square_leaf(x: In[Ptr[f64]], x_bytes: i64, y: Out[Ptr[f64]], y_bytes: i64, alpha: f64):
    i = hpvm.instance_id(0)
    y[i] = alpha * x[i] * x[i]


@hpvm.graph
def square(x: In[Ptr[f64]], x_bytes: i64, y: Out[Ptr[f64]], y_bytes: i64, alpha: f64, n: i64):
    hpvm.node(square_leaf, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, alpha=alpha)


@hpvm.leaf
def square_grad_leaf(x: In[Ptr[f64]], x_bytes: i64, grad_y: In[Ptr[f64]], grad_y_bytes: i64,
                     grad_x: Out[Ptr[f64]], grad_x_bytes: i64, alpha: f64):
    i = hpvm.instance_id(0)
    grad_x[i] = 2.0 * alpha * x[i] * grad_y[i]


@hpvm.graph
def square_grad(x: In[Ptr[f64]], x_bytes: i64, grad_y: In[Ptr[f64]], grad_y_bytes: i64,
                grad_x: Out[Ptr[f64]], grad_x_bytes: i64, alpha: f64, n: i64):
    hpvm.node(square_grad_leaf, grid=n, x=x, x_bytes=x_bytes, grad_y=grad_y,
              grad_y_bytes=grad_y_bytes, grad_x=grad_x, grad_x_bytes=grad_x_bytes, alpha=alpha)


# one op per graph and target for the whole module: torch ops cannot be removed once defined
_OPS: dict[tuple[str, str], object] = {}


def _op(kind: str, target: str):
    key = (kind, target)
    if key not in _OPS:
        if kind == "bias_relu":
            _OPS[key] = torch_layer.make_op(target)
        elif kind == "axpy":
            _OPS[key] = hpvm.torch.op(axpy, scalars={"n": lambda x: x.numel()},
                                      shapes={"y": "x"}, target=target)
        elif kind == "square":
            _OPS[key] = hpvm.torch.op(square, shapes={"y": "x"}, scalars={"n": lambda x: x.numel()},
                                      backward=square_grad, target=target)
        elif kind == "square_py":  # a Python backward that calls torch ops
            _OPS[key] = hpvm.torch.op(
                square, shapes={"y": "x"}, scalars={"n": lambda x: x.numel()}, target=target,
                backward=lambda saved, grads: {"x": 2 * saved["alpha"] * saved["x"] * grads["y"]})
    return _OPS[key]


def _one_graph(fn, *args) -> None:
    """fn compiles under fullgraph=True to exactly one graph, with no break."""
    explained = torch._dynamo.explain(fn)(*args)
    assert explained.graph_count == 1 and explained.graph_break_count == 0, explained


@pytest.mark.parametrize("target", CPU_TARGETS)
def test_forward_matches_torch_on_random_inputs(target: str) -> None:
    op = _op("bias_relu", target)
    for n, m in ((7, 5), (33, 16)):
        x, b = torch.randn(n, m), torch.randn(m)
        torch.testing.assert_close(op(x, b), torch.relu(x + b))
        torch.testing.assert_close(op(x=x, b=b), torch.relu(x + b))


@pytest.mark.parametrize("target", CPU_TARGETS)
def test_inout_is_mutated_in_place(target: str) -> None:
    op = _op("axpy", target)
    assert op.mutated == ["y"] and "Tensor(a!) y" in op.schema and op.results == []
    x, y = torch.randn(1000), torch.randn(1000)
    expected = 2.5 * x + y
    before = y.data_ptr()
    assert op(x, y, 2.5) is None
    torch.testing.assert_close(y, expected)
    assert y.data_ptr() == before


def test_graph_outputs_come_back_as_0d_tensors() -> None:
    op = hpvm.torch.op(summary.root, name="hpvm_test::summary", scalars={"n": lambda a: a.numel()})
    a = torch.arange(5, dtype=torch.float32)
    total, count = op(a)
    assert total.shape == () and total.dtype == torch.float32 and total.item() == 10.0
    assert count.dtype == torch.int64 and count.item() == 5


def test_the_runtime_holds_no_tensor_after_a_call() -> None:
    op = _op("bias_relu", "cpu")
    with hpvm.runtime("cpu"):  # the op joins it
        tracker = hpvm.api.host._active().tracker
        before = len(tracker._objects)
        for _ in range(3):
            op(torch.randn(4, 3), torch.randn(3))
        assert len(tracker._objects) == before


@pytest.mark.parametrize("target", CPU_TARGETS)
def test_gradcheck_with_a_backward_graph(target: str) -> None:
    op = _op("square", target)
    x = torch.randn(17, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: op(t, 1.5), (x,))
    torch.testing.assert_close(op(x, 1.5), 1.5 * x * x)


def test_gradcheck_with_a_python_backward() -> None:
    op = _op("square_py", "cpu")
    x = torch.randn(9, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: op(t, -0.5), (x,))


@pytest.mark.parametrize("target", CPU_TARGETS)
def test_gradients_match_torch(target: str) -> None:
    op = _op("bias_relu", target)
    x = torch.randn(12, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    weight = torch.randn(12, 6)
    (op(x, b) * weight).sum().backward()
    x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    (torch.relu(x2 + b2) * weight).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_opcheck() -> None:
    torch.library.opcheck(_op("bias_relu", "cpu").overload, (torch.randn(5, 4), torch.randn(4)))
    x = torch.randn(8, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(_op("square", "cpu").overload, (x, 0.75))
    torch.library.opcheck(_op("axpy", "cpu").overload, (torch.randn(6), torch.randn(6), 3.0))


def _counting_backend():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_compile_fullgraph_one_graph_no_break() -> None:
    op = _op("bias_relu", "cpu")
    lin = torch.nn.Linear(6, 6)

    def model(x, b):
        return op(lin(x), b).sum(dim=1)

    x, b = torch.randn(10, 6), torch.randn(6)
    _one_graph(model, x, b)
    graphs, backend = _counting_backend()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    torch.testing.assert_close(compiled(x, b), model(x, b))
    assert len(graphs) == 1
    assert any(n.target is op.overload for n in graphs[0].graph.nodes)


def test_compile_aot_eager_trains_with_the_backward_graph() -> None:
    op = _op("bias_relu", "cpu")
    x = torch.randn(10, 6, requires_grad=True)
    b = torch.randn(6, requires_grad=True)
    compiled = torch.compile(lambda x, b: (op(x, b) ** 2).sum(), fullgraph=True, backend="aot_eager")
    compiled(x, b).backward()
    x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    (torch.relu(x2 + b2) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(b.grad, b2.grad)


def test_compile_mutating_op() -> None:
    op = _op("axpy", "cpu")

    def step(x, y):
        op(x, y, 2.0)
        return y * 1

    x, y = torch.randn(64), torch.randn(64)
    expected = 2.0 * x + y
    _one_graph(step, x, y.clone())
    compiled = torch.compile(step, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(x, y), expected)
    torch.testing.assert_close(y, expected)


def test_compile_dynamic_shapes_and_scalar_arguments() -> None:
    """dynamic=True: sizes reach the op as SymInts (an int argument, derived scalars, shapes)."""
    op = hpvm.torch.op(axpy, name="hpvm_test::axpy_n")  # n is an argument here
    assert op.schema == "(Tensor x, Tensor(a!) y, float alpha, SymInt n) -> ()"

    def step(x, y):
        op(x, y, 2.0, x.shape[0])
        return y + 1

    compiled = torch.compile(step, fullgraph=True, dynamic=True, backend="aot_eager")
    for n in (10, 17):
        x, y = torch.randn(n), torch.randn(n)
        expected = 2 * x + y + 1
        torch.testing.assert_close(compiled(x, y), expected)
    square_op = _op("square", "cpu")
    grad = torch.compile(lambda x: square_op(x, 0.5).sum(), fullgraph=True, dynamic=True,
                         backend="aot_eager")
    for n in (4, 9):
        x = torch.randn(n, dtype=torch.float64, requires_grad=True)
        grad(x).backward()
        torch.testing.assert_close(x.grad, x.detach())


def test_a_graph_read_back_from_text() -> None:
    op = hpvm.torch.op(hpvm.from_text(hpvm.to_text(square)), name="hpvm_test::square_text",
                       shapes={"y": "x"}, scalars={"n": lambda x: x.numel()})
    x = torch.randn(6, dtype=torch.float64)
    torch.testing.assert_close(op(x, 2.0), 2.0 * x * x)


@pytest.mark.skipif(shutil.which("cc") is None and shutil.which("gcc") is None,
                    reason="inductor's CPU code needs a C compiler, and none is here")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_compile_inductor() -> None:
    """The default backend (inductor) around the op: forward only, to keep its C++ compile short
    (the backward graph runs under aot_eager above)."""
    op = _op("bias_relu", "cpu")
    x, b = torch.randn(10, 6), torch.randn(6)
    torch._dynamo.reset()
    compiled = torch.compile(lambda x, b: op(x * 2, b) + 1, fullgraph=True)
    torch.testing.assert_close(compiled(x, b), torch.relu(x * 2 + b) + 1)
    x, b = torch.randn(10, 6), torch.randn(6)  # fresh inputs, same compiled code
    torch.testing.assert_close(compiled(x, b), torch.relu(x * 2 + b) + 1)


# -- errors ---------------------------------------------------------------------------------------


def _raises(match: str, fn, *args, **kwargs) -> LaunchError:
    with pytest.raises(LaunchError, match=match) as info:
        fn(*args, **kwargs)
    assert info.value.rule == "torch-op" and info.value.loc is not None
    assert info.value.loc.file == __file__, info.value.loc
    return info.value


def test_call_errors() -> None:
    op = _op("bias_relu", "cpu")
    x, b = torch.randn(4, 3), torch.randn(3)
    _raises(r"'x' of hpvm::\w+ must be a torch.float32 tensor \(f32 elements\), got torch.float64",
            op, x.double(), b)
    _raises(r"'b' of .* must have shape \(3,\), got \(4,\)", op, x, torch.randn(4))
    _raises(r"'b' .* is on meta but 'x' is on cpu", op, x, torch.randn(3, device="meta"))
    _raises(r"'x' .* is a pointer \(f32\): pass a torch tensor, not float", op, 1.0, b)
    _raises(r"takes \(x, b\): missing b", op, x)
    _raises(r"has no argument 'z'", op, x, b, z=1)
    _raises(r"'b' given twice", op, x, b, b=b)
    axpy_op = _op("axpy", "cpu")
    _raises(r"'alpha' .* is a scalar f32: got str", axpy_op, x, x.clone(), "2")
    _raises(r"'alpha' .* is a scalar f32: pass a number, not a tensor", axpy_op, x, x.clone(),
            torch.tensor(2.0))
    _raises(r"'y' .* written in place \(InOut\[...\]\) and must be contiguous", axpy_op,
            torch.randn(3, 4), torch.randn(4, 3).t(), 1.0)


def test_errors_under_compile_name_the_argument() -> None:
    op = _op("bias_relu", "cpu")
    compiled = torch.compile(lambda x, b: op(x, b), fullgraph=True, backend="aot_eager")
    with pytest.raises(Exception, match=r"'b' of .* must have shape \(3,\), got \(5,\)"):
        compiled(torch.randn(4, 3), torch.randn(5))


def test_definition_errors() -> None:
    _raises(r"writes y \(Out\[...\]\), which the op allocates and returns: give each a shape",
            hpvm.torch.op, square)
    _raises(r"no parameter 'z'", hpvm.torch.op, square, shapes={"y": "x", "z": "x"})
    _raises(r"the sizes .* are filled from the tensors", hpvm.torch.op, square,
            shapes={"y": "x"}, scalars={"x_bytes": 8})
    _raises(r"scalars\['n'\] takes q, which the op does not know", hpvm.torch.op, square,
            shapes={"y": "x"}, scalars={"n": lambda q: q.numel()})
    _raises(r"shapes\['y'\] = 'w' names no input", hpvm.torch.op, square, shapes={"y": "w"})
    _raises(r"backward= needs an op that mutates nothing", hpvm.torch.op, axpy,
            backward=lambda saved, grads: {})
    _raises(r"target 'python' for cuda tensors: choose one of gpu, nvptx", hpvm.torch.op, square,
            shapes={"y": "x"}, target={"cuda": "python"})
    _raises(r"takes an @hpvm.graph function", hpvm.torch.op, square_leaf)
    _raises(r"the backward graph writes 'y'; its Out pointers are gradients", hpvm.torch.op,
            square, shapes={"y": "x"}, backward=square)


def test_import_hpvm_does_not_import_torch() -> None:
    code = ("import sys, hpvm_py as hpvm; assert 'torch' not in sys.modules; hpvm.torch.op; "
            "assert 'torch' in sys.modules; import hpvm_py.torch as t; import torch; "
            "assert t is hpvm.torch and torch.__name__ == 'torch' and hasattr(torch, 'compile')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_example_trains(tmp_path) -> None:
    losses = torch_layer.train(steps=20, target="cpu")
    assert losses[-1] < 0.5 * losses[0]
    compiled = torch_layer.train(steps=3, target="cpu", compile=True)
    assert compiled[:3] == pytest.approx(losses[:3], rel=1e-4)


# -- CUDA tensors (gpu and nvptx targets; skipped without a GPU: run by tests/run_device_tests.sh) --

def _gpu_targets() -> list[str]:
    from hpvm_py.backends import registry
    from hpvm_py.device.devices import cuda_available

    return [t for t in ("gpu", "nvptx") if cuda_available() and registry.available(t)]


GPU_TARGETS = _gpu_targets()
needs_gpu = pytest.mark.skipif(not GPU_TARGETS, reason="CUDA tensors need a real GPU")


@needs_gpu
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_cuda_forward_backward_on_the_current_stream(target: str) -> None:
    op = _op("bias_relu", target)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):  # the op's kernels are queued on torch's current stream
        x = torch.randn(300, 40, device="cuda", requires_grad=True)
        b = torch.randn(40, device="cuda", requires_grad=True)
        y = op(x, b)
        (y * y).sum().backward()
        expected = torch.relu(x.detach() + b.detach())
        assert y.device.type == "cuda"
        torch.testing.assert_close(y, expected)
        torch.testing.assert_close(x.grad, 2 * expected)
        torch.testing.assert_close(b.grad, (2 * expected).sum(0))
    side.synchronize()
    axpy_op = _op("axpy", target)
    x, y = torch.randn(5000, device="cuda"), torch.randn(5000, device="cuda")
    expected = 0.5 * x + y
    axpy_op(x, y, 0.5)
    torch.testing.assert_close(y, expected)


@needs_gpu
@pytest.mark.parametrize("target", GPU_TARGETS)
def test_cuda_compile_and_opcheck(target: str) -> None:
    op = _op("bias_relu", target)
    x = torch.randn(64, 32, device="cuda", requires_grad=True)
    b = torch.randn(32, device="cuda", requires_grad=True)
    _one_graph(lambda x, b: op(x, b).sum(), x, b)
    compiled = torch.compile(lambda x, b: (op(x, b) ** 2).sum(), fullgraph=True, backend="aot_eager")
    compiled(x, b).backward()
    x2, b2 = x.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    (torch.relu(x2 + b2) ** 2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(b.grad, b2.grad)
    torch.library.opcheck(op.overload, (torch.randn(8, 4, device="cuda"), torch.randn(4, device="cuda")))
    square = _op("square", target)
    t = torch.randn(33, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda v: square(v, 1.25), (t,))


@needs_gpu
def test_cuda_example_trains() -> None:
    losses = torch_layer.train(steps=20, device="cuda")
    assert losses[-1] < 0.5 * losses[0]


def test_the_running_runtime_chooses_the_target() -> None:
    op = _op("bias_relu", "cpu")
    assert op._target(torch.device("cpu")) == "cpu"
    with hpvm.runtime("python"):
        with pytest.raises(LaunchError, match="runs on target 'cpu' .* has target 'python'"):
            op._target(torch.device("cpu"))  # one runtime per process
        unpinned = hpvm.torch.op(square, name="hpvm_test::square_any", shapes={"y": "x"})
        assert unpinned._target(torch.device("cpu")) == "python"  # else the running runtime's
        with pytest.raises(LaunchError, match="tensors on cuda:0, but the runtime running"):
            unpinned._target(torch.device("cuda:0"))
