"""Claims of the host API's docs (docs/api.md, docs/streaming.md, docs/runtime.md), checked
adversarially: every mistake is an HPVMError at the user's line, never an internal error."""
from __future__ import annotations

import collections
import io
import os
import threading
import time

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64
from hpvm_py.errors import (DistributedError, FrontendError, HPVMTimeoutError, LaunchError,
                             StreamError)

from errcheck import check_error
from programs import api_prog as P

HERE = os.path.abspath(__file__)


@pytest.fixture(params=["python", "cpu"])
def rt(request):
    with hpvm.runtime(request.param):
        yield request.param


def test_wait_push_and_pop_refuse_objects_that_are_no_handle(rt):
    """wait(), push() and pop() checked a handle by its methods' names, so any object with a
    close() or pop() (a file, a generator, a list, a dict) had that method called: an internal
    TypeError or KeyError instead of the error saying what they take."""
    with pytest.raises(LaunchError) as info:
        hpvm.wait(io.StringIO())  # ERR:wait-file
    check_error(info.value, LaunchError, HERE, "wait-file", None)
    with pytest.raises(LaunchError) as info:
        hpvm.wait(x for x in ())  # ERR:wait-generator
    check_error(info.value, LaunchError, HERE, "wait-generator", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop([1, 2, 3])  # ERR:pop-list
    check_error(info.value, StreamError, HERE, "pop-list", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop({})  # ERR:pop-dict
    check_error(info.value, StreamError, HERE, "pop-dict", None)
    with pytest.raises(StreamError) as info:
        hpvm.pop(collections.deque([1]), timeout=1)  # ERR:pop-deque
    check_error(info.value, StreamError, HERE, "pop-deque", None)

    class Pusher:
        def push(self, *args):
            return None

    with pytest.raises(StreamError) as info:
        hpvm.push(Pusher(), 1)  # ERR:push-duck
    check_error(info.value, StreamError, HERE, "push-duck", None)
    # the real handles still work
    a = np.random.default_rng().random(8, dtype=np.float32)
    c = np.zeros(8, np.float32)
    s = hpvm.launch(P.vinc, stream=True)
    hpvm.push(s, a, c, 8)
    assert hpvm.pop(s, timeout=60) == ()
    hpvm.wait(s, timeout=60)
    np.testing.assert_array_equal(c, a + np.float32(1))


def test_a_target_that_is_no_name_is_refused_by_init_runtime_and_compile():
    """init(), runtime() and compile() looked a target up in the targets table as a key: a list,
    a dict or an array was an internal TypeError (unhashable), and compile()'s "" or {} compiled
    for the default target."""
    for target in (["cpu"], np.array(["cpu"])):
        with pytest.raises(LaunchError, match="is not one of") as info:
            hpvm.init(target)  # ERR:init-list
        check_error(info.value, LaunchError, HERE, "init-list", None)
        with pytest.raises(LaunchError, match="is not one of") as info:
            with hpvm.runtime(target):  # ERR:runtime-list
                pass
        check_error(info.value, LaunchError, HERE, "runtime-list", None)
    for target in (["cpu"], {}, ""):
        with pytest.raises(LaunchError, match="is not one of") as info:
            hpvm.compile(P.vinc, target=target)  # ERR:compile-list
        check_error(info.value, LaunchError, HERE, "compile-list", None)
    with hpvm.runtime("python"):
        with pytest.raises(LaunchError, match="is not one of") as info:
            hpvm.init({})  # ERR:init-in-runtime
        check_error(info.value, LaunchError, HERE, "init-in-runtime", None)
        assert hpvm.compile(P.vinc).target == "python"
    assert hpvm.compile(P.vinc, target=np.str_("cpu")).target == "cpu"


def test_from_text_and_load_refuse_what_is_no_text_or_folder(tmp_path):
    """from_text(None) or from_text(bytes) failed inside the lexer, load(None), load(3) or
    load(b"dir") inside pathlib: internal errors instead of a LaunchError at the call."""
    for text in (None, b"module m", 3):
        with pytest.raises(LaunchError, match="takes the IR as a str") as info:
            hpvm.from_text(text)  # ERR:from-text
        check_error(info.value, LaunchError, HERE, "from-text", None)
    for folder in (None, 3, bytes(tmp_path)):
        with pytest.raises(LaunchError, match="must be a str or os.PathLike") as info:
            hpvm.load(folder)  # ERR:load
        check_error(info.value, LaunchError, HERE, "load", None)
    # the text of a graph still goes both ways, and runs as the graph does
    (tmp_path / "vinc.hpvm").write_text(hpvm.to_text(P.vinc), encoding="utf-8")
    a = np.random.default_rng().random(8, dtype=np.float32)
    graphs = (hpvm.from_text(hpvm.to_text(P.vinc)), hpvm.load(tmp_path), hpvm.load(str(tmp_path)))
    for graph in graphs:
        c = np.zeros(8, np.float32)
        with hpvm.runtime("cpu"):
            hpvm.wait(hpvm.launch(graph, a, c, 8))
        np.testing.assert_array_equal(c, a + np.float32(1))


@hpvm.graph
def no_nodes(a: InOut[Ptr[f32]], a_bytes: i64, k: i64):
    pass


@pytest.mark.parametrize("target", ["python", "cpu", "gpu"])
def test_a_stream_of_a_graph_without_nodes_pops_one_empty_result_per_push(target):
    """A graph with no node launches (it does nothing), but its stream failed at the launch: the
    stage scheduler took a stream of no stages and read the first one (an internal IndexError)."""
    rng = np.random.default_rng()
    a = rng.random(4, dtype=np.float32)
    before = a.copy()
    with hpvm.runtime(target):
        assert hpvm.wait(hpvm.launch(no_nodes, a, 3)) is None
        s = hpvm.launch(no_nodes, stream=True, depth=1)
        count = int(rng.integers(2, 6))
        for k in range(count):
            hpvm.push(s, a, k, timeout=10)
        assert hpvm.pop(s, timeout=10) == ()
        with pytest.raises(LaunchError) as info:
            hpvm.push(s, a, timeout=10)  # ERR:no-nodes-push
        check_error(info.value, LaunchError, HERE, "no-nodes-push", None)
        hpvm.wait(s, timeout=10)
        assert list(s.results()) == [()] * (count - 1)
        with pytest.raises(StreamError):
            hpvm.pop(s, timeout=10)
    np.testing.assert_array_equal(a, before)


@hpvm.leaf
def spin(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    s = a[0]
    for k in range(n):
        s = s * 0.999 + 1.0
    a[0] = s


@hpvm.graph
def slow(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(spin, a=hpvm.streaming(a), a_bytes=hpvm.streaming(a_bytes), n=hpvm.streaming(n))


def test_a_wait_that_times_out_behind_a_blocked_push_still_closes_the_stream():
    """docs/streaming.md: "a wait() that times out has closed the stream to pushes". One that
    timed out waiting for another thread's push (blocked on a full pipeline) left the stream
    open: that thread went on pushing, and results() never ended."""
    n = 400_000  # (about half a second an item as Python)
    with hpvm.runtime("python"):
        reference = np.zeros(1, np.float32)
        hpvm.wait(hpvm.launch(slow, reference, n))
        s = hpvm.launch(slow, stream=True, depth=1)
        bufs = [np.zeros(1, np.float32) for _ in range(6)]
        outcome = []

        def pusher():
            try:
                for b in bufs:
                    hpvm.push(s, b, n)
                    outcome.append("pushed")
            except StreamError as exc:
                outcome.append(exc)

        thread = threading.Thread(target=pusher)
        thread.start()
        inner = s._stream
        end = time.monotonic() + 60
        while not (inner._pushed == 2 and inner._feed_lock.locked()) and time.monotonic() < end:
            time.sleep(0.001)  # until the third push waits for room, holding the feed lock
        assert inner._pushed == 2
        with pytest.raises(HPVMTimeoutError):
            hpvm.wait(s, timeout=0.01)
        thread.join(60)
        assert outcome[:3] == ["pushed"] * 3 and len(outcome) == 4, outcome
        assert "closed by wait()" in str(outcome[3])
        assert len(list(s.results())) == 3
        hpvm.wait(s, timeout=60)
    for b in bufs[:3]:
        np.testing.assert_array_equal(b, reference)
    for b in bufs[3:]:
        assert b[0] == 0


def test_the_counters_the_guides_name_read_zero_before_they_count(rt):
    """docs/streaming.md reads `hpvm.stats()["stream_whole_items"]` (and backends.md, distributed.md
    other counters) as counts; stats() left a counter out until it first counted, so the docs'
    own expressions were a KeyError on a fresh runtime, or on a target that never counts it."""
    named = ("stream_whole_items", "stream_slot_repoints", "stream_item_graphs",
             "stream_items_host_started", "quad_launches", "row_guard_launches",
             "collective_agreements")
    counts = hpvm.stats()
    assert all(counts[name] == 0 for name in named), counts
    a = np.random.default_rng().random(8, dtype=np.float32)
    s = hpvm.launch(P.vinc, stream=True)
    hpvm.push(s, a, np.zeros(8, np.float32), 8)
    hpvm.pop(s, timeout=60)
    hpvm.wait(s, timeout=60)
    assert hpvm.stats()["stream_whole_items"] == 0  # (whole items run on a GPU only)


@pytest.mark.parametrize("target", ["python", "cpu", "gpu"])
def test_a_tensor_launched_on_can_be_untracked_resized_and_tracked_again(target):
    """docs/runtime.md: untrack a buffer before resizing it; launching it again tracks it again.
    The python target (and copies through a fake device) viewed a CPU tensor with
    Tensor.numpy(), which marks its storage as never resizable: resize_() then failed in torch."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng()
    n = int(rng.integers(4, 40))
    a = rng.random(4 * n, dtype=np.float32)
    with hpvm.runtime(target):
        t = torch.zeros(n)
        hpvm.track_memory(t)
        hpvm.wait(hpvm.launch(P.vinc, a[:n], t, n))
        hpvm.untrack_memory(t)
        np.testing.assert_array_equal(t.clone().numpy(), a[:n] + np.float32(1))
        t.resize_(4 * n)  # (untracked: the docs' way to resize a buffer)
        hpvm.track_memory(t)
        hpvm.wait(hpvm.launch(P.vinc, a, t, 4 * n))
        hpvm.request_memory(t)
        np.testing.assert_array_equal(t.clone().numpy(), a + np.float32(1))
        u = torch.zeros(n)  # untracked, launched on: the user's again after the launch
        hpvm.wait(hpvm.launch(P.vinc, a[:n], u, n))
        u.resize_(2 * n)
    assert t.untyped_storage().resizable() and u.untyped_storage().resizable()


def test_the_symmetric_heap_takes_numpy_counts_and_refuses_what_is_no_shape(monkeypatch):
    """symmetric.empty(np.int64(3), ...) iterated the count as a tuple, as it did 2.5 and None:
    internal TypeErrors; a tuple of NumPy counts was refused as not ints."""
    torch = pytest.importorskip("torch")
    for shape in (2.5, None, "4", (2, True), (2, -1)):
        with pytest.raises(DistributedError, match="must be non-negative ints") as info:
            hpvm.symmetric.empty(shape, hpvm.f32)  # ERR:heap-shape
        check_error(info.value, DistributedError, HERE, "heap-shape", "heap-shape")
    monkeypatch.setenv("HPVM_HEAP_BYTES", "1M")
    hpvm.distributed.init(timeout=5, device="cpu")
    try:
        rng = np.random.default_rng()
        rows, cols = (int(v) for v in rng.integers(1, 9, size=2))
        a = hpvm.symmetric.empty(np.int64(rows), np.float32)
        b = hpvm.symmetric.zeros((np.int32(rows), cols), hpvm.i32)
        assert a.shape == (rows,) and a.dtype == torch.float32
        assert b.shape == (rows, cols) and b.dtype == torch.int32 and torch.all(b == 0)
    finally:
        hpvm.distributed.finalize()


@pytest.mark.parametrize("kwargs", [dict(timeout=[5]), dict(timeout=10 ** 400), dict(timeout="5"),
                                    dict(device=["cpu"]), dict(device={"cpu": 1})])
def test_distributed_init_refuses_a_timeout_or_device_of_no_kind(kwargs):
    """distributed.init() took float(timeout): "5" was 5 s, [5] and 10**400 internal errors; a
    device that is a list or a dict was looked up in the targets table (unhashable)."""
    try:
        match = "must be positive seconds|is not one of"
        with pytest.raises(DistributedError, match=match) as info:
            hpvm.distributed.init(**kwargs)  # ERR:dist-init
        check_error(info.value, DistributedError, HERE, "dist-init", None)
        assert not hpvm.distributed.is_initialized()
    finally:
        hpvm.distributed.finalize()


def test_an_rmsnorm_eps_beyond_a_float_is_refused_at_the_factory():
    """all_reduce_rmsnorm(f32, eps=10**400) passed the option check (a positive int) and failed
    as float(eps) when the node launched: an internal OverflowError."""
    with pytest.raises(FrontendError, match="must be a positive number") as info:
        hpvm.comm.all_reduce_rmsnorm(f32, eps=10 ** 400)  # ERR:rms-eps
    check_error(info.value, FrontendError, HERE, "rms-eps", "collective-options")
    eps = int(np.random.default_rng().integers(1, 1000))  # a whole number of the float's range
    assert f"eps={eps}" in hpvm.to_text(_norm_graph(hpvm.comm.all_reduce_rmsnorm(f32, eps=eps)))


def _norm_graph(node):
    @hpvm.graph
    def norm(x: InOut[Ptr[f32]], x_bytes: i64, r: InOut[Ptr[f32]], r_bytes: i64,
             w: In[Ptr[f32]], w_bytes: i64, hidden: i64):
        hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                  weight_bytes=w_bytes, hidden=hidden)

    return norm
