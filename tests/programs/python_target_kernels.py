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


CLASH_BLOCK = 64


@hpvm.leaf
def clashing_names(x: In[Ptr[f32]], x_bytes: i64, partial: Out[Ptr[f32]], partial_bytes: i64, n: i64):
    """Locals named as the python target's own generated names (the group of a malloc, the lanes
    of vector code, instance queries, temporaries, runtime helpers), in a block sum with scratch
    memory and barriers."""
    group = hpvm.malloc(CLASH_BLOCK * 4, f32)
    me = hpvm.get_node()
    lanes = hpvm.get_node_instance_id_x(me)
    id_0x = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    n_0x = id_0x * CLASH_BLOCK + lanes
    _t1 = 0.0
    if n_0x < n:
        _t1 = x[n_0x]
    group[lanes] = _t1
    hpvm.barrier()
    np = CLASH_BLOCK // 2
    while np > 0:
        if lanes < np:
            group[lanes] += group[lanes + np]
        hpvm.barrier()
        np //= 2
    if lanes == 0:
        partial[id_0x] = group[0]


@hpvm.graph
def clashing_blocks(x: In[Ptr[f32]], x_bytes: i64, partial: Out[Ptr[f32]], partial_bytes: i64, n: i64):
    hpvm.node(clashing_names, grid=CLASH_BLOCK, x=x, x_bytes=x_bytes, partial=partial,
              partial_bytes=partial_bytes, n=n)


@hpvm.graph
def clashing_root(x: In[Ptr[f32]], x_bytes: i64, partial: Out[Ptr[f32]], partial_bytes: i64, n: i64,
                  blocks: i64):
    hpvm.node(clashing_blocks, grid=blocks, x=x, x_bytes=x_bytes, partial=partial,
              partial_bytes=partial_bytes, n=n)
