"""Graphs for tests/test_argument_objects_adversarial.py and tests/test_tracked_aliases_adversarial.py:
a scale and an increment over f32 buffers, launched on arrays, their views and tensors sharing
their memory; on the host (hint cpu) and streamed too."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def scale_leaf(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32):
    i = hpvm.instance_id(0)
    c[i] = a[i] * k


@hpvm.graph
def scale(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32, n: i64):
    """c[:n] = a[:n] * k."""
    hpvm.node(scale_leaf, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, k=k)


@hpvm.graph
def scale_on_host(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32, n: i64):
    hpvm.node(scale_leaf, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, k=k, hint="cpu")


@hpvm.graph
def scale_streamed(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32, n: i64):
    st = hpvm.streaming
    hpvm.node(scale_leaf, grid=n, a=st(a), a_bytes=st(a_bytes), c=st(c), c_bytes=st(c_bytes),
              k=st(k))


@hpvm.leaf
def add_one_leaf(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    a[i] = a[i] + 1.0


@hpvm.graph
def add_one(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    """a[:n] += 1."""
    hpvm.node(add_one_leaf, grid=n, a=a, a_bytes=a_bytes)


@hpvm.graph
def add_one_on_host(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(add_one_leaf, grid=n, a=a, a_bytes=a_bytes, hint="cpu")
