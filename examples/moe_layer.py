"""A mixture-of-experts layer as one dataflow graph, on every rank (expert parallelism):

    expert, gate = top1(softmax(x @ w_router))   the router, per token (a leaf)
    recv = moe_dispatch(x, expert)               each token row to the rank of its expert
    y = recv[e] @ w[e] for the local experts     the experts (a leaf)
    out = moe_combine(y) * gate                  each row back to its token, scaled by its gate

Every rank holds `tokens` rows and `experts / world_size` experts. Each rank checks its `out`
against a single-process NumPy reference of the whole layer (x @ w[expert] * gate per token).
With a capacity below the busiest expert's load, the rows past it are dropped (out = 0 there;
the reference drops the same rows: the order is (source rank, source row)).

    mpiexec -n 2 python examples/moe_layer.py [--target cpu|python|gpu|nvptx] [--tokens 16]
        [--experts-per-rank 2] [--capacity C]
"""
# no `from __future__ import annotations`: the graph's annotations use closure variables

import argparse
import math

import numpy as np
import torch

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i32, i64


@hpvm.leaf
def router(x: In[Ptr[f32]], x_bytes: i64, w: In[Ptr[f32]], w_bytes: i64, expert: Out[Ptr[i32]],
           expert_bytes: i64, gate: Out[Ptr[f32]], gate_bytes: i64, hidden: i64, experts: i64) -> i64:
    t = hpvm.instance_id(0)
    best = f32(-1e30)
    chosen = i32(0)
    for e in range(experts):
        logit = f32(0.0)
        for k in range(hidden):
            logit += x[t * hidden + k] * w[k * experts + e]
        if logit > best:
            best = logit
            chosen = i32(e)
    total = f32(0.0)  # the softmax's denominator; the gate is the chosen expert's probability
    for e in range(experts):
        logit = f32(0.0)
        for k in range(hidden):
            logit += x[t * hidden + k] * w[k * experts + e]
        total += math.exp(logit - best)
    expert[t] = chosen
    gate[t] = f32(1.0) / total
    return 1


@hpvm.leaf
def experts_ffn(ready: i64, recv: In[Ptr[f32]], recv_bytes: i64, w: In[Ptr[f32]], w_bytes: i64,
                y: Out[Ptr[f32]], y_bytes: i64, hidden: i64, capacity: i64):
    row = hpvm.instance_id(0)  # a row of the receive buffer: local expert row // capacity
    col = hpvm.instance_id(1)
    e = row // capacity
    acc = f32(0.0)
    for k in range(hidden):
        acc += recv[row * hidden + k] * w[(e * hidden + k) * hidden + col]
    y[row * hidden + col] = acc


def layer(hidden: int, experts: int, capacity: int):  # noqa: ANN201 - a graph
    dispatch = hpvm.comm.moe_dispatch(f32, hidden=hidden, experts=experts, capacity=capacity)
    combine = hpvm.comm.moe_combine(f32, hidden=hidden, experts=experts, capacity=capacity)

    @hpvm.graph
    def moe(x: In[Ptr[f32]], x_bytes: i64, wr: In[Ptr[f32]], wr_bytes: i64, expert: Out[Ptr[i32]],
            expert_bytes: i64, gate: Out[Ptr[f32]], gate_bytes: i64, recv: Out[Ptr[f32]], recv_bytes: i64,
            counts: Out[Ptr[i32]], counts_bytes: i64, origin: Out[Ptr[i32]], origin_bytes: i64,
            slot: Out[Ptr[i32]], slot_bytes: i64, w: In[Ptr[f32]], w_bytes: i64, y: Out[Ptr[f32]],
            y_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, tokens: i64, rows: i64):
        routed = hpvm.node(router, grid=tokens, x=x, x_bytes=x_bytes, w=wr, w_bytes=wr_bytes,
                           expert=expert, expert_bytes=expert_bytes, gate=gate, gate_bytes=gate_bytes,
                           hidden=hidden, experts=experts)
        # unordered siblings fire in creation order (docs/distributed.md): dispatch after the router
        hpvm.node(dispatch, tokens=x, tokens_bytes=x_bytes, expert=expert, expert_bytes=expert_bytes,
                  recv=recv, recv_bytes=recv_bytes, counts=counts, counts_bytes=counts_bytes,
                  origin=origin, origin_bytes=origin_bytes, slot=slot, slot_bytes=slot_bytes)
        hpvm.node(experts_ffn, grid=(rows, hidden), ready=hpvm.all_to_all(routed.out[0]), recv=recv,
                  recv_bytes=recv_bytes, w=w, w_bytes=w_bytes, y=y, y_bytes=y_bytes, hidden=hidden,
                  capacity=capacity)
        hpvm.node(combine, expert_out=y, expert_out_bytes=y_bytes, slot=slot, slot_bytes=slot_bytes,
                  gate=gate, gate_bytes=gate_bytes, out=out, out_bytes=out_bytes)
    return moe


# the layer main() builds with its default sizes on two ranks, at module level so that the
# example's leaves are compiled by the tests that compile every example graph
DEFAULT_LAYER = layer(hidden=16, experts=4, capacity=32)


def reference(xs: list[np.ndarray], wr: np.ndarray, w: np.ndarray, capacity: int, rank: int) -> np.ndarray:
    """This rank's out, from every rank's tokens, in float64: top-1 routing, rows past an expert's
    capacity (in (source rank, source row) order) dropped."""
    taken = np.zeros(len(w), dtype=np.int64)
    for q, x in enumerate(xs):
        logits = x @ wr
        chosen = logits.argmax(axis=1)
        gate = 1.0 / np.exp(logits - logits.max(axis=1, keepdims=True)).sum(axis=1)
        out = np.zeros_like(x)
        for i, e in enumerate(chosen):
            if taken[e] < capacity:
                out[i] = gate[i] * (x[i] @ w[e])
            taken[e] += 1
        if q == rank:
            return out
    raise AssertionError(rank)


def main(target: str | None = None, tokens: int = 16, hidden: int = 16, per_rank: int = 2,
         capacity: int | None = None, seed: int = 4321) -> float:
    """Runs on every rank; returns the largest error against the reference."""
    hpvm.distributed.init(device=target)  # the heap where the target's nodes run
    rank, world = hpvm.distributed.rank(), hpvm.distributed.world_size()
    experts = per_rank * world
    capacity = capacity or tokens * world  # enough for every row: nothing dropped
    rng = np.random.default_rng(seed)  # the same inputs and weights on every rank
    f32_values = lambda *shape: rng.standard_normal(shape).astype(np.float32).astype(np.float64)  # noqa: E731
    xs = [f32_values(tokens, hidden) for _ in range(world)]
    wr = f32_values(hidden, experts)
    w = f32_values(experts, hidden, hidden) / 4.0

    def heap(a: np.ndarray | tuple, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        if isinstance(a, tuple):  # a shape: zeros
            return hpvm.symmetric.zeros(a, dtype)
        t = hpvm.symmetric.empty(a.shape, dtype)
        t.copy_(torch.from_numpy(np.ascontiguousarray(a)).to(dtype))
        return t

    rows = per_rank * capacity
    args = [heap(xs[rank]), heap(wr), heap((tokens,), torch.int32), heap((tokens,)),
            heap((rows, hidden)), heap((world, per_rank), torch.int32),
            heap((rows, 2), torch.int32), heap((tokens,), torch.int32),
            heap(w[rank * per_rank:(rank + 1) * per_rank]), heap((rows, hidden)), heap((tokens, hidden))]
    with hpvm.runtime(target):
        flat = [v for t in args for v in (t, t.nbytes)]
        hpvm.wait(hpvm.launch(layer(hidden, experts, capacity), *flat, tokens, rows))
    out, slot = args[-1].cpu().numpy(), args[7].cpu().numpy()
    error = float(np.abs(out - reference(xs, wr, w, capacity, rank)).max())
    if not error < 1e-4:
        raise SystemExit(f"rank {rank}: moe_layer differs from the reference by {error}")
    print(f"moe_layer rank {rank}/{world}: {tokens} tokens, {experts} experts, capacity {capacity}, "
          f"{int((slot < 0).sum())} dropped, OK, max error {error:.2e}", flush=True)
    return error


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", choices=("cpu", "python", "gpu", "nvptx"), default=None)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--experts-per-rank", type=int, default=2)
    parser.add_argument("--capacity", type=int, default=None)
    options = parser.parse_args()
    main(options.target, tokens=options.tokens, per_rank=options.experts_per_rank,
         capacity=options.capacity)
