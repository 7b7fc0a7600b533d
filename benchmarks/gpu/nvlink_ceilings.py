"""What the links between GPUs carry, every rank busy at once, next to the heap all-reduce.

Every rank at once, 256 MiB and 1 GiB per rank, each rank's bytes split evenly over its peers (one
peer on two GPUs, three on four): the copy engines' pull (torch `copy_` from each peer's heap, one
stream per peer), a Triton kernel's pull (loads of the peers' heaps, stores here; chunk c from
peer c mod (world - 1)) and push (loads here, stores to the peers' heaps; and, a ring's pattern,
to the next rank's heap only; on more than two GPUs, to the peers in turns) over a few grid shapes,
then the heap all-reduce's one-shot, two-shot and push (two-shot by stores) kernels over chunk /
warps / programs shapes (push: those whose scratch fits in HPVM_HEAP_BYTES beside the 1 GiB) and,
on two GPUs, the stream kernel over chunk / warps / lanes / slots shapes (bf16, busbw, and for the
stream kernel its share of the copy engine's pull: issue 22's target is 95%). Each time: median of
5 batches (collectives_gpu.time_us, as in the table against NCCL). The all-reduce's busbw cannot
exceed what one GPU's links carry each way, the better of the kernel's pull and push.

Run on a machine of two or four GPUs (one rank per GPU, NVLink multicast off):
    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 HPVM_HEAP_BYTES=1200M \\
        python -m torch.distributed.run --nproc-per-node 4 benchmarks/gpu/nvlink_ceilings.py
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.distributed as dist
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
import hpvm_py as hpvm  # noqa: E402
from hpvm_py.distributed import ranks  # noqa: E402
from hpvm_py.distributed.gpu import launch as G  # noqa: E402
from hpvm_py.distributed.gpu.signals import peer_delta  # noqa: E402
from collectives_gpu import copy_engine_us, time_us  # noqa: E402 - this folder: the NCCL table's timing

GRIDS = ((4096, 8, 264), (4096, 4, 528), (8192, 8, 528), (2048, 4, 1056), (8192, 16, 264))
TUNINGS = ((16 << 10, 8, 264), (16 << 10, 4, 528), (32 << 10, 4, 528), (8 << 10, 4, 1024),
           (16 << 10, 8, 528), (32 << 10, 8, 528), (16 << 10, 4, 1024))
# the stream kernel: chunk bytes, warps, lanes, slots per lane (rings of 4 to 33 MiB)
STREAM_TUNINGS = ((16 << 10, 8, 264, 4), (16 << 10, 8, 132, 4), (32 << 10, 8, 132, 4), (16 << 10, 8, 264, 2),
                  (16 << 10, 8, 264, 8), (64 << 10, 16, 132, 2), (8 << 10, 4, 528, 4), (32 << 10, 8, 264, 4),
                  (16 << 10, 4, 528, 4), (8 << 10, 4, 132, 4))


@triton.jit
def _peer_of_chunk(c, rank, WORLD: tl.constexpr):
    return (rank + 1 + c % (WORLD - 1)) % WORLD


@triton.jit
def pull(dst, src, bases, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr):
    """dst[i] = src[i] of a peer (chunk c's peer: _peer_of_chunk)."""
    for c in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = c * BLOCK + tl.arange(0, BLOCK)
        peer = src + peer_delta(bases, rank, _peer_of_chunk(c, rank, WORLD), 4)
        tl.store(dst + offs, tl.load(peer + offs, mask=offs < n), mask=offs < n)


@triton.jit
def push(dst, src, bases, rank, n, WORLD: tl.constexpr, BLOCK: tl.constexpr, NEXT: tl.constexpr,
         TURN: tl.constexpr):
    """dst[i] of a peer = src[i] (chunk c's peer: _peer_of_chunk; NEXT: the next rank's only, a
    ring's pattern; TURN > 0: every program's k-th chunk goes to rank + 1 + (k // TURN) mod
    (world - 1), so that the ranks take their peers in turns, as a push all-reduce that kept its
    sums in rank order could)."""
    k = 0
    for c in range(tl.program_id(0), tl.cdiv(n, BLOCK), tl.num_programs(0)):
        offs = c * BLOCK + tl.arange(0, BLOCK)
        if NEXT:
            q = (rank + 1) % WORLD
        elif TURN > 0:
            q = (rank + 1 + (k // TURN) % (WORLD - 1)) % WORLD
        else:
            q = _peer_of_chunk(c, rank, WORLD)
        peer = dst + peer_delta(bases, rank, q, 4)
        tl.store(peer + offs, tl.load(src + offs, mask=offs < n), mask=offs < n)
        k += 1


def copy_engines_us(src, dst, iters: int, line_up) -> float:  # noqa: ANN001
    """Every peer's share of src's twin pulled into dst by the copy engines at once (one stream
    per peer; on two ranks, collectives_gpu.copy_engine_us)."""
    heap = ranks.current().heap
    peers = [q for q in range(len(heap.bases)) if q != heap.rank]
    if len(peers) == 1:
        return copy_engine_us(src, dst, iters, line_up)
    share = -(-src.numel() // len(peers))
    streams = [torch.cuda.Stream() for _ in peers]
    parts = []
    for i, q in enumerate(peers):
        first = i * share
        count = min(share, src.numel() - first)
        twin = heap.tensor(q, src.data_ptr() - heap.my_base + first * src.element_size(), count, src.dtype)
        parts.append((twin, dst[first:first + count]))

    def pull_all() -> None:
        main = torch.cuda.current_stream()
        for stream, (twin, part) in zip(streams, parts):
            stream.wait_stream(main)
            with torch.cuda.stream(stream):
                part.copy_(twin)
        for stream in streams:
            main.wait_stream(stream)

    return time_us(pull_all, iters, line_up)


def main() -> None:
    hpvm.distributed.init(device="cuda")
    world = ranks.current()
    heap, rank = world.heap, world.rank
    if world.size < 2 or len(heap.local_ranks) != world.size:
        raise SystemExit("run with two or more ranks on one host, one per GPU")
    device = torch.device("cuda", torch.cuda.current_device())
    largest = 1 << 30
    arena = hpvm.symmetric.empty(largest, torch.uint8)
    local = torch.empty(largest, dtype=torch.uint8, device=device)
    size = world.size
    bus = 2 * (size - 1) / size  # busbw = algbw * bus

    def out(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    out(f"# {torch.cuda.get_device_name()} x {size}; GB/s per GPU and direction, every rank at once")
    for nbytes in (256 << 20, largest):
        n, mib = nbytes // 4, nbytes >> 20
        x, y = arena[:nbytes].view(torch.float32), local[:nbytes].view(torch.float32)
        ce_us = copy_engines_us(x, y, 10, dist.barrier)
        out(f"{mib} MiB copy engine pull (torch copy_): {nbytes / ce_us / 1e3:.0f}")
        for block, warps, programs in GRIDS:
            pulled = time_us(lambda: pull[(programs,)](y, x, heap.bases_tensor, rank, n, WORLD=size,
                                                     BLOCK=block, num_warps=warps),
                             10, dist.barrier)
            patterns = ((False, 0), (True, 0)) + (((False, 4), (False, 16)) if size > 2 else ())
            pushed = [time_us(lambda: push[(programs,)](x, y, heap.bases_tensor, rank, n, WORLD=size, BLOCK=block,
                                                        NEXT=to_next, TURN=turn, num_warps=warps),
                              10, dist.barrier)
                      for to_next, turn in patterns]
            out(f"{mib} MiB kernel pull / push / push to the next rank only"
                f"{' / push to the peers in turns of 4 and of 16 chunks' if size > 2 else ''}, "
                f"{block * 4 >> 10}K/{warps}/{programs}: {nbytes / pulled / 1e3:.0f} / "
                + " / ".join(f"{nbytes / us / 1e3:.0f}" for us in pushed))
        values = arena[:nbytes].view(torch.bfloat16)
        values.copy_(torch.randn(nbytes // 2, device=device).to(torch.bfloat16))
        saved = dict(G.TUNING)
        for algorithm in ("one_shot", "two_shot", "push"):
            for chunk, warps, programs in TUNINGS:
                G.TUNING[algorithm] = G.Tuning(chunk, warps, programs)
                if algorithm == "push" and G.reserve_scratch(heap, size) is None:
                    continue
                us = time_us(lambda: G.all_reduce(values, "sum", algorithm), 5, dist.barrier)
                out(f"{mib} MiB all_reduce {algorithm} {chunk >> 10}K/{warps}/{programs}: {us:.0f} us, "
                    f"busbw {nbytes / us / 1e3 * bus:.0f}")
        for chunk, warps, lanes, slots in STREAM_TUNINGS if size == 2 else ():
            G.TUNING["stream"] = G.Tuning(chunk, warps, lanes, slots)
            us = time_us(lambda: G.all_reduce(values, "sum", "stream"), 5, dist.barrier)
            out(f"{mib} MiB all_reduce stream {chunk >> 10}K/{warps}/{lanes}/{slots}: {us:.0f} us, "
                f"busbw {nbytes / us / 1e3:.0f}, {ce_us / us:.0%} of the copy engine")
        G.TUNING.update(saved)


if __name__ == "__main__":
    main()
