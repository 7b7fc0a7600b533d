"""Graphs for tests/test_tracker_compact_adversarial.py: one buffer passed as two or three
parameters (of one element type and of two), with nodes on the host and on two GPUs."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, bf16, f32, i64, u16


@hpvm.leaf
def axpy(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = y[i] + x[i] * k


@hpvm.leaf
def times(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    y[i] = x[i] * k


@hpvm.graph
def hop(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
        z_bytes: i64, n: i64, k: f32):
    """y += x * k on fake:0 (gpu), then z = y * 2 on the host, then y += z * 1 on fake:1."""
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, hint="gpu:0")
    hpvm.node(times, grid=n, x=y, x_bytes=y_bytes, y=z, y_bytes=z_bytes, k=2.0, hint="cpu")
    hpvm.node(axpy, grid=n, x=z, x_bytes=z_bytes, y=y, y_bytes=y_bytes, k=1.0, hint="gpu:1")


@hpvm.graph
def on_host(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
            z_bytes: i64, n: i64, k: f32):
    """hop's arithmetic, every node on the host."""
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, hint="cpu")
    hpvm.node(times, grid=n, x=y, x_bytes=y_bytes, y=z, y_bytes=z_bytes, k=2.0, hint="cpu")
    hpvm.node(axpy, grid=n, x=z, x_bytes=z_bytes, y=y, y_bytes=y_bytes, k=1.0, hint="cpu")


@hpvm.graph
def on_gpu1(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f32]],
            z_bytes: i64, n: i64, k: f32):
    """hop's arithmetic, every node on fake:1."""
    hpvm.node(axpy, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k, hint="gpu:1")
    hpvm.node(times, grid=n, x=y, x_bytes=y_bytes, y=z, y_bytes=z_bytes, k=2.0, hint="gpu:1")
    hpvm.node(axpy, grid=n, x=z, x_bytes=z_bytes, y=y, y_bytes=y_bytes, k=1.0, hint="gpu:1")


@hpvm.leaf
def bits(x: In[Ptr[u16]], x_bytes: i64, y: InOut[Ptr[bf16]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = bf16(f32(x[i] % 256) * 0.5)


@hpvm.graph
def bits_hop(x: In[Ptr[u16]], x_bytes: i64, y: InOut[Ptr[bf16]], y_bytes: i64, n: i64):
    """y = bf16((x % 256) * 0.5) on fake:1, where x and y may be one uint16 array."""
    hpvm.node(bits, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, hint="gpu:1")


@hpvm.graph
def bits_host(x: In[Ptr[u16]], x_bytes: i64, y: InOut[Ptr[bf16]], y_bytes: i64, n: i64):
    hpvm.node(bits, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, hint="cpu")
