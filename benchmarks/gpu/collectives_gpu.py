"""All-reduce on GPU ranks, nccl-tests style, against NCCL measured in the same run: bytes, time,
algbw, busbw and the ratio NCCL time / hpvm-py time, for bf16 and f32 from 8 KiB to 1 GiB. On two
GPUs the table also times the stream kernel (forced) and, from 1 MiB, the copy engine's pull of the
same bytes from the peer (both ranks at once: the link's ceiling, `CE bus`) with the stream
kernel's busbw as a share of it (`str/CE`; issue 22's target: 95% from 256 MiB).

Started by `python benchmarks/collectives.py --gpu` (which runs torchrun with one rank per GPU).
Each row times back-to-back calls with CUDA events (rank 0's median of 5 batches of at least 20
calls, `--min-calls`, the ranks lined up before each batch): the direct API of
hpvm_py.distributed.gpu.launch (what a communication node launches once the ranks agreed), each
algorithm forced and the chooser's pick; NCCL is torch.distributed.all_reduce on a process group of
its own. Up to 64 MiB the table also times
CUDA graphs of 20 calls each (ours and NCCL's), which leave out the host's launch cost. --sweep
times tuning variants; --launch adds the whole communication-node launch (hpvm.launch + wait of a
one-node graph); --overlap times a tensor-parallel step whose matmul is chunked, each chunk's
all-reduce starting on a second stream as soon as its chunk is done, against matmul then
all-reduce. --quick times only the quantized all-reduce (bf16 sent as fp8, int8 or int4 codes
with per-32 scales) against NCCL's bf16 all-reduce and our exact one, with each format's error:
where it overtakes the exact all-reduce sets chooser.QUANTIZE_BYTES. --moe times the
mixture-of-experts dispatch and combine instead of the all-reduce tables, against
torch.distributed.all_to_all_single (see _moe).
"""
from __future__ import annotations

import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import InOut, Ptr, bf16, i64  # noqa: E402


def time_us(fn, iters: int, line_up) -> float:  # noqa: ANN001
    import torch

    fn()
    batches = []
    for _ in range(5):
        torch.cuda.synchronize()
        line_up()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            fn()
        end.record()
        end.synchronize()
        batches.append(start.elapsed_time(end) * 1e3 / iters)
    return statistics.median(batches)


def copy_engine_us(src, dst, iters: int, line_up) -> float:  # noqa: ANN001
    """The copy engine's pull of src's twin on the other rank of two into dst (torch copy_, every
    rank at once): what the link carries each way, the stream all-reduce's ceiling."""
    from hpvm_py.distributed import ranks

    heap = ranks.current().heap
    peer = heap.tensor(1 - heap.rank, src.data_ptr() - heap.my_base, src.numel(), src.dtype)
    return time_us(lambda: dst.copy_(peer), iters, line_up)


CE_MIN_BYTES = 1 << 20  # below it the copy's launch, not the link, sets its time


def _graphed(fn, calls: int = 20):  # noqa: ANN001, ANN202
    """A function replaying a CUDA graph of `calls` calls of fn (captured after a warm-up)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(calls):
                fn()
    torch.cuda.synchronize()
    return graph.replay


GRAPH_CALLS = 20
GRAPH_MAX_BYTES = 64 << 20


MIN_CALLS = 20  # calls per batch at least (--min-calls; nccl-tests times 20 by default)


def _iters(nbytes: int) -> int:
    """Calls per timed batch. The first call of a batch also waits out the ranks' skew after the
    barrier (tens of microseconds), for NCCL and hpvm-py alike; too few calls add a share of it
    to both times and pull the ratio towards 1 (at 64 MiB, 5 calls a batch added 16-19 us)."""
    return max(MIN_CALLS, min(300, (256 << 20) // max(nbytes, 1)))


def main(sweep: bool, node: bool, overlap: bool, max_bytes: int, quick: bool = False,
         moe: bool = False, min_calls: int = MIN_CALLS) -> None:
    global MIN_CALLS
    MIN_CALLS = min_calls
    import torch
    import torch.distributed as dist

    from hpvm_py.distributed import chooser
    from hpvm_py.distributed.gpu import launch as G
    from hpvm_py.distributed.gpu.heap import ONE_SHOT_PUSH_BYTES

    hpvm.distributed.init(device="cuda")
    rank, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    nccl = dist.new_group(backend="nccl")
    dev = torch.device("cuda", torch.cuda.current_device())

    def line_up() -> None:
        dist.barrier()

    def out(text: str) -> None:
        if rank == 0:
            print(text, flush=True)

    if moe:
        _moe(nccl, dev, line_up, out, max_bytes)
        return
    arena = hpvm.symmetric.empty(max_bytes, torch.uint8)
    plain = torch.empty(max_bytes, dtype=torch.uint8, device=dev)

    sizes = [8 << 10]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    out(f"# {torch.cuda.get_device_name()} x {world}, torch {torch.__version__}; algbw = bytes / time, "
        "busbw = algbw * 2(n-1)/n; ratio = NCCL time / hpvm-py time (> 1: hpvm-py faster)")
    if quick:
        _quick(G, arena, plain, nccl, dev, line_up, out, max_bytes)
        return
    for dtype in (torch.bfloat16, torch.float32):
        esize = torch.empty(0, dtype=dtype).element_size()
        out(f"\n## all_reduce sum {str(dtype).removeprefix('torch.')}, {world} GPUs")
        out(f"{'bytes':>11} {'chosen':>8} {'us':>9} {'algbw':>7} {'busbw':>7} {'one_shot':>9} "
            f"{'two_shot':>9} {'push':>9} {'stream':>9} {'NCCL us':>9} {'NCCL bus':>8} {'ratio':>6} {'CE bus':>7} "
            f"{'str/CE':>6} {'graph us':>9} {'NCCL gr':>8} {'ratio':>6} {'os_push':>8} {'osp gr':>7}")
        for nbytes in sizes:
            n = nbytes // esize
            x = arena[:nbytes].view(dtype)
            x.copy_(torch.randn(n, device=dev).to(dtype))
            y = plain[:nbytes].view(dtype)
            y.copy_(x)
            iters = _iters(nbytes)
            nccl_us = time_us(lambda: dist.all_reduce(y, group=nccl), iters, line_up)
            algorithms = ("one_shot", "two_shot", "push") + (("stream",) if world == 2 else ())
            small = nbytes <= ONE_SHOT_PUSH_BYTES
            algorithms += ("one_shot_push",) if small else ()
            times = {a: time_us(lambda a=a: G.all_reduce(x, "sum", a), iters, line_up) for a in algorithms}
            chosen = chooser.choose_gpu("all_reduce", nbytes, world, elem_bytes=x.element_size())
            us = times[chosen]
            bus = 2 * (world - 1) / world
            ceiling = f"{'-':>7} {'-':>6}"
            if world == 2 and nbytes >= CE_MIN_BYTES:
                ce_us = copy_engine_us(x, y, iters, line_up)
                ceiling = f"{nbytes / ce_us / 1e3:>7.1f} {ce_us / times['stream']:>6.0%}"
            streamed = f"{times['stream']:>9.1f}" if "stream" in times else f"{'-':>9}"
            graphs = ""
            if nbytes <= GRAPH_MAX_BYTES:
                ours = time_us(_graphed(lambda: G.all_reduce(x, "sum")), iters, line_up) / GRAPH_CALLS
                theirs = time_us(_graphed(lambda: dist.all_reduce(y, group=nccl)), iters,
                                  line_up) / GRAPH_CALLS
                graphs = f" {ours:>9.1f} {theirs:>8.1f} {theirs / ours:>6.2f}"
                if small:  # one-shot by stores, forced: eager and as graphs
                    by_stores = time_us(_graphed(lambda: G.all_reduce(x, "sum", "one_shot_push")), iters,
                                        line_up) / GRAPH_CALLS
                    graphs += f" {times['one_shot_push']:>8.1f} {by_stores:>7.1f}"
            out(f"{nbytes:>11} {chosen:>8} {us:>9.1f} {nbytes / us / 1e3:>7.1f} "
                f"{nbytes / us / 1e3 * bus:>7.1f} {times['one_shot']:>9.1f} {times['two_shot']:>9.1f} "
                f"{times['push']:>9.1f} {streamed} {nccl_us:>9.1f} {nbytes / nccl_us / 1e3 * bus:>8.1f} {nccl_us / us:>6.2f} "
                f"{ceiling}{graphs}")
    extras = [(sweep, lambda: _sweep(G, arena, dev, line_up, out, max_bytes)),
              (node, lambda: _node(hpvm, arena, out)), (overlap, lambda: _overlap(G, arena, dev, line_up, out))]
    for wanted, run in extras:
        if wanted:
            try:  # one section's failure must not cost the others' figures
                run()
            except Exception:  # noqa: BLE001 - reported, then the next section
                import traceback

                out(traceback.format_exc())


def _sweep(G, arena, dev, line_up, out, max_bytes: int) -> None:  # noqa: ANN001
    import torch

    out("\n## tuning sweep, bf16 all_reduce, us (block bytes / warps / programs)")
    variants = [(8 << 10, 4, 264), (16 << 10, 8, 132), (16 << 10, 8, 264), (32 << 10, 8, 264),
                (32 << 10, 16, 132), (16 << 10, 4, 528), (64 << 10, 16, 132), (8 << 10, 8, 528),
                (16 << 10, 8, 512)]
    sizes = [s for s in (64 << 10, 1 << 20, 16 << 20, 256 << 20) if s <= max_bytes]
    out(f"{'algorithm':>9} {'variant':>16} " + " ".join(f"{s:>10}" for s in sizes))
    saved, by_world = dict(G.TUNING), dict(G.TUNING_BY_WORLD)
    G.TUNING_BY_WORLD.clear()  # the variants apply at every world size
    world = hpvm.distributed.world_size()
    for algorithm in ("one_shot", "two_shot", "push") + (("stream",) if world == 2 else ()):
        for block, warps, programs in variants:  # the stream kernel keeps its slots per lane
            G.TUNING[algorithm] = G.Tuning(block, warps, programs, saved[algorithm].slots)
            row = []
            for nbytes in sizes:
                x = arena[:nbytes].view(torch.bfloat16)
                row.append(time_us(lambda: G.all_reduce(x, "sum", algorithm), _iters(nbytes), line_up))
            out(f"{algorithm:>9} {f'{block >> 10}K/{warps}/{programs}':>16} "
                + " ".join(f"{t:>10.1f}" for t in row))
        G.TUNING[algorithm] = saved[algorithm]
    G.TUNING_BY_WORLD.update(by_world)


def _quick(G, arena, plain, nccl, dev, line_up, out, max_bytes: int) -> None:  # noqa: ANN001
    """The quantized all-reduce of bf16 (direct API) against NCCL's bf16 all-reduce and the exact
    one the chooser picks, from 256 KiB up; `err`: the largest |result - exact sum| of one call on
    fresh normal inputs, over the largest |exact sum| (the int8 bound is about 1/254 of each rank's
    block maximum, summed over ranks)."""
    import torch
    import torch.distributed as dist

    from hpvm_py.distributed import chooser

    world = dist.get_world_size()
    modes = ("fp8", "int8", "int4")
    out(f"\n## quantized all-reduce, bf16, {world} GPUs, us; ratio = NCCL bf16 time / the format's "
        "time; err = max |result - exact| / max |exact|")
    out(f"{'bytes':>11} {'NCCL us':>9} {'exact us':>9} " + " ".join(f"{m + ' us':>9}" for m in modes)
        + " " + " ".join(f"{m + ' ratio':>10}" for m in modes) + " " + " ".join(f"{m + ' err':>9}" for m in modes))
    sizes = [256 << 10]
    while sizes[-1] * 2 <= max_bytes:
        sizes.append(sizes[-1] * 2)
    for nbytes in sizes:
        n = nbytes // 2
        x = arena[:nbytes].view(torch.bfloat16)
        y = plain[:nbytes].view(torch.bfloat16)
        errors = {}
        for mode in modes:  # one call on fresh inputs, against the exact sum of every rank's
            g = torch.Generator(device=dev).manual_seed(1000 + dist.get_rank())
            x.copy_(torch.randn(n, generator=g, device=dev).to(torch.bfloat16))
            exact = x.double()
            dist.all_reduce(exact, group=nccl)
            G.all_reduce_quantized(x, mode)
            torch.cuda.synchronize()
            errors[mode] = float((x.double() - exact).abs().max() / exact.abs().max())
        x.copy_(torch.randn(n, device=dev).to(torch.bfloat16) * 1e-3)  # sums grow: stay finite
        y.copy_(x)
        iters = _iters(nbytes)
        nccl_us = time_us(lambda: dist.all_reduce(y, group=nccl), iters, line_up)
        exact_us = time_us(lambda: G.all_reduce(x, "sum"), iters, line_up)
        times = {m: time_us(lambda m=m: G.all_reduce_quantized(x, m), iters, line_up) for m in modes}
        out(f"{nbytes:>11} {nccl_us:>9.1f} {exact_us:>9.1f} " + " ".join(f"{times[m]:>9.1f}" for m in modes)
            + " " + " ".join(f"{nccl_us / times[m]:>10.2f}" for m in modes)
            + " " + " ".join(f"{errors[m]:>9.2e}" for m in modes))
    out(f"# chooser.QUANTIZE_BYTES now: {chooser.QUANTIZE_BYTES} (the first size each format beat the exact one)")


SUM_BF16 = hpvm.comm.all_reduce(bf16)


@hpvm.graph
def one_all_reduce(x: InOut[Ptr[bf16]], x_bytes: i64):
    hpvm.node(SUM_BF16, buf=x, buf_bytes=x_bytes)


def _node(hpvm, arena, out) -> None:  # noqa: ANN001
    """The whole node launch against the direct API, both on the host clock and synchronised: a
    one-node graph launched again with the same buffer (replayed; its agreement kept and checked
    by its fingerprint through the host control block: docs/distributed.md), and the direct call
    of the same kernel (no agreement at all). Issue 22's target: graph / direct <= 1.3."""
    import torch

    from hpvm_py.distributed.gpu import launch as G

    out("\n## communication node (hpvm.launch + wait of a one-node graph, relaunched) against the "
        "direct API, bf16, host clock, synchronised")
    out(f"{'bytes':>11} {'graph us':>9} {'direct us':>9} {'graph/direct':>12}")
    with hpvm.runtime("gpu"):
        for nbytes in (8 << 10, 1 << 20, 16 << 20):
            x = arena[:nbytes].view(torch.bfloat16)
            times = {"graph": [], "direct": []}
            calls = {"graph": lambda: hpvm.wait(hpvm.launch(one_all_reduce, x, nbytes)),
                     "direct": lambda: G.all_reduce(x)}
            for _ in range(60):
                for name, call in calls.items():  # interleaved
                    torch.cuda.synchronize()
                    start = time.perf_counter()
                    call()
                    torch.cuda.synchronize()
                    times[name].append((time.perf_counter() - start) * 1e6)
            graph, direct = (statistics.median(times[k][10:]) for k in ("graph", "direct"))
            out(f"{nbytes:>11} {graph:>9.1f} {direct:>9.1f} {graph / direct:>11.2f}x")


def _overlap(G, arena, dev, line_up, out) -> None:  # noqa: ANN001
    """A tensor-parallel step y = all_reduce(x @ w_shard), x: [m, k], w_shard: [k, n], bf16, y on
    the heap: unfused (matmul, then all-reduce) against chunked (m split in `chunks`; the
    all-reduce of chunk i runs on a second stream while chunk i + 1 is multiplied)."""
    import torch

    out("\n## compute/communication overlap: y = all_reduce(x @ w), bf16, us per step")
    out(f"{'m x k x n':>20} {'chunks':>6} {'programs':>8} {'unfused':>9} {'chunked':>9} {'speedup':>7}")
    k, n = 4096, 8192
    m = min(8192, arena.numel() // (2 * n) // 1024 * 1024)  # y fills at most the arena
    x = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
    w = torch.randn(k, n, device=dev, dtype=torch.bfloat16) / k ** 0.5
    y = arena[:m * n * 2].view(torch.bfloat16).view(m, n)
    comm = torch.cuda.Stream()
    saved = dict(G.TUNING)

    def unfused() -> None:
        torch.matmul(x, w, out=y)
        G.all_reduce(y, "sum")

    def chunked(chunks: int) -> None:
        rows = m // chunks
        main = torch.cuda.current_stream()
        comm.wait_stream(main)  # y is free: the previous step's readers are done
        for i in range(chunks):
            part = y[i * rows:(i + 1) * rows]
            torch.matmul(x[i * rows:(i + 1) * rows], w, out=part)
            comm.wait_stream(main)
            with torch.cuda.stream(comm):
                G.all_reduce(part, "sum")
        main.wait_stream(comm)

    base = time_us(unfused, 10, line_up)
    for chunks in (2, 4, 8):
        for programs in (32, 66, 132):  # fewer programs leave more SMs to the matmul
            G.TUNING["one_shot"] = G.TUNING["two_shot"] = G.Tuning(16 << 10, 8, programs)
            G.TUNING["stream"] = G.Tuning(16 << 10, 8, programs, saved["stream"].slots)
            fast = time_us(lambda: chunked(chunks), 10, line_up)
            out(f"{f'{m}x{k}x{n}':>20} {chunks:>6} {programs:>8} {base:>9.1f} {fast:>9.1f} "
                f"{base / fast:>7.2f}")
    G.TUNING.update(saved)


MOE_HIDDEN = 7168  # DeepSeek-V3's hidden size: bf16 rows of 14 KiB
MOE_EXPERTS_PER_RANK = 8


def _moe(nccl, dev, line_up, out, max_bytes: int) -> None:  # noqa: ANN001
    """Expert-parallel token exchange: top-1, bf16 rows of MOE_HIDDEN elements, uniform random
    routing over MOE_EXPERTS_PER_RANK x world experts, capacity = the busiest expert's load (nothing
    dropped: all_to_all drops nothing). hpvm-py: the direct API of gpu/moe_launch.py, dispatch
    (every row into its expert's slot on the expert's rank) and combine (every row back, times its
    gate). NCCL: torch.distributed.all_to_all_single as an MoE layer uses it. Dispatch: the rows
    sorted by expert (so by rank), the split sizes exchanged (an all_to_all_single of the counts,
    brought to the host: the payload call needs them as lists), then the rows; "payload" times the
    rows' all_to_all_single alone, its splits known. Combine: the rows sent back with the
    dispatch's splits, put back in token order and scaled by the gates ("payload": the
    all_to_all_single alone). Times in us, rank 0's median of batches; GB/s: the rows' bytes per
    rank (tokens x hidden x 2) / time."""
    import numpy as np
    import torch
    import torch.distributed as dist

    from hpvm_py.distributed.gpu import moe_launch as M

    rank, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    local, hidden = MOE_EXPERTS_PER_RANK, MOE_HIDDEN
    experts = local * world
    arena = hpvm.symmetric.empty(max_bytes, torch.uint8)
    out(f"# {torch.cuda.get_device_name()} x {world}, torch {torch.__version__}")
    out(f"\n## moe dispatch + combine, bf16 rows of {hidden}, {experts} experts on {world} GPUs, top-1 "
        "uniform; us (ratio = NCCL time / hpvm-py time, > 1: hpvm-py faster)")
    out(f"{'tokens':>7} {'capacity':>8} {'dispatch':>9} {'GB/s':>6} {'NCCL+splits':>11} {'NCCL payload':>12} "
        f"{'ratio':>6} {'ratio pl':>8} {'combine':>9} {'NCCL comb':>9} {'NCCL payload':>12} {'ratio':>6}")
    for tokens in (128, 512, 2048, 4096):
        rng = np.random.default_rng(1000 + tokens)  # every rank draws every rank's routing
        routes = [rng.integers(0, experts, tokens) for _ in range(world)]
        capacity = int(sum(np.bincount(r, minlength=experts) for r in routes).max())
        rows = local * capacity
        cursor = [0]

        def take(n: int, dtype: torch.dtype) -> torch.Tensor:
            start = -(-cursor[0] // 256) * 256
            cursor[0] = start + n * torch.empty(0, dtype=dtype).element_size()
            if cursor[0] > arena.numel():
                raise MemoryError(f"tokens={tokens}: the arena of {arena.numel()} bytes is too small")
            return arena[start:cursor[0]].view(dtype)

        try:
            x, expert = take(tokens * hidden, torch.bfloat16), take(tokens, torch.int32)
            recv, counts = take(rows * hidden, torch.bfloat16), take(experts, torch.int32)
            origin, slot = take(2 * rows, torch.int32), take(tokens, torch.int32)
            gate, y = take(tokens, torch.float32), take(tokens * hidden, torch.bfloat16)
        except MemoryError as exc:
            out(f"{tokens:>7} skipped: {exc} (--max-mib larger)")
            continue
        x.copy_(torch.randn(tokens * hidden, device=dev).to(torch.bfloat16))
        expert.copy_(torch.from_numpy(routes[rank]).to(torch.int32))
        gate.copy_(torch.rand(tokens, device=dev))
        route = expert.long()

        def ours_dispatch() -> None:
            M.moe_dispatch(x, expert, recv, counts, origin, slot, hidden, experts, capacity)

        def ours_combine() -> None:
            M.moe_combine(recv, slot, gate, y, hidden, experts, capacity)

        ours_dispatch()
        ours_combine()
        torch.cuda.synchronize()
        want = (x.view(tokens, hidden).float() * gate[:, None]).to(torch.bfloat16)
        assert torch.equal(y.view(tokens, hidden), want), "moe dispatch + combine is not exact"

        rows_in = x.view(tokens, hidden)
        send_counts = torch.zeros(world, dtype=torch.int64, device=dev)
        send_counts.scatter_add_(0, route // local, torch.ones_like(route))
        recv_counts = torch.empty_like(send_counts)
        dist.all_to_all_single(recv_counts, send_counts, group=nccl)
        splits_in, splits_out = send_counts.tolist(), recv_counts.tolist()
        order = torch.argsort(route, stable=True)
        sent = rows_in.index_select(0, order)
        got = torch.empty(sum(splits_out), hidden, dtype=torch.bfloat16, device=dev)
        back = torch.empty_like(sent)
        combined = torch.empty_like(rows_in)

        def nccl_dispatch() -> None:  # what a layer does when the routing is new
            order = torch.argsort(route, stable=True)
            permuted = rows_in.index_select(0, order)
            mine = torch.zeros(world, dtype=torch.int64, device=dev)
            mine.scatter_add_(0, route // local, torch.ones_like(route))
            theirs = torch.empty_like(mine)
            dist.all_to_all_single(theirs, mine, group=nccl)
            ins, outs = mine.tolist(), theirs.tolist()
            landed = torch.empty(sum(outs), hidden, dtype=torch.bfloat16, device=dev)
            dist.all_to_all_single(landed, permuted, outs, ins, group=nccl)

        def nccl_dispatch_payload() -> None:
            dist.all_to_all_single(got, sent, splits_out, splits_in, group=nccl)

        def nccl_combine() -> None:
            dist.all_to_all_single(back, got, splits_in, splits_out, group=nccl)
            combined.index_copy_(0, order, back)
            combined.mul_(gate[:, None].to(torch.bfloat16))

        def nccl_combine_payload() -> None:
            dist.all_to_all_single(back, got, splits_in, splits_out, group=nccl)

        iters = 50 if tokens <= 512 else 20
        t = {name: time_us(fn, iters, line_up) for name, fn in (
            ("dispatch", ours_dispatch), ("nccl", nccl_dispatch), ("payload", nccl_dispatch_payload),
            ("combine", ours_combine), ("nccl_comb", nccl_combine), ("payload_comb", nccl_combine_payload))}
        gbs = tokens * hidden * 2 / t["dispatch"] / 1e3
        out(f"{tokens:>7} {capacity:>8} {t['dispatch']:>9.1f} {gbs:>6.1f} {t['nccl']:>11.1f} "
            f"{t['payload']:>12.1f} "
            f"{t['nccl'] / t['dispatch']:>6.2f} {t['payload'] / t['dispatch']:>8.2f} {t['combine']:>9.1f} "
            f"{t['nccl_comb']:>9.1f} {t['payload_comb']:>12.1f} {t['nccl_comb'] / t['combine']:>6.2f}")
