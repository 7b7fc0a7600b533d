"""Streaming graphs for tests/test_streams_adversarial.py: 1-4 stages joined by streaming edges,
a first stage whose index is shifted by an item's scalar (out of range: the stage fails at that
item), a weight buffer and a factor bound without streaming (the first push's), replicated and
single-instance leaves, stages placed on the host and on the two fake GPUs by hints, an internal
node as a stage."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def shift_scale(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, off: i64,
                k: f32) -> i64:
    i = hpvm.instance_id(0)
    y[i] = x[i + off] * k
    return off


@hpvm.leaf
def acc_weighted(off: i64, y: In[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]], w_bytes: i64,
                 acc: InOut[Ptr[f32]], acc_bytes: i64, pad: i64) -> i64:
    i = hpvm.instance_id(0)
    acc[i] = acc[i] + y[i + pad] * w[i] + hpvm.f32(off)
    return off + 1


@hpvm.leaf
def total(t: i64, acc: In[Ptr[f32]], acc_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
          n: i64, pad: i64) -> f32:
    s = hpvm.f32(0.0)
    for i in range(n):
        s = s + acc[i + pad]
    out[0] = s + hpvm.f32(t)
    return s


@hpvm.leaf
def blend(s: f32, y: In[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64,
          pad: i64) -> f32:
    i = hpvm.instance_id(0)
    z[i] = z[i] * 0.5 + y[i + pad] + s
    return s + 1.0


@hpvm.graph
def one(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]],
        w_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64,
        z: InOut[Ptr[f32]], z_bytes: i64, off: i64, k: f32, n: i64, pad: i64) -> i64:
    s = hpvm.streaming
    a = hpvm.node(shift_scale, grid=n, x=s(x), x_bytes=s(x_bytes), y=s(y), y_bytes=s(y_bytes),
                  off=s(off), k=s(k))
    return a.out[0]


def _chain(x, x_bytes, y, y_bytes, w, w_bytes, acc, acc_bytes, out, out_bytes, z, z_bytes, off,
           k, n, pad, stages: int, hints: tuple, inner: bool = False, kept: frozenset = frozenset(),
           fails: int = 1):
    """The stages; a root parameter `p` bound into stage `i` without streaming where (i, p) is in
    `kept` (w and k always are), with its size too."""
    def b(stage: int, name: str, value):
        return value if (stage, name) in kept else hpvm.streaming(value)

    def p(stage: int):  # the index shift: the item's pad in stage `fails`, else 0
        return hpvm.streaming(pad) if stage == fails else 0

    s = hpvm.streaming
    a = hpvm.node(shift_scale, grid=n, x=b(0, "x", x), x_bytes=b(0, "x", x_bytes), y=b(0, "y", y),
                  y_bytes=b(0, "y", y_bytes), off=b(0, "off", off), k=k, hint=hints[0])
    outs = [a.out[0]]
    if stages >= 2:
        if inner:
            bb = hpvm.node(acc_inner, off=s(hpvm.all_to_all(a.out[0])), y=b(1, "y", y),
                           y_bytes=b(1, "y", y_bytes), w=w, w_bytes=w_bytes, acc=b(1, "acc", acc),
                           acc_bytes=b(1, "acc", acc_bytes), n=s(n), pad=p(1), hint=hints[1])
        else:
            bb = hpvm.node(acc_weighted, grid=n, off=s(hpvm.all_to_all(a.out[0])), y=b(1, "y", y),
                           y_bytes=b(1, "y", y_bytes), w=w, w_bytes=w_bytes, acc=b(1, "acc", acc),
                           acc_bytes=b(1, "acc", acc_bytes), pad=p(1), hint=hints[1])
        outs.append(bb.out[0])
    if stages >= 3:
        c = hpvm.node(total, t=s(hpvm.all_to_all(bb.out[0])), acc=b(2, "acc", acc),
                      acc_bytes=b(2, "acc", acc_bytes), out=b(2, "out", out),
                      out_bytes=b(2, "out", out_bytes), n=s(n), pad=p(2), hint=hints[2])
        outs.append(c.out[0])
    if stages >= 4:
        d = hpvm.node(blend, grid=n, s=s(hpvm.all_to_all(c.out[0])), y=b(3, "y", y),
                      y_bytes=b(3, "y", y_bytes), z=b(3, "z", z), z_bytes=b(3, "z", z_bytes),
                      pad=p(3), hint=hints[3])
        outs.append(d.out[0])
    return outs


@hpvm.graph
def acc_inner(off: i64, y: In[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]], w_bytes: i64,
              acc: InOut[Ptr[f32]], acc_bytes: i64, n: i64, pad: i64) -> i64:
    b = hpvm.node(acc_weighted, grid=n, off=off, y=y, y_bytes=y_bytes, w=w, w_bytes=w_bytes,
                  acc=acc, acc_bytes=acc_bytes, pad=pad)
    return b.out[0]


def _graph(stages: int, hints: tuple, inner: bool, kept: frozenset, fails: int):
    if stages == 2:
        @hpvm.graph
        def g2(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]],
               w_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64, out: Out[Ptr[f32]],
               out_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, off: i64, k: f32,
               n: i64, pad: i64) -> tuple[i64, i64]:
            o = _chain(x, x_bytes, y, y_bytes, w, w_bytes, acc, acc_bytes, out, out_bytes, z,
                       z_bytes, off, k, n, pad, 2, hints, inner, kept, fails)
            return o[0], o[1]
        return g2
    if stages == 3:
        @hpvm.graph
        def g3(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]],
               w_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64, out: Out[Ptr[f32]],
               out_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, off: i64, k: f32,
               n: i64, pad: i64) -> tuple[i64, i64, f32]:
            o = _chain(x, x_bytes, y, y_bytes, w, w_bytes, acc, acc_bytes, out, out_bytes, z,
                       z_bytes, off, k, n, pad, 3, hints, inner, kept, fails)
            return o[0], o[1], o[2]
        return g3

    @hpvm.graph
    def g4(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, w: In[Ptr[f32]],
           w_bytes: i64, acc: InOut[Ptr[f32]], acc_bytes: i64, out: Out[Ptr[f32]],
           out_bytes: i64, z: InOut[Ptr[f32]], z_bytes: i64, off: i64, k: f32,
           n: i64, pad: i64) -> tuple[i64, i64, f32, f32]:
        o = _chain(x, x_bytes, y, y_bytes, w, w_bytes, acc, acc_bytes, out, out_bytes, z,
                   z_bytes, off, k, n, pad, 4, hints, inner, kept, fails)
        return o[0], o[1], o[2], o[3]
    return g4


_GRAPHS: dict = {}


def graph(stages: int, hints: tuple = ("any",) * 4, inner: bool = False,
          kept: frozenset = frozenset(), fails: int = 1):
    """The chain of `stages` stages with these hints and kept binds (made once per shape)."""
    if stages == 1:
        return one
    key = (stages, hints, inner, kept, fails)
    if key not in _GRAPHS:
        _GRAPHS[key] = _graph(stages, hints, inner, kept, fails)
    return _GRAPHS[key]
