"""GPU ranks: the quantized all-reduce and the fp8 output of the fused all-reduce + RMSNorm through
the direct API (hpvm_py.distributed.gpu.launch), on fresh random inputs, bit for bit against the
host codec (hpvm_py/distributed/quantize.py: what CPU ranks compute) and within the documented
error bound of the exact sum: every format and element type at sizes from one element to 8 MiB,
back-to-back calls of several sizes without a host synchronisation (the workspace is reused), a
CUDA graph replayed, and the RMSNorm's fp8 codes and scales in the fused kernel and in the
long-row fallback. Run on 2+ GPUs: `mpirun -n 2 python tests/gpu_dist/check_quantized.py SEED`.
Prints `rank R: N quantized checks ok`.
"""
import sys

import numpy as np
import torch

import hpvm_py as hpvm
from hpvm_py.distributed import quantize as Q
from hpvm_py.distributed.gpu import launch as G
from hpvm_py.distributed.quantized import sum_payloads

SEED = int(sys.argv[1])
hpvm.distributed.init(timeout=30, device="cuda")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
DEV = torch.device("cuda", torch.cuda.current_device())
TYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
UNIT = {"f32": 0.0, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}
TINY = {"f32": 2.0 ** -150, "bf16": 2.0 ** -134, "f16": 2.0 ** -25}
checks = 0
arena = hpvm.symmetric.empty(40 << 20, torch.uint8)  # the workspace goes after it, at the heap's end
cursor = 0


def region(n: int, dtype: torch.dtype) -> torch.Tensor:
    global cursor
    esize = torch.empty(0, dtype=dtype).element_size()
    start = -(-cursor // 256) * 256
    cursor = start + n * esize
    assert cursor <= arena.numel()
    return arena[start:cursor].view(dtype)


def parts(dtype: str, n: int, salt: int) -> list[torch.Tensor]:
    """Every rank's input (each rank makes all of them): magnitudes spread over e^-3..e^3."""
    out = []
    for q in range(WORLD):
        g = torch.Generator(device=DEV).manual_seed(SEED * 7919 + salt * 131 + q)
        v = torch.randn(n, generator=g, device=DEV) * torch.exp(torch.rand(n, generator=g, device=DEV) * 6 - 3)
        out.append(v.to(TYPES[dtype]))
    return out


def host_semantics(ps: list[torch.Tensor], mode: str) -> torch.Tensor:
    """What CPU ranks compute: quantize.py's payloads, decoded and added in rank order."""
    n = ps[0].numel()
    layout = Q.Layout(n, mode)
    payloads = []
    for p in ps:
        codes, scales = np.zeros(layout.code_bytes, np.uint8), np.zeros(layout.groups, np.float32)
        Q.encode(p.float().cpu().numpy(), mode, codes, scales)
        payloads.append((codes, scales))
    return torch.from_numpy(sum_payloads(payloads, n, mode)).to(ps[0].dtype)


def within_bound(got: torch.Tensor, ps: list[torch.Tensor], mode: str, dtype: str) -> bool:
    """docs/distributed.md's bound of |result - exact sum|, element by element."""
    n = got.numel()
    xs = [p.double().cpu() for p in ps]
    pad = -n % 32
    absmax = [torch.nn.functional.pad(x.abs(), (0, pad)).view(-1, 32).amax(1).repeat_interleave(32)[:n] for x in xs]
    if mode == "fp8":
        e = sum(torch.maximum(x.abs() / 16, a / (448 * 1024)) for x, a in zip(xs, absmax))
    else:
        e = sum(a / (2 * Q.QMAX[mode]) for a in absmax)
    s = e + (WORLD + 2) * 2.0 ** -23 * sum(absmax)
    exact = sum(xs)
    limit = s + UNIT[dtype] * (exact.abs() + s) + TINY[dtype]
    return bool(torch.all((got.double().cpu() - exact).abs() <= limit))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(a.cpu().contiguous().view(torch.uint8), b.cpu().contiguous().view(torch.uint8))


def check(name: str, ok: bool) -> None:
    global checks
    if not ok:
        raise AssertionError(f"rank {RANK}: {name}")
    checks += 1


def formats() -> None:
    global cursor
    salt = 0
    for mode in Q.MODES:
        for dtype in ("bf16", "f16", "f32"):
            sizes = (1, 1000, 70_003) + ((4 << 20) + 3,) * (dtype == "bf16")  # up to 8 MiB of bf16
            for n in sizes:
                salt += 1
                cursor = 0
                ps = parts(dtype, n, salt)
                x = region(n, TYPES[dtype])
                x.copy_(ps[RANK])
                G.all_reduce_quantized(x, mode)
                torch.cuda.synchronize()
                want = host_semantics(ps, mode)
                if not same_bits(x, want):
                    bad = (x.cpu().float() != want.float()).nonzero()[:4].flatten()
                    raise AssertionError(f"rank {RANK}: {mode} {dtype} n={n}: differs from the host codec "
                                         f"at {bad.tolist()}: {x.cpu()[bad].tolist()} != {want[bad].tolist()}")
                check(f"{mode} {dtype} n={n} bound", within_bound(x, ps, mode, dtype))


def back_to_back() -> None:
    """Several sizes and formats queued without a host synchronisation: peers read each call's
    workspace before any rank's next call rewrites it."""
    global cursor
    cursor = 0
    calls = [("int8", 300_000), ("fp8", 5000), ("int4", 1 << 20), ("int8", 300_000), ("fp8", 77)]
    bufs, wants = [], []
    for k, (mode, n) in enumerate(calls):
        ps = parts("bf16", n, 50_000 + k)
        x = region(n, torch.bfloat16)
        x.copy_(ps[RANK])
        bufs.append(x)
        wants.append(host_semantics(ps, mode))
    torch.cuda.synchronize()
    for (mode, _), x in zip(calls, bufs):
        G.all_reduce_quantized(x, mode)
    torch.cuda.synchronize()
    for k, x in enumerate(bufs):
        check(f"back-to-back {k}", same_bits(x, wants[k]))


def cuda_graph() -> None:
    global cursor
    cursor = 0
    n = 200_000
    x = region(n, torch.bfloat16)
    src = torch.empty(n, dtype=torch.bfloat16, device=DEV)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        G.all_reduce_quantized(x, "int8")  # compile outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            x.copy_(src)
            G.all_reduce_quantized(x, "int8")
    for k in range(4):
        ps = parts("bf16", n, 60_000 + k)
        src.copy_(ps[RANK])
        graph.replay()
        torch.cuda.synchronize()
        check(f"cuda graph replay {k}", same_bits(x, host_semantics(ps, "int8")))


def rmsnorm_fp8() -> None:
    """The fp8 copy of x as stored: bit for bit quantize.rows_fp8 (and torch's e4m3fn)."""
    global cursor
    salt = 70_000
    for dtype, rows, hidden in (("bf16", 64, 4096), ("f32", 7, 1000), ("f16", 3, 129), ("bf16", 2, 20000)):
        salt += 1
        cursor = 0
        xs = parts(dtype, rows * hidden, salt)
        res, w = parts(dtype, rows * hidden, salt + 1)[0], parts(dtype, hidden, salt + 2)[0]
        x, r, wt = region(rows * hidden, TYPES[dtype]), region(rows * hidden, TYPES[dtype]), region(hidden, TYPES[dtype])
        out, scales = region(rows * hidden, torch.uint8), region(rows, torch.float32)
        x.copy_(xs[RANK])
        r.copy_(res)
        wt.copy_(w)
        G.all_reduce_rmsnorm(x, r, wt, hidden, 1e-6, out, scales)
        torch.cuda.synchronize()
        total = sum(p.double() for p in xs) + res.double()
        rows_ = total.view(rows, hidden)
        want = rows_ / torch.sqrt(rows_.square().mean(1, keepdim=True) + 1e-6) * w.double()
        tol = 1e-5 if dtype == "f32" else 2e-2
        check(f"rmsnorm-fp8 {dtype} x", torch.allclose(x.double(), want.view(-1), rtol=tol, atol=tol))
        codes, row_scales = Q.rows_fp8(x.float().cpu().numpy().reshape(rows, hidden))
        check(f"rmsnorm-fp8 {dtype} scales", np.array_equal(scales.cpu().numpy(), row_scales))
        check(f"rmsnorm-fp8 {dtype} codes", np.array_equal(out.cpu().numpy(), codes.reshape(-1)))


formats()
back_to_back()
cuda_graph()
rmsnorm_fp8()
print(f"rank {RANK}: {checks} quantized checks ok", flush=True)
