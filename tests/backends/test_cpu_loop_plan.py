"""cpu backend: the execution plans (loop interchange, regions around barriers) keep the results of
running each instance on its own, bit for bit."""
import numpy as np

import hpvm_py as hpvm
from cpu_harness import run
from hpvm_py import In, Out, Ptr, f32, i32, i64
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends.cpu import loop_plan as P
from hpvm_py.backends.cpu.passes import PASSES

rng = np.random.default_rng(11)


def _plan(leaf, dims, modes):
    ctx = NodeContext(dims, modes, ())
    return P.make_plan(PASSES.final(leaf.ir, ctx), ctx)


@hpvm.leaf
def matmul(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
           C_bytes: i64, K: i64):
    col = hpvm.get_node_instance_id_x(hpvm.get_node())
    row = hpvm.get_node_instance_id_y(hpvm.get_node())
    n = hpvm.get_num_node_instances_x(hpvm.get_node())
    acc = f32(0.0)
    for k in range(K):
        acc += A[row * K + k] * B[k * n + col]
    C[row * n + col] = acc


def test_naive_matmul_is_interchanged_and_exact():
    plan = _plan(matmul, (2,), ("buffer", "uniform") * 3 + ("uniform",))
    assert plan.kind == "row"
    assert plan.storage["acc"] == P.INSTANCE and plan.storage["k"] == P.GROUP
    assert plan.storage["row"] == P.REMAT and plan.storage["col"] == P.REMAT
    M, N, K = 70, 1100, 33  # N spans several tiles and is split between threads
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    run(matmul, [(N, M)], A, None, B, None, C, None, K)
    want = np.zeros((M, N), np.float32)
    for k in range(K):  # each instance adds in k order: the same roundings
        want += A[:, k:k + 1] * B[k:k + 1, :]
    assert np.array_equal(C, want)


@hpvm.leaf
def guarded(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, out: Out[Ptr[f32]],
            out_bytes: i64, cnt: Out[Ptr[i32]], cnt_bytes: i64, K: i64, valid: i64):
    col = hpvm.get_node_instance_id_x(hpvm.get_node())
    n = hpvm.get_num_node_instances_x(hpvm.get_node())
    if col >= valid:
        return
    acc = f32(0.0)
    c = 0
    last = -1
    for k in range(K):
        v = B[k * n + col]
        if v > 0.5:
            acc += v * A[k]
            c += 1
        for j in range(2):
            acc += f32(j) * 0.25
        last = k
    for k2 in range(3):
        acc = acc * 0.5 + B[k2 * n + col]
    out[col] = acc
    cnt[col] = i32(c + 100 * last + 10000 * k2)


def test_interchange_with_early_return_branches_and_nested_loops():
    plan = _plan(guarded, (1,), ("buffer", "uniform") * 4 + ("uniform", "uniform"))
    assert plan.kind == "row"
    # `if col >= valid: return` became the end of the x range
    assert [(b.dim, b.lower) for b in plan.bounds] == [(0, False)]
    N, K, valid = 1500, 20, 1300
    A = rng.random(K, dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    out = np.full(N, -1, np.float32)
    cnt = np.full(N, -1, np.int32)
    run(guarded, [(N,)], A, None, B, None, out, None, cnt, None, K, valid)
    for col in range(0, N, 7):
        if col >= valid:
            assert out[col] == -1 and cnt[col] == -1
            continue
        acc, c = np.float32(0), 0
        for k in range(K):
            v = B[k, col]
            if v > 0.5:
                acc = np.float32(acc + v * A[k])
                c += 1
            acc = np.float32(acc + np.float32(0.0))
            acc = np.float32(acc + np.float32(0.25))
        for k2 in range(3):
            acc = np.float32(acc * np.float32(0.5) + B[k2, col])
        assert out[col] == acc and cnt[col] == c + 100 * (K - 1) + 20000, col


@hpvm.leaf
def tiled_matmul(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
                 C_bytes: i64, K: i64, N: i64):
    node = hpvm.get_node()
    parent = hpvm.get_parent_node(node)
    tx = hpvm.get_node_instance_id_x(node)
    ty = hpvm.get_node_instance_id_y(node)
    row = hpvm.get_node_instance_id_y(parent) * 8 + ty
    col = hpvm.get_node_instance_id_x(parent) * 8 + tx
    As = hpvm.malloc(8 * 8 * 4, f32)
    Bs = hpvm.malloc(8 * 8 * 4, f32)
    acc = f32(0.0)
    for t in range(K // 8):
        As[ty * 8 + tx] = A[row * K + t * 8 + tx]
        Bs[ty * 8 + tx] = B[(t * 8 + ty) * N + col]
        hpvm.barrier()
        for kk in range(8):
            acc += As[ty * 8 + kk] * Bs[kk * 8 + tx]
        hpvm.barrier()
    C[row * N + col] = acc


def test_tiled_matmul_regions_and_interchange():
    plan = _plan(tiled_matmul, (2, 2), ("buffer", "uniform") * 3 + ("uniform", "uniform"))
    assert plan.kind == "group"
    (loop,) = [i for i in plan.items if isinstance(i, P.GroupFor)]
    assert any(isinstance(i, P.GroupFor) and i.stmt.var == "kk" for i in loop.body)
    M, N, K = 24, 40, 32
    A = rng.random((M, K), dtype=np.float32)
    B = rng.random((K, N), dtype=np.float32)
    C = np.zeros((M, N), np.float32)
    run(tiled_matmul, [(8, 8), (N // 8, M // 8)], A, None, B, None, C, None, K, N)
    want = np.zeros((M, N), np.float32)
    for k in range(K):
        want += A[:, k:k + 1] * B[k:k + 1, :]
    assert np.array_equal(C, want)


@hpvm.leaf
def strided(A: In[Ptr[f32]], A_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, K: i64):
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    acc = f32(0.0)
    for k in range(K):
        acc += A[row * K + k]
    out[row] = acc


def test_loops_without_unit_stride_access_stay_inside_the_instance():
    assert _plan(strided, (1,), ("buffer", "uniform", "buffer", "uniform", "uniform")).kind == "flat"


@hpvm.leaf
def triangular(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
               C_bytes: i64):
    node = hpvm.get_node()
    col = hpvm.get_node_instance_id_x(node)
    row = hpvm.get_node_instance_id_y(node)
    plane = hpvm.get_node_instance_id_z(node)
    n = hpvm.get_num_node_instances_x(node)
    m = hpvm.get_num_node_instances_y(node)
    acc = f32(0.0)
    for k in range(row + 1):  # differs between rows: groups stay within one row
        acc += A[(plane * m + row) * m + k] * B[k * n + col]
    C[(plane * m + row) * n + col] = acc


def test_row_dependent_loops_keep_one_row_per_group():
    assert _plan(matmul, (2,), ("buffer", "uniform") * 3 + ("uniform",)).rows > 1
    plan = _plan(triangular, (3,), ("buffer", "uniform") * 3)
    assert plan.kind == "row" and plan.rows == 1
    Z, M, N = 3, 9, 600
    A = rng.random((Z, M, M), dtype=np.float32)
    B = rng.random((M, N), dtype=np.float32)
    C = np.zeros((Z, M, N), np.float32)
    run(triangular, [(N, M, Z)], A, None, B, None, C, None)
    want = np.zeros((Z, M, N), np.float32)
    for row in range(M):
        for k in range(row + 1):
            want[:, row, :] += A[:, row, k:k + 1] * B[k]
    assert np.array_equal(C, want)


@hpvm.leaf
def batched(A: In[Ptr[f32]], A_bytes: i64, B: In[Ptr[f32]], B_bytes: i64, C: Out[Ptr[f32]],
            C_bytes: i64, K: i64):
    node = hpvm.get_node()
    col = hpvm.get_node_instance_id_x(node)
    row = hpvm.get_node_instance_id_y(node)
    batch = hpvm.get_node_instance_id_z(node)
    n = hpvm.get_num_node_instances_x(node)
    m = hpvm.get_num_node_instances_y(node)
    acc = f32(0.0)
    for k in range(K):
        acc += A[(batch * m + row) * K + k] * B[(batch * K + k) * n + col]
    C[(batch * m + row) * n + col] = acc


def test_three_dimensional_blocks_of_rows():
    plan = _plan(batched, (3,), ("buffer", "uniform") * 3 + ("uniform",))
    assert plan.kind == "row" and plan.rows > 1
    Z, M, N, K = 3, 10, 530, 7
    A = rng.random((Z, M, K), dtype=np.float32)
    B = rng.random((Z, K, N), dtype=np.float32)
    C = np.zeros((Z, M, N), np.float32)
    run(batched, [(N, M, Z)], A, None, B, None, C, None, K)
    want = np.zeros((Z, M, N), np.float32)
    for k in range(K):
        want += A[:, :, k:k + 1] * B[:, k:k + 1, :]
    assert np.array_equal(C, want)
