"""Coverage programs for replication geometry (tests/test_geometry_adversarial.py): every instance counts
its linear id (x fastest, then y, z, then the parent levels) into hist[lin % H], and the last n
instances store their linear id, so a launch that covers too few or too many instances shows."""
import numpy as np
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64

H = 1024


@hpvm.leaf
def cover1(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    x = hpvm.instance_id(0)
    total = hpvm.num_instances(0)
    hpvm.atomic_add(hist, x % H, 1)
    if x >= total - n:
        out[x - (total - n)] = x


@hpvm.leaf
def cover2(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    me = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(me)
    y = hpvm.get_node_instance_id_y(me)
    nx = hpvm.get_num_node_instances_x(me)
    ny = hpvm.get_num_node_instances_y(me)
    lin = y * nx + x
    total = nx * ny
    hpvm.atomic_add(hist, lin % H, 1)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.leaf
def cover3(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    x = hpvm.instance_id(0)
    y = hpvm.instance_id(1)
    z = hpvm.instance_id(2)
    nx = hpvm.num_instances(0)
    ny = hpvm.num_instances(1)
    nz = hpvm.num_instances(2)
    lin = (z * ny + y) * nx + x
    total = nx * ny * nz
    hpvm.atomic_add(hist, lin % H, 1)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.graph
def root1(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, a: i64):
    hpvm.node(cover1, grid=a, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


@hpvm.graph
def root2(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, a: i64, b: i64):
    hpvm.node(cover2, grid=(a, b), hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


@hpvm.graph
def root3(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, a: i64, b: i64, c: i64):
    hpvm.node(cover3, grid=(a, b, c), hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


# a 1-D leaf of l instances inside a 2-D parent of (pa, pb)
@hpvm.leaf
def child_of_2d(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    me = hpvm.get_node()
    parent = hpvm.get_parent_node(me)
    px = hpvm.get_node_instance_id_x(parent)
    py = hpvm.get_node_instance_id_y(parent)
    pa = hpvm.get_num_node_instances_x(parent)
    pb = hpvm.get_num_node_instances_y(parent)
    x = hpvm.get_node_instance_id_x(me)
    nl = hpvm.get_num_node_instances_x(me)
    lin = (py * pa + px) * nl + x
    total = pa * pb * nl
    hpvm.atomic_add(hist, lin % H, 1)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.graph
def mid2(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, l: i64):
    hpvm.node(child_of_2d, grid=l, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


@hpvm.graph
def root_h2(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
            pa: i64, pb: i64, l: i64):
    hpvm.node(mid2, grid=(pa, pb), hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n, l=l)


# three replicated levels: grandparent (g), parent (p), leaf (l), all 1-D
@hpvm.leaf
def child3(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    me = hpvm.get_node()
    parent = hpvm.get_parent_node(me)
    grand = hpvm.get_parent_node(parent)
    g = hpvm.get_node_instance_id_x(grand)
    ng = hpvm.get_num_node_instances_x(grand)
    p = hpvm.get_node_instance_id_x(parent)
    np_ = hpvm.get_num_node_instances_x(parent)
    x = hpvm.get_node_instance_id_x(me)
    nl = hpvm.get_num_node_instances_x(me)
    lin = (g * np_ + p) * nl + x
    total = ng * np_ * nl
    hpvm.atomic_add(hist, lin % H, 1)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.graph
def lvl1(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, l: i64):
    hpvm.node(child3, grid=l, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


@hpvm.graph
def lvl2(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, p: i64, l: i64):
    hpvm.node(lvl1, grid=p, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n, l=l)


@hpvm.graph
def root_h3(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
            g: i64, p: i64, l: i64):
    hpvm.node(lvl2, grid=g, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n, p=p, l=l)


# a leaf with a barrier (groups) inside a 1-D parent
@hpvm.leaf
def grouped(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64):
    me = hpvm.get_node()
    parent = hpvm.get_parent_node(me)
    p = hpvm.get_node_instance_id_x(parent)
    np_ = hpvm.get_num_node_instances_x(parent)
    x = hpvm.get_node_instance_id_x(me)
    nl = hpvm.get_num_node_instances_x(me)
    hpvm.barrier()
    lin = p * nl + x
    total = np_ * nl
    hpvm.atomic_add(hist, lin % H, 1)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.graph
def gmid(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64, l: i64):
    hpvm.node(grouped, grid=l, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n)


@hpvm.graph
def root_g(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
           p: i64, l: i64):
    hpvm.node(gmid, grid=p, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n, l=l)


# a 1-D leaf inside a 1-D parent that adds a parameter, not a constant, so that its counts are not
# privatised: the gpu target runs it as programs over tiles of the combined grid (gridtiles.py)
@hpvm.leaf
def tiled(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
          one: i64):
    me = hpvm.get_node()
    parent = hpvm.get_parent_node(me)
    lin = hpvm.get_node_instance_id_x(parent) * hpvm.get_num_node_instances_x(me) + \
        hpvm.get_node_instance_id_x(me)
    total = hpvm.get_num_node_instances_x(parent) * hpvm.get_num_node_instances_x(me)
    hpvm.atomic_add(hist, lin % H, one)
    if lin >= total - n:
        out[lin - (total - n)] = lin


@hpvm.graph
def tmid(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
         one: i64, l: i64):
    hpvm.node(tiled, grid=l, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n,
              one=one)


@hpvm.graph
def root_t(hist: InOut[Ptr[i64]], hist_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, n: i64,
           p: i64, l: i64, one: i64):
    hpvm.node(tmid, grid=p, hist=hist, hist_bytes=hist_bytes, out=out, out_bytes=out_bytes, n=n,
              one=one, l=l)


CASES = {  # name -> root; its parameters after n are the extents, outermost level first (then
    # root_t's `one`, the amount it counts with: 1)
    "1d": root1, "2d": root2, "3d": root3, "h2": root_h2, "h3": root_h3, "grouped": root_g,
    "tiled": root_t,
}


def expected(total: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    k = np.arange(H)
    hist = total // H + (k < total % H)
    m = min(n, total)
    out = np.full(n, -1, np.int64)
    out[:m] = np.arange(total - m, total)
    return hist.astype(np.int64), out
