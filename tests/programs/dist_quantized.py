"""Run under `mpiexec -n N python dist_quantized.py SEED [TARGET]`: the quantized all-reduce and the
fused RMSNorm's fp8 output as communication nodes, on fresh random inputs (derived from SEED),
against references written here from docs/distributed.md ("Quantized all-reduce"). Each check
reports `QUICK <name> ok` on every rank:

- every format (fp8, int8, int4) and element type (f32, bf16, f16), sizes from one element to
  several payload pads: the result is bit for bit the documented semantics (each rank's input
  quantized per group of 32 with an f32 scale, decoded, added in f32 in rank order, rounded once),
  within the documented error bound of the exact sum, and really quantized (most elements differ
  from the exact all-reduce's);
- below HPVM_COMM_QUANTIZE_BYTES the node is the exact all-reduce;
- a relaunched quantized graph stays right on fresh inputs, agreed once;
- all_reduce_rmsnorm(quantize="fp8"): x and residual as the plain node, out and scales bit for bit
  e4m3fn(x / s) with s = max|x| / 448 per row (torch's own fp8 conversion as the reference);
- one rank (FAULTY) with its own threshold, or with another format: every rank raises naming the
  quantization, and the ranks stay in step; last (heap path), a workspace that does not fit the
  heap: every rank raises heap-capacity.

HPVM_COMM_FORCE_REMOTE=1 runs it on the engine path; TARGET gpu on GPU ranks runs the Triton kernels.
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import os
import sys

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report, report_disagreement
from hpvm_py import In, InOut, Out, Ptr, f32, i64, u8
from hpvm_py.errors import DistributedError
from hpvm_py.support import stats

SEED = int(sys.argv[1]) if len(sys.argv) > 1 else 1
TARGET = sys.argv[2] if len(sys.argv) > 2 else "cpu"
hpvm.distributed.init(timeout=60, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
FAULTY = WORLD // 2
TORCH = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
QMAX = {"fp8": 448.0, "int8": 127.0, "int4": 7.0}
UNIT = {"f32": 0.0, "bf16": 2.0 ** -8, "f16": 2.0 ** -11}  # the final rounding's relative error
TINY = {"f32": 2.0 ** -150, "bf16": 2.0 ** -134, "f16": 2.0 ** -25}  # half the smallest subnormal
os.environ["HPVM_COMM_QUANTIZE_BYTES"] = "0"  # quantize every size unless a check says otherwise
ON_GPU = hpvm.symmetric.empty(1, torch.uint8).is_cuda


def inputs(step: int, n: int, dtype: str) -> list[torch.Tensor]:
    """Every rank's input: normal values with magnitudes spread over e^-3..e^3, and one group of
    zeros (each rank can compute all of them)."""
    out = []
    for q in range(WORLD):
        rng = np.random.default_rng([SEED, step, q])
        v = rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))
        v[32:64] = 0.0
        out.append(torch.from_numpy(v.astype(np.float32)).to(TORCH[dtype]))
    return out


def decoded(x: torch.Tensor, mode: str) -> np.ndarray:
    """One rank's contribution as the semantics say: per group of 32, s = absmax / QMAX (f32),
    code = v / s rounded (ints: to nearest even, clamped; fp8: torch's e4m3fn), value = code * s."""
    v = x.to(torch.float32).numpy()
    groups = -(-len(v) // 32)
    g = np.zeros(groups * 32, np.float32)
    g[:len(v)] = v
    g = g.reshape(groups, 32)
    s = (np.abs(g).max(axis=1) / np.float32(QMAX[mode])).astype(np.float32)
    y = np.where(s[:, None] > 0, g / np.where(s > 0, s, 1)[:, None], 0).astype(np.float32)
    y = np.clip(y, -QMAX[mode], QMAX[mode])
    if mode == "fp8":
        code = torch.from_numpy(y).to(torch.float8_e4m3fn).to(torch.float32).numpy()
    else:
        code = np.round(y).astype(np.int32).astype(np.float32)  # halves to even; integer codes: no -0
    return (code * s[:, None]).reshape(-1)[:len(v)]


def semantics(parts: list[torch.Tensor], mode: str) -> torch.Tensor:
    acc = decoded(parts[0], mode).copy()
    for p in parts[1:]:
        acc = acc + decoded(p, mode)  # f32, rank order
    return torch.from_numpy(acc).to(parts[0].dtype)


def bound(parts: list[torch.Tensor], mode: str, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(the exact sum in f64, the documented error bound of each element)."""
    xs = [p.to(torch.float64).numpy() for p in parts]
    n = len(xs[0])
    groups = -(-n // 32)
    absmax = []
    for x in xs:
        g = np.zeros(groups * 32)
        g[:n] = np.abs(x)
        absmax.append(np.repeat(g.reshape(groups, 32).max(axis=1), 32)[:n])
    if mode == "fp8":
        e = sum(np.maximum(np.abs(x) / 16, a / (448 * 1024)) for x, a in zip(xs, absmax))
    else:
        e = sum(a / (2 * QMAX[mode]) for a in absmax)
    s = e + (WORLD + 2) * 2.0 ** -23 * sum(absmax)
    exact = sum(xs)
    return exact, s + UNIT[dtype] * (np.abs(exact) + s) + TINY[dtype]


def exact_sum(parts: list[torch.Tensor]) -> torch.Tensor:
    acc = parts[0].to(torch.float32)
    for p in parts[1:]:
        acc = acc + p.to(torch.float32)
    return acc.to(parts[0].dtype)


def run(graph, *args) -> None:  # noqa: ANN001
    hpvm.wait(hpvm.launch(graph, *args))
    if ON_GPU:
        torch.cuda.synchronize()


_graphs: dict = {}


def quick_graph(dtype: str, mode: str | None):  # noqa: ANN201
    key = (dtype, mode)
    if key not in _graphs:
        node = hpvm.comm.all_reduce(getattr(hpvm, dtype), quantize=mode)

        @hpvm.graph
        def g(x: InOut[Ptr[getattr(hpvm, dtype)]], x_bytes: i64):
            hpvm.node(node, buf=x, buf_bytes=x_bytes)
        _graphs[key] = g
    return _graphs[key]


def bits(t: torch.Tensor) -> np.ndarray:
    return t.cpu().contiguous().view(torch.uint8).numpy()


def counter(name: str) -> int:
    return stats.snapshot().get(name, 0)


step = 0
_buffers: dict = {}


def buffer(n: int, dtype: str) -> torch.Tensor:
    """One heap buffer per size and type (the same on every rank; the heap is never freed)."""
    if (n, dtype) not in _buffers:
        _buffers[(n, dtype)] = hpvm.symmetric.empty(n, TORCH[dtype])
    return _buffers[(n, dtype)]


def quick(mode: str, dtype: str, n: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    global step
    step += 1
    parts = inputs(step, n, dtype)
    x = buffer(n, dtype)
    x.copy_(parts[RANK].to(x.device))
    run(quick_graph(dtype, mode), x, x.nbytes)
    return x.cpu(), parts


def check_formats() -> None:
    for mode in ("fp8", "int8", "int4"):
        for dtype in ("f32", "bf16", "f16"):
            for n in (1, 1000, 20_001):
                before = counter("collectives_quantized")
                got, parts = quick(mode, dtype, n)
                assert counter("collectives_quantized") == before + (not REMOTE), "not quantized"
                want = semantics(parts, mode)
                if not np.array_equal(bits(got), bits(want)):
                    bad = np.flatnonzero(got.float().numpy() != want.float().numpy())[:4]
                    raise AssertionError((mode, dtype, n, RANK, bad, got[bad], want[bad]))
                exact, limit = bound(parts, mode, dtype)
                error = np.abs(got.to(torch.float64).numpy() - exact)
                assert np.all(error <= limit), (mode, dtype, n, float((error / limit).max()))
                assert np.all(got[32:64].float().numpy() == 0), "a group of zeros stays zero"
                if n >= 1000:  # really quantized: most elements differ from the exact sum's
                    differ = np.mean(got.float().numpy() != exact_sum(parts).float().numpy())
                    assert differ > 0.3, (mode, dtype, differ)
                    assert np.mean(error / limit) > 0.05, (mode, dtype, float(np.mean(error / limit)))
            report(RANK, f"QUICK {mode} {dtype} ok")


def check_threshold() -> None:
    """Below the threshold (the format's default, 128 MiB for int4) the node runs the exact all-reduce."""
    global step
    del os.environ["HPVM_COMM_QUANTIZE_BYTES"]
    try:
        before = counter("collectives_quantized")
        step += 1
        parts = inputs(step, 5000, "bf16")
        x = buffer(5000, "bf16")
        x.copy_(parts[RANK].to(x.device))
        run(quick_graph("bf16", "int4"), x, x.nbytes)
        assert np.array_equal(bits(x), bits(exact_sum(parts))), "below the threshold: exact"
        assert counter("collectives_quantized") == before
    finally:
        os.environ["HPVM_COMM_QUANTIZE_BYTES"] = "0"
    report(RANK, "QUICK threshold ok")


def check_relaunch(name: str = "relaunch", new_agreements: int | None = 1) -> None:
    agreements = counter("collective_agreements")
    for _ in range(3):
        got, parts = quick("int8", "bf16", 3000)
        assert np.array_equal(bits(got), bits(semantics(parts, "int8")))
    if not REMOTE and new_agreements is not None:
        assert counter("collective_agreements") - agreements == new_agreements
    report(RANK, f"QUICK {name} ok")


def check_rmsnorm_fp8() -> None:
    global step
    for dtype, rows, hidden in (("f32", 5, 96), ("bf16", 3, 4096)):
        t = getattr(hpvm, dtype)
        node = hpvm.comm.all_reduce_rmsnorm(t, eps=1e-5, quantize="fp8")

        @hpvm.graph
        def g(x: InOut[Ptr[t]], x_bytes: i64, r: InOut[Ptr[t]], r_bytes: i64, w: In[Ptr[t]],
              w_bytes: i64, hidden: i64, out: Out[Ptr[u8]], out_bytes: i64, s: Out[Ptr[f32]],
              s_bytes: i64):
            hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                      weight_bytes=w_bytes, hidden=hidden, out=out, out_bytes=out_bytes, scales=s,
                      scales_bytes=s_bytes)

        step += 1
        xs = inputs(step, rows * hidden, dtype)
        residual, weight = inputs(step + 1000, rows * hidden, dtype)[0], inputs(step + 2000, hidden, dtype)[0]
        x, r, w = (hpvm.symmetric.empty(v.numel(), TORCH[dtype]) for v in (xs[RANK], residual, weight))
        out = hpvm.symmetric.zeros(rows * hidden, torch.uint8)
        scales = hpvm.symmetric.zeros(rows, torch.float32)
        for buf, v in ((x, xs[RANK]), (r, residual), (w, weight)):
            buf.copy_(v.to(buf.device))
        run(g, x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden, out, out.nbytes, scales, scales.nbytes)
        total = sum(p.to(torch.float64) for p in xs) + residual.to(torch.float64)
        rows_ = total.view(rows, hidden)
        normed = rows_ / torch.sqrt(rows_.square().mean(1, keepdim=True) + 1e-5) * weight.to(torch.float64)
        tol = 1e-4 if dtype == "f32" else 2e-2
        assert torch.allclose(r.cpu().double(), total, rtol=tol, atol=tol), "residual"
        assert torch.allclose(x.cpu().double(), normed.view(-1), rtol=tol, atol=tol), "x"
        v = x.cpu().float().view(rows, hidden)  # the fp8 copy is of x as stored
        s = v.abs().amax(1) / torch.full((rows,), 448.0)
        y = torch.where(s[:, None] > 0, v / torch.where(s > 0, s, 1)[:, None], torch.zeros_like(v))
        codes = y.clamp(-448, 448).to(torch.float8_e4m3fn).view(torch.uint8)
        assert torch.equal(scales.cpu(), s), (dtype, scales.cpu(), s)
        assert torch.equal(out.cpu().view(rows, hidden), codes), dtype
        back = out.cpu().view(torch.float8_e4m3fn).float().view(rows, hidden) * scales.cpu()[:, None]
        assert torch.all((back - v).abs() <= torch.maximum(v.abs() / 16, s[:, None] / 1024) * 1.001)
        report(RANK, f"QUICK rmsnorm-fp8 {dtype} ok")


def disagree(name: str, mine, theirs, pattern: str) -> None:  # noqa: ANN001
    """FAULTY runs `mine`, the others `theirs`: every rank raises naming the difference."""
    report_disagreement(RANK, FAULTY, f"QUICK {name} ok", mine, theirs, pattern)


def check_disagreements() -> None:
    x = buffer(3000, "bf16")
    # FAULTY's own threshold: a relaunch of a kept call shape keeps the agreed algorithm, so the
    # disagreement shows on a buffer new to every rank (the chooser is asked for it)
    fresh = hpvm.symmetric.zeros(3000, TORCH["bf16"])

    def own_threshold() -> None:
        os.environ["HPVM_COMM_QUANTIZE_BYTES"] = str(1 << 40)
        try:
            run(quick_graph("bf16", "int8"), fresh, fresh.nbytes)
        finally:
            os.environ["HPVM_COMM_QUANTIZE_BYTES"] = "0"

    usual = lambda: run(quick_graph("bf16", "int8"), x, x.nbytes)  # noqa: E731
    disagree("own-threshold", own_threshold, lambda: run(quick_graph("bf16", "int8"), fresh, fresh.nbytes),
             r"ranks disagree on the quantization")
    check_relaunch("in-step-after-threshold", None)
    disagree("other-format", lambda: run(quick_graph("bf16", "fp8"), x, x.nbytes), usual,
             r"ranks disagree on the quantization .*rank \d+: fp8")
    check_relaunch("in-step-after-format", None)


def check_workspace_full() -> None:
    """The workspace must fit after the user's allocations: every rank raises heap-capacity."""
    x = hpvm.symmetric.zeros(64 << 10, torch.float32)
    hpvm.symmetric.empty(hpvm.symmetric.free_bytes() - 4096, torch.uint8)
    try:
        run(quick_graph("f32", "int8"), x, x.nbytes)
    except DistributedError as exc:
        assert exc.rule == "heap-capacity" and "bytes of workspace" in str(exc), str(exc)
        report(RANK, "QUICK workspace-full ok")
        return
    raise AssertionError("no heap-capacity error")


with hpvm.runtime(TARGET):
    check_formats()
    check_threshold()
    check_relaunch()
    check_rmsnorm_fp8()
    check_disagreements()
    if not REMOTE:
        check_workspace_full()
report(RANK, "QUICK done")
