"""GPU runtime: launch replay (rt/replay.py on the gpu and nvptx targets), streams, the copies of
a stream, buffers resized or freed while tracked, and the reports of kernel faults
(device/faults.py).

On CI the gpu target runs on the fake device through Triton's interpreter: the same recording,
binding of device edges and lazy output copies run there; the direct call of Triton's compiled
launcher and real faults run on a GPU only (the tests marked so)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.device import faults
from hpvm_py.device.devices import cuda_available
from hpvm_py.device import gpu_device
from hpvm_py.device.outputs import DeviceOutputs
from hpvm_py.device.streams import FAKE_LOG
from hpvm_py.backends.triton.prepared import specialisation
from hpvm_py.errors import ExecutionError, LaunchError, MemoryTrackingError
from hpvm_py.support.torch_streams import torch_stream
from programs import gpu_replay_graphs as g

GPU_TARGETS = [t for t in __import__("conftest").TARGETS if t in ("gpu", "nvptx")]
pytestmark = pytest.mark.skipif(not GPU_TARGETS, reason="no GPU target here (gpu needs triton)")
needs_cuda = pytest.mark.skipif(not cuda_available(), reason="a real GPU")


@pytest.fixture(params=GPU_TARGETS)
def gpu_target(request: pytest.FixtureRequest) -> str:
    return request.param


def _replays() -> int:
    return hpvm.stats()["replayed_launches"]


def test_replays_read_new_data_in_the_same_buffers(gpu_target: str, rng) -> None:
    n = 96
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    expected = x.copy()
    with hpvm.runtime(gpu_target):
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        for step in range(3):  # x -> y -> x ...: every launch reads what the last one wrote
            k, c = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
            hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, k, c))
            expected = expected * np.float32(k) + np.float32(c)
            k, c = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
            hpvm.wait(hpvm.launch(g.chain, y, y.nbytes, x, x.nbytes, n, k, c))
            expected = expected * np.float32(k) + np.float32(c)
        replays, rebound = _replays(), hpvm.stats()["rebound_launches"]
        hpvm.request_memory(x)
        copies = hpvm.stats()
    np.testing.assert_array_equal(x, expected)
    # x -> y recorded; y -> x runs its launches, copied and pointed at the swapped buffers; each
    # replayed from then on
    assert replays == 5 and rebound == 1
    assert copies["h2d_copies"] == 1 and copies["d2h_copies"] == 1  # x in once (y is Out), x back once


def test_a_changed_buffer_is_rebound_and_a_changed_count_takes_the_full_path(gpu_target: str,
                                                                              rng) -> None:
    n = 64
    x = rng.random(n, dtype=np.float32)
    y, other = np.zeros(n, np.float32), np.zeros(n, np.float32)
    with hpvm.runtime(gpu_target):
        for buf in (x, y, other):
            hpvm.track_memory(buf)
        hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, 2.0, 1.0))
        hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, other, other.nbytes, n, 3.0, 0.0))
        assert _replays() == 1 and hpvm.stats()["rebound_launches"] == 1  # same sizes
        hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n // 2, 4.0, 0.0))
        assert _replays() == 1  # another count: the full path
        for buf in (y, other):
            hpvm.request_memory(buf)
    np.testing.assert_array_equal(other, x * np.float32(3))
    np.testing.assert_array_equal(y[:n // 2], x[:n // 2] * np.float32(4))
    np.testing.assert_array_equal(y[n // 2:], x[n // 2:] * np.float32(2) + np.float32(1))


def test_a_uniform_edge_and_a_root_output_come_to_the_host(gpu_target: str, rng) -> None:
    n = 80
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(gpu_target):
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        # a float's bits are what Triton specialises on: 1.1 and 0.3 are not multiples of 16 (the
        # compiled launcher of the others does not fit them), and back again
        for k in (1.0, 2.5, 1.1, -3.0, 0.3, 17.25):
            result = hpvm.wait(hpvm.launch(g.broadcast, x, x.nbytes, y, y.nbytes, n, k))
            hpvm.request_memory(y)
            v = x[0] * np.float32(k)
            np.testing.assert_array_equal(y, x + v)
            assert result == v * np.float32(2)
        assert _replays() == 5


def test_an_edge_that_only_orders_is_replayed_without_reading_it(gpu_target: str, rng,
                                                                 output_fetches: list) -> None:
    """The second node never reads the value on its edge (it only has to run after the first):
    replays neither bring that value to the host nor fall back to the normal path."""
    n = 72
    x = rng.random(n, dtype=np.float32)
    h, y = np.zeros(n, np.float32), np.zeros(n, np.float32)
    fetches = output_fetches
    with hpvm.runtime(gpu_target):
        for buf in (x, h, y):
            hpvm.track_memory(buf)
        before = _replays()
        for step in range(4):
            k, c = float(rng.uniform(0.5, 2)), float(rng.uniform(-1, 1))
            if step == 1:
                fetches.clear()  # the first launch records (and reads every output)
            hpvm.wait(hpvm.launch(g.ordered, x, x.nbytes, h, h.nbytes, y, y.nbytes, n, k, c))
            hpvm.request_memory(y)
            np.testing.assert_array_equal(y, x * np.float32(k) + np.float32(c))
        assert _replays() - before == 3
    assert fetches == []


def test_untracked_host_buffers_are_copied_every_launch(gpu_target: str, rng) -> None:
    """A buffer the user did not track comes back after each launch; the user may then change it,
    so such launches are never replayed from stale device copies."""
    n = 48
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(gpu_target):
        for _ in range(3):
            x[:] = rng.random(n, dtype=np.float32)
            hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, 2.0, 0.5))
            np.testing.assert_array_equal(y, x * np.float32(2) + np.float32(0.5))


def test_independent_siblings_run_on_separate_streams(gpu_target: str, rng) -> None:
    n = 64
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(gpu_target):
        fake = gpu_device().startswith("fake")
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        hpvm.wait(hpvm.launch(g.fan_in, x, x.nbytes, y, y.nbytes, n, 2.0, 3.0))
        FAKE_LOG.clear()
        for k, c in ((1.5, -1.0), (0.25, 4.0)):
            hpvm.wait(hpvm.launch(g.fan_in, x, x.nbytes, y, y.nbytes, n, k, c))
            hpvm.request_memory(y)
            np.testing.assert_array_equal(y, x * np.float32(k) + x * np.float32(c))
        assert _replays() == 2
    if not fake:
        return  # a real GPU: the results above; the operations are logged on the fake device
    log = FAKE_LOG[:len(FAKE_LOG) // 2]  # the first replay
    launches = [op for op in log if op[0] == "launch"]
    assert launches == [("launch", "load_scaled", 0), ("launch", "load_scaled", 1), ("launch", "add_into", 0)]
    side = log.index(("launch", "load_scaled", 1))
    joined = log.index(("launch", "add_into", 0))
    assert log.index(("wait", 1, ("fork", 1))) < side  # the side stream starts after stream 0's work
    recorded = [op for op in log[side:joined] if op[:2] == ("record", 1)]
    assert len(recorded) == 1 and ("wait", 0, recorded[0][2]) in log[side:joined]  # the edge
    assert log[-2:] == [("record", 1, ("join", 1)), ("wait", 0, ("join", 1))]


def test_stream_handle_0_is_torchs_default_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    """Handle 0 (the legacy default stream, where the GPU targets launch under torch's default
    stream) is torch.cuda.default_stream(), not torch.cuda.ExternalStream(0), which torch 2.11
    made another stream: a rebound replay's events were recorded and waited for there, and now
    and then its default-stream kernel read a side-stream kernel's edge before it was written.
    torch.cuda's calls are stand-ins here (no GPU): which one each handle takes."""
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch.cuda, "default_stream", lambda device=None: ("default", device))
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: ("current", device))
    monkeypatch.setattr(torch.cuda, "ExternalStream",
                        lambda handle, device=None: ("external", handle, device))
    assert torch_stream(0) == ("default", None)
    assert torch_stream(0, "cuda:1") == ("default", "cuda:1")
    assert torch_stream(None) == ("current", None)
    assert torch_stream(0x7F00, "cuda:0") == ("external", 0x7F00, "cuda:0")


@needs_cuda
def test_stream_handles_name_their_own_streams_on_a_gpu() -> None:
    torch = pytest.importorskip("torch")
    assert torch_stream(0).cuda_stream == 0  # (torch.cuda.ExternalStream(0).cuda_stream was not)
    side = torch.cuda.Stream()
    assert torch_stream(side.cuda_stream).cuda_stream == side.cuda_stream
    assert torch_stream(None).cuda_stream == torch.cuda.current_stream().cuda_stream


@needs_cuda
def test_rebound_siblings_on_the_default_stream_are_waited_for(gpu_target: str, rng) -> None:
    """test_rebind.py's rebound independent siblings, many times over: each round records a
    launch and rebinds it twice; the copies' side-stream kernel must finish before the default
    stream's kernel reads its edge (on an H200 with four such processes at once, 1 round in
    300-1000 read the edge of the launch before, with the events on ExternalStream(0))."""
    n = 64
    for _ in range(200):
        xs = [rng.random(n, dtype=np.float32) for _ in range(3)]
        ys = [np.zeros(n, np.float32) for _ in range(3)]
        with hpvm.runtime(gpu_target):
            for buf in xs + ys:
                hpvm.track_memory(buf)
            for x, y, k, c in zip(xs, ys, (2.0, 1.5, 1.5), (3.0, -1.0, -1.0)):
                hpvm.wait(hpvm.launch(g.fan_in, x, x.nbytes, y, y.nbytes, n, k, c))
            for y in ys:
                hpvm.request_memory(y)
        for x, y, k, c in zip(xs, ys, (2.0, 1.5, 1.5), (3.0, -1.0, -1.0)):
            np.testing.assert_array_equal(y, x * np.float32(k) + x * np.float32(c))


@needs_cuda
def test_replays_on_cuda_tensors_see_new_values(gpu_target: str) -> None:
    import torch

    n = 4096
    x = torch.rand(n, device="cuda")
    y = torch.zeros(n, device="cuda")
    with hpvm.runtime(gpu_target):
        for k in (1.0, 2.0, 3.0, 1.0, 16.0):
            x.uniform_()  # new data, written by torch on the device, in the same buffer
            hpvm.wait(hpvm.launch(g.chain, x, n * 4, y, n * 4, n, k, 0.25))
            torch.testing.assert_close(y, x * k + 0.25, rtol=0, atol=0)
        assert _replays() == 4


def test_triton_specialisation_classes() -> None:
    """A value keeps the compiled kernel only within its class (1; multiples of 16; the i32 and
    i64 ranges)."""
    assert specialisation(1) != specialisation(2) == specialisation(3) == specialisation(-7)
    assert specialisation(16) == specialisation(32) != specialisation(17)
    assert specialisation(2**31) != specialisation(2**31 - 16) == specialisation(0)
    assert specialisation(2**63) != specialisation(2**62)


def test_a_buffer_resized_while_tracked_is_refused(compiled_target: str) -> None:
    torch = pytest.importorskip("torch")
    x = torch.arange(32, dtype=torch.float32)
    y = torch.zeros(32)
    with hpvm.runtime(compiled_target):
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        for _ in range(2):  # the second launch is a replay on compiled targets
            hpvm.wait(hpvm.launch(g.chain, x, 128, y, 128, 32, 1.0, 0.0))
        y.set_(torch.zeros(4096))  # new memory under the same tensor: the tracked copies are stale
        with pytest.raises(MemoryTrackingError, match="resized or its memory freed.*untrack_memory"):
            hpvm.wait(hpvm.launch(g.chain, x, 128, y, 128, 32, 1.0, 0.0))
        hpvm.track_memory(y)  # tracked again: a new object, usable
        hpvm.wait(hpvm.launch(g.chain, x, 128, y, 128, 32, 2.0, 0.0))
        hpvm.request_memory(y)
    assert torch.equal(y[:32], x * 2)


def test_a_torch_buffer_freed_while_tracked_is_refused(gpu_target: str) -> None:
    """(On the cpu target the tensor's memory is shared with NumPy views, and torch refuses to
    free it.)"""
    torch = pytest.importorskip("torch")
    x = torch.arange(32, dtype=torch.float32)
    y = torch.zeros(32)
    with hpvm.runtime(gpu_target):
        hpvm.track_memory(y)
        hpvm.wait(hpvm.launch(g.chain, x, 128, y, 128, 32, 1.0, 0.0))
        y.untyped_storage().resize_(0)  # freed under the tracker
        with pytest.raises(MemoryTrackingError, match="untrack_memory"):
            hpvm.request_memory(y)
        with pytest.raises(MemoryTrackingError, match="not tracked"):  # forgotten after the report
            hpvm.request_memory(y)


def test_a_fault_names_the_leaf_and_stops_gpu_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """What a fault report says and does, with the error CUDA gives at the first wait."""
    monkeypatch.setattr(faults, "_lost", None)

    class Faulted:
        def reshape(self, *_: object) -> "Faulted":
            raise RuntimeError("CUDA error: an illegal memory access was encountered")

    faults.launched("earlier", None)
    faults.launched("scale_rows", None)
    outputs = DeviceOutputs([(np.zeros(1, np.float32), Faulted())], "scale_rows", None)
    with pytest.raises(ExecutionError, match="scale_rows.*earlier.*illegal memory access.*restart"):
        outputs.fetch()
    x = np.zeros(8, np.float32)
    with hpvm.runtime("gpu"), pytest.raises(LaunchError, match="unusable after an earlier kernel fault"):
        hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, x, x.nbytes, 8, 1.0, 0.0))


# torch's wording of CUDA errors: the error's text, then advice that every message carries
_TORCH_ADVICE = ("\nCUDA kernel errors might be asynchronously reported at some other API call, so "
                 "the stacktrace below might be incorrect.\nFor debugging consider passing "
                 "CUDA_LAUNCH_BLOCKING=1\nCompile with `TORCH_USE_CUDA_DSA` to enable device-side "
                 "assertions.\n")


@pytest.mark.parametrize("text, fault", [
    ("operation failed due to a previous error during capture", False),
    ("operation not permitted when stream is capturing", False),
    ("out of memory", False),
    ("an illegal memory access was encountered", True),
    ("device-side assert triggered", True),
    ("misaligned address", True),
    ("unspecified launch failure", True)])
def test_only_errors_that_lose_the_context_are_faults(text: str, fault: bool) -> None:
    """A capture that another thread's work invalidated is no fault: torch's advice about
    device-side assertions, at the end of every CUDA error it raises, made it one, and the
    runtime refused the GPU for the rest of the process (12 test processes on one H200)."""
    assert faults.is_fault(RuntimeError(f"CUDA error: {text}{_TORCH_ADVICE}")) is fault


@needs_cuda
def test_a_real_kernel_fault_is_reported(gpu_target: str) -> None:
    """An unchecked kernel driven far out of bounds (through the backend, past the runtime's
    checks) faults: the report names the leaf; the next launch says the GPU is unusable."""
    script = textwrap.dedent(f"""
        import numpy as np, torch, hpvm_py as hpvm
        from hpvm_py.backends.base import BufferArg
        from programs import gpu_replay_graphs as g
        hpvm.init("{gpu_target}")
        node = hpvm.compile(g.chain).plan.nodes[0]
        x = torch.zeros(16, device="cuda")
        n = 1 << 30  # reads 4 GiB past a 64-byte buffer
        out = np.zeros(n, np.float32)
        try:
            node.kernel.launch([BufferArg(x, x.data_ptr(), 1 << 40, None), 1 << 40, np.float32(1)],
                               [out], [(n,)])
            torch.cuda.synchronize()
            print("NO FAULT")
        except hpvm.errors.HPVMError as exc:
            print("FIRST", exc)
        try:
            hpvm.wait(hpvm.launch(g.chain, x, 64, x, 64, 16, 1.0, 0.0))
        except hpvm.errors.HPVMError as exc:
            print("SECOND", exc)
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=env)
    assert "FIRST" in done.stdout and "load_scaled" in done.stdout and "faulted" in done.stdout, \
        done.stdout + done.stderr
    assert "SECOND" in done.stdout and "unusable" in done.stdout, done.stdout + done.stderr


def test_stream_assignment_of_a_diamond_and_a_wide_fan() -> None:
    from types import SimpleNamespace

    from hpvm_py.rt.replay_streams import MAX_STREAMS, assign_streams

    def nodes(producers: list[list[int]]) -> list[SimpleNamespace]:
        return [SimpleNamespace(inputs=[SimpleNamespace(node=p) for p in ps] or [SimpleNamespace(node=None)])
                for ps in producers]

    diamond = assign_streams(nodes([[], [0], [0], [1, 2]]))  # a -> b, a -> c, (b, c) -> d
    assert diamond.stream_of == (0, 0, 1, 0) and diamond.waits == ((), (), (0,), (2,))
    assert diamond.used == (1,) and diamond.recorded == {0, 2}
    wide = assign_streams(nodes([[]] * 6 + [list(range(6))]))  # six roots joined by one node
    assert wide.stream_of[:6] == tuple(i % MAX_STREAMS for i in range(6))
    assert wide.waits[6] == tuple(p for p in range(6) if wide.stream_of[p] != 0)


def test_a_stream_copies_each_item_in_once_and_each_result_out_once(gpu_target: str, rng) -> None:
    """Four stages, each reading the buffer the previous one wrote: on the device the item's
    buffers stay valid from stage to stage; each comes back once, when its stage is done."""
    from programs.stream_graphs import four_stages

    n, work, count = 32, 3, 3
    items = []
    with hpvm.runtime(gpu_target):
        before = hpvm.stats()
        handle = hpvm.launch(four_stages, stream=True)
        for _ in range(count):
            bufs = [rng.random(n, dtype=np.float32)] + [np.zeros(n, np.float32) for _ in range(4)]
            items.append(bufs)
            hpvm.push(handle, *[a for b in bufs for a in (b, b.nbytes)], n, work)
        assert [hpvm.pop(handle, timeout=120) for _ in range(count)] == [(1,)] * count
        hpvm.wait(handle, timeout=60)
        after = hpvm.stats()
    assert after["h2d_copies"] - before["h2d_copies"] == count  # the input a of each item
    assert after["d2h_copies"] - before["d2h_copies"] == 4 * count  # b, c, d, e of each item
    for a, *outs in items:
        v = a.copy()
        for out in outs:
            for _ in range(work):
                v = v * np.float32(0.999) + np.float32(0.001)
            np.testing.assert_array_equal(out, v)


def test_an_untracked_buffer_is_let_go_by_its_recordings(compiled_target: str) -> None:
    """A recorded launch holds its kernels' views of the buffers: untracking one drops the
    recordings that use it (README: the runtime holds a tracked buffer until untrack_memory or
    cleanup, and nothing after that)."""
    torch = pytest.importorskip("torch")
    x = torch.arange(64, dtype=torch.float32)
    y = torch.zeros(64)
    with hpvm.runtime(compiled_target):
        compiled = hpvm.compile(g.chain)
        hpvm.track_memory(x)  # (an untracked host buffer is not replayed on a device)
        hpvm.track_memory(y)
        for c in (1.0, 2.0):
            hpvm.wait(hpvm.launch(compiled, x, 256, y, 256, 64, 1.0, c))
        hpvm.request_memory(y)
        assert torch.equal(y, x + 2.0) and _replays() == 1
        recordings = [r for r in compiled.replays._recordings if not r.dropped]
        assert recordings and all(r.steps for r in recordings)
        hpvm.untrack_memory(y)
        assert all(r.dropped and not r.steps and r.graph is None for r in recordings)
        hpvm.wait(hpvm.launch(compiled, x, 256, y, 256, 64, 1.0, 3.0))  # recorded afresh
        assert torch.equal(y, x + 3.0) and _replays() == 1


def test_the_triton_fast_path_reuses_the_compiled_launcher_within_a_class(monkeypatch) -> None:
    """What a replay on a GPU does with Triton (CI runs the interpreter, which has no compiled
    kernels): the first run goes through the dispatch, later runs call the compiled kernel's
    launcher with the same arguments plus the constexprs; a scalar of another class dispatches
    again. Triton is stood in for by objects that record the calls (a compiled kernel without
    metadata: relaunched through Triton's launcher, not the own one; test_triton_launcher.py has
    the own one)."""
    from hpvm_py.device.outputs import DeviceOutputs as Outputs
    from hpvm_py.backends.triton import prepared as P
    from hpvm_py.support.loc import Loc
    from hpvm_py.types import f32, i64

    calls: list[tuple] = []

    class Compiled:
        def __getitem__(self, grid):
            return lambda *args, stream: calls.append(("launcher", grid, args, stream))

    class Jit:
        arg_names = ["k", "n", "BLOCK"]

        def __getitem__(self, grid):
            def dispatch(*args, **options):
                calls.append(("dispatch", grid, args, options["BLOCK"]))
                return Compiled()
            return dispatch

    leaf = type("Leaf", (), {"name": "scale", "loc": Loc("f.py", 1, 1),
                             "params": [type("P", (), {"type": f32})(), type("P", (), {"type": i64})()]})()
    kernel = type("K", (), {"leaf": leaf})()
    monkeypatch.setattr(P, "interpreting", lambda: False)
    monkeypatch.setattr(P, "current_stream", lambda: 7)
    monkeypatch.setattr(P, "current_device", lambda: 0)
    launch = P.TritonLaunch(kernel, None, Jit(), [P.scalar_bits(2.0, f32), 64], {"BLOCK": 128},
                            (4, 1, 1), Outputs([], "scale", None), None, [], {0: 0, 1: 1}, {}, 1)
    launch.start()
    launch.set_uniform(0, 4.0)  # 2.0 and 4.0: both bit patterns multiples of 16
    launch.start()
    launch.set_uniform(0, 1.1)  # not a multiple of 16: Triton compiled another kernel for it
    launch.start()
    launch.start()
    bits = [P.scalar_bits(v, f32) for v in (2.0, 4.0, 1.1)]
    assert calls == [("dispatch", (4, 1, 1), (bits[0], 64), 128),
                     ("launcher", (4, 1, 1), (bits[1], 64, 128), 7),
                     ("dispatch", (4, 1, 1), (bits[2], 64), 128),
                     ("launcher", (4, 1, 1), (bits[2], 64, 128), 7)]


def test_a_block_graph_is_replayed_with_the_copies_of_a_fresh_launch(gpu_target: str, rng) -> None:
    """examples/stencil.py: a root node of 3-D blocks, each a 2-D leaf (recorded as one kernel over
    both levels). 20 launches with swapped buffers: 2 H2D in all, 1 D2H when the host asks."""
    import stencil

    nx, ny, nz = 20, 10, 4
    a = rng.random((nz, ny, nx), dtype=np.float32)
    b = a.copy()
    expected = a.copy()
    with hpvm.runtime(gpu_target):
        hpvm.track_memory(a)
        hpvm.track_memory(b)
        for step in range(20):
            src, dst = (a, b) if step % 2 == 0 else (b, a)
            c0 = float(rng.uniform(0.1, 0.3))
            hpvm.wait(hpvm.launch(stencil.root, src, src.nbytes, dst, dst.nbytes, nx, ny, nz, c0, 1 / 36))
            expected = stencil.reference(expected, c0, 1 / 36)
        replays = _replays()
        hpvm.request_memory(a)
        counts = hpvm.stats()
    np.testing.assert_allclose(a, expected, rtol=2e-5, atol=1e-6)
    # recorded once, the other direction rebound from it, then each replayed
    assert replays == 19 and counts["rebound_launches"] == 1
    assert counts["h2d_copies"] == 2 and counts["d2h_copies"] == 1
    assert counts["kernel_launches"] == 20 and counts["nodes_run"] == 40


@needs_cuda
def test_replays_inside_a_profile_run_kernel_by_kernel_with_their_gpu_times(gpu_target: str,
                                                                            rng) -> None:
    """Repeats with the same scalars run as one CUDA graph, except inside a profile: there each
    kernel runs on its own and gets its GPU time (a "gpu_kernel" event per kernel); the results
    are the same, and the graph is used again once the profile ends."""
    n = 1 << 16
    x = rng.random(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    with hpvm.runtime(gpu_target):
        hpvm.track_memory(x)
        hpvm.track_memory(y)
        for _ in range(3):  # recorded, replayed, captured
            hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, 2.0, 1.0))
        graphs = hpvm.stats()["cuda_graph_replays"]
        with hpvm.profile(None) as prof:
            for _ in range(4):
                hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, 2.0, 1.0))
        assert hpvm.stats()["cuda_graph_replays"] == graphs
        hpvm.wait(hpvm.launch(g.chain, x, x.nbytes, y, y.nbytes, n, 2.0, 1.0))
        assert hpvm.stats()["cuda_graph_replays"] == graphs + 1
        hpvm.request_memory(y)
    timed = [e for e in prof.events if e["cat"] == "gpu_kernel"]
    assert len(timed) == 4 * 3 and all(e["dur"] > 0 for e in timed)  # 4 launches of 3 kernels
    np.testing.assert_allclose(y, x * np.float32(2) + np.float32(1), rtol=1e-6)
