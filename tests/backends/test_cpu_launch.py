"""cpu backend: how launches are split over threads, privatised atomics, scratch failures."""
from types import SimpleNamespace

import numpy as np
import pytest

import hpvm_py as hpvm
from cpu_harness import buffer, run
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.backends.cpu import kernel as kernel_module
from hpvm_py.errors import ExecutionError


@hpvm.leaf
def fill(out: Out[Ptr[i64]], out_bytes: i64):
    node = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(node)
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    out[p * hpvm.get_num_node_instances_x(node) + x] = p * 1000 + x


@hpvm.leaf
def fill_shared(out: Out[Ptr[i64]], out_bytes: i64):
    node = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(node)
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    s = hpvm.malloc(8, i64)
    hpvm.atomic_add(s, 0, 1)
    hpvm.barrier()
    out[p * hpvm.get_num_node_instances_x(node) + x] = s[0]


def _kernel(leaf):
    ctx = NodeContext(level_dims=(1, 1), input_modes=("buffer", "uniform"), output_modes=())
    return CpuBackend().compile_leaf(leaf.ir, ctx)


def test_partitions(monkeypatch):
    threads = 4  # whatever this host has: the split only depends on the pool's size
    monkeypatch.setattr(kernel_module, "native_pool", lambda: SimpleNamespace(threads=threads))
    k = _kernel(fill)
    assert k._partition(1, 1000, 1000) == [(0, 1, 0, 1000)]  # tiny: the calling thread only
    many_parents = k._partition(1000, 1000, 1000)
    assert all(o == (0, 1000) for *_, o0, o1 in many_parents for o in [(o0, o1)])
    assert sum(p1 - p0 for p0, p1, _, _ in many_parents) == 1000
    few_parents = k._partition(1, 10**6, 10**6)  # split the leaf's outermost dimension
    assert len(few_parents) == threads * kernel_module.PARTS_PER_THREAD
    assert few_parents[0][2] == 0 and few_parents[-1][3] == 10**6
    grouped = _kernel(fill_shared)._partition(3, 10**6, 10**6)  # groups stay whole
    assert [(p0, p1, o0, o1) for p0, p1, o0, o1 in grouped] == [(0, 1, 0, 10**6), (1, 2, 0, 10**6),
                                                                (2, 3, 0, 10**6)]


@pytest.mark.parametrize("leaf", [fill, fill_shared])
def test_every_instance_runs_once_whatever_the_split(leaf):
    P, L = 37, 3000
    out = np.zeros(P * L, np.int64)
    run(leaf, [(L,), (P,)], out, None)
    want = (np.arange(P)[:, None] * 1000 + np.arange(L)).reshape(-1) if leaf is fill else \
        np.full(P * L, L)
    assert np.array_equal(out, want)


@hpvm.leaf
def count(d: In[Ptr[i32]], d_bytes: i64, h: InOut[Ptr[i32]], h_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    hpvm.atomic_add(h, d[i] & 15, 1)


def test_privatisation_only_when_the_copies_are_cheap(monkeypatch):
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 2, output_modes=())
    kernel = CpuBackend().compile_leaf(count.ir, ctx)
    assert kernel.info.private == {"h": "add"}
    d = np.arange(1 << 18, dtype=np.int32)
    small, large = np.zeros(16, np.int32), np.zeros(1 << 20, np.int32)
    assert kernel._privates([buffer(d), 0, buffer(small), 0], 4, d.size)
    assert not kernel._privates([buffer(d), 0, buffer(large), 0], 4, d.size)
    assert kernel._privates([buffer(d), 0, buffer(small), 0], 1, d.size)  # plain increments
    for h in (small, large):  # both ways give the same counts
        kernel.launch([buffer(d), np.int64(d.nbytes), buffer(h), np.int64(h.nbytes)], [], [(d.size,)])
        assert list(h[:16]) == [d.size // 16] * 16


@hpvm.leaf
def scratch_size(n: i64, out: Out[Ptr[f32]], out_bytes: i64):
    s = hpvm.malloc(n * 4, f32)
    s[0] = 1.0
    out[hpvm.get_node_instance_id_x(hpvm.get_node())] = s[0]


def test_failed_scratch_allocation_is_an_error():
    out = np.zeros(4, np.float32)
    run(scratch_size, [(4,), ()], 2, out, None)
    assert list(out) == [1.0] * 4
    with pytest.raises(ExecutionError, match="could not allocate"):
        run(scratch_size, [(4,), ()], -1, out, None)
    with pytest.raises(ExecutionError, match="could not allocate"):
        run(scratch_size, [(4,), ()], 2**61, out, None)


def test_concurrent_launches_on_one_privatised_buffer():
    import threading

    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform") * 2, output_modes=())
    kernel = CpuBackend().compile_leaf(count.ir, ctx)
    d = np.arange(1 << 17, dtype=np.int32)
    h = np.zeros(16, np.int32)
    args = [buffer(d), np.int64(d.nbytes), buffer(h), np.int64(h.nbytes)]
    threads = [threading.Thread(target=lambda: [kernel.launch(args, [], [(d.size,)])
                                                for _ in range(5)]) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert list(h) == [15 * d.size // 16] * 16  # merged atomically: no update lost
