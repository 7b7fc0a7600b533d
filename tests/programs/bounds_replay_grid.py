"""A leaf whose grid a sibling of its parent computes (tests/test_bounds_adversarial.py): a replay
must run the new grid, not the recorded one."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i64


@hpvm.leaf
def count(src: In[Ptr[i64]], src_bytes: i64) -> i64:
    return src[0]


@hpvm.leaf
def fill(out: InOut[Ptr[i64]], out_bytes: i64):
    x = hpvm.get_node_instance_id_x(hpvm.get_node())
    out[x] = x + 1  # store


@hpvm.graph
def rows(out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    hpvm.node(fill, grid=n, out=out, out_bytes=out_bytes)


@hpvm.graph
def root(src: In[Ptr[i64]], src_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64):
    c = hpvm.node(count, src=src, src_bytes=src_bytes)
    hpvm.node(rows, out=out, out_bytes=out_bytes, n=c.out[0])


STORE_LINE = 15
