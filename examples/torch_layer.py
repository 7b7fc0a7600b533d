"""A PyTorch layer written as HPVM graphs: a fused bias + ReLU with its backward graph, used as an
`nn.Module` in a small MLP trained for a few steps (docs/torch.md).

    python examples/torch_layer.py [--target cpu|python] [--size STEPS] [--compile]

On CUDA tensors (`--device cuda`) the same op runs on the gpu target, on torch's current stream.
"""
from __future__ import annotations

import argparse

import torch

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def bias_relu(x: In[Ptr[f32]], x_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
              y: Out[Ptr[f32]], y_bytes: i64, m: i64):
    i = hpvm.instance_id(0)  # row
    j = hpvm.instance_id(1)  # feature
    y[i * m + j] = max(x[i * m + j] + b[j], 0.0)


@hpvm.graph
def forward(x: In[Ptr[f32]], x_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
            y: Out[Ptr[f32]], y_bytes: i64, n: i64, m: i64):
    hpvm.node(bias_relu, grid=(n, m), x=x, x_bytes=x_bytes, b=b, b_bytes=b_bytes, y=y,
              y_bytes=y_bytes, m=m)


@hpvm.leaf
def relu_grad(y: In[Ptr[f32]], y_bytes: i64, grad_y: In[Ptr[f32]], grad_y_bytes: i64,
              grad_x: Out[Ptr[f32]], grad_x_bytes: i64, m: i64):
    k = hpvm.instance_id(0) * m + hpvm.instance_id(1)
    grad_x[k] = grad_y[k] if y[k] > 0.0 else 0.0


@hpvm.leaf
def bias_grad(y: In[Ptr[f32]], y_bytes: i64, grad_y: In[Ptr[f32]], grad_y_bytes: i64,
              grad_b: Out[Ptr[f32]], grad_b_bytes: i64, n: i64, m: i64):
    j = hpvm.instance_id(0)  # one instance per feature sums its column
    total = 0.0
    for i in range(n):
        if y[i * m + j] > 0.0:
            total += grad_y[i * m + j]
    grad_b[j] = total


@hpvm.graph
def backward(y: In[Ptr[f32]], y_bytes: i64, grad_y: In[Ptr[f32]], grad_y_bytes: i64,
             grad_x: Out[Ptr[f32]], grad_x_bytes: i64, grad_b: Out[Ptr[f32]], grad_b_bytes: i64,
             n: i64, m: i64):
    hpvm.node(relu_grad, grid=(n, m), y=y, y_bytes=y_bytes, grad_y=grad_y,
              grad_y_bytes=grad_y_bytes, grad_x=grad_x, grad_x_bytes=grad_x_bytes, m=m)
    hpvm.node(bias_grad, grid=m, y=y, y_bytes=y_bytes, grad_y=grad_y, grad_y_bytes=grad_y_bytes,
              grad_b=grad_b, grad_b_bytes=grad_b_bytes, n=n, m=m)


def make_op(target: str | None = None) -> hpvm.torch.TorchOp:
    """y = relu(x + b) for x of shape (n, m) and b of shape (m,), with autograd."""
    return hpvm.torch.op(
        forward,
        shapes={"y": "x", "b": ("m",)},                  # y like x; b is checked to be (m,)
        scalars={"n": lambda x: x.shape[0], "m": lambda x: x.shape[1]},  # from the tensors
        backward=backward,
        backward_shapes={"grad_x": "y", "grad_b": ("m",)},
        target=target)


class BiasReLU(torch.nn.Module):
    """relu(x + bias), the forward and backward written as HPVM graphs."""

    def __init__(self, features: int, op: hpvm.torch.TorchOp):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(features))
        self.op = op

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.op(x, self.bias)


def train(steps: int = 30, target: str | None = None, device: str = "cpu",
          compile: bool = False, seed: int = 0) -> list[float]:  # noqa: A002
    """Fit a small MLP to a fixed random regression problem; returns the losses."""
    torch.manual_seed(seed)
    op = make_op(target)
    hidden = 32
    model = torch.nn.Sequential(torch.nn.Linear(16, hidden, bias=False), BiasReLU(hidden, op),
                                torch.nn.Linear(hidden, 1)).to(device)
    inputs = torch.randn(128, 16, device=device)
    targets = (inputs[:, :1] * 2 - inputs[:, 1:2]).relu() + 0.1 * torch.randn(128, 1, device=device)
    step_fn = torch.compile(model, fullgraph=True, backend="aot_eager") if compile else model
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for _ in range(steps):
        optimiser.zero_grad()
        loss = torch.nn.functional.mse_loss(step_fn(inputs), targets)
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    return losses


def main(target: str | None = None, steps: int = 30, device: str = "cpu", compile: bool = False) -> None:  # noqa: A002
    losses = train(steps, target, device, compile)
    print(f"torch_layer: loss {losses[0]:.4f} -> {losses[-1]:.4f} in {steps} steps")
    assert losses[-1] < 0.5 * losses[0], losses


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "python", "gpu", "nvptx"), default=None)
    parser.add_argument("--size", type=int, default=30, help="training steps")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--compile", action="store_true", help="torch.compile(fullgraph=True)")
    args = parser.parse_args()
    main(args.target, args.size, args.device, args.compile)
