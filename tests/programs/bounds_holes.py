"""Leaves and graphs for tests/test_bounds_soundness.py: one per hole the launch-time bounds proof
once had. Every out-of-range access sits on a line marked `# oob:<name>`, which the tests look up
to check that the error names it."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i8, i64


# -- an index computed by an earlier node crosses an edge (one value, or one per instance) -----

@hpvm.leaf
def pick(src: In[Ptr[i64]], src_bytes: i64) -> i64:
    return src[0]


@hpvm.leaf
def put(k: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    out[k] = 1.0  # oob:put


@hpvm.graph
def edge_index(src: In[Ptr[i64]], src_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    p = hpvm.node(pick, src=src, src_bytes=src_bytes)
    hpvm.node(put, k=p.out[0], out=out, out_bytes=out_bytes)


@hpvm.leaf
def pick_each(src: In[Ptr[i64]], src_bytes: i64) -> i64:
    return src[hpvm.instance_id(0)]


@hpvm.leaf
def put_each(k: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    out[k] = 2.0  # oob:put_each


@hpvm.graph
def edge_index_each(src: In[Ptr[i64]], src_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64):
    p = hpvm.node(pick_each, grid=n, src=src, src_bytes=src_bytes)
    hpvm.node(put_each, grid=n, k=p.out[0], out=out, out_bytes=out_bytes)


# -- loops left by a data-dependent break, continue paths -------------------------------------

@hpvm.leaf
def while_break(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    j = 0
    while j < 8:
        if data[j] == 0:
            break  # leaves with j < 8: the loop condition is still true
        j = j + 1
    k = j - 8
    if k < 1:
        out[k] = 1.0  # oob:while_break


@hpvm.leaf
def for_break(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    j = 0
    for t in range(8):
        j = -5
        if data[t] == 0:
            break
        j = 0
    out[j] = 1.0  # oob:for_break


@hpvm.leaf
def for_return(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    j = 0
    for t in range(8):
        j = t + 100
        if data[t] == 0:
            out[j - 100] = 3.0
            return
        j = 0
    out[j] = 1.0


@hpvm.leaf
def while_continue(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    j = 0
    w = 0
    while w < 8:
        w = w + 1
        j = -5
        if data[w - 1] == 0:
            continue  # back to the head with j == -5
        j = 0
    out[j] = 1.0  # oob:while_continue


@hpvm.graph
def run_while_break(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    hpvm.node(while_break, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes)


@hpvm.graph
def run_for_break(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    hpvm.node(for_break, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes)


@hpvm.graph
def run_for_return(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    hpvm.node(for_return, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes)


@hpvm.graph
def run_while_continue(data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    hpvm.node(while_continue, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes)


# -- a chain of loop-carried variables ----------------------------------------------------------

@hpvm.leaf
def carried_chain(out: InOut[Ptr[f32]], out_bytes: i64, n: i64):
    a = 0
    b = 0
    c = 0
    d = 0
    e = 0
    for t in range(n):
        out[e] = 1.0  # oob:carried_chain
        e = d
        d = c
        c = b
        b = a
        a = 1000


@hpvm.graph
def run_carried_chain(out: InOut[Ptr[f32]], out_bytes: i64, n: i64):
    hpvm.node(carried_chain, out=out, out_bytes=out_bytes, n=n)


# -- a relation proven on wrapping i8 arithmetic, used on the same sum in i64 -------------------

@hpvm.leaf
def wrapped_relation(data: In[Ptr[i8]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    a = data[0]
    b = data[1]
    if a + b >= hpvm.i8(0) and a + b < hpvm.i8(8):  # i8: -128 + -128 wraps to 0
        out[i64(a) + i64(b)] = 1.0  # oob:wrapped_relation


@hpvm.graph
def run_wrapped_relation(data: In[Ptr[i8]], data_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    hpvm.node(wrapped_relation, data=data, data_bytes=data_bytes, out=out, out_bytes=out_bytes)


# -- malloc sizes whose sum overflows 64 bits ---------------------------------------------------

@hpvm.leaf
def huge_scratch(n: i64, out: InOut[Ptr[f32]], out_bytes: i64):
    s0 = hpvm.malloc(64, f32)
    s1 = hpvm.malloc(n, f32)
    s2 = hpvm.malloc(n, f32)  # oob:huge_scratch (the running total overflows here)
    s3 = hpvm.malloc(n, f32)
    s4 = hpvm.malloc(n, f32)
    i = hpvm.instance_id(0)
    s1[i] = 1.0
    s2[i] = 2.0
    s3[i] = 3.0
    s4[i] = 4.0
    s0[i] = s1[i] + s2[i] + s3[i] + s4[i]
    out[i] = s0[i]


@hpvm.graph
def run_huge_scratch(n: i64, out: InOut[Ptr[f32]], out_bytes: i64, m: i64):
    hpvm.node(huge_scratch, grid=m, n=n, out=out, out_bytes=out_bytes)


# -- a grid whose instance count overflows 64 bits ----------------------------------------------

@hpvm.leaf
def mark(out: InOut[Ptr[f32]], out_bytes: i64):
    out[0] = 1.0


@hpvm.graph
def huge_grid(out: InOut[Ptr[f32]], out_bytes: i64, x: i64, y: i64):
    hpvm.node(mark, grid=(x, y), out=out, out_bytes=out_bytes)  # oob:huge_grid

