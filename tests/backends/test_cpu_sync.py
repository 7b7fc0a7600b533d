"""cpu backend: barriers, malloc scratch memory and atomics (under threads)."""
import numpy as np
import pytest

import hpvm_py as hpvm
from cpu_harness import bf16_to_f32, f32_to_bf16, leaves_from_source, run
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64
from hpvm_py.errors import CompileError

rng = np.random.default_rng(7)

# -- barriers ----------------------------------------------------------------------------------


@hpvm.leaf
def block_sum(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64):
    node = hpvm.get_node()
    tid = hpvm.get_node_instance_id_x(node)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    n = hpvm.get_num_node_instances_x(node)
    buf = hpvm.malloc(hpvm.get_num_node_instances_x(hpvm.get_node()) * 4, f32)
    buf[tid] = a[blk * n + tid]
    hpvm.barrier()
    s = n // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        hpvm.barrier()
        s //= 2
    if tid == 0:
        out[blk] = buf[0]


@hpvm.leaf
def block_sum_no_barrier(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64):
    node = hpvm.get_node()
    tid = hpvm.get_node_instance_id_x(node)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    n = hpvm.get_num_node_instances_x(node)
    buf = hpvm.malloc(hpvm.get_num_node_instances_x(hpvm.get_node()) * 4, f32)
    buf[tid] = a[blk * n + tid]
    s = n // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        s //= 2
    if tid == 0:
        out[blk] = buf[0]


def _tree_sum(a: np.ndarray, blocks: int, n: int) -> np.ndarray:
    """The reduction order of block_sum, in f32."""
    buf = a.reshape(blocks, n).copy()
    s = n // 2
    while s > 0:
        buf[:, :s] += buf[:, s:2 * s]
        s //= 2
    return buf[:, 0]


@pytest.mark.parametrize("blocks,n", [(1, 64), (37, 128), (300, 256), (2, 1024)])
def test_block_reduction_with_barriers(blocks, n):
    a = rng.random(blocks * n, dtype=np.float32)
    out = np.zeros(blocks, np.float32)
    run(block_sum, [(n,), (blocks,)], a, None, out, None)
    assert np.array_equal(out, _tree_sum(a, blocks, n))


def test_block_reduction_is_wrong_without_the_barriers():
    blocks, n = 4, 64
    a = rng.random(blocks * n, dtype=np.float32) + 1
    out = np.zeros(blocks, np.float32)
    run(block_sum_no_barrier, [(n,), (blocks,)], a, None, out, None)
    assert not np.allclose(out, a.reshape(blocks, n).sum(1))


@hpvm.leaf
def rotate(a: In[Ptr[i64]], a_bytes: i64, k: i64, out: Out[Ptr[i64]], out_bytes: i64):
    node = hpvm.get_node()
    tid = hpvm.get_node_instance_id_x(node)
    n = hpvm.get_num_node_instances_x(node)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    buf = hpvm.malloc(hpvm.get_num_node_instances_x(hpvm.get_node()) * 8, i64)
    buf[tid] = a[blk * n + tid]
    hpvm.barrier()
    for it in range(k):
        v = buf[(tid + 1) % n]  # lives across the barrier below
        hpvm.barrier()
        buf[tid] = v + it
        hpvm.barrier()
    out[blk * n + tid] = buf[tid]


def test_barriers_inside_a_uniform_loop():
    blocks, n, k = 3, 50, 7
    a = np.arange(blocks * n, dtype=np.int64)
    out = np.zeros_like(a)
    run(rotate, [(n,), (blocks,)], a, None, k, out, None)
    want = np.roll(a.reshape(blocks, n), -k, axis=1) + sum(range(k))
    assert np.array_equal(out, want.reshape(-1))


@hpvm.leaf
def transpose_tiles(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, w: i64):
    node = hpvm.get_node()
    parent = hpvm.get_parent_node(node)
    tx = hpvm.get_node_instance_id_x(node)
    ty = hpvm.get_node_instance_id_y(node)
    bx = hpvm.get_node_instance_id_x(parent)
    by = hpvm.get_node_instance_id_y(parent)
    tile = hpvm.malloc(8 * 8 * 4, f32)
    tile[ty * 8 + tx] = a[(by * 8 + ty) * w + bx * 8 + tx]
    hpvm.barrier()
    b[(bx * 8 + ty) * w + by * 8 + tx] = tile[tx * 8 + ty]


def test_two_dimensional_groups_share_scratch():
    w = 64
    a = rng.random((w, w), dtype=np.float32)
    b = np.zeros_like(a)
    run(transpose_tiles, [(8, 8), (w // 8, w // 8)], a, None, b, None, w)
    assert np.array_equal(b, a.T)


@hpvm.leaf
def scratch_starts_at_zero(out: Out[Ptr[i32]], out_bytes: i64):
    node = hpvm.get_node()
    tid = hpvm.get_node_instance_id_x(node)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    n = hpvm.get_num_node_instances_x(node)
    s = hpvm.malloc(64, i32)
    hpvm.atomic_add(s, tid % 4, i32(blk + 1))
    hpvm.barrier()
    if tid < 4:
        out[blk * 4 + tid] = s[tid]


def test_malloc_is_zeroed_per_group():
    blocks, n = 6, 10
    out = np.zeros(blocks * 4, np.int32)
    run(scratch_starts_at_zero, [(n,), (blocks,)], out, None)
    per_slot = np.array([3, 3, 2, 2])  # tid % 4 over tid < 10
    assert np.array_equal(out, (np.arange(1, blocks + 1)[:, None] * per_slot).reshape(-1))


@hpvm.leaf
def returns_before_barrier(out: Out[Ptr[i64]], out_bytes: i64):
    tid = hpvm.get_node_instance_id_x(hpvm.get_node())
    s = hpvm.malloc(8 * 16, i64)
    if tid % 3 == 0:
        return
    s[tid] = tid
    hpvm.barrier()
    out[tid] = s[tid] + s[(tid + 1) % 16] * 100


def test_instances_that_returned_skip_later_regions():
    out = np.full(16, -1, np.int64)
    run(returns_before_barrier, [(16,), ()], out, None)
    want = [-1 if t % 3 == 0 else t + (0 if (t + 1) % 16 % 3 == 0 else (t + 1) % 16) * 100
            for t in range(16)]
    assert list(out) == want


@pytest.mark.parametrize("body,line_hint", [
    ("""
        if a[tid] > 0.0:
            hpvm.barrier()
    """, "hpvm.barrier()"),
    ("""
        for k in range(tid):
            hpvm.barrier()
    """, "hpvm.barrier()"),
    ("""
        n = i64(a[0])
        while n > 0:
            hpvm.barrier()
            n -= 1
    """, "hpvm.barrier()"),
    ("""
        for k in range(4):
            if tid == k:
                break
            hpvm.barrier()
    """, "break"),
])
def test_barrier_in_non_uniform_control_flow_is_rejected(body, line_hint):
    import textwrap

    src = ("@hpvm.leaf\ndef bad(a: In[Ptr[f32]], a_bytes: i64):\n"
           "    tid = hpvm.get_node_instance_id_x(hpvm.get_node())\n"
           + textwrap.indent(textwrap.dedent(body), "    "))
    mod = leaves_from_source(src)
    with pytest.raises(CompileError) as info:
        run(mod.bad, [(8,), (2,)], np.ones(8, np.float32), None)
    assert info.value.rule == "barrier-uniform"
    assert line_hint in info.value.loc.source_line()


@hpvm.leaf
def uniform_break(a: In[Ptr[i64]], a_bytes: i64, limit: i64, out: Out[Ptr[i64]], out_bytes: i64):
    tid = hpvm.get_node_instance_id_x(hpvm.get_node())
    s = hpvm.malloc(8 * 32, i64)
    s[tid] = a[tid]
    rounds = 0
    for k in range(100):
        if k == limit:
            break
        v = s[(tid + 1) % 32]
        hpvm.barrier()
        s[tid] = v
        hpvm.barrier()
        rounds += 1
    out[tid] = s[tid] * 1000 + rounds


def test_uniform_break_out_of_a_loop_with_barriers():
    a = np.arange(32, dtype=np.int64)
    out = np.zeros_like(a)
    run(uniform_break, [(32,), ()], a, None, 5, out, None)
    assert np.array_equal(out, np.roll(a, -5) * 1000 + 5)


# -- atomics -----------------------------------------------------------------------------------


@hpvm.leaf
def histogram(d: In[Ptr[i32]], d_bytes: i64, h: InOut[Ptr[i32]], h_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    hpvm.atomic_add(h, d[i] % 256, 1)


def test_histogram_under_threads():
    d = rng.integers(-10**6, 10**6, 1 << 20).astype(np.int32)
    h = np.full(256, 5, np.int32)
    run(histogram, [(d.size,)], d, None, h, None)
    assert np.array_equal(h, np.bincount(d % 256, minlength=256) + 5)


@hpvm.leaf
def claim_slots(counter: InOut[Ptr[i64]], c_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    slot = hpvm.atomic_add(counter, 0, 1)  # the old value is used: real atomics
    out[slot] = i


def test_atomic_add_returns_unique_old_values_under_threads():
    n = 200_000
    counter = np.zeros(1, np.int64)
    out = np.full(n, -1, np.int64)
    run(claim_slots, [(n,)], counter, None, out, None)
    assert counter[0] == n
    assert np.array_equal(np.sort(out), np.arange(n))


def _atomic_leaf(op: str, t: str, use_result: bool):
    call = f"hpvm.atomic_{op}(cell, i % 7, v[i])"
    body = f"    old[i] = {call}\n" if use_result else f"    {call}\n"
    src = (f"@hpvm.leaf\ndef at_{op}(v: In[Ptr[{t}]], v_bytes: i64, cell: InOut[Ptr[{t}]], "
           f"cell_bytes: i64, old: Out[Ptr[{t}]], old_bytes: i64):\n"
           f"    i = hpvm.get_node_instance_id_x(hpvm.get_node())\n{body}")
    return getattr(leaves_from_source(src), f"at_{op}")


_REDUCE = {"add": np.add, "sub": np.subtract, "min": np.minimum, "max": np.maximum,
           "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}


@pytest.mark.parametrize("use_result", [False, True], ids=["privatised", "atomic"])
@pytest.mark.parametrize("op,t", [("add", "i32"), ("sub", "i64"), ("min", "i32"), ("max", "u64"),
                                  ("and", "u64"), ("or", "i32"), ("xor", "i64"), ("xchg", "i32")])
def test_atomic_ops_under_threads(op, t, use_result):
    dtype = np.dtype({"i32": np.int32, "i64": np.int64, "u64": np.uint64}[t])
    n = 100_000
    info = np.iinfo(dtype)
    v = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    if op in ("and",):
        v |= dtype.type(rng.integers(0, 2**30)) | ~dtype.type(0xFF)  # keep some bits set
    start = rng.integers(info.min, info.max, 7, dtype=dtype, endpoint=True)
    cell = start.copy()
    old = np.zeros(n, dtype)
    run(_atomic_leaf(op, t, use_result), [(n,)], v, None, cell, None, old, None)
    for k in range(7):
        mine = v[k::7]
        if op == "xchg":
            # the final value and the old values are the start and the exchanged values
            seen = np.concatenate([[cell[k]], old[k::7]]) if use_result else np.array([cell[k]])
            everything = np.concatenate([[start[k]], mine])
            assert np.isin(seen, everything).all()
            if use_result:
                assert np.array_equal(np.sort(seen), np.sort(everything))
            continue
        with np.errstate(over="ignore"):
            want = _REDUCE[op].reduce(np.concatenate([[start[k]], mine]), dtype=dtype)
        assert cell[k] == want, f"{op} cell {k}"


@pytest.mark.parametrize("t", [np.float32, np.float64])
def test_float_atomic_add_under_threads(t):
    n = 300_000
    tname = "f32" if t is np.float32 else "f64"
    leaf = _atomic_leaf("add", tname, use_result=False)
    cell = np.zeros(7, t)
    run(leaf, [(n,)], np.ones(n, t), None, cell, None, np.zeros(n, t), None)
    assert list(cell) == [len(range(k, n, 7)) for k in range(7)]  # small integers: exact


@pytest.mark.parametrize("op", ["min", "max", "sub", "xchg"])
def test_float_atomics(op):
    n = 50_000
    leaf = _atomic_leaf(op, "f64", use_result=True)
    v = rng.standard_normal(n)
    cell = np.zeros(7)
    old = np.zeros(n)
    run(leaf, [(n,)], v, None, cell, None, old, None)
    for k in range(7):
        values = np.concatenate([[0.0], v[k::7]])
        if op == "min":
            assert cell[k] == values.min()
        elif op == "max":
            assert cell[k] == values.max()
        elif op == "sub":
            assert np.isclose(cell[k], -v[k::7].sum())
        else:
            assert np.array_equal(np.sort(np.concatenate([[cell[k]], old[k::7]])), np.sort(values))


@pytest.mark.parametrize("tname,limit", [("f16", 2048), ("bf16", 256)])
def test_sixteen_bit_float_atomics(tname, limit):
    leaf = _atomic_leaf("add", tname, use_result=False)
    n = 7 * (limit // 2)  # sums stay small integers: exact in the 16-bit type
    ones = np.full(n, 0x3F80 if tname == "bf16" else 1.0,
                   dtype=np.uint16 if tname == "bf16" else np.float16)
    cell = np.zeros(7, ones.dtype)
    run(leaf, [(n,)], ones, None, cell, None, np.zeros(n, ones.dtype), None)
    values = bf16_to_f32(cell) if tname == "bf16" else cell
    assert list(values) == [limit // 2] * 7
    maxed = _atomic_leaf("max", tname, use_result=True)
    v = np.arange(n, dtype=np.float32) % 200
    v_buf = f32_to_bf16(v) if tname == "bf16" else v.astype(np.float16)
    cell = np.zeros(7, ones.dtype)
    run(maxed, [(n,)], v_buf, None, cell, None, np.zeros(n, ones.dtype), None)
    values = bf16_to_f32(cell) if tname == "bf16" else cell
    assert list(values) == [v[k::7].max() for k in range(7)]


def test_atomics_on_booleans_store_0_or_1():
    """An i1 element is a byte 0 or 1: atomic_add is an or (a byte add would store 2), as on the
    python target (tests/test_cpu_codegen_adversarial.py tries every op)."""
    mod = leaves_from_source("""
        @hpvm.leaf
        def flag(b: InOut[Ptr[i1]], b_bytes: i64):
            hpvm.atomic_xchg(b, 0, True)
            hpvm.atomic_add(b, 1, True)
    """)
    cells = np.zeros(2, bool)
    run(mod.flag, [(5,)], cells, None)
    assert cells.view(np.uint8).tolist() == [1, 1]


@hpvm.leaf
def block_total(a: In[Ptr[f32]], a_bytes: i64) -> f32:
    node = hpvm.get_node()
    tid = hpvm.get_node_instance_id_x(node)
    n = hpvm.get_num_node_instances_x(node)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    buf = hpvm.malloc(hpvm.get_num_node_instances_x(hpvm.get_node()) * 4, f32)
    buf[tid] = a[blk * n + tid]
    hpvm.barrier()
    s = n // 2
    while s > 0:
        if tid < s:
            buf[tid] += buf[tid + s]
        hpvm.barrier()
        s //= 2
    return buf[0] + f32(tid) * 0.0


@pytest.mark.parametrize("mode", ["per_parent", "per_instance"])
def test_outputs_of_a_leaf_with_barriers(mode):
    blocks, n = 5, 32
    a = rng.random(blocks * n, dtype=np.float32)
    (out,) = run(block_total, [(n,), (blocks,)], a, None, outputs=(mode,))
    sums = _tree_sum(a, blocks, n)
    assert np.array_equal(out, sums if mode == "per_parent" else np.repeat(sums, n))
