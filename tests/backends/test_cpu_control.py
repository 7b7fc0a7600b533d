"""cpu backend: control flow, instance spaces of 1-3 dimensions and levels, argument modes."""

from typing import NamedTuple

import numpy as np
import pytest

import hpvm_py as hpvm
from cpu_harness import bf16_to_f32, f32_to_bf16, leaves_from_source, run
from hpvm_py import In, InOut, Out, Ptr, bf16, f32, i32, i64, u8

# -- loops -------------------------------------------------------------------------------------


@hpvm.leaf
def range_loop(start: i64, stop: i64, step: i64, out: Out[Ptr[i64]], out_bytes: i64):
    count = 0
    total = 0
    last = 0
    k = -7
    for k in range(start, stop, step):
        count += 1
        total += k
        last = k
        k = 1000  # reassigning the variable does not change the iteration
    out[0] = count
    out[1] = total
    out[2] = last
    out[3] = k


I64_MIN, I64_MAX = -(2**63), 2**63 - 1
RANGES = [(0, 10, 1), (0, 10, 3), (10, 0, -1), (10, 0, -3), (5, 5, 1), (5, 0, 1), (0, 5, -1),
          (0, 10, 0), (-5, 5, 2), (3, 4, 100), (I64_MIN, I64_MAX, 2**62), (I64_MAX, I64_MIN, -2**62),
          (I64_MAX - 2, I64_MAX, 1), (I64_MIN + 2, I64_MIN, -1), (0, 7, I64_MIN), (-1, 7, I64_MAX)]


@pytest.mark.parametrize("start,stop,step", RANGES)
def test_for_range_semantics(start, stop, step):
    out = np.zeros(4, np.int64)
    run(range_loop, [()], start, stop, step, out, None)
    values = list(range(start, stop, step)) if step else []
    assert out[0] == len(values)
    assert out[1] == np.int64(sum(values) % 2**64 - (2**64 if sum(values) % 2**64 >= 2**63 else 0))
    assert out[2] == (values[-1] if values else 0)
    assert out[3] == (1000 if values else -7)


@hpvm.leaf
def small_loop(a: u8, b: u8, c: u8, out: Out[Ptr[i64]], out_bytes: i64):
    n = 0
    for j in range(a, b, c):
        n += 1
        out[n] = i64(j)
    out[0] = n


def test_for_range_unsigned_near_the_top():
    for a, b, c in [(250, 255, 1), (0, 255, 100), (255, 0, 1), (3, 255, 255)]:
        out = np.zeros(300, np.int64)
        run(small_loop, [()], a, b, c, out, None)
        values = list(range(a, b, c))
        assert out[0] == len(values) and list(out[1:1 + len(values)]) == values


@hpvm.leaf
def collatz(a: In[Ptr[i64]], a_bytes: i64, steps: Out[Ptr[i64]], steps_bytes: i64,
            evens: Out[Ptr[i64]], evens_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    v = a[i]
    n = 0
    e = 0
    while True:
        if v == 1:
            break
        n += 1
        if v % 2 == 1:
            v = 3 * v + 1
            continue
        e += 1
        v //= 2
    steps[i] = n
    evens[i] = e


def test_while_break_continue():
    a = np.arange(1, 2000, dtype=np.int64)
    steps, evens = np.zeros_like(a), np.zeros_like(a)
    run(collatz, [(a.size,)], a, None, steps, None, evens, None)
    for v, s, e in zip(a.tolist(), steps.tolist(), evens.tolist()):
        n = ev = 0
        while v != 1:
            n += 1
            if v % 2:
                v = 3 * v + 1
            else:
                ev += 1
                v //= 2
        assert (s, e) == (n, ev)


@hpvm.leaf
def nested_loops(n: i64, out: Out[Ptr[i64]], out_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    total = 0
    for a in range(n):
        if a == i:
            continue
        for b in range(a):
            if b * a > 40:
                break
            total += b
    out[i] = total


def test_nested_loops_with_break_and_continue():
    out = np.zeros(20, np.int64)
    run(nested_loops, [(20,)], 15, out, None)
    for i in range(20):
        total = 0
        for a in range(15):
            if a == i:
                continue
            for b in range(a):
                if b * a > 40:
                    break
                total += b
        assert out[i] == total


# -- returns, laziness -------------------------------------------------------------------------


@hpvm.leaf
def early_return(a: In[Ptr[f32]], a_bytes: i64) -> f32:
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    v = a[i]
    if v < 0.0:
        return -1.0
    for k in range(10):
        if v > f32(k):
            continue
        return f32(k)
    return v * 2.0


def test_early_return():
    a = np.array([-3.0, 0.5, 3.5, 9.5, 12.0, -0.0], dtype=np.float32)
    (out,) = run(early_return, [(a.size,)], a, None, outputs=("per_instance",))
    assert list(out) == [-1.0, 1.0, 4.0, 19.0, 24.0, 0.0]


@hpvm.leaf
def lazy(a: In[Ptr[f32]], a_bytes: i64, n: i64, out: Out[Ptr[f32]], out_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    r = 0.0
    if i < n and a[i] > 0.5:
        r += 1.0
    if i >= n or a[i] < 0.25:
        r += 2.0
    r += a[i] if i < n else f32(-1.0)
    out[i] = r


def test_and_or_select_are_lazy():
    # a has n elements and the grid n + 5: the guarded loads outside a must never run (the
    # checked build would report them).
    n = 20
    a = np.linspace(0, 1, n, dtype=np.float32)
    out = np.zeros(n + 5, np.float32)
    run(lazy, [(n + 5,)], a, None, n, out, None, checked=True)
    want = np.full(n + 5, 1.0, np.float32)
    want[:n] = (a > 0.5) * 1.0 + (a < 0.25) * 2.0 + a
    want[n:] = 2.0 - 1.0
    assert np.array_equal(out, want)


# -- instance spaces ----------------------------------------------------------------------------


@hpvm.leaf
def ids3(out: Out[Ptr[i64]], out_bytes: i64, dims: Out[Ptr[i32]], dims_bytes: i64):
    node = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(node)
    y = hpvm.get_node_instance_id_y(node)
    z = hpvm.get_node_instance_id_z(node)
    nx = hpvm.get_num_node_instances_x(node)
    ny = hpvm.get_num_node_instances_y(node)
    out[x + nx * (y + ny * z)] = x + 1000 * y + 1000000 * z + 10**9 * hpvm.get_num_node_instances_z(node)
    dims[0] = hpvm.get_num_dims(node)
    dims[1] = hpvm.get_num_dims(hpvm.get_parent_node(node))


@pytest.mark.parametrize("shape", [(7, 5, 3), (70, 40, 30)])
def test_three_dimensional_ids(shape):
    nx, ny, nz = shape
    out = np.zeros(nx * ny * nz, np.int64)
    dims = np.zeros(2, np.int32)
    run(ids3, [shape], out, None, dims, None)
    z, y, x = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    assert np.array_equal(out, (x + 1000 * y + 1000000 * z + 10**9 * nz).reshape(-1))
    assert list(dims) == [3, 0]  # the parent of a top-level leaf is the root


@hpvm.leaf
def ids2(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64):
    col = hpvm.instance_id(0)
    row = hpvm.instance_id(1)
    w = hpvm.num_instances(0)
    out[row * w + col] = a[row * w + col] * 2.0 + f32(row)


def test_two_dimensional_partitioned_over_rows():
    a = np.random.default_rng(3).random((300, 250), dtype=np.float32)  # enough to use threads
    out = np.zeros_like(a)
    run(ids2, [(250, 300)], a, None, out, None)
    assert np.array_equal(out, a * 2 + np.arange(300, dtype=np.float32)[:, None])


class Pair(NamedTuple):
    first: f32
    second: i64


@hpvm.leaf
def under_parent(s: f32, t: i64, u: bf16) -> Pair:
    node = hpvm.get_node()
    parent = hpvm.get_parent_node(node)
    px = hpvm.get_node_instance_id_x(parent)
    py = hpvm.get_node_instance_id_y(parent)
    lin = hpvm.get_node_instance_id_x(node) + 3 * hpvm.get_node_instance_id_y(node)
    return Pair(s * 10.0 + f32(px) + f32(py) * 100.0 + f32(u), t * 1000 + lin)


@pytest.mark.parametrize("modes", [("per_parent", "per_instance"), ("per_instance", "per_parent")])
def test_leaf_under_replicated_parent(modes):
    P, L = 4, 6  # parent grid 2x2, leaf grid 3x2
    s = np.arange(P, dtype=np.float32) + 0.5
    t = np.arange(P * L, dtype=np.int64) * 7
    u = 1.5  # a bf16 scalar argument is given as a float (hpvm.bf16(1.5) is a NumPy float32)
    first, second = run(under_parent, [(3, 2), (2, 2)], s, t, u,
                        modes={"s": "per_parent", "t": "per_instance"}, outputs=modes)
    u_value = 1.5
    first_all = np.array([[s[p] * 10 + p % 2 + (p // 2) * 100 + u_value for _ in range(L)]
                          for p in range(P)], dtype=np.float32)
    second_all = np.array([[t[p * L + lin] * 1000 + lin for lin in range(L)] for p in range(P)])
    for got, all_values, mode in ((first, first_all, modes[0]), (second, second_all, modes[1])):
        if mode == "per_parent":  # the instance with lin 0 of each parent writes out[p]
            assert np.array_equal(got, all_values[:, 0])
        else:
            assert np.array_equal(got, all_values.reshape(-1))


@hpvm.leaf
def three_levels(out: Out[Ptr[i64]], out_bytes: i64):
    node = hpvm.get_node()
    parent = hpvm.get_parent_node(node)
    grand = hpvm.get_parent_node(parent)
    x0 = hpvm.get_node_instance_id_x(node)
    x1 = hpvm.get_node_instance_id_x(parent)
    x2 = hpvm.get_node_instance_id_x(grand)
    y2 = hpvm.get_node_instance_id_y(grand)
    n0 = hpvm.get_num_node_instances_x(node)
    n1 = hpvm.get_num_node_instances_x(parent)
    n2 = hpvm.get_num_node_instances_x(grand)
    flat = x0 + n0 * (x1 + n1 * (x2 + n2 * y2))
    out[flat] = x0 + 10 * x1 + 100 * x2 + 1000 * y2 + 10000 * hpvm.get_num_dims(grand)


def test_three_levels_of_instances():
    out = np.zeros(5 * 3 * 4 * 2, np.int64)
    run(three_levels, [(5,), (3,), (4, 2)], out, None)
    want = [x0 + 10 * x1 + 100 * x2 + 1000 * y2 + 20000
            for y2 in range(2) for x2 in range(4) for x1 in range(3) for x0 in range(5)]
    assert list(out) == want


@hpvm.leaf
def many_parents(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    n = hpvm.get_num_node_instances_x(hpvm.get_node())
    b[p * n + i] = a[p * n + i] + f32(p)


def test_partitioned_over_parents():
    P, L = 400, 300
    a = np.random.default_rng(5).random(P * L, dtype=np.float32)
    b = np.zeros_like(a)
    run(many_parents, [(L,), (P,)], a, None, b, None)
    assert np.array_equal(b, a + np.repeat(np.arange(P, dtype=np.float32), L))


def test_zero_dimensional_leaf_and_scalar_types():
    mod = leaves_from_source("""
        @hpvm.leaf
        def scalars(a: i8, b: u64, c: f16, d: bf16, e: i1, f: f32, out: Out[Ptr[f64]], out_bytes: i64):
            out[0] = f64(a)
            out[1] = f64(b)
            out[2] = f64(c)
            out[3] = f64(d)
            out[4] = f64(e)
            out[5] = f64(f)
            out[6] = f64(c + c)
            out[7] = f64(d * bf16(3.0))
    """)
    out = np.zeros(8, np.float64)
    run(mod.scalars, [()], -5, 2**64 - 1, 0.1, 0.1, True, 1e-3, out, None)
    bf = float(bf16_to_f32(f32_to_bf16(np.array([0.1], np.float32)))[0])
    assert list(out) == [-5.0, float(2**64), float(np.float16(0.1)), bf, 1.0,
                         float(np.float32(1e-3)), float(np.float16(0.1) + np.float16(0.1)),
                         float(bf16_to_f32(f32_to_bf16(np.array([bf * 3], np.float32)))[0])]


def test_empty_grid_runs_nothing():
    out = np.full(4, 9, np.int64)
    run(ids2, [(0, 4)], np.zeros(4, np.float32), None, out.view(np.float32), None)
    assert list(out) == [9] * 4


@hpvm.leaf
def reassign_param(n: i64, a: InOut[Ptr[i64]], a_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    n = n + i
    while n > 10:
        n -= 10
    a[i] = n


def test_assigning_a_parameter_is_local_to_the_instance():
    a = np.zeros(50, np.int64)
    run(reassign_param, [(50,)], 7, a, None)
    assert list(a) == [((7 + i - 1) % 10) + 1 for i in range(50)]
