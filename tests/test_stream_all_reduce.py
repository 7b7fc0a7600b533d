"""The stream all-reduce of two GPU ranks (gpu/stream_kernels.py; docs/distributed.md, "GPU
ranks") and the other all-reduce with a workspace at the end of the heap, two-shot by stores
(its kernel runs under the interpreter in test_quick_reduce.py): the stream kernel itself under Triton's interpreter on two CPU ranks whose heaps are shared
memory (tests/programs/dist_stream_interpreted.py), the chooser's threshold and its override, the
ring's workspace at the end of the heap (two-shot where it has no room) and the ring's words in
the control block. Its sm_90 PTX is checked with the other kernels' (test_gpu_collectives.py); on
GPUs, tests/gpu_dist/check_direct.py."""
from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_interpreter_loop_bounds

from hpvm_py.distributed import chooser
from hpvm_py.distributed.allocator import ALIGN, SymmetricAllocator
from hpvm_py.distributed.call import ALGORITHMS
from hpvm_py.distributed.gpu import heap as gpu_heap
from hpvm_py.distributed.gpu import launch
from hpvm_py.errors import DistributedError

ROOT = Path(__file__).resolve().parent.parent
MPIEXEC = Path(sys.executable).parent / "mpiexec"
MIB = 1 << 20


@pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}")
@needs_interpreter_loop_bounds
def test_stream_kernel_under_the_interpreter_on_two_cpu_ranks(tmp_path: Path) -> None:
    """Bit for bit NumPy's rank-order sum and one_shot's result (f32, bf16, i32, max), sizes that
    are not whole chunks, rings of 2 to 8 slots wrapped many times, back-to-back calls, a call the
    ranks disagree on, a rank that never pushes; every publication after a random pause."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1", OMP_NUM_THREADS="1",
                       HPVM_TEST_OUT=str(tmp_path), TRITON_INTERPRET="1")
    seed = str(np.random.default_rng().integers(1 << 30))
    program = ROOT / "tests" / "programs" / "dist_stream_interpreted.py"
    command = [str(MPIEXEC), "-n", "2", sys.executable, str(program), seed]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    want = [f"STREAM {name} ok" for name in ("sizes", "bf16", "ops", "back-to-back", "mismatch", "missing")]
    for r in range(2):
        assert (tmp_path / f"rank{r}.txt").read_text().splitlines() == want + ["STREAM done"], (r, output)


def test_chooser_picks_stream_for_two_gpus_above_the_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPVM_COMM_ONESHOT_BYTES", raising=False)
    monkeypatch.delenv("HPVM_COMM_STREAM_BYTES", raising=False)
    assert chooser.choose_gpu("all_reduce", 1 << 40, 2) == "push"  # by default: push was faster
    monkeypatch.setattr(chooser, "GPU_PUSH_BYTES", {})  # the stream kernel against two-shot alone
    monkeypatch.setattr(chooser, "GPU_STREAM_BYTES", 64 << 20)  # a threshold, as a tuning would set
    limit = chooser.GPU_STREAM_BYTES
    assert chooser.choose_gpu("all_reduce", limit, 2) == "two_shot"
    assert chooser.choose_gpu("all_reduce", limit + 1, 2) == "stream"
    assert chooser.choose_gpu("all_reduce", 1 << 40, 4) != "stream"  # two ranks only
    assert chooser.choose_gpu("all_gather", 1 << 40, 2) == "direct"
    assert chooser.choose_gpu("all_reduce", 1 << 40, 2, "int8") == "quantized"
    assert chooser.choose(True, "all_reduce", 1 << 40) == "two_shot"  # CPU ranks: no stream kernel
    monkeypatch.setenv("HPVM_COMM_STREAM_BYTES", "4096")
    assert chooser.choose_gpu("all_reduce", 2 * MIB, 2) == "stream"
    assert chooser.choose_gpu("all_reduce", 4097, 2) == "one_shot_push"  # one-shot's threshold comes first
    monkeypatch.setenv("HPVM_COMM_ONESHOT_BYTES", "100")
    assert chooser.choose_gpu("all_reduce", 4097, 2) == "stream"
    assert chooser.choose_gpu("all_reduce", 4096, 2) == "two_shot"
    assert chooser.choose_gpu("all_reduce", 100, 2) == "one_shot_push"
    monkeypatch.setenv("HPVM_COMM_STREAM_BYTES", "64M")  # (a suffix is a power of 1024)
    assert chooser.choose_gpu("all_reduce", 64 * MIB + 2, 2) == "stream"
    assert chooser.choose_gpu("all_reduce", 64 * MIB, 2) == "two_shot"
    monkeypatch.setenv("HPVM_COMM_STREAM_BYTES", "64MB")
    with pytest.raises(DistributedError, match="HPVM_COMM_STREAM_BYTES='64MB' must be a number of bytes"):
        chooser.choose_gpu("all_reduce", 1 << 30, 2)
    assert "stream" in ALGORITHMS  # a word of the descriptor: ranks that choose differently raise


class _Heap(SymmetricAllocator):
    """A heap's allocator alone (the ring's reservation needs no memory)."""

    def __init__(self, size: int):
        self.rank, self.size, self.header, self.bases, self.my_base = 0, size, ALIGN, [0, 0], 0
        self._start_allocations()


def test_the_ring_is_reserved_at_the_end_of_the_heap_or_two_shot_runs(monkeypatch: pytest.MonkeyPatch
                                                                     ) -> None:
    monkeypatch.delenv("HPVM_COMM_ONESHOT_BYTES", raising=False)
    monkeypatch.delenv("HPVM_COMM_STREAM_BYTES", raising=False)
    monkeypatch.setattr(chooser, "GPU_STREAM_BYTES", 64 << 20)
    tuning = launch.TUNING["stream"]
    ring = launch.ring_bytes(tuning)
    assert ring == tuning.programs * tuning.slots * tuning.block_bytes
    assert 2 <= tuning.slots <= gpu_heap.MAX_SLOTS and tuning.programs <= gpu_heap.MAX_BLOCKS
    big = chooser.GPU_STREAM_BYTES + 1
    roomy = _Heap(big + ring + 4 * MIB)
    roomy.allocate(big)
    world = types.SimpleNamespace(size=2, heap=roomy)
    assert launch.choose("all_reduce", big, world) == "stream"
    # (the pick reserves nothing: ranks that disagree on the call keep their heaps alike)
    assert roomy.limit == roomy.size
    assert launch.reserve_ring(roomy) == roomy.size - ring  # as the kernel's launch reserves it
    assert roomy.limit == roomy.size - ring  # reserved: user allocations stop before the ring
    with pytest.raises(DistributedError, match="heap exhausted"):
        roomy.allocate(roomy.free_bytes + 1)
    full = _Heap(big + ring // 2)
    full.allocate(big)
    world = types.SimpleNamespace(size=2, heap=full)
    assert launch.choose("all_reduce", big, world) == "two_shot"  # the same on every rank
    assert full.limit == full.size  # nothing reserved
    # a smaller ring (another tuning) lies inside the reserved one, at the end of the heap
    monkeypatch.setitem(launch.TUNING, "stream", launch.Tuning(4 << 10, 4, 16, slots=2))
    assert launch.reserve_ring(roomy) == roomy.size - 16 * 2 * (4 << 10)
    assert roomy.limit == roomy.size - ring


def test_push_two_shot_by_world_size_and_its_scratch(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two-shot by stores from its measured threshold on, for the world sizes it was measured on;
    HPVM_COMM_PUSH_BYTES moves the threshold for every world size; where user allocations leave
    its scratch no room at the end of the heap, two-shot runs (the same pick on every rank)."""
    for name in ("HPVM_COMM_ONESHOT_BYTES", "HPVM_COMM_STREAM_BYTES", "HPVM_COMM_PUSH_BYTES"):
        monkeypatch.delenv(name, raising=False)
    for world, limit in chooser.GPU_PUSH_BYTES.items():
        assert chooser.choose_gpu("all_reduce", limit, world) in ("one_shot", "two_shot")
        assert chooser.choose_gpu("all_reduce", limit + 1, world) == "push"
    assert chooser.choose_gpu("all_reduce", 1 << 40, 3) == "two_shot"  # not measured on three
    for world, limit in chooser.GPU_PUSH_BYTES_WIDE.items():  # 4-byte elements cross over first
        assert limit < chooser.GPU_PUSH_BYTES[world]
        assert chooser.choose_gpu("all_reduce", limit + 1, world, elem_bytes=4) == "push"
        assert chooser.choose_gpu("all_reduce", limit + 1, world, elem_bytes=2) == "two_shot"
        assert chooser.choose_gpu("all_reduce", limit, world, elem_bytes=4) == "two_shot"
    assert chooser.choose_gpu("all_reduce", 8 << 20, 4, elem_bytes=4) == "push"  # f32 at 8 MiB
    monkeypatch.setenv("HPVM_COMM_PUSH_BYTES", str(4 << 20))
    assert chooser.choose_gpu("all_reduce", (4 << 20) + 1, 3) == "push"
    assert chooser.choose_gpu("all_reduce", 4 << 20, 3) == "two_shot"
    monkeypatch.setenv("HPVM_COMM_PUSH_BYTES", "4M")
    assert chooser.choose_gpu("all_reduce", (4 << 20) + 1, 3) == "push"
    monkeypatch.setenv("HPVM_COMM_PUSH_BYTES", "-8")
    with pytest.raises(DistributedError, match="HPVM_COMM_PUSH_BYTES='-8' must be a number of bytes"):
        chooser.choose_gpu("all_reduce", 1 << 30, 4)
    monkeypatch.delenv("HPVM_COMM_PUSH_BYTES")
    big = max(chooser.GPU_PUSH_BYTES.values()) + 1
    for world in (2, 4):  # each world size reserves the scratch of its own shape
        need = launch.scratch_bytes(launch.shape_for("push", world), world)
        for room, pick in ((need + MIB, "push"), (need - MIB, "two_shot")):
            heap = _Heap(64 * MIB + room)
            heap.allocate(64 * MIB)
            assert launch.choose("all_reduce", big, types.SimpleNamespace(size=world, heap=heap)) == pick, room
            assert heap.limit == heap.size  # the pick reserves nothing
            assert launch.reserve_scratch(heap, world) == \
                (heap.size - need if pick == "push" else None)  # the launch's reservation, or none
    assert "push" in ALGORITHMS  # a word of the descriptor: ranks that choose differently raise


def test_push_shapes_by_world_size() -> None:
    """Two GPUs run push in their measured shape (16 KiB chunks, the first with the arrival);
    other world sizes the default one, without it; a world's shape overrides only its own."""
    two, four = launch.shape_for("push", 2), launch.shape_for("push", 4)
    assert two.early and two.block_bytes == 16 << 10 and two.programs <= gpu_heap.MAX_BLOCKS
    assert four is launch.TUNING["push"] and not four.early
    assert launch.shape_for("push", 3) is launch.TUNING["push"]
    assert launch.shape_for("two_shot", 2) is launch.TUNING["two_shot"]
    assert launch.scratch_bytes(two, 2) == two.programs * 2 * 2 * two.block_bytes


def test_the_rings_words_live_in_the_control_block() -> None:
    """Per lane MAX_SLOTS sequence words and an acknowledgement, after the mismatch word and inside
    CONTROL_BYTES (the host's recovery clears them with the step counters they continue)."""
    assert gpu_heap.RING_AT > gpu_heap.MISMATCH_AT
    assert gpu_heap.LANE_WORDS == gpu_heap.MAX_SLOTS + 1
    end = 8 * (gpu_heap.RING_AT + gpu_heap.MAX_BLOCKS * gpu_heap.LANE_WORDS)
    assert end <= gpu_heap.CONTROL_BYTES < end + ALIGN and gpu_heap.CONTROL_BYTES % ALIGN == 0
