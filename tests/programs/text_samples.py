"""Programs for the textual IR tests: leaves, helpers and graphs using most front-end features.

Leaves are compiled from this file's source, so they must live in a real file. Each `*_root`
graph below is the root of one module in SAMPLE_ROOTS.
"""
import math
from typing import NamedTuple

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i1, i32, i64, u8, u64
from hpvm_py.frontend.decorators import LibraryDef
from hpvm_py.ir.dfg import LibraryFunc
from hpvm_py.ir.kernel import Param

SCALE = 2.5


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i < n:
        c[i] = a[i] + 1.0


@hpvm.graph
def vadd_root(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes, n=n)


@hpvm.func
def sq(x: f32) -> f32:
    return x * x


@hpvm.func
def norm2(x: f32, y: f32) -> f32:
    return math.sqrt(sq(x) + sq(y))


@hpvm.func
def clamp_store(p: Ptr[f32], i: i64, v: f32):
    p[i] = min(max(v, 0.0), 1.0)


class Stats(NamedTuple):
    total: f32
    count: i64


@hpvm.leaf(target="cpu")
def stats(x: In[Ptr[f32]], x_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
          n: i64) -> Stats:
    total = 0.0
    count = 0
    k = 0
    for j in range(n):
        v = x[j]
        if v != v:
            continue
        if v > 1e30 or v < -1e30:
            break
        total += v ** 2 + norm2(v, SCALE)
        count += 1
        b = hpvm.i64(v) % 16 if v >= 0 else 0
        hpvm.atomic_add(hist, b, 1)
    while k < 3 and not (count == 0):
        k += 1
        clamp_store(x, k, -total)
    return Stats(total, count)


@hpvm.leaf(target="gpu")
def tile(a: InOut[Ptr[f64]], a_bytes: i64, w: i64, flags: u8) -> tuple[f64, u64]:
    scratch = hpvm.malloc(hpvm.get_num_node_instances_x(hpvm.get_node()) * 8, hpvm.f64)
    parent = hpvm.get_parent_node(hpvm.get_node())
    x = hpvm.instance_id(0)
    y = hpvm.get_node_instance_id_y(hpvm.get_node())
    gy = hpvm.get_node_instance_id_x(parent)
    dims = hpvm.get_num_dims(parent)
    scratch[x] = a[y * w + x] * 0.5 - hpvm.f64(dims)
    hpvm.barrier()
    bits = (hpvm.u64(flags) << 3) ^ ~hpvm.u64(gy) | hpvm.u64(hpvm.num_instances(1))
    m = -scratch[0] if flags & 1 else math.floor(scratch[0] / 3.0)
    hpvm.atomic_max(a, 0, m)
    flag: i1 = flags > 2
    if flag or bits == 0:
        print("tile", x, y, 1.5)
        breakpoint()
    return m ** 0.5, bits


@hpvm.leaf
def produce(n: i64) -> tuple[f32, i64]:
    return hpvm.f32(n) * 0.25, n // 2


@hpvm.leaf
def consume(x: f32, k: i64, a: In[Ptr[f64]], a_bytes: i64, w: i64, flags: u8) -> f32:
    return x + hpvm.f32(k)


@hpvm.graph
def inner(a: InOut[Ptr[f64]], a_bytes: i64, w: i64, h: i64, flags: u8) -> tuple[f64, u64]:
    t = hpvm.create_node_2d(tile, w, (h + 15) // 16)
    hpvm.bind_input(t, a, 0)
    hpvm.bind_input(t, 1, 1)
    hpvm.bind_input(t, w, "w")
    hpvm.bind_input(t, flags, 3, stream=True)
    hpvm.bind_output(t, 0, 0)
    hpvm.bind_output(t, 1, 1, stream=True)
    hpvm.hint(t, "gpu")


def _all_reduce() -> LibraryDef:
    params = [Param(name="buf", type=Ptr[f32], direction="inout"),
              Param(name="buf_bytes", type=i64)]
    return LibraryDef(LibraryFunc(name="all_reduce_f32", kind="all_reduce",
                                  options={"dtype": "f32", "op": "sum", "eps": 1e-6, "ranks": 4},
                                  params=params, outputs=[]))


all_reduce = _all_reduce()


class RootOut(NamedTuple):
    tile_max: f64
    total: f32


@hpvm.graph
def big_root(x: In[Ptr[f32]], x_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64,
             a: InOut[Ptr[f64]], a_bytes: i64, w: i64, h: i64, n: i64, flags: u8,
             buf: InOut[Ptr[f32]], buf_bytes: i64) -> RootOut:
    s = hpvm.node(stats, x, x_bytes, hist, hist_bytes, n, name="st", hint="cpu")
    g = hpvm.node(inner, grid=(n - 1, 2 * w % 7), a=a, a_bytes=a_bytes, w=w, h=h, flags=flags)
    p = hpvm.node(produce, grid=3, n=n)
    c = hpvm.node(consume, grid=(w, h, n), x=hpvm.all_to_all(p.out[0]),
                  k=hpvm.streaming(p.out[1]), a=a, a_bytes=a_bytes, w=w, flags=flags)
    hpvm.edge(s, c, hpvm.ONE_TO_ONE, "count", "k")
    hpvm.node(all_reduce, buf=buf, buf_bytes=buf_bytes)
    return RootOut(g.out[0], hpvm.streaming(s.out.total))


SAMPLE_ROOTS = [vadd_root, big_root]
