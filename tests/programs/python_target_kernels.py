"""Leaves for tests/test_python_target.py."""
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


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

