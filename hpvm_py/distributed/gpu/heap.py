"""The symmetric heap on GPU ranks: one device allocation per rank, mapped into every local rank's
address space through CUDA IPC handles.
(docs/architecture.md, "Module notes": distributed/gpu/heap.py)"""
from __future__ import annotations

from typing import Any

from ...errors import DistributedError
from ..allocator import ALIGN, SymmetricAllocator

MAX_BLOCKS = 1024  # programs a collective kernel may launch (each owns a counter and flags)
MAX_WORLD = 8  # local ranks (flags per program)
MAX_SLOTS = 8  # ring slots per lane of the stream all-reduce (stream_kernels.py)
# The control block, in 64-bit words (signals.py names the offsets): MAX_BLOCKS counters, then
# MAX_BLOCKS * MAX_WORLD flags, then as many fingerprint slots, then the word that says the ranks
# disagreed on a call (set by the kernel that saw it, cleared by the host: runner.py), then the
# stream all-reduce's ring words: per lane MAX_SLOTS sequence words and one acknowledgement, all
# written by the peer. They live here, not in the ring's workspace, so that the host's recovery
# clears them with the counters whose steps they hold.
FLAGS_AT = MAX_BLOCKS
FINGERPRINTS_AT = FLAGS_AT + MAX_BLOCKS * MAX_WORLD
MISMATCH_AT = FINGERPRINTS_AT + MAX_BLOCKS * MAX_WORLD
RING_AT = MISMATCH_AT + 1
LANE_WORDS = MAX_SLOTS + 1
CONTROL_BYTES = -(-(8 * (RING_AT + MAX_BLOCKS * LANE_WORDS)) // ALIGN) * ALIGN
# One-shot by stores (kernels.all_reduce_one_shot_push) keeps its rows right after the control
# block, in the heap's header, not in the workspace at the end of the heap: it stores into a
# peer's rows before its arrival, when the peer may still be in a kernel that uses the workspace.
# Two sets (by the parity of a program's step) of ONE_SHOT_PUSH_PROGRAMS programs x world ranks
# x ONE_SHOT_PUSH_CHUNK bytes: calls up to 512 KiB, 4 MiB of rows on 4 ranks.
ONE_SHOT_PUSH_CHUNK = 4 << 10
ONE_SHOT_PUSH_PROGRAMS = 128
ONE_SHOT_PUSH_BYTES = ONE_SHOT_PUSH_CHUNK * ONE_SHOT_PUSH_PROGRAMS  # the largest call


def one_shot_push_rows_bytes(world_size: int) -> int:
    return 2 * ONE_SHOT_PUSH_PROGRAMS * world_size * ONE_SHOT_PUSH_CHUNK


def header_bytes(world_size: int) -> int:
    """The control block and one-shot by stores' rows: where user allocations start."""
    return CONTROL_BYTES + one_shot_push_rows_bytes(world_size)


# the status word (pinned host memory) a kernel writes when a call fails: the missing rank + 1,
# MISMATCHED when the ranks' fingerprints of the call differ, or a code just above it for bad data
# (launch.py's _BAD_DATA)
MISMATCHED = 1 << 20


class GpuHeap(SymmetricAllocator):
    """This rank's device heap and its mappings of the heaps of the other local ranks."""

    def __init__(self, rank: int, size: int, device: str, own: Any, peers: dict[int, Any],
                 world_size: int):
        import torch

        self.rank = rank
        self.size = size
        self.rows_offset = CONTROL_BYTES  # one-shot by stores' rows, then user allocations
        self.header = header_bytes(world_size)
        self.device = device
        self._memory = {rank: own, **peers}  # rank -> uint8 tensor (kept alive: peers map it)
        self.bases = [0] * world_size  # 0: not mapped here (another host)
        for q, t in self._memory.items():
            self.bases[q] = int(t.data_ptr())
        self.my_base = self.bases[rank]
        self.local_ranks = sorted(self._memory)
        self.bases_tensor = torch.tensor(self.bases, dtype=torch.int64, device=device)
        self.control = own[:CONTROL_BYTES].view(torch.int64)
        self.status = torch.zeros(1, dtype=torch.int64, pin_memory=True)
        self._status_word = self.status.numpy()  # read without torch's indexing cost
        self._start_allocations()

    def tensor(self, rank: int, offset: int, count: int, dtype: Any) -> Any:
        """A tensor of `count` elements at `offset` of rank's heap (this rank's or a local peer's,
        as mapped here)."""
        return self._memory[rank][offset:offset + count * dtype.itemsize].view(dtype)

    def status_code(self) -> int:
        """The status word as a kernel wrote it (0: nothing to report)."""
        return int(self._status_word[0])

    def failed_rank(self) -> int | None:
        """The rank a kernel's wait gave up on (the host's pinned copy; no synchronization)."""
        code = int(self._status_word[0])
        return None if code == 0 or code >= MISMATCHED else code - 1

    def failed(self) -> bool:
        """Whether a kernel wrote the status word (no synchronization)."""
        return bool(self._status_word[0])

    def mismatched(self) -> bool:
        """Whether a kernel found that the ranks' fingerprints of its call differ."""
        return int(self._status_word[0]) == MISMATCHED

    def clear_failure(self) -> None:
        self._status_word[0] = 0

    def reset_control(self) -> None:
        """Every counter, flag, fingerprint and the mismatch word back to zero (every rank at
        once, with no kernel running anywhere: runner.py's recovery after a disagreement)."""
        self.control.zero_()


def create(rank: int, size: int, device: str) -> tuple[Any, Any]:
    """This rank's heap memory, zeroed, and what peers need to map it (picklable)."""
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    try:
        own = torch.zeros(size, dtype=torch.uint8, device=device)
    except torch.OutOfMemoryError:
        free, total = torch.cuda.mem_get_info(device)
        raise DistributedError(f"cannot allocate a symmetric heap of {size} bytes on {device} "
                               f"({free} of {total} bytes free there); set HPVM_HEAP_BYTES smaller") from None
    if own.data_ptr() % ALIGN:
        raise DistributedError(f"the heap on {device} is not {ALIGN}-byte aligned")
    torch.cuda.synchronize(device)  # the zeros are there before a peer maps them
    return own, reduce_tensor(own)


# where torch's CUDA-sharing arguments (torch.multiprocessing.reductions.rebuild_cuda_tensor)
# name the GPU the handle is opened on
_HANDLE_DEVICE = 6


def open_peer(handle: Any, device: str) -> Any:
    """A peer's heap, mapped into this process on this rank's GPU (cudaIpcOpenMemHandle with lazy
    peer access underneath). torch would open the handle on the peer's own GPU, where the
    mapping is not reachable from kernels on this one: every peer access would fault."""
    import torch

    rebuild, args = handle
    args = list(args)
    assert isinstance(args[_HANDLE_DEVICE], int), "torch's CUDA sharing arguments changed"
    args[_HANDLE_DEVICE] = torch.device(device).index
    return rebuild(*args)
