"""The quantized all-reduce and the fused RMSNorm's fp8 output on the host: the heap algorithm of
CPU ranks, the engine path, and the row codec in torch (the GPU fallback for long rows).
(docs/architecture.md, "Module notes": distributed/quantized.py)"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .call import Call
from .quantize import QMAX, Layout, decode, encode, rows_fp8
from .reduction_arith import torch_dtype
from .sync import Communicator
from .transport import Transport

Payload = tuple[np.ndarray, np.ndarray]  # (codes, scales) of one rank


def _f32(t: Any) -> np.ndarray:
    """A torch tensor's values as f32 NumPy (exact for f16, bf16 and f32)."""
    import torch

    return t.detach().to("cpu", torch.float32).numpy()


def _store(dst: Any, values: np.ndarray) -> None:
    """dst (a torch tensor, anywhere) = values, rounded to dst's type to nearest even."""
    import torch

    dst.copy_(torch.from_numpy(np.ascontiguousarray(values)))


def sum_payloads(payloads: Sequence[Payload], n: int, mode: str) -> np.ndarray:
    """The ranks' decoded payloads added in f32, in rank order (rank 0 first)."""
    total = decode(*payloads[0], n, mode).copy()
    for codes, scales in payloads[1:]:
        total += decode(codes, scales, n, mode)
    return total


def _split(payload: np.ndarray, layout: Layout) -> Payload:
    return payload[:layout.code_bytes], payload[layout.scales_offset:layout.total].view(np.float32)


def heap_all_reduce(comm: Communicator, call: Call) -> None:
    """CPU ranks on one host: each rank encodes its buffer into its workspace (reserved at the
    end of its heap when the ranks agreed on the call) | barrier | each rank decodes every
    rank's workspace, adds in rank order and writes its buffer. No barrier at the end: peers read
    workspaces only, and a workspace is written again only after the next collective's
    agreement barrier, which no rank passes before every rank has finished this one."""
    n, mode, heap = call.count(0), call.quantize, comm.heap
    layout = Layout(n, mode)
    offset = heap.reserve_workspace(layout.total)  # the ranks agreed on the call: reserve it now
    if offset is None:  # a kept call shape whose room user allocations took since it was agreed
        raise call.fail(f"the quantized all-reduce needs {layout.total} bytes of workspace at the end "
                        f"of the symmetric heap, and {heap.free_bytes} bytes are free (set "
                        "HPVM_HEAP_BYTES larger)", rule="heap-capacity")
    payloads = [_split(heap.array(q, offset, layout.total, np.uint8), layout) for q in comm.ranks]
    buf = heap.tensor(comm.rank, call.buffers[0].offset, n, torch_dtype(call.dtype))
    encode(_f32(buf), mode, *payloads[comm.ranks.index(comm.rank)])
    comm.barrier(call.what, call.loc)
    _store(buf, sum_payloads(payloads, n, mode))


def engine_all_reduce(transport: Transport, call: Call, timeout: float) -> None:
    """Ranks on several hosts: the same payloads, all-gathered by the engine, then decoded and
    added in rank order (the codec runs on the host, GPU ranks included)."""
    import torch

    n, mode = call.count(0), call.quantize
    layout = Layout(n, mode)
    buf = call.buffers[0].tensor[:n]
    mine = np.zeros(layout.total, dtype=np.uint8)
    encode(_f32(buf), mode, *_split(mine, layout))
    everyone = torch.empty(transport.size * layout.total, dtype=torch.uint8, device=buf.device)
    transport.all_gather(torch.from_numpy(mine).to(buf.device), everyone, timeout)
    parts = everyone.cpu().numpy().reshape(transport.size, layout.total)
    _store(buf, sum_payloads([_split(p, layout) for p in parts], n, mode))


def emit_fp8(call: Call, x: Any, out: Any, scales: Any) -> None:
    """all_reduce_rmsnorm(quantize="fp8"): the fp8 codes and per-row scales of x, the node's new
    output (as stored, in its element type), into out and scales (torch tensors)."""
    codes, row_scales = rows_fp8(_f32(x).reshape(-1, call.hidden))
    _store(out, codes.reshape(-1))
    _store(scales, row_scales)


def rows_fp8_torch(x: Any, hidden: int, out: Any, scales: Any) -> None:
    """rows_fp8 in torch, where x lives (the GPU's fallback for rows too long for the fused
    kernel): the same correctly rounded f32 divisions, clamp and e4m3fn rounding to nearest."""
    import torch

    v = x.to(torch.float32).view(-1, hidden)
    qmax = torch.full((v.shape[0],), QMAX["fp8"], dtype=torch.float32, device=v.device)
    s = v.abs().amax(dim=1) / qmax  # tensor / tensor: a division (a scalar divisor may be a product)
    safe = torch.where(s > 0, s, torch.ones_like(s))
    y = torch.where(s[:, None] > 0, v / safe[:, None], torch.zeros_like(v)).clamp(-QMAX["fp8"], QMAX["fp8"])
    out.copy_(y.to(torch.float8_e4m3fn).view(torch.uint8).view(-1))
    scales.copy_(s)
