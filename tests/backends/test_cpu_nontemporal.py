"""cpu backend: non-temporal stores for large outputs: which stores qualify, when a launch uses
them, and results equal bit for bit to normal stores (unaligned views, threads, launch after
launch)."""
import re
import threading

import llvmlite.binding as llvm
import numpy as np
import pytest
from cpu_harness import buffer, run
from shared_leaves import stencil

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i16, i64, u8
from hpvm_py.backends.base import NodeContext
from hpvm_py.backends import jit
from hpvm_py.backends.cpu import CpuBackend
from hpvm_py.backends.cpu import kernel as kernel_module
from hpvm_py.backends.cpu import storechoice
from hpvm_py.backends.cpu.backend import _analyse
from hpvm_py.backends.cpu.nontemporal import SUPPORTED, nt_stores
from hpvm_py.backends.cpu.threads import native_pool
from hpvm_py.support import stats
from hpvm_py.types import PtrType

pytestmark = pytest.mark.skipif(not SUPPORTED, reason="non-temporal stores are x86-64 only")

rng = np.random.default_rng(7)


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
         c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + b[i]


@hpvm.leaf
def saxpy(alpha: f32, x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    y[i] = alpha * x[i] + y[i]


@hpvm.leaf
def strided(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[2 * i] = a[i]


@hpvm.leaf
def conditional(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if a[i] > 0.5:
        c[i] = a[i]


@hpvm.leaf
def counted(a: In[Ptr[i64]], a_bytes: i64, c: InOut[Ptr[i64]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    hpvm.atomic_add(c, i, a[i])


@hpvm.leaf
def row_sums(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64,
             d: Out[Ptr[f32]], d_bytes: i64, n: i64):
    node = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(node)
    nx = hpvm.get_num_node_instances_x(node)
    acc = f32(0)
    for k in range(n):
        acc += a[k * nx + i]
        d[k * nx + i] = acc  # inside the interchanged loop: written again and again
    c[i] = acc


@hpvm.leaf
def two_outputs(a: In[Ptr[f64]], a_bytes: i64, c: Out[Ptr[f64]], c_bytes: i64,
                d: Out[Ptr[f64]], d_bytes: i64, shift: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] * 3.0
    d[i + shift] = a[i] - 1.0


@hpvm.leaf
def reversed_blocks(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    node = hpvm.get_node()
    x = hpvm.get_node_instance_id_x(node)
    n = hpvm.get_num_node_instances_x(node)
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(node))
    hpvm.barrier()
    c[p * n + x] = a[p * n + n - 1 - x] * a[p * n + x]


@hpvm.leaf
def widen_u8(a: In[Ptr[u8]], a_bytes: i64, c: Out[Ptr[u8]], c_bytes: i64, d: Out[Ptr[i16]],
             d_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] ^ u8(0x5A)
    d[i] = i16(a[i]) * i16(-3)


def _modes(leaf):
    return tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.ir.params)


def _context(leaf, dims):
    return NodeContext(level_dims=dims, input_modes=_modes(leaf), output_modes=())


def _qualifying(leaf, dims=(1,)):
    ctx = _context(leaf, dims)
    prepared, plan = _analyse(leaf.ir, ctx)
    return sorted(s.store.ptr.name for stores in nt_stores(prepared, ctx, plan).values()
                  for s in stores)


def test_which_stores_qualify():
    assert _qualifying(vadd) == ["c"]
    assert _qualifying(stencil, (3,)) == ["An"]  # the guard became loop ranges
    assert _qualifying(reversed_blocks, (1, 1)) == ["c"]  # after a barrier
    assert _qualifying(two_outputs) == ["c", "d"]
    assert _qualifying(saxpy) == []  # y is read too: 10% slower with non-temporal stores
    assert _qualifying(strided) == []  # every other element
    assert _qualifying(conditional) == []  # a masked store has no non-temporal form
    assert _qualifying(counted) == []  # atomics never
    assert _qualifying(row_sums) == ["c"]  # not d, which the uniform loop writes n times


def _launch(leaf, extents, *args, nontemporal):
    """Run the leaf with or without non-temporal stores; returns whether they were used."""
    before = stats.snapshot().get("cpu_nontemporal_launches", 0)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HPVM_CPU_NONTEMPORAL", "on" if nontemporal else "off")
        run(leaf, extents, *args)
    return stats.snapshot().get("cpu_nontemporal_launches", 0) > before


def test_only_launches_that_write_enough_use_them(monkeypatch):
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1 << 20)
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))

    def uses_them(n, size=None):
        a, b, c = (np.zeros(size or n, np.float32) for _ in range(3))
        args = [buffer(a), a.nbytes, buffer(b), b.nbytes, buffer(c), c.nbytes]
        return kernel.prepare(args, [], [(n,)]).nontemporal

    assert uses_them(1 << 18)  # 1 MiB written
    assert not uses_them((1 << 18) - 1)
    assert not uses_them(1 << 10, size=1 << 20)  # a large buffer, little of it written
    checked = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)), checked=True)
    a = np.zeros(1 << 20, np.float32)
    args = [buffer(a), a.nbytes, buffer(a), a.nbytes, buffer(a.copy()), a.nbytes]
    assert not checked.prepare(args, [], [(1 << 20,)]).nontemporal
    assert kernel_module.last_level_cache_bytes() >= 64 << 10  # any x86-64 cache, or the default


def _floats(n, dtype):
    """Random values with the awkward ones mixed in: NaN payloads, infinities, -0, subnormals."""
    values = rng.standard_normal(n).astype(dtype)
    special = np.array([np.nan, -np.inf, np.inf, -0.0, np.finfo(dtype).tiny / 4], dtype)
    values[rng.integers(0, n, n // 7)] = rng.choice(special, n // 7)
    return values


def _sum(a, b):
    with np.errstate(invalid="ignore"):  # inf + -inf
        return a + b


@pytest.mark.parametrize("n", [1, 15, 16, 17, 100, 1000, 70001, 1 << 20])
def test_same_bits_as_normal_stores(n):
    a, b = _floats(n, np.float32), _floats(n, np.float32)
    got, want = np.zeros(n, np.float32), np.zeros(n, np.float32)
    assert _launch(vadd, [(n,)], a, None, b, None, got, None, nontemporal=True)
    assert not _launch(vadd, [(n,)], a, None, b, None, want, None, nontemporal=False)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("shift", [0, 1, 8])
def test_two_outputs_at_different_line_offsets(shift):
    n = 50_000
    a = _floats(n, np.float64)
    results = []
    for nontemporal in (True, False):
        c, d = np.zeros(n, np.float64), np.zeros(n + shift, np.float64)
        assert _launch(two_outputs, [(n,)], a, None, c, None, d, None, shift,
                       nontemporal=nontemporal) == nontemporal
        results.append((c.view(np.uint64), d.view(np.uint64)))
    assert all(np.array_equal(x, y) for x, y in zip(*results))


def test_small_integer_elements():
    n = 100_003
    a = rng.integers(0, 256, n, dtype=np.uint8)
    c, d = np.zeros(n, np.uint8), np.zeros(n, np.int16)
    assert _launch(widen_u8, [(n,)], a, None, c, None, d, None, nontemporal=True)
    assert np.array_equal(c, a ^ np.uint8(0x5A))
    assert np.array_equal(d, a.astype(np.int16) * np.int16(-3))


def test_unaligned_views():
    """Views that start anywhere in a line, and one whose floats are not even 4-byte aligned."""
    n = 40_000
    for offset in range(17):
        a = _floats(n + 17, np.float32)[offset:offset + n]
        b = _floats(n + 17, np.float32)[16 - offset:16 - offset + n]
        whole = np.full(n + 40, 7, np.float32)
        c = whole[(3 * offset) % 17:(3 * offset) % 17 + n]
        assert _launch(vadd, [(n,)], a, None, b, None, c, None, nontemporal=True)
        assert np.array_equal(c.view(np.uint32), _sum(a, b).view(np.uint32))
        outside = np.ones(whole.size, bool)
        outside[(3 * offset) % 17:(3 * offset) % 17 + n] = False
        assert np.all(whole[outside] == 7)
    raw = np.zeros(4 * n + 1, np.uint8)
    c = np.frombuffer(raw.data, np.float32, n, offset=1)  # a float at every 4k + 1 bytes
    assert c.ctypes.data % 4 == 1 and not c.flags.aligned
    a, b = _floats(n, np.float32), _floats(n, np.float32)
    assert _launch(vadd, [(n,)], a, None, b, None, c, None, nontemporal=True)
    assert np.array_equal(np.frombuffer(raw.data, np.uint32, n, offset=1),
                          _sum(a, b).view(np.uint32))


def test_stencil_rows():
    nz, ny, nx = 10, 33, 70
    A0 = _floats(nz * ny * nx, np.float32).reshape(nz, ny, nx)
    got, want = np.full_like(A0, -1), np.full_like(A0, -1)
    c0, c1 = np.float32(0.5), np.float32(0.25)
    assert _launch(stencil, [(nx, ny, nz)], A0, None, got, None, c0, c1, nontemporal=True)
    _launch(stencil, [(nx, ny, nz)], A0, None, want, None, c0, c1, nontemporal=False)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_after_a_barrier():
    parents, width = 300, 256
    a = _floats(parents * width, np.float32)
    c = np.zeros_like(a)
    assert _launch(reversed_blocks, [(width,), (parents,)], a, None, c, None, nontemporal=True)
    blocks = a.reshape(parents, width)
    with np.errstate(invalid="ignore"):
        want = blocks[:, ::-1] * blocks
    assert np.array_equal(c.view(np.uint32), want.view(np.uint32).reshape(-1))


def test_partitions_and_consecutive_launches(monkeypatch):
    """Several partitions on the native pool write one array; each launch then reads what the
    previous one wrote (the fence at the end of every partition makes it visible)."""
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "on")
    n = 1 << 20
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))
    if native_pool().threads > 1:
        assert len(kernel._partition(1, n, n)) > 1
    ones = np.ones(n, np.float32)
    x, y = np.zeros(n, np.float32), np.zeros(n, np.float32)
    for step in range(1, 9):
        src, dst = (x, y) if step % 2 else (y, x)
        args = [buffer(src), src.nbytes, buffer(ones), ones.nbytes, buffer(dst), dst.nbytes]
        prepared = kernel.prepare(args, [], [(n,)])
        assert prepared.nontemporal
        prepared.run()
        assert np.all(dst == step)


def test_concurrent_launches(monkeypatch):
    """Launches from several Python threads: one holds the pool, the others run on their own."""
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "on")
    n = 300_000
    inputs = [(_floats(n, np.float32), _floats(n, np.float32)) for _ in range(4)]
    outputs = [np.zeros(n, np.float32) for _ in inputs]

    def launch(k):
        for _ in range(5):
            run(vadd, [(n,)], inputs[k][0], None, inputs[k][1], None, outputs[k], None)

    threads = [threading.Thread(target=launch, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for (a, b), c in zip(inputs, outputs):
        assert np.array_equal(c.view(np.uint32), _sum(a, b).view(np.uint32))


def test_aligned_vector_stores_in_the_code():
    ctx = _context(vadd, (1,))
    text = CpuBackend().llvm_ir(vadd.ir, ctx, nontemporal=True)
    wide = [line for line in text.splitlines() if "store <" in line and "!nontemporal" in line]
    assert wide
    for line in wide:  # each wide store is aligned to its own width (32 bytes on AVX2, 64 on AVX-512)
        lanes, bits = re.search(r"store <(\d+) x (?:float|i(\d+))>", line).groups()
        width = int(lanes) * (int(bits) if bits else 32) // 8
        assert int(re.search(r"align (\d+)", line).group(1)) >= width, line
    assert "llvm.x86.sse.sfence" in text
    assembly = jit.target_machine().emit_assembly(llvm.parse_assembly(text))
    assert "movntps" in assembly
    assert "!nontemporal" not in CpuBackend().llvm_ir(vadd.ir, ctx)


def test_the_setting_forces_them_on_or_off(monkeypatch):
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))

    def uses_them(n):
        a, b, c = (np.zeros(n, np.float32) for _ in range(3))
        return kernel.prepare([buffer(a), a.nbytes, buffer(b), b.nbytes, buffer(c), c.nbytes],
                              [], [(n,)]).nontemporal

    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "on")
    assert uses_them(1 << 10)  # 4 KiB: far below the automatic threshold
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "off")
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1)
    assert not uses_them(1 << 18)
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "auto")
    assert uses_them(1 << 18)
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "sometimes")
    with pytest.raises(hpvm.errors.LaunchError, match="HPVM_CPU_NONTEMPORAL='sometimes'"):
        uses_them(1 << 10)


def _size_class(written: int, row: int) -> tuple[int, int]:
    """A store trial's class: the bytes written and the x loops' length (kernel.py)."""
    return written.bit_length(), min(row, kernel_module.ROWS_ALIKE).bit_length()


@hpvm.leaf
def scale_rows(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, nx: i64):
    at = hpvm.instance_id(1) * nx + hpvm.instance_id(0)
    c[at] = a[at] * 2.0


def test_rows_without_a_whole_line_keep_normal_stores_and_row_lengths_are_timed_apart(monkeypatch):
    """auto: an x loop too short to write a whole cache line gets normal stores, no trial (the
    three-part loops only cost there: 1.3-2x for rows of 8 to 64 f32 on a 16-core host); rows
    of other lengths are separate classes (a choice timed on long rows was kept for short ones).
    The results are the same bits whatever the stores."""
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1 << 16)
    monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "auto")
    kernel = CpuBackend().compile_leaf(scale_rows.ir, _context(scale_rows, (2,)))
    n = 1 << 17
    a = _floats(n, np.float32)
    for nx, timed in ((8, False), (15, False), (16, True), (1024, True), (n, True)):
        c = np.zeros(n, np.float32)
        launch = kernel.prepare([buffer(a), a.nbytes, buffer(c), c.nbytes, nx], [], [(nx, n // nx)])
        assert (launch.trial is not None) == timed, nx
        launch.run()
        m = nx * (n // nx)  # (15 does not divide n)
        np.testing.assert_array_equal(c[:m].view(np.uint32), (a[:m] * np.float32(2)).view(np.uint32))
    assert set(kernel._store_trials) == {_size_class(n * 4, nx) for nx in (16, 1024, n)}


def test_a_size_class_times_both_stores_then_keeps_the_faster(monkeypatch):
    """auto: the first launches of a size class alternate the drivers (timed), then every launch of
    the class, a prepared one run again included, uses the faster; results never change."""
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1 << 16)
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))
    n = 1 << 16
    a, b = _floats(n, np.float32), _floats(n, np.float32)
    with np.errstate(invalid="ignore"):
        want = a + b
    c = np.zeros(n, np.float32)
    args = [buffer(a), a.nbytes, buffer(b), b.nbytes, buffer(c), c.nbytes]
    reused = kernel.prepare(args, [], [(n,)])
    used = []
    for _ in range(2 * storechoice.TRIAL_RUNS):
        c[:] = 0
        reused.run()
        used.append(reused.nontemporal)
        assert np.array_equal(c.view(np.uint32), want.view(np.uint32))
    assert used[:2] == [True, False]  # alternating, non-temporal first
    trial = kernel._store_trials[_size_class(n * 4, n)]
    assert trial.choice is not None and reused.trial is None
    assert reused.nontemporal == trial.choice
    assert kernel.prepare(args, [], [(n,)]).nontemporal == trial.choice
    small = np.zeros(1 << 10, np.float32)  # another size class, below the threshold: normal stores
    assert not kernel.prepare([buffer(small), small.nbytes] * 3, [], [(1 << 10,)]).nontemporal


def test_a_later_process_takes_the_size_class_choice_from_the_disk_cache(monkeypatch):
    """The decision is kept on disk: a kernel that has not timed the class yet (a later process,
    here the same kernel with its trials forgotten) starts with it, no launch alternating; an
    entry that is not a choice is ignored and the class is timed again."""
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1 << 16)
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))
    n = 1 << 17
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    args = [buffer(a), a.nbytes, buffer(b), b.nbytes, buffer(c), c.nbytes]
    launch = kernel.prepare(args, [], [(n,)])
    for _ in range(2 * storechoice.TRIAL_RUNS):
        launch.run()
    size_class = _size_class(n * 4, n)
    decided = kernel._store_trials[size_class].choice
    assert decided is not None
    kernel._store_trials.clear()
    before = stats.count("store_choice_disk_hits")
    again = kernel.prepare(args, [], [(n,)])
    assert again.nontemporal == decided and again.trial is None  # no timing: the kept choice
    assert stats.count("store_choice_disk_hits") == before + 1
    np.testing.assert_array_equal(c, a + b)
    key = kernel._store_trials[size_class]._key
    storechoice.cache.store(key, storechoice.SUFFIX, b'{"nontemporal": "yes"}')
    kernel._store_trials.clear()
    assert kernel.prepare(args, [], [(n,)]).trial is not None  # timed afresh


def test_the_disk_cache_keys_a_size_class_choice_by_the_code_s_cpu_level(monkeypatch):
    """The choice was timed on code for one HPVM_CPU_LEVEL by one LLVM: a process whose code is
    for another level (or made by another llvmlite) times its own, not the other's kept choice."""
    monkeypatch.setattr(kernel_module, "NONTEMPORAL_BYTES", 1 << 16)
    kernel = CpuBackend().compile_leaf(vadd.ir, _context(vadd, (1,)))
    n = 1 << 17
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    args = [buffer(a), a.nbytes, buffer(b), b.nbytes, buffer(c), c.nbytes]
    size_class = _size_class(n * 4, n)
    keys = []
    for signature in ("llvm=20;cpu=one", "llvm=20;cpu=another"):
        monkeypatch.setattr(kernel_module, "host_signature",
                            lambda cpu, signature=signature: signature)
        kernel._store_trials.clear()
        kernel.prepare(args, [], [(n,)])
        keys.append(kernel._store_trials[size_class]._key)
    assert keys[0] != keys[1]
