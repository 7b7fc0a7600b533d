"""A three-node chain with values on edges, for tests/test_replay.py."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64


@hpvm.leaf
def scale_into(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64, k: f32) -> i64:
    i = hpvm.instance_id(0)
    b[i] = a[i] * k
    return hpvm.num_instances(0)


@hpvm.leaf
def total(count: i64, b: InOut[Ptr[f32]], b_bytes: i64) -> f32:
    s = 0.0
    for i in range(count):
        s += b[i]
    return s


@hpvm.leaf
def double(v: f32) -> f32:
    return v * 2.0


@hpvm.graph
def chain(a: In[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[f32]], b_bytes: i64, n: i64, k: f32) -> f32:
    scaled = hpvm.node(scale_into, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, k=k)
    s = hpvm.node(total, count=hpvm.all_to_all(scaled.out[0]), b=b, b_bytes=b_bytes)
    return hpvm.node(double, v=s.out[0]).out[0]


# -- a root node holding one leaf (the Parboil block pattern) --------------------------------------

@hpvm.leaf
def gather_scaled(a: In[Ptr[f32]], a_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
                  b: InOut[Ptr[f32]], b_bytes: i64, w: i64, k: f32):
    """b[i] = a[at[i]] * k over blocks of w lanes: the index comes from data (checked code)."""
    me = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * w + hpvm.instance_id(0)
    b[i] = a[at[i]] * k


@hpvm.graph
def gather_block(a: In[Ptr[f32]], a_bytes: i64, at: In[Ptr[i64]], at_bytes: i64,
                 b: InOut[Ptr[f32]], b_bytes: i64, w: i64, k: f32):
    hpvm.node(gather_scaled, grid=w, a=a, a_bytes=a_bytes, at=at, at_bytes=at_bytes, b=b,
              b_bytes=b_bytes, w=w, k=k)


@hpvm.graph
def blocks(a: In[Ptr[f32]], a_bytes: i64, at: In[Ptr[i64]], at_bytes: i64, b: InOut[Ptr[f32]],
           b_bytes: i64, nblocks: i64, w: i64, k: f32):
    hpvm.node(gather_block, grid=nblocks, a=a, a_bytes=a_bytes, at=at, at_bytes=at_bytes, b=b,
              b_bytes=b_bytes, w=w, k=k)



@hpvm.leaf
def copy_scalars(x: InOut[Ptr[f32]], x_bytes: i64, k: f32, m: f32):
    x[0] = k * 1.0  # (a product keeps the sign of a zero)
    x[1] = m * 1.0


@hpvm.graph
def two_scalars(x: InOut[Ptr[f32]], x_bytes: i64, k: f32, m: f32):
    hpvm.node(copy_scalars, x=x, x_bytes=x_bytes, k=k, m=m)


@hpvm.leaf
def pick(src: In[Ptr[i64]], src_bytes: i64) -> i64:
    return src[1]


@hpvm.leaf
def mark(unread: i64, out: InOut[Ptr[i64]], out_bytes: i64):
    out[0] = 7  # `unread` is not read: the edge only orders mark after pick


@hpvm.graph
def unread_edge(src: In[Ptr[i64]], src_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64):
    picked = hpvm.node(pick, src=src, src_bytes=src_bytes)
    hpvm.node(mark, unread=hpvm.all_to_all(picked.out[0]), out=out, out_bytes=out_bytes)
