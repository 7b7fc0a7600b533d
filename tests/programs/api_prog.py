"""Valid graphs for the host-API misuse tests."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i1, i8, i64


@hpvm.leaf
def inc_each(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + 1.0  # ERR:out-of-bounds


@hpvm.graph
def vinc(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(inc_each, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


@hpvm.leaf
def mix(a: InOut[Ptr[f32]], a_bytes: i64, k: i8, flag: i1, x: f32) -> i64:
    if flag:
        a[0] = a[0] + f32(k) + x
    return i64(k) * 2


@hpvm.graph
def mixed(a: InOut[Ptr[f32]], a_bytes: i64, k: i8, flag: i1, x: f32) -> i64:
    s = hpvm.node(mix, a=a, a_bytes=a_bytes, k=k, flag=flag, x=x)
    return s.out[0]
