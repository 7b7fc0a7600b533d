"""Graphs whose buffers a launch tracks in the tracker's compact forms (rt/tracker.py,
MemoryObject): one buffer as two parameters, of one element type and of two."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, bf16, f32, i64, u16


@hpvm.leaf
def scale_into(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] * k + 1.0


@hpvm.graph
def scale_graph(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, k: f32, n: i64):
    hpvm.node(scale_into, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, k=k)


@hpvm.leaf
def bits_to_bf16(x: In[Ptr[u16]], x_bytes: i64, y: InOut[Ptr[bf16]], y_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    y[i] = bf16(f32(x[i] % 256) * 0.5)


@hpvm.graph
def bits_graph(x: In[Ptr[u16]], x_bytes: i64, y: InOut[Ptr[bf16]], y_bytes: i64, n: i64):
    hpvm.node(bits_to_bf16, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)
