"""Near-matches of the gpu target's rewrites (docs/backends.md, "Beyond a literal translation"):
row guards and quads whose guard or load index reads a scalar that differs from lane to lane (fed
per instance by a one-to-one edge, or per parent where the leaf has no x), and range() loops, the
literal ones and those spread over the lanes, whose distance passes 2**63. Every target must give
NumPy's (or Python's) answer; seeded generators draw the flags, offsets, bounds and ranges."""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.backends.triton.quads import quad_loads
from hpvm_py.backends.triton.rowguard import find_row_guard
from hpvm_py.rt.compiler import compile_graph

LX, LY = 8, 2  # the leaf's x extent is a multiple of four: quads fit every launch


@hpvm.leaf
def flag_leaf(f: In[Ptr[i64]], f_bytes: i64, n: i64) -> i64:
    """Each instance's value of f at its coordinate: a per-instance scalar for its sibling."""
    me = hpvm.get_node()
    blk = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(blk) * LX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(blk) * LY + hpvm.get_node_instance_id_y(me)
    return f[j * n + i]


@hpvm.leaf
def flagged_guard(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                  lo: i64, nlim: i64, k: i64):
    """A row guard with a per-instance conjunct: not a row conjunct, whatever it reads."""
    me = hpvm.get_node()
    blk = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(blk) * LX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(blk) * LY + hpvm.get_node_instance_id_y(me)
    at = j * n + i
    if k > 0 and lo <= i and i < nlim:
        out[at] = a[at + n - 1] + a[at + n] * 2.0 + a[at + n + 1] * 10.0


@hpvm.leaf
def flagged_index(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                  lo: i64, nlim: i64, k: i64):
    """Neighbours of a per-instance index: `at + k` steps by no one number from lane to lane."""
    me = hpvm.get_node()
    blk = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(blk) * LX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(blk) * LY + hpvm.get_node_instance_id_y(me)
    at = j * n + i
    if lo <= i and i < nlim:
        out[at] = a[at + k + n - 1] + a[at + k + n + 1] * 10.0


def _per_instance_root(leaf):
    @hpvm.graph
    def block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
              f: In[Ptr[i64]], f_bytes: i64, n: i64, lo: i64, nlim: i64):
        flags = hpvm.node(flag_leaf, grid=(LX, LY), f=f, f_bytes=f_bytes, n=n)
        s = hpvm.node(leaf, grid=(LX, LY), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n,
                      lo=lo, nlim=nlim)
        hpvm.edge(flags, s, hpvm.ONE_TO_ONE, 0, "k")

    @hpvm.graph
    def root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
             f: In[Ptr[i64]], f_bytes: i64, n: i64, lo: i64, nlim: i64, px: i64, py: i64):
        hpvm.node(block, grid=(px, py), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, f=f,
                  f_bytes=f_bytes, n=n, lo=lo, nlim=nlim)
    return root


guard_root = _per_instance_root(flagged_guard)
index_root = _per_instance_root(flagged_index)


@hpvm.leaf
def parent_flag_leaf(f: In[Ptr[i64]], f_bytes: i64, n: i64) -> i64:
    me = hpvm.get_node()
    return f[hpvm.get_node_instance_id_y(me) * n + hpvm.get_node_instance_id_x(me)]


@hpvm.leaf
def point_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
               lo: i64, nlim: i64, k: i64):
    """One instance per parent instance (no x of its own): a per-parent value differs along x."""
    blk = hpvm.get_parent_node(hpvm.get_node())
    i = hpvm.get_node_instance_id_x(blk)
    j = hpvm.get_node_instance_id_y(blk)
    at = j * n + i
    if k > 0 and lo <= i and i < nlim:
        out[at] = a[at + n - 1] + a[at + n] * 2.0 + a[at + n + 1] * 10.0


@hpvm.graph
def point_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64, n: i64,
                lo: i64, nlim: i64, k: i64):
    hpvm.node(point_leaf, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, n=n, lo=lo,
              nlim=nlim, k=k)


@hpvm.graph
def parent_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
                f: In[Ptr[i64]], f_bytes: i64, n: i64, lo: i64, nlim: i64, px: i64, py: i64):
    flags = hpvm.node(parent_flag_leaf, grid=(px, py), f=f, f_bytes=f_bytes, n=n)
    s = hpvm.node(point_block, grid=(px, py), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes,
                  n=n, lo=lo, nlim=nlim)
    hpvm.edge(flags, s, hpvm.ONE_TO_ONE, 0, "k")


def _expected(root, a: np.ndarray, out: np.ndarray, f: np.ndarray, n: int, m: int, lo: int,
              nlim: int) -> np.ndarray:
    out = out.copy()
    for j in range(m):
        for i in range(max(lo, 0), min(nlim, n)):
            at, k = j * n + i, int(f[j * n + i])
            if root is index_root:
                out[at] = a[at + k + n - 1] + a[at + k + n + 1] * np.float32(10)
            elif k > 0:
                out[at] = a[at + n - 1] + a[at + n] * np.float32(2) + a[at + n + 1] * np.float32(10)
    return out


def _launch(target: str, root, a: np.ndarray, out: np.ndarray, f: np.ndarray, n: int, lo: int,
            nlim: int, px: int, py: int) -> np.ndarray:
    out = out.copy()
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, out, out.nbytes, f, f.nbytes, n, lo, nlim, px, py))
        hpvm.request_memory(out)
    return out


def _draw(rng: random.Random, root) -> tuple:
    """A launch: parent grid, bounds, flags (0/1, or the offsets 0..2 of index_root) and data of
    small integers (the sums stay exact in f32)."""
    point = root is parent_root
    px, py = rng.choice([1, 2, 3]) * (4 if point else 1), rng.choice([1, 2, 3])
    n, m = px * (1 if point else LX), py * (1 if point else LY)
    lo, nlim = rng.choice([0, 1, 2]), n - rng.choice([0, 1, 3])
    g = np.random.default_rng(rng.randrange(1 << 30))
    f = g.integers(0, 3 if root is index_root else 2, n * m).astype(np.int64)
    a = g.integers(-50, 50, (m + 2) * n + 4).astype(np.float32)
    out = g.integers(-50, 50, a.size).astype(np.float32)
    return a, out, f, n, m, lo, nlim, px, py


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("root", [guard_root, index_root, parent_root],
                         ids=["per-instance-guard", "per-instance-index", "per-parent-guard"])
def test_lane_varying_scalars_in_row_guards_and_quads(target: str, root) -> None:
    """Quads split a centre loaded under the row conjuncts' mask into four lanes: a conjunct or
    an index that reads a per-instance (or, without a leaf x, per-parent) scalar took another
    lane's element or a masked-off 0 (the whole quad's values came from lanes masked off)."""
    rng = random.Random(20261)
    for _ in range(4):
        a, out, f, n, m, lo, nlim, px, py = _draw(rng, root)
        got = _launch(target, root, a, out, f, n, lo, nlim, px, py)
        np.testing.assert_array_equal(got, _expected(root, a, out, f, n, m, lo, nlim),
                                      err_msg=f"n={n} m={m} lo={lo} nlim={nlim}")


@pytest.mark.skipif("gpu" not in TARGETS, reason="the gpu target is not usable here")
def test_a_minimal_alternating_flag() -> None:
    """The reproducer: k alternates 0, 1 along x; every flagged lane's neighbours are masked-off
    lanes' centres in the quads variant."""
    n, m = 2 * LX, LY
    a = np.arange((m + 2) * n + 4, dtype=np.float32)
    out = np.zeros_like(a)
    f = (np.arange(n * m) % 2).astype(np.int64)
    got = _launch("gpu", guard_root, a, out, f, n, 0, n, 2, 1)
    np.testing.assert_array_equal(got, _expected(guard_root, a, out, f, n, m, 0, n))


def _leaf(root, name: str):
    for leaf, ctx, kernel in compile_graph(root, "gpu").leaf_kernels():
        if kernel.leaf.name == name:
            return kernel.leaf, ctx
    raise AssertionError(name)


@pytest.mark.skipif("gpu" not in TARGETS, reason="the gpu target is not usable here")
def test_lane_varying_scalars_are_no_row_conjuncts_nor_quad_strides() -> None:
    leaf, ctx = _leaf(guard_root, "flagged_guard")
    guard = find_row_guard(leaf, ctx.input_modes)
    assert guard is not None and len(guard.rows) == 0 and len(guard.columns) == 3
    leaf, ctx = _leaf(parent_root, "point_leaf")
    guard = find_row_guard(leaf, ctx.input_modes)
    assert guard is not None and len(guard.rows) == 0 and len(guard.columns) == 3
    leaf, ctx = _leaf(index_root, "flagged_index")
    guard = find_row_guard(leaf, ctx.input_modes)
    assert guard is not None and quad_loads(leaf, guard, ctx.level_dims, ctx.input_modes) is None


# -- range() past 2**63 ----------------------------------------------------------------------------


@hpvm.leaf
def range_leaf(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    """Both loops are reductions spread over the lanes on gpu (one instance)."""
    c = 0
    for t in range(lo, hi, st):
        c += 1
    x = 0
    for t in range(lo, hi, st):
        x = x ^ t
    out[0] = c
    out[1] = x


@hpvm.leaf
def range_split_leaf(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    """One spread loop, nothing before it: split over several programs on gpu."""
    x = 0
    for t in range(lo, hi, st):
        x = x ^ (t + 1)
    out[0] = x


@hpvm.leaf
def range_grid_leaf(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    """The literal loop (two instances: nothing is spread)."""
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c = 0
    last = 0
    for t in range(lo, hi, st):
        c += 1
        last = t
    out[2 * i] = c
    out[2 * i + 1] = last


@hpvm.graph
def range_root(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    hpvm.node(range_leaf, out=out, out_bytes=out_bytes, lo=lo, hi=hi, st=st)


@hpvm.graph
def range_split_root(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    hpvm.node(range_split_leaf, out=out, out_bytes=out_bytes, lo=lo, hi=hi, st=st)


@hpvm.graph
def range_grid_root(out: Out[Ptr[i64]], out_bytes: i64, lo: i64, hi: i64, st: i64):
    hpvm.node(range_grid_leaf, grid=2, out=out, out_bytes=out_bytes, lo=lo, hi=hi, st=st)


BIG = 2**63
MINIMAL_RANGES = [(-BIG, BIG - 1, 2**62), (BIG - 1, -BIG, -2**62), (-5, BIG - 1, 2**61),
                  (-BIG, 10, 2**62), (BIG - 1, -BIG, -(BIG - 1)), (-BIG, BIG - 1, -BIG)]


def _ranges(seed: int, count: int) -> list[tuple[int, int, int]]:
    """(start, stop, step) near the int64 extremes with at most 64 iterations."""
    rng = random.Random(seed)
    found = []
    while len(found) < count:
        lo = rng.choice([-BIG, -BIG + 1, BIG - 1, 0, -1]) + rng.randint(-3, 3)
        hi = rng.choice([-BIG, BIG - 1, 0, 7]) + rng.randint(-3, 3)
        st = rng.choice([1, -1]) * rng.choice([2**62, 2**61 + 3, BIG - 1, 3 * 2**60, 2**60 + 1])
        lo, hi = (min(max(v, -BIG), BIG - 1) for v in (lo, hi))
        if len(range(lo, hi, st)) <= 64:
            found.append((lo, hi, st))
    return found


def _xor(r: range, plus: int = 0) -> int:
    x = 0
    for t in r:
        x ^= t + plus
    return x


@pytest.mark.parametrize("target", TARGETS)
def test_ranges_past_2_63_run_pythons_count(target: str) -> None:
    """_trip took stop - start in int64: past 2**63 it wrapped, and the gpu loops ran 0 or 1
    times (range(-2**63, 2**63 - 1, 2**62) runs 4)."""
    cases = MINIMAL_RANGES + _ranges(7, 10)
    with hpvm.runtime(target):
        for lo, hi, st in cases:
            r = range(lo, hi, st)
            out = np.zeros(2, np.int64)
            hpvm.wait(hpvm.launch(range_root, out, out.nbytes, lo, hi, st))
            hpvm.request_memory(out)
            assert (int(out[0]), int(out[1])) == (len(r), _xor(r)), (lo, hi, st)
            one = np.zeros(1, np.int64)
            hpvm.wait(hpvm.launch(range_split_root, one, one.nbytes, lo, hi, st))
            hpvm.request_memory(one)
            assert int(one[0]) == (_xor(r, 1) + BIG) % 2**64 - BIG, (lo, hi, st)
            out = np.zeros(4, np.int64)
            hpvm.wait(hpvm.launch(range_grid_root, out, out.nbytes, lo, hi, st))
            hpvm.request_memory(out)
            last = r[-1] if len(r) else 0
            assert [int(v) for v in out] == [len(r), last] * 2, (lo, hi, st)
