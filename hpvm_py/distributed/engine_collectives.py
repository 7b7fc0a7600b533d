"""The collectives between ranks on different hosts: the launcher's own engine (MPI through mpi4py,
or gloo under torchrun) does the work; no home-made transport. Buffers need not be on the heap.

f16 and bf16 are widened to f32 for reductions (the engines have no 16-bit float arithmetic) and
rounded once at the end, as on the heap path; moves (gather, broadcast) carry raw bytes.
"""
from __future__ import annotations

from typing import Any

from ..errors import HPVMTimeoutError
from .reduction_arith import accumulator_dtype, add_rmsnorm, reduce_all
from .call import Call
from .quantized import emit_fp8, engine_all_reduce
from .moe_host import run_on_engine as _moe
from .moe_plan import MOE_KINDS
from .transport import Transport
from .waiting import RanksMissing


def exchange(transport: Transport, call: Call, words: list[int], timeout: float) -> list[Any]:
    try:
        return transport.exchange(words, timeout)
    except RanksMissing as exc:
        raise _timeout(call, exc, timeout) from None


def _timeout(call: Call, exc: RanksMissing, timeout: float) -> HPVMTimeoutError:
    who = f"rank(s) {exc.ranks}" if exc.ranks else f"some rank ({_ENGINE_SILENT})"
    return HPVMTimeoutError(f"{call.what()}: {who} did not arrive within {timeout:g} s (a rank failed, "
                            "exited, or skipped this collective; the timeout is HPVM_COMM_TIMEOUT or "
                            "hpvm.distributed.init(timeout=...)); the ranks are out of step now: finalize",
                            call.loc, rule="rank-arrival")


_ENGINE_SILENT = ("every rank posted its descriptor and answered once the engine gave up; the engine "
                  "does not say which one stalled")


def run(transport: Transport, call: Call, timeout: float) -> None:
    if call.buffers[0].size == 0 and call.kind not in MOE_KINDS:  # agreed: every buffer is empty
        return
    try:
        _RUN[call.kind](transport, call, timeout)
    except RanksMissing as exc:
        raise _timeout(call, _stalled(transport, exc, timeout), timeout) from None


def _stalled(transport: Transport, exc: RanksMissing, timeout: float) -> RanksMissing:
    """The engine does not say which rank its collective waits for: ask every rank over the
    launcher's transport. The ranks still there answer (they all passed the descriptor exchange
    just before, so they give up at about the same time); the ones that do not are named. This
    costs a second timeout, only when a rank stalled inside the engine's collective."""
    try:
        transport.exchange(None, timeout)
    except RanksMissing as probe:
        if probe.ranks:
            return RanksMissing(probe.ranks, exc.waited + probe.waited)
    return exc  # every rank answered: the engine itself stalled


def _flat(call: Call, i: int) -> Any:
    return call.buffers[i].tensor[:call.count(i)]


def _widened(t: Any, call: Call) -> Any:
    """t itself when the engine reduces its type, else an f32 copy."""
    wide = accumulator_dtype(call.dtype)
    return t if t.dtype == wide else t.to(wide)


def _in_rank_order(call: Call) -> bool:
    """max and min of floats: the engines' own (MPI's `a > b ? a : b`, gloo's) keep or drop a NaN
    depending on which rank holds it, so ranks could end with different results (MPI), none of
    them the heap path's (NaN propagates): those are gathered and combined in rank order here,
    with the heap path's arithmetic (reduction_arith.reduce_all)."""
    return call.op != "sum" and call.dtype.is_float


def _gathered_reduce(transport: Transport, t: Any, call: Call, timeout: float) -> Any:
    """Every rank's `t` combined by call.op in rank order (a new tensor of the accumulator type)."""
    import torch

    whole = torch.empty(transport.size * t.numel(), dtype=t.dtype, device=t.device)
    transport.all_gather(t.contiguous().view(torch.uint8), whole.view(torch.uint8), timeout)
    return reduce_all(list(whole.view(transport.size, t.numel()).unbind(0)), call.op, call.dtype)


def _all_reduce(transport: Transport, call: Call, timeout: float) -> None:
    if call.quantization():
        engine_all_reduce(transport, call, timeout)
        return
    buf = _flat(call, 0)
    if _in_rank_order(call):
        buf.copy_(_gathered_reduce(transport, buf, call, timeout))
        return
    work = _widened(buf, call)
    transport.all_reduce(work, call.op, timeout)
    if work is not buf:
        buf.copy_(work)


def _all_gather(transport: Transport, call: Call, timeout: float) -> None:
    import torch

    transport.all_gather(_flat(call, 0).view(torch.uint8), _flat(call, 1).view(torch.uint8), timeout)


def _reduce_scatter(transport: Transport, call: Call, timeout: float) -> None:
    src, dst = _flat(call, 0), _flat(call, 1)
    if _in_rank_order(call):
        n = dst.numel()
        dst.copy_(_gathered_reduce(transport, src, call, timeout)[transport.rank * n:(transport.rank + 1) * n])
        return
    wide_src = _widened(src, call)
    wide_dst = _widened(dst, call) if wide_src is src else wide_src.new_empty(dst.shape)
    transport.reduce_scatter(wide_src, wide_dst, call.op, timeout)
    if wide_dst is not dst:
        dst.copy_(wide_dst)


def _broadcast(transport: Transport, call: Call, timeout: float) -> None:
    import torch

    transport.broadcast(_flat(call, 0).view(torch.uint8), call.root, timeout)


def _all_reduce_rmsnorm(transport: Transport, call: Call, timeout: float) -> None:
    x = _flat(call, 0)
    total = x.to(accumulator_dtype(call.dtype), copy=True)
    transport.all_reduce(total, "sum", timeout)
    residual = _flat(call, 1)
    out, r = add_rmsnorm(total, residual, _flat(call, 2), call.hidden, call.eps)
    residual.copy_(r)
    x.copy_(out)
    if call.quantize:
        emit_fp8(call, x, _flat(call, 3), _flat(call, 4))


_RUN = {"all_reduce": _all_reduce, "all_gather": _all_gather, "reduce_scatter": _reduce_scatter,
        "broadcast": _broadcast, "all_reduce_rmsnorm": _all_reduce_rmsnorm,
        "moe_dispatch": _moe, "moe_combine": _moe}
