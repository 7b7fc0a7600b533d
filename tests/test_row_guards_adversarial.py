"""Edges of the gpu target's rewrites (docs/backends.md, "Beyond a literal translation") found by
a hunt: each test holds a rule one rewrite broke, on every target against NumPy."""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import In, InOut, Ptr, f32, i64
from hpvm_py.backends.triton.rowguard import find_row_guard
from hpvm_py.rt.compiler import compile_graph

PAD = 8  # elements before the grid in `a`: every neighbour load stays in bounds (a parameter in
# the leaves: a constant term of 4 or more in an index keeps its loads out of quads)


@hpvm.leaf
def ticket_leaf(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
                cnt: InOut[Ptr[i64]], cnt_bytes: i64, n: i64, pad: i64, parity: i64):
    """A guard on an atomic's old value: it differs from lane to lane of a row, though it reads no
    x coordinate."""
    me = hpvm.get_node()
    blk = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(blk) * hpvm.get_num_node_instances_x(me) \
        + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(blk) * hpvm.get_num_node_instances_y(me) \
        + hpvm.get_node_instance_id_y(me)
    at = pad + j * n + i
    t = hpvm.atomic_add(cnt, 0, 1)
    if 0 < i and i < n - 1 and t % 2 == parity:
        out[j * n + i] = a[at - 1] + a[at + 1] * 2.0 + a[at] * 4.0


@hpvm.graph
def ticket_block(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
                 cnt: InOut[Ptr[i64]], cnt_bytes: i64, n: i64, pad: i64, parity: i64, lx: i64, ly: i64):
    hpvm.node(ticket_leaf, grid=(lx, ly), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, cnt=cnt,
              cnt_bytes=cnt_bytes, n=n, pad=pad, parity=parity)


@hpvm.graph
def ticket_root(a: In[Ptr[f32]], a_bytes: i64, out: InOut[Ptr[f32]], out_bytes: i64,
                cnt: InOut[Ptr[i64]], cnt_bytes: i64, n: i64, pad: i64, parity: i64, lx: i64, ly: i64,
                px: i64, py: i64):
    hpvm.node(ticket_block, grid=(px, py), a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes,
              cnt=cnt, cnt_bytes=cnt_bytes, n=n, pad=pad, parity=parity, lx=lx, ly=ly)


def test_a_guard_on_an_atomics_old_value_is_no_row_conjunct() -> None:
    (_, ctx, kernel), = compile_graph(ticket_root, "gpu").leaf_kernels()
    guard = find_row_guard(kernel.leaf, ctx.input_modes)
    assert guard is not None and guard.rows == ()  # `t % 2 == parity` is among the columns
    assert len(guard.columns) == 3


@pytest.mark.parametrize("target", TARGETS)
def test_quads_under_a_guard_on_tickets_give_numpys_stencil(target: str) -> None:
    """Which instances draw even tickets depends on the order of the atomics; every instance that
    stores must store its own stencil value. The quads variant (x extents a multiple of four)
    assumed the guard's non-x conjuncts were the same over a quad, and served a lane's neighbours
    from quad-mates' centres loaded under their own masks: zeros where a mate drew the other
    parity (every stored value was wrong)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for lx, ly, px, py in [(8, 2, 2, 3), (4, 1, 3, 1), (rng.choice([4, 8, 12]), rng.randint(1, 3),
                                                         rng.randint(2, 4), rng.randint(1, 3))]:
        n, m = lx * px, ly * py
        parity = rng.choice([0, 1])
        a = np.random.default_rng(rng.randrange(1 << 30)).integers(1, 50, PAD + n * m + 1)
        a = a.astype(np.float32)
        stencil = np.full(n * m, -1.0, np.float32)
        for j in range(m):
            for i in range(1, n - 1):
                at = PAD + j * n + i
                stencil[j * n + i] = a[at - 1] + a[at + 1] * np.float32(2) + a[at] * np.float32(4)
        out = np.full(n * m, -1.0, np.float32)
        cnt = np.zeros(1, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(ticket_root, a, a.nbytes, out, out.nbytes, cnt, cnt.nbytes, n, PAD,
                                  parity, lx, ly, px, py))
            hpvm.request_memory(out)
            hpvm.request_memory(cnt)
            stats = hpvm.stats()
        where = f"seed {seed}, target {target}, grid {(lx, ly)} x {(px, py)}, parity {parity}"
        assert cnt[0] == n * m, where
        stored = out != -1.0
        np.testing.assert_array_equal(out[stored], stencil[stored], err_msg=where)
        assert 0 < stored.sum() <= (n - 2) * m, where  # (n >= 8: half the tickets, 2 m off)
        if target == "gpu":  # the rewrite ran: row masks and quads
            assert stats.get("row_guard_launches") == 1 and stats.get("quad_launches") == 1, where
