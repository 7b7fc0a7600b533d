"""The GPU path of communication nodes, as far as a machine without a GPU can check it: the
kernels compile for sm_90 with the flag protocol's ordering in the PTX, the chooser, the device
choice at init, and the heap protocol of the CPU heap. The GPU-rank runs themselves are
tests/gpu_dist/run_device.sh (on a machine with 2+ GPUs; docs/distributed.md, "GPU ranks")."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.distributed import chooser
from hpvm_py.errors import DistributedError

ROOT = Path(__file__).resolve().parent.parent


def test_collective_kernels_compile_with_ordered_flags() -> None:
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(ROOT), env.get("PYTHONPATH"))))
    result = subprocess.run([sys.executable, str(ROOT / "tests" / "programs" / "gpu_collectives_ptx.py")],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 19, result.stdout  # nine kernels (push both ways) for 2 and 4 ranks, stream for 2
    for line in lines:
        name, *fields = line.split()
        counts = {k: int(v) for k, v in (f.split("=") for f in fields)}
        kernel, world = name.split("/")[0].removesuffix("-early"), int(name.split("/")[1])
        # the arrival and the final (or per-chunk) step signal every peer with a release exchange
        # (one vector exchange, a thread per peer), and poll each peer's flag with acquire loads;
        # the bounded waits read the global timer
        # (one-shot by stores has one step only: its arrival also publishes the rows it stored)
        steps = 1 if kernel == "all_reduce_one_shot_push" else 2
        assert counts["release"] >= steps, line
        assert counts["acquire"] >= steps * (world - 1), line
        assert counts["timer"] >= 2, line
        assert counts["v4"] >= 1, line  # data moves in 16-byte vectors
        if kernel == "all_reduce_stream":
            # the arrival, a slot's sequence number and its acknowledgement: each published with a
            # release exchange, each polled (with the bounded wait's clock) by acquire loads; the
            # chunk goes into the peer's slot and the sum into the buffer as 16-byte stores
            assert counts["release"] >= 3 and counts["acquire"] >= 3 and counts["timer"] >= 3, line
            assert counts["st4"] >= 2, line
        if kernel == "all_reduce_push":  # the chunks to the peers' scratch and the sums: 16-byte stores
            assert counts["st4"] >= 2 * world, line


def test_gpu_chooser_by_size_and_world(monkeypatch: pytest.MonkeyPatch) -> None:
    """One-shot by stores up to its threshold, one-shot to its own, two-shot above both (push
    from its threshold: test_stream_all_reduce.py); HPVM_COMM_ONESHOT_BYTES bounds both one-shot
    kernels, HPVM_COMM_ONE_SHOT_PUSH_BYTES the one by stores (never above what its rows hold)."""
    from hpvm_py.distributed.gpu.heap import ONE_SHOT_PUSH_BYTES

    for name in ("HPVM_COMM_ONESHOT_BYTES", "HPVM_COMM_STREAM_BYTES", "HPVM_COMM_ONE_SHOT_PUSH_BYTES"):
        monkeypatch.delenv(name, raising=False)
    for world, limit in chooser.GPU_ONESHOT_BYTES.items():
        by_stores = chooser.GPU_ONE_SHOT_PUSH_BYTES.get(world, 0)
        assert chooser.choose_gpu("all_reduce", by_stores, world) == ("one_shot_push" if by_stores else "one_shot")
        top = max(limit, by_stores)
        assert chooser.choose_gpu("all_reduce", top, world) == ("one_shot" if limit > by_stores else "one_shot_push")
        above = "push" if top + 1 > chooser.GPU_PUSH_BYTES.get(world, 1 << 62) else "two_shot"
        assert chooser.choose_gpu("all_reduce", top + 1, world) == above
    assert chooser.choose_gpu("all_gather", 1 << 30, 2) == "direct"
    monkeypatch.setenv("HPVM_COMM_ONESHOT_BYTES", "4096")
    assert chooser.choose_gpu("all_reduce", 4096, 2) == "one_shot_push"
    assert chooser.choose_gpu("all_reduce", 4097, 2) == "two_shot"
    monkeypatch.setenv("HPVM_COMM_ONESHOT_BYTES", str(1 << 20))
    monkeypatch.setenv("HPVM_COMM_ONE_SHOT_PUSH_BYTES", "0")
    assert chooser.choose_gpu("all_reduce", 8192, 4) == "one_shot"
    monkeypatch.setenv("HPVM_COMM_ONE_SHOT_PUSH_BYTES", str(64 << 20))
    assert chooser.choose_gpu("all_reduce", ONE_SHOT_PUSH_BYTES, 4) == "one_shot_push"
    assert chooser.choose_gpu("all_reduce", ONE_SHOT_PUSH_BYTES + 1, 4) == "one_shot"  # its rows are full


def test_init_device_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    from hpvm_py.device.devices import cuda_available

    with pytest.raises(DistributedError, match=r"device='tpu' is not one of cpu, cuda") as info:
        hpvm.distributed.init(device="tpu")
    assert "test_gpu_collectives.py" in str(info.value)
    monkeypatch.setenv("HPVM_DIST_DEVICE", "gpu0")
    with pytest.raises(DistributedError, match=r"HPVM_DIST_DEVICE='gpu0'"):
        hpvm.distributed.init()
    if not cuda_available():
        monkeypatch.delenv("HPVM_DIST_DEVICE")
        with pytest.raises(DistributedError, match="torch sees no CUDA GPU"):
            hpvm.distributed.init(device="cuda")
    assert not hpvm.distributed.is_initialized()


def test_cpu_heap_speaks_the_heap_protocol(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_HEAP_BYTES", "1M")
    hpvm.distributed.init(timeout=5, device="cpu")
    try:
        from hpvm_py.distributed import ranks

        heap = ranks.current().heap
        assert heap.device == "host" and heap.world_size == 1 and heap.rank == 0
        assert heap.bases_array.dtype == np.int64 and int(heap.bases_array[0]) == heap.my_base
        x = hpvm.symmetric.empty(100, hpvm.f32)
        assert heap.contains(x.data_ptr(), x.nbytes)
        assert not heap.contains(x.data_ptr(), x.nbytes + heap.free_bytes + 1)  # runs past the top
        assert not heap.contains(heap.my_base, 8)  # the control block is no user memory
        assert heap.translate(x.data_ptr(), 0) == x.data_ptr()
    finally:
        hpvm.distributed.finalize()


def test_gpu_suite_is_not_collected_by_pytest() -> None:
    """The device suite runs under mpirun on GPUs; pytest must not import it (it joins ranks)."""
    names = [p.name for p in (ROOT / "tests" / "gpu_dist").iterdir()]
    assert "check_direct.py" in names and not any(re.match(r"test_.*\.py$", n) for n in names)


def test_peer_heap_opens_on_this_ranks_gpu() -> None:
    """torch's sharing arguments name the exporting rank's GPU; a kernel on this rank's GPU can
    reach the mapping only if the handle is opened here (on 2 GPUs every peer access faulted)."""
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    from hpvm_py.distributed.gpu import heap as gpu_heap

    opened = {}

    def rebuild(*args: object) -> str:
        opened["args"] = args
        return "mapped"

    peer_args = tuple(range(100, 115))
    peer_args = peer_args[:6] + (1,) + peer_args[7:]  # the peer's heap lives on cuda:1
    assert rebuild_cuda_tensor.__code__.co_varnames[6] == "storage_device"  # torch's layout
    assert gpu_heap.open_peer((rebuild, peer_args), "cuda:0") == "mapped"
    assert opened["args"][6] == 0
    assert opened["args"][:6] + opened["args"][7:] == peer_args[:6] + peer_args[7:]


def test_forced_remote_ranks_keep_their_machine() -> None:
    from hpvm_py.distributed.handshake import machine

    assert machine("node7#rank3") == "node7"
    assert machine("node7") == "node7"


def test_a_heap_too_small_for_its_header_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """HPVM_HEAP_BYTES at or below the GPU heap's header (control block and one-shot rows, which
    grow with the world) stops init on every rank with the sizes, before any memory is taken."""
    import torch

    from hpvm_py.distributed.gpu import heap as gpu_heap
    from hpvm_py.distributed.gpu import setup

    class OneRank:  # the launcher's transport of a world of one: every exchange returns our own
        rank = 0

        def exchange(self, obj, timeout):  # noqa: ANN001, ANN201
            return [obj]

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(gpu_heap, "create", lambda *a: pytest.fail("the heap was allocated"))
    header = gpu_heap.header_bytes(4)
    assert header > gpu_heap.header_bytes(2) > gpu_heap.CONTROL_BYTES
    with pytest.raises(DistributedError, match=rf"HPVM_HEAP_BYTES={header} leaves no room after the "
                                               rf"GPU heap's header of {header} bytes"):
        setup.join_gpu(OneRank(), 5.0, ["host"] * 4, header, 4)


def test_a_communication_node_joins_a_cuda_graph_only_in_the_world_it_agreed_in(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """rt/replay.py captures a prepared communication node into the launch's CUDA graph, and
    replays that graph, only while the ranks are GPU ranks of one host in the world (and with the
    timeout) of the node's last run, and only for a call the ranks agreed on."""
    from types import SimpleNamespace

    from hpvm_py.distributed import nodes, ranks

    world = SimpleNamespace(device="cuda:0", single_host=True, timeout=60.0)
    monkeypatch.setattr(ranks, "current", lambda: world)
    prepared = nodes.PreparedCollective.__new__(nodes.PreparedCollective)
    prepared._agreed, prepared._timeout = None, 60.0
    assert not prepared.capturable  # not run yet: nothing agreed
    prepared._agreed = SimpleNamespace(world=world, mine=None)
    assert prepared.capturable
    world.timeout = 5.0  # the kernel's waits were captured with the old timeout
    assert not prepared.capturable
    world.timeout = 60.0
    prepared._agreed = SimpleNamespace(world=world, mine=DistributedError("this rank's own mistake"))
    assert not prepared.capturable
    prepared._agreed = SimpleNamespace(world=SimpleNamespace(), mine=None)  # finalize, init again
    assert not prepared.capturable
    for device, single in (("host", True), ("cuda:0", False)):  # CPU ranks; ranks on several hosts
        world.device, world.single_host = device, single
        prepared._agreed = SimpleNamespace(world=world, mine=None)
        assert not prepared.capturable


def test_a_collective_graph_is_replayed_only_in_the_world_it_was_captured_in(monkeypatch) -> None:
    """The direct collectives replay one captured graph per call (gpu/replay.py), whose kernel
    points into the heap of the world it was captured in: a world made after that one ended, even
    at the same address (an id() key once matched it), captures its own."""
    import gc
    from dataclasses import dataclass
    from types import SimpleNamespace

    from hpvm_py.distributed import ranks
    from hpvm_py.distributed.gpu import launch as gpu_launch

    @dataclass
    class World:  # (a stand-in: what _run reads of ranks.World, a dataclass too: unhashable)
        timeout: float = 5.0

    captured, replayed = [], []

    class Graphs:  # (gpu/replay.Replays without CUDA)
        def __init__(self) -> None:
            self.graphs: dict = {}

        def lookup(self, key):
            return self.graphs.get(key)

        def first(self, key, launch):
            launch()
            captured.append(key)
            self.graphs[key] = Replayed(key)
            return self.graphs[key]

    class Replayed:
        def __init__(self, key) -> None:
            self.key = key

        def __call__(self) -> None:
            replayed.append(self.key)

    monkeypatch.setattr(gpu_launch, "capturing", lambda: False)
    monkeypatch.setattr(gpu_launch, "_replays", Graphs())
    call = SimpleNamespace(runs=0)

    def run_kernel() -> None:
        call.runs += 1

    now = [None]  # the current world
    monkeypatch.setattr(ranks, "current", lambda: now[0])
    ids = set()
    for _ in range(20):  # worlds made and ended one after another reuse addresses in CPython
        now[0] = World()
        ids.add(id(now[0]))
        gpu_launch._run(("all_reduce", 1 << 20), run_kernel)
        gpu_launch._run(("all_reduce", 1 << 20), run_kernel)  # the same world: replayed
        now[0] = None
        gc.collect()
    assert len(captured) == 20 and len(replayed) == 20 and call.runs == 20
    assert len(ids) < 20  # (some world did take an earlier one's address)
