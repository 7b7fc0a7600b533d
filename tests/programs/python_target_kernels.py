"""Leaves for tests/test_python_target.py."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def masked(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    limit = 3.0
    if i < n:
        v = x[i]
        if v > limit and i > 0 and x[i - 1] < 0.0:
            y[i] = v * 2.0
        elif v < -limit:
            y[i] = -v if i % 2 == 0 else v + 1.0
        else:
            acc = 0.0
            for k in range(4):
                acc += v * k
            y[i] = acc



@hpvm.leaf
def guarded(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64,
            h: InOut[Ptr[i32]], h_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, n: i64):
    """Every access to a, b and h is guarded by i < n: with n == 0 they may hold no element."""
    i = hpvm.instance_id(0)
    v = 1.0
    if i < n:
        v = a[i] + a[0]  # a per-instance and a shared index
        b[i] = v
        b[0] = v
        hpvm.atomic_add(h, i, 1)
    out[i] = v
