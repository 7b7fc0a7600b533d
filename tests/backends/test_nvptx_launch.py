"""Kernels of the nvptx target launched on a real GPU, compared with NumPy on fresh random inputs.

Needs a CUDA GPU, torch with CUDA and cuda-bindings (the device machines have them); elsewhere the
module is skipped with the reason (CI assembles the same kernels in test_nvptx_codegen.py).
"""
from __future__ import annotations

import numpy as np
import pytest

from hpvm_py.backends.nvptx import device
from hpvm_py.errors import ExecutionError, LaunchError
from hpvm_py.ir import semantics as S

from cpu_harness import leaves_from_source, run
from shared_leaves import stencil

pytestmark = pytest.mark.skipif(device.unusable_reason() is not None,
                                reason=f"target nvptx cannot run here: {device.unusable_reason()}")

rng = np.random.default_rng()

LEAVES = leaves_from_source('''
@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[i] = a[i] + b[i]


@hpvm.leaf
def histogram(data: In[Ptr[u32]], data_bytes: i64, bins: InOut[Ptr[u32]], bins_bytes: i64, n: i64,
              nbins: i64):
    i = hpvm.instance_id(0)
    if i < n:
        hpvm.atomic_add(bins, i64(data[i]) % nbins, u32(1))


@hpvm.leaf
def block_histogram(data: In[Ptr[u32]], data_bytes: i64, bins: InOut[Ptr[u32]], bins_bytes: i64,
                    n: i64):
    local = hpvm.malloc(64 * 4, u32)
    me = hpvm.get_node()
    t = hpvm.get_node_instance_id_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    width = hpvm.get_num_node_instances_x(me)
    i = blk * width + t
    if i < n:
        hpvm.atomic_add(local, i64(data[i]) % 64, u32(1))
    hpvm.barrier()
    if t < 64:
        hpvm.atomic_add(bins, t, local[t])


@hpvm.leaf
def reverse_in_block(x: InOut[Ptr[f64]], x_bytes: i64, count: i64):
    scratch = hpvm.malloc(count * 8, f64)
    me = hpvm.get_node()
    t = hpvm.get_node_instance_id_x(me)
    blk = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    width = hpvm.get_num_node_instances_x(me)
    scratch[t] = x[blk * width + t]
    hpvm.barrier()
    x[blk * width + t] = scratch[width - 1 - t]


@hpvm.leaf
def zeroed_scratch(out: Out[Ptr[i32]], out_bytes: i64):
    s = hpvm.malloc(256 * 4, i32)
    t = hpvm.instance_id(0)
    out[t] = s[t] + s[255 - t]


@hpvm.leaf
def math_mix(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, z: Out[Ptr[f64]], z_bytes: i64):
    i = hpvm.instance_id(0)
    v = x[i]
    y[i] = math.sin(v) + math.exp(v * 0.5) + math.fmod(v * 7.0, 1.5) + math.sqrt(math.fabs(v))
    w = f64(v)
    z[i] = math.atan2(w, 1.5) + math.log1p(math.fabs(w)) + w ** 2.5 if w > 0.0 else math.cosh(w)


@hpvm.leaf
def min_max(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, o: Out[Ptr[f32]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[4 * i] = hpvm.math.fmin(a[i], b[i])
    o[4 * i + 1] = hpvm.math.fmax(a[i], b[i])
    o[4 * i + 2] = min(a[i], b[i])
    o[4 * i + 3] = max(a[i], b[i])
    o[4 * a_bytes // 4 + i] = math.copysign(a[i], b[i] - b[i])  # inf - inf: a NaN


@hpvm.leaf
def per_instance(v: i32, scale: i32) -> i32:
    return v * scale + i32(hpvm.instance_id(0))


@hpvm.leaf
def coordinates(out: Out[Ptr[i64]], out_bytes: i64):
    me = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(me)
    y = hpvm.get_node_instance_id_y(me)
    out[y * hpvm.get_num_node_instances_x(me) + x] = y * 1000 + x


@hpvm.leaf
def parent_ids(out: Out[Ptr[i64]], out_bytes: i64):
    me = hpvm.get_node()
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me))
    out[p * hpvm.get_num_node_instances_x(me) + hpvm.get_node_instance_id_x(me)] = p


@hpvm.leaf
def early_return(x: InOut[Ptr[i32]], x_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    if i >= n:
        return
    x[i] = x[i] * 2 + 1
''')


def test_vadd_matches_numpy():
    n = 100_003  # a tail block
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.zeros(n, dtype=np.float32)
    run(LEAVES.vadd, [(n,)], a, None, b, None, c, None, target="nvptx")
    np.testing.assert_array_equal(c, a + b)


def test_stencil_3d_matches_numpy():
    nx, ny, nz = 37, 21, 9
    a0 = rng.random(nx * ny * nz, dtype=np.float32)
    an = np.zeros_like(a0)
    run(stencil, [(nx, ny, nz)], a0, None, an, None, np.float32(0.5), np.float32(0.25),
        target="nvptx")
    grid = a0.reshape(nz, ny, nx)
    inner = (grid[1:-1, 1:-1, 2:] + grid[1:-1, 1:-1, :-2] + grid[1:-1, 2:, 1:-1] + grid[1:-1, :-2, 1:-1]
             + grid[2:, 1:-1, 1:-1] + grid[:-2, 1:-1, 1:-1]) * np.float32(0.25) - grid[1:-1, 1:-1, 1:-1] * np.float32(0.5)
    np.testing.assert_allclose(an.reshape(nz, ny, nx)[1:-1, 1:-1, 1:-1], inner, rtol=1e-6)
    assert not an.reshape(nz, ny, nx)[0].any()


def test_global_atomics_count_every_instance():
    n, nbins = 50_000, 37
    data = rng.integers(0, 1 << 30, n, dtype=np.uint32)
    bins = np.zeros(nbins, dtype=np.uint32)
    run(LEAVES.histogram, [(n + 100,)], data, None, bins, None, n, nbins, target="nvptx")
    np.testing.assert_array_equal(bins, np.bincount(data % nbins, minlength=nbins).astype(np.uint32))


def test_shared_memory_atomics_and_barrier_per_block():
    width, blocks = 128, 40
    n = width * blocks - 17
    data = rng.integers(0, 1 << 30, n, dtype=np.uint32)
    bins = np.zeros(64, dtype=np.uint32)
    run(LEAVES.block_histogram, [(width,), (blocks,)], data, None, bins, None, n, target="nvptx")
    np.testing.assert_array_equal(bins, np.bincount(data % 64, minlength=64).astype(np.uint32))


def test_dynamic_shared_memory_sized_at_launch():
    width, blocks = 96, 7
    x = rng.random(width * blocks)
    expected = x.reshape(blocks, width)[:, ::-1].reshape(-1).copy()
    run(LEAVES.reverse_in_block, [(width,), (blocks,)], x, None, width, target="nvptx")
    np.testing.assert_array_equal(x, expected)


def test_malloc_scratch_starts_zeroed():
    out = np.full(256, 7, dtype=np.int32)
    run(LEAVES.zeroed_scratch, [(256,)], out, None, target="nvptx")
    assert not out.any()


def test_libdevice_math_close_to_numpy():
    n = 4096
    x = (rng.random(n, dtype=np.float32) - 0.5) * 8
    y = np.zeros(n, dtype=np.float32)
    z = np.zeros(n, dtype=np.float64)
    run(LEAVES.math_mix, [(n,)], x, None, y, None, z, None, target="nvptx")
    v = x.astype(np.float32)
    want_y = np.sin(v) + np.exp(v * np.float32(0.5)) + np.fmod(v * np.float32(7), np.float32(1.5)) \
        + np.sqrt(np.abs(v))
    np.testing.assert_allclose(y, want_y, rtol=2e-6, atol=2e-6)
    w = v.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want_z = np.where(w > 0, np.arctan2(w, 1.5) + np.log1p(np.abs(w)) + w ** 2.5, np.cosh(w))
    np.testing.assert_allclose(z, want_z, rtol=1e-13)


def test_min_max_of_signed_zeros_and_nan_follow_the_language():
    # fmin/fmax: IEEE minimumNumber/maximumNumber (semantics.fmin); min/max: NumPy's minimum
    special = np.array([0.0, -0.0, np.nan, 1.0, -1.0, np.inf], np.float32)
    a, b = np.repeat(special, special.size), np.tile(special, special.size)
    out = np.zeros(5 * a.size, np.float32)
    run(LEAVES.min_max, [(a.size,)], a, None, b, None, out, None, target="nvptx")
    np.testing.assert_array_equal(out[4 * a.size:], np.abs(a))
    out = out[:4 * a.size]
    with np.errstate(invalid="ignore"):
        want = np.stack([S.fmin(a, b), S.fmax(a, b), np.where((a < b) | np.isnan(a), a, b),
                         np.where((a > b) | np.isnan(a), a, b)], axis=1).reshape(-1)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(want))
    np.testing.assert_array_equal(out, want)  # NaN matches NaN


def test_per_instance_inputs_and_outputs_with_parents():
    leaves, parents = 50, 9
    v = rng.integers(-1000, 1000, leaves * parents, dtype=np.int32)
    (out,) = run(LEAVES.per_instance, [(leaves,), (parents,)], v, 3,
                 modes={"v": "per_instance"}, outputs=("per_instance",), target="nvptx")
    np.testing.assert_array_equal(out, v * 3 + np.tile(np.arange(leaves, dtype=np.int32), parents))
    (first,) = run(LEAVES.per_instance, [(leaves,), (parents,)], v, 3,
                   modes={"v": "per_instance"}, outputs=("per_parent",), target="nvptx")
    np.testing.assert_array_equal(first, v.reshape(parents, leaves)[:, 0] * 3)


def test_grid_beyond_the_gpu_limits_runs_in_chunks():
    nx, ny = 3, 600_000  # more than 65535 blocks in y
    out = np.full(nx * ny, -1, dtype=np.int64)
    run(LEAVES.coordinates, [(nx, ny)], out, None, target="nvptx")
    y, x = np.divmod(np.arange(nx * ny), nx)
    np.testing.assert_array_equal(out, y * 1000 + x)
    leaves, parents = 3, 2_100_000  # more than 65535 blocks of (z, parent) pairs
    out = np.full(leaves * parents, -1, dtype=np.int64)
    run(LEAVES.parent_ids, [(leaves,), (parents,)], out, None, target="nvptx")
    np.testing.assert_array_equal(out, np.repeat(np.arange(parents), leaves))


def test_prepared_launch_runs_again_with_a_new_scalar():
    from hpvm_py.backends.base import NodeContext
    from hpvm_py.backends.nvptx import NvptxBackend
    import torch

    from cpu_harness import device_buffer

    leaf = LEAVES.early_return.ir
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "uniform"), output_modes=())
    kernel = NvptxBackend().compile_leaf(leaf, ctx)
    x = torch.zeros(100, dtype=torch.int32, device="cuda")
    prepared = kernel.prepare([device_buffer(x), np.int64(400), np.int64(10)], [], [(100,)])
    assert prepared.reusable
    prepared.run()
    prepared.set_uniform(2, 50)
    prepared.run()
    want = np.zeros(100, dtype=np.int32)
    want[:10] = 3  # twice x * 2 + 1
    want[10:50] = 1
    np.testing.assert_array_equal(x.cpu().numpy(), want)


def test_early_return_skips_the_rest():
    n = 1000
    x = rng.integers(-100, 100, n + 300, dtype=np.int32)
    want = x.copy()
    want[:n] = want[:n] * 2 + 1
    run(LEAVES.early_return, [(n + 300,)], x, None, n, target="nvptx")
    np.testing.assert_array_equal(x, want)


def test_checked_kernel_reports_the_line(monkeypatch):
    n = 300
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.zeros(n, dtype=np.float32)
    with pytest.raises(ExecutionError) as info:
        # one instance too many: a[n] is out of bounds
        run(LEAVES.vadd, [(n + 1,)], a, None, b, None, c, None, checked=True, target="nvptx")
    assert "out-of-bounds load from a[300]" in str(info.value)
    assert info.value.loc.line == LEAVES.vadd.ir.body[-1].loc.line
    np.testing.assert_array_equal(c, a + b)  # the in-bounds instances ran


def test_forced_checks_by_environment(monkeypatch):
    from hpvm_py.backends.nvptx.backend import checks_forced

    monkeypatch.setenv("HPVM_GPU_CHECK", "1")
    assert checks_forced()
    n = 64
    x = np.zeros(n, dtype=np.float32)
    with pytest.raises(ExecutionError, match="out-of-bounds"):
        run(LEAVES.vadd, [(n + 5,)], x, None, x.copy(), None, x.copy(), None, target="nvptx")


def test_group_larger_than_a_block_is_a_located_error():
    x = np.zeros(4096, dtype=np.float64)
    with pytest.raises(LaunchError, match="thread block") as info:
        run(LEAVES.reverse_in_block, [(2048,), (2,)], x, None, 2048, target="nvptx")
    assert info.value.loc.line == LEAVES.reverse_in_block.ir.loc.line


def test_shared_memory_beyond_the_device_is_a_located_error():
    x = np.zeros(64, dtype=np.float64)
    with pytest.raises(LaunchError, match="shared memory"):
        # 64 instances, but a scratch of 10**6 doubles
        run(LEAVES.reverse_in_block, [(64,), (1,)], x, None, 10**6, target="nvptx")


def test_host_buffer_is_refused():
    from hpvm_py.backends.base import NodeContext
    from hpvm_py.backends.nvptx import NvptxBackend

    from cpu_harness import buffer

    leaf = LEAVES.vadd.ir
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 3, output_modes=())
    kernel = NvptxBackend().compile_leaf(leaf, ctx)
    a = np.zeros(8, dtype=np.float32)
    with pytest.raises(LaunchError, match="host memory"):
        kernel.launch([buffer(a), np.int64(32)] * 3, [], [(8,)])
