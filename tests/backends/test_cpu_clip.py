"""cpu backend: guards on instance ids become loop ranges, with the same results."""
import numpy as np
import pytest

import hpvm_py as hpvm
from cpu_harness import run
from hpvm_py import InOut, Out, Ptr, f32, i32, i64
from hpvm_py.backends.cpu.clip import clip_instances
from shared_leaves import stencil

rng = np.random.default_rng(21)


def _bounds(leaf, modes):
    return [(b.dim, b.lower, b.offset) for b in clip_instances(leaf.ir, modes)[1]]


def test_stencil_guard_becomes_ranges():
    modes = ("buffer", "uniform", "buffer", "uniform", "uniform", "uniform")
    assert sorted(_bounds(stencil, modes)) == [(0, False, 0), (0, True, 1), (1, False, 0),
                                               (1, True, 1), (2, False, 0), (2, True, 1)]
    nz, ny, nx = 9, 40, 70
    A0 = rng.random((nz, ny, nx), dtype=np.float32)
    An = np.full_like(A0, -5)
    c0, c1 = np.float32(0.5), np.float32(0.25)
    run(stencil, [(nx, ny, nz)], A0, None, An, None, c0, c1)
    want = np.full_like(A0, -5)
    want[1:-1, 1:-1, 1:-1] = (A0[1:-1, 1:-1, 2:] + A0[1:-1, 1:-1, :-2] + A0[1:-1, 2:, 1:-1]
                              + A0[1:-1, :-2, 1:-1] + A0[2:, 1:-1, 1:-1]
                              + A0[:-2, 1:-1, 1:-1]) * c1 - A0[1:-1, 1:-1, 1:-1] * c0
    assert np.array_equal(An, want)


@hpvm.leaf
def early_exit(a: InOut[Ptr[i64]], a_bytes: i64, n: i64, m: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    j = hpvm.get_node_instance_id_y(hpvm.get_node())
    if i >= n or m <= j:
        return
    a[j * 100 + i] += 1


def test_early_return_guard():
    assert sorted(_bounds(early_exit, ("buffer", "uniform", "uniform", "uniform"))) == \
        [(0, False, 0), (1, False, 0)]
    a = np.zeros(100 * 100, np.int64)
    run(early_exit, [(100, 100)], a, None, 37, 55)
    want = np.zeros((100, 100), np.int64)
    want[:55, :37] = 1
    assert np.array_equal(a.reshape(100, 100), want)


@hpvm.leaf
def counted(c: InOut[Ptr[i64]], c_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i > 2 and hpvm.atomic_add(c, 0, 1) >= 0 and i < n:
        out[i] = 1


def test_conjuncts_after_an_atomic_stay_per_instance():
    assert _bounds(counted, ("buffer", "uniform", "buffer", "uniform", "uniform")) == [(0, True, 1)]
    c = np.zeros(1, np.int64)
    out = np.zeros(50, np.int64)
    run(counted, [(50,)], c, None, out, None, 10)
    assert c[0] == 47  # every instance past the first conjunct ran the atomic
    assert list(np.flatnonzero(out)) == list(range(3, 10))


@hpvm.leaf
def one_row(a: InOut[Ptr[f32]], a_bytes: i64, big: i64, lim: i64):
    node = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(node)
    j = hpvm.get_node_instance_id_y(node)
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    if j == 3 and i < lim + p and a[p * 64 + i] > 0.5 and i <= big:
        a[p * 64 + i] = -1.0


@pytest.mark.parametrize("big", [2**63 - 1, 20])
def test_equality_parent_ids_and_residual_conditions(big):
    a = rng.random(4 * 64, dtype=np.float32)
    want = a.copy().reshape(4, 64)
    for p in range(4):
        row = want[p]
        sel = (np.arange(64) < 30 + p) & (row > 0.5) & (np.arange(64) <= big)
        row[sel] = -1.0
    run(one_row, [(64, 5), (4,)], a, None, big, 30)
    assert np.array_equal(a.reshape(4, 64), want)


@hpvm.leaf
def gt_max(a: InOut[Ptr[i32]], a_bytes: i64, big: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i > big:
        a[i] = 1


def test_bound_past_the_largest_i64_keeps_nothing():
    a = np.zeros(10, np.int32)
    run(gt_max, [(10,)], a, None, 2**63 - 1)
    assert not a.any()
    run(gt_max, [(10,)], a, None, -(2**63))
    assert a.all()


@hpvm.leaf
def with_output(n: i64) -> i64:
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i >= n:
        return 0
    return i


def test_leaves_with_outputs_are_not_clipped():
    assert _bounds(with_output, ("uniform",)) == []
    (out,) = run(with_output, [(8,)], 5, outputs=("per_instance",))
    assert list(out) == [0, 1, 2, 3, 4, 0, 0, 0]
