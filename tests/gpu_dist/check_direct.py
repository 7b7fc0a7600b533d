"""GPU ranks, the direct API of hpvm_py.distributed.gpu.launch, against torch references on fresh
random inputs: every collective, dtype and reduction, every all-reduce algorithm (push: two-shot by
stores; stream: two ranks) at sizes from one element to 64 MiB, all bit for bit alike; the stream kernel's ring
wrapped hundreds of times; back-to-back calls without host synchronisation (the device epochs); a
CUDA graph of collectives replayed; the mixture-of-experts dispatch and combine
(gpu/moe_launch.py); and last, a rank that skips a call (the device wait times out and names it).
Run on 2+ GPUs:
`mpirun -n 2 python tests/gpu_dist/check_direct.py SEED`.
Prints `rank R: N checks ok` and, for the fault, `rank R: FAULT missing ok` on the waiting rank.
"""
import sys

import torch

import hpvm_py as hpvm
from hpvm_py.distributed.gpu import launch as G
from hpvm_py.distributed.gpu.heap import ONE_SHOT_PUSH_BYTES
from hpvm_py.errors import HPVMTimeoutError

SEED = int(sys.argv[1])
hpvm.distributed.init(timeout=20, device="cuda")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
DEV = torch.device("cuda", torch.cuda.current_device())
TYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
         "i32": torch.int32, "u8": torch.uint8, "i64": torch.int64}
TOL = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}
# every all-reduce algorithm this world has (the stream kernel is for two ranks)
ALGORITHMS = ("one_shot", "one_shot_push", "two_shot", "push") + (("stream",) if WORLD == 2 else ())
SMALL_ONLY = {"one_shot_push": ONE_SHOT_PUSH_BYTES}  # the largest call of an algorithm, in bytes


def algorithms(n: int, dtype: torch.dtype) -> list[str]:
    """The all-reduce algorithms that take n elements of dtype."""
    nbytes = n * torch.empty(0, dtype=dtype).element_size()
    return [a for a in ALGORITHMS if nbytes <= SMALL_ONLY.get(a, nbytes)]
checks = 0
heap = hpvm.symmetric.empty((64 << 20) + (8 << 20), torch.uint8)  # one arena, views reused
cursor = 0


def region(n: int, dtype: torch.dtype) -> torch.Tensor:
    """A fresh heap view of n elements (the same offsets on every rank)."""
    global cursor
    esize = torch.empty(0, dtype=dtype).element_size()
    start = -(-cursor // 256) * 256
    cursor = start + n * esize
    assert cursor <= heap.numel()
    return heap[start:cursor].view(dtype)


def reset() -> None:
    global cursor
    cursor = 0


def parts(dtype: str, n: int, salt: int) -> list[torch.Tensor]:
    out = []
    for q in range(WORLD):
        g = torch.Generator(device=DEV).manual_seed(SEED * 7919 + salt * 131 + q)
        if dtype in TOL:
            out.append(torch.randn(n, generator=g, device=DEV, dtype=torch.float32).to(TYPES[dtype]))
        else:
            out.append(torch.randint(0, 100, (n,), generator=g, device=DEV).to(TYPES[dtype]))
    return out


def reduce_ref(ps: list[torch.Tensor], op: str, dtype: str) -> torch.Tensor:
    wide = torch.float64 if dtype in TOL else ps[0].dtype
    acc = ps[0].to(wide)
    for p in ps[1:]:
        p = p.to(wide)
        acc = acc + p if op == "sum" else (torch.maximum(acc, p) if op == "max" else torch.minimum(acc, p))
    return acc


def check(name: str, got: torch.Tensor, want: torch.Tensor, dtype: str) -> None:
    global checks
    torch.cuda.synchronize()
    if dtype in TOL:
        ok = torch.allclose(got.double(), want.double(), rtol=TOL[dtype], atol=TOL[dtype])
    else:
        ok = torch.equal(got, want.to(got.dtype))
    if not ok:
        bad = (got.double() - want.double()).abs().argmax()
        raise AssertionError(f"rank {RANK}: {name}: worst at {int(bad)}: got {got[bad].item()}, "
                             f"want {want[bad].item()}")
    checks += 1


def all_reduce_cases() -> None:
    salt = 0
    cases = [("f32", "sum"), ("f32", "max"), ("f32", "min"), ("bf16", "sum"), ("bf16", "max"),
             ("f16", "sum"), ("f64", "sum"), ("i32", "sum"), ("i32", "min"), ("u8", "max"), ("i64", "min")]
    for dtype, op in cases:
        if True:
            for n in (1, 1000, 70_003):
                for algorithm in algorithms(n, TYPES[dtype]):
                    salt += 1
                    reset()
                    ps = parts(dtype, n, salt)
                    x = region(n, TYPES[dtype])
                    x.copy_(ps[RANK])
                    G.all_reduce(x, op, algorithm)
                    check(f"all_reduce {dtype} {op} n={n} {algorithm}", x, reduce_ref(ps, op, dtype), dtype)
    for n in (1 << 20, (16 << 20) + 5, 32 << 20):  # bf16 elements: 2 MiB to 64 MiB
        for algorithm in algorithms(n, torch.bfloat16):
            salt += 1
            reset()
            ps = parts("bf16", n, salt)
            x = region(n, torch.bfloat16)
            x.copy_(ps[RANK])
            G.all_reduce(x, "sum", algorithm)
            check(f"all_reduce bf16 n={n} {algorithm}", x, reduce_ref(ps, "sum", "bf16"), "bf16")


def bit_identity() -> None:
    """Every algorithm and every rank give the same bits (rank-order combination in f32)."""
    global checks
    reset()
    n = 200_001  # 400 KB: every algorithm takes it
    ps = parts("bf16", n, 999)
    results = {}
    for algorithm in algorithms(n, torch.bfloat16):
        x = results[algorithm] = region(n, torch.bfloat16)
        x.copy_(ps[RANK])
        G.all_reduce(x, "sum", algorithm)
    one = results["one_shot"]
    everyone = region(n * WORLD, torch.bfloat16)
    G.all_gather(one, everyone)
    torch.cuda.synchronize()
    for algorithm, x in results.items():
        assert torch.equal(one.view(torch.int16), x.view(torch.int16)), f"one-shot and {algorithm} differ"
    for q in range(WORLD):
        assert torch.equal(everyone[q * n:(q + 1) * n].view(torch.int16), one.view(torch.int16)), q
    checks += 1


def other_collectives() -> None:
    salt = 5000
    for dtype in ("f32", "bf16", "i32", "u8"):
        for n in (1, 4097, 1 << 20):
            salt += 1
            reset()
            ps = parts(dtype, n, salt)
            src, dst = region(n, TYPES[dtype]), region(n * WORLD, TYPES[dtype])
            src.copy_(ps[RANK])
            G.all_gather(src, dst)
            check(f"all_gather {dtype} n={n}", dst, torch.cat(ps), dtype)
            whole = parts(dtype, n * WORLD, salt + 10_000)
            big, mine = region(n * WORLD, TYPES[dtype]), region(n, TYPES[dtype])
            big.copy_(whole[RANK])
            for op in ("sum", "max"):
                G.reduce_scatter(big, mine, op)
                want = reduce_ref(whole, op, dtype)[RANK * n:(RANK + 1) * n]
                check(f"reduce_scatter {dtype} {op} n={n}", mine, want, dtype)
            for root in range(WORLD):
                buf = region(n, TYPES[dtype])
                buf.copy_(ps[RANK])
                G.broadcast(buf, root)
                check(f"broadcast {dtype} root={root} n={n}", buf, ps[root], dtype)


def rmsnorm() -> None:
    salt = 9000
    for dtype, rows, hidden in (("f32", 7, 1000), ("bf16", 64, 4096), ("f16", 3, 129), ("bf16", 2, 20000)):
        salt += 1
        reset()
        xs = parts(dtype, rows * hidden, salt)
        res = parts(dtype, rows * hidden, salt + 1)[0]  # the same residual everywhere
        w = parts(dtype, hidden, salt + 2)[0]
        x, r, wt = region(rows * hidden, TYPES[dtype]), region(rows * hidden, TYPES[dtype]), region(hidden, TYPES[dtype])
        x.copy_(xs[RANK])
        r.copy_(res)
        wt.copy_(w)
        G.all_reduce_rmsnorm(x, r, wt, hidden, 1e-6)
        total = reduce_ref(xs, "sum", dtype) + res.double()
        rows_ = total.view(rows, hidden)
        want = rows_ / torch.sqrt(rows_.square().mean(1, keepdim=True) + 1e-6) * w.double()
        check(f"rmsnorm {dtype} residual", r, total, dtype)
        check(f"rmsnorm {dtype} x", x, want.view(-1), dtype)


def back_to_back() -> None:
    """Eight all-reduces queued without a host synchronisation, half of them on one buffer twice:
    the device epochs keep the calls apart."""
    reset()
    n = 50_000
    bufs, wants = [], []
    for k in range(8):
        ps = [p.round() for p in parts("f32", n, 20_000 + k)]  # integers: exact sums in any order
        x = region(n, torch.float32)
        x.copy_(ps[RANK])
        bufs.append(x)
        wants.append(reduce_ref(ps, "sum", "f32"))
    torch.cuda.synchronize()
    for k, x in enumerate(bufs):
        G.all_reduce(x, "sum", ALGORITHMS[k % len(ALGORITHMS)])
        if k < 4:
            G.all_reduce(x, "sum")  # again, in place: WORLD x the sum
    for k, x in enumerate(bufs):
        check(f"back-to-back {k}", x, wants[k] * (WORLD if k < 4 else 1), "f32")


def stream_ring() -> None:
    """Two ranks: the stream kernel in a small ring (16 lanes of 2 slots of 4 KiB: each slot
    refilled hundreds of times per call) and in the default one, on sizes that are not whole
    chunks, twice in a row on the same buffers: bit for bit one-shot's result."""
    global checks
    if WORLD != 2:
        return
    saved = G.TUNING["stream"]
    for tuning in (G.Tuning(block_bytes=4 << 10, warps=4, programs=16, slots=2), saved):
        G.TUNING["stream"] = tuning
        for k, n in enumerate(((8 << 20) + 3, (16 << 20) + 1001)):  # bf16: 16 and 32 MiB
            reset()
            ps = parts("bf16", n, 40_000 + k)
            x, want = region(n, torch.bfloat16), region(n, torch.bfloat16)
            x.copy_(ps[RANK])
            want.copy_(ps[RANK])
            G.all_reduce(want, "sum", "one_shot")
            G.all_reduce(x, "sum", "stream")
            G.all_reduce(want, "sum", "one_shot")  # again, queued behind the first: 2 x the sum
            G.all_reduce(x, "sum", "stream")
            torch.cuda.synchronize()
            name = f"stream {tuning.programs} lanes x {tuning.slots} slots, n={n}"
            assert torch.equal(x.view(torch.int16), want.view(torch.int16)), f"rank {RANK}: {name}"
            checks += 1
    G.TUNING["stream"] = saved


def cuda_graph() -> None:
    """Collectives captured in a CUDA graph and replayed with fresh inputs (two ranks: the stream
    all-reduce too, bit for bit the chosen one's)."""
    global checks
    reset()
    n = 100_000
    x, y = region(n, torch.bfloat16), region(n * WORLD, torch.bfloat16)
    z = region(n, torch.bfloat16)
    src = torch.empty(n, dtype=torch.bfloat16, device=DEV)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        G.all_reduce(x, "sum")  # compile outside the capture
        G.all_gather(x, y)
        if WORLD == 2:
            G.all_reduce(z, "sum", "stream")
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            x.copy_(src)
            z.copy_(src)
            G.all_reduce(x, "sum")
            G.all_gather(x, y)
            if WORLD == 2:
                G.all_reduce(z, "sum", "stream")
    for k in range(5):
        ps = parts("bf16", n, 30_000 + k)
        src.copy_(ps[RANK])
        graph.replay()
        want = reduce_ref(ps, "sum", "bf16").to(torch.bfloat16)
        check(f"cuda graph replay {k} all_reduce", x, want, "bf16")
        check(f"cuda graph replay {k} all_gather", y, want.repeat(WORLD), "bf16")
        if WORLD == 2:
            assert torch.equal(z.view(torch.int16), x.view(torch.int16)), f"cuda graph replay {k}: stream"
            checks += 1


def bad_buffers() -> None:
    """Tensors off the heap, or not contiguous, are refused before anything is launched."""
    global checks
    from hpvm_py.errors import DistributedError

    reset()
    x = region(64, torch.float32)
    for name, t, rule in (("off the heap", torch.zeros(64, device=DEV), "buffer-on-heap"),
                          ("strided", x.view(8, 8).t(), None)):
        try:
            G.all_reduce(t, "sum")
        except DistributedError as exc:
            assert rule is None or exc.rule == rule, (name, exc)
            checks += 1
            continue
        raise AssertionError(f"rank {RANK}: a tensor {name} was accepted")


def moe() -> None:
    """moe_dispatch and moe_combine against the reference of the whole world (moe_reference.py):
    random routing and everything to one rank (drops), bf16 and f32, gated or not; each call made
    twice with fresh inputs in the same buffers (the second replays the call's CUDA graph); then a
    bad expert id on the middle rank, which its next synchronize() reports."""
    import numpy as np

    from hpvm_py.distributed.gpu import moe_launch as M
    from hpvm_py.errors import DistributedError
    from tests.programs import moe_reference as ref

    global checks
    cases = [("bf16", 1024, 512, 8 * WORLD, 256, "uniform"), ("bf16", 4096, 256, 4 * WORLD, 64, "skewed"),
             ("f32", 333, 96, 2 * WORLD, 1000, "uniform"), ("bf16", 0, 64, 2 * WORLD, 4, "uniform")]
    for k, (dtype, tokens, hidden, experts, capacity, kind) in enumerate(cases):
        reset()
        local, t = experts // WORLD, TYPES[dtype]
        x, expert = region(tokens * hidden, t), region(tokens, torch.int32)
        recv, counts = region(local * capacity * hidden, t), region(experts, torch.int32)
        origin, slot = region(2 * local * capacity, torch.int32), region(tokens, torch.int32)
        gate, out = region(tokens, torch.float32), region(tokens * hidden, t)
        for again in range(2):
            rng = np.random.default_rng(SEED * 31 + 2 * k + again)
            routes = ref.routes(rng, WORLD, tokens, experts, kind)
            rows = [torch.from_numpy(rng.standard_normal((tokens, hidden))).to(t).double().numpy()
                    for _ in range(WORLD)]
            gates = [rng.random(tokens).astype(np.float32) for _ in range(WORLD)]
            x.copy_(torch.from_numpy(rows[RANK].reshape(-1)).to(t))
            expert.copy_(torch.from_numpy(routes[RANK]))
            gate.copy_(torch.from_numpy(gates[RANK]))
            gated = (k + again) % 2 == 0
            M.moe_dispatch(x, expert, recv, counts, origin, slot, hidden, experts, capacity)
            M.moe_combine(recv, slot, gate if gated else None, out, hidden, experts, capacity)
            G.synchronize()
            want = ref.dispatch(routes, rows, experts, capacity)
            name = f"moe {dtype} {kind} T={tokens} H={hidden} E={experts} C={capacity} call {again}"
            received = torch.from_numpy(~np.isnan(want["recv"][RANK]).reshape(-1))
            got_recv = recv.double().cpu()
            wanted_recv = torch.from_numpy(want["recv"][RANK].reshape(-1))
            assert torch.equal(got_recv[received], wanted_recv[received]), name
            assert np.array_equal(counts.cpu().numpy().reshape(WORLD, local), want["counts"][RANK]), name
            pairs = origin.cpu().numpy().reshape(local, capacity, 2)
            assert np.array_equal(pairs, want["origin"][RANK]), name
            assert np.array_equal(slot.cpu().numpy(), want["slot"][RANK]), name
            outs = [np.nan_to_num(r) for r in want["recv"]]
            combined = ref.combine(want["slot"], outs, experts, capacity, gates if gated else None)[RANK]
            wanted = torch.from_numpy(combined.reshape(-1)).float().to(t)
            check(f"{name} combine", out, wanted.to(DEV), dtype)
            assert torch.equal(out.cpu(), wanted), f"{name}: combine is not exact"
    reset()
    x, expert = region(64 * 32, torch.bfloat16), region(64, torch.int32)
    recv, counts = region(2 * 16 * 32, torch.bfloat16), region(2 * WORLD, torch.int32)
    origin, slot = region(2 * 2 * 16, torch.int32), region(64, torch.int32)
    expert.fill_(0)
    if RANK == WORLD // 2:
        expert[5] = 2 * WORLD  # not an expert
    M.moe_dispatch(x, expert, recv, counts, origin, slot, 32, 2 * WORLD, 16)
    try:
        G.synchronize()
    except DistributedError as exc:
        assert RANK == WORLD // 2 and exc.rule == "moe-data" and "expert ids outside" in str(exc), str(exc)
        checks += 1
    else:
        assert RANK != WORLD // 2, "a bad expert id was not reported"
    assert int(slot[5]) == -1 or RANK != WORLD // 2


def missing_rank() -> None:
    """The middle rank (the last of two) skips a call: the others' kernels give up after the
    timeout and name it."""
    reset()
    x = region(1000, torch.float32)
    x.fill_(1.0)
    torch.cuda.synchronize()
    from hpvm_py.distributed import ranks

    ranks.current().timeout = 2.0
    faulty = WORLD // 2
    if RANK == faulty:
        print(f"rank {RANK}: FAULT missing skipped", flush=True)
        return
    G.all_reduce(x, "sum")
    try:
        G.synchronize()
    except HPVMTimeoutError as exc:
        assert f"rank {faulty} did not arrive within 2 s" in str(exc), str(exc)
        print(f"rank {RANK}: FAULT missing ok", flush=True)
        return
    raise AssertionError("no timeout")


all_reduce_cases()
bit_identity()
stream_ring()
other_collectives()
rmsnorm()
back_to_back()
cuda_graph()
bad_buffers()
moe()
print(f"rank {RANK}: {checks} checks ok", flush=True)
missing_rank()
