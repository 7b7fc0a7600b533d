"""Run under `mpiexec -n N python dist_collectives.py SEED TARGET`: every collective, for several
element types, sizes (both all-reduce algorithms) and reductions, as graphs on the given target,
compared with NumPy references computed from every rank's inputs (derived from SEED).

HPVM_COMM_FORCE_REMOTE=1 runs the same checks on the engine path. Prints `rank R: N checks ok;
paths P` (P: the algorithms that ran, from hpvm.stats()).
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import os
import sys

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import In, InOut, Out, Ptr, f32, i64

SEED, TARGET = int(sys.argv[1]), sys.argv[2]
hpvm.distributed.init(timeout=30, device=TARGET)
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "i64": torch.int64}
TOL = {"f32": 1e-5, "f64": 1e-12, "f16": 2e-3, "bf16": 1.6e-2}
checks = 0


def inputs(dtype: str, n: int, salt: int) -> list[torch.Tensor]:
    """Every rank's input (each rank can compute all of them)."""
    out = []
    for q in range(WORLD):
        g = torch.Generator().manual_seed(SEED * 1009 + salt * 31 + q)
        if dtype in TOL:
            out.append(torch.randn(n, generator=g, dtype=torch.float64).to(TORCH[dtype]))
        else:
            out.append(torch.randint(0, 100, (n,), generator=g, dtype=torch.int64).to(TORCH[dtype]))
    return out


def on_heap(t: torch.Tensor) -> torch.Tensor:
    buf = hpvm.symmetric.empty(t.shape, t.dtype)
    buf.copy_(t)
    return buf


def check(name: str, got: torch.Tensor, want: np.ndarray, dtype: str) -> None:
    global checks
    got64 = got.to(torch.float64).cpu().numpy()
    if dtype in TOL:
        ok = np.allclose(got64, want, rtol=TOL[dtype], atol=TOL[dtype])
    else:
        ok = np.array_equal(got64, want)
    if not ok:
        bad = np.flatnonzero(~np.isclose(got64, want, rtol=TOL.get(dtype, 0), atol=TOL.get(dtype, 0)))
        raise AssertionError(f"rank {RANK}: {name} differs at {bad[:5]}: got {got64[bad[:5]]}, "
                             f"want {want[bad[:5]]}")
    checks += 1


def reference(parts: list[torch.Tensor], op: str, dtype: str) -> np.ndarray:
    if dtype in TOL:
        stack = np.stack([p.to(torch.float64).numpy() for p in parts])
        return {"sum": stack.sum(0), "max": stack.max(0), "min": stack.min(0)}[op]
    stack = np.stack([p.numpy() for p in parts])  # integer sums wrap in the element type
    result = {"sum": lambda: stack.sum(0, dtype=stack.dtype), "max": lambda: stack.max(0),
              "min": lambda: stack.min(0)}[op]()
    return result.astype(np.float64)


def ptr(dtype: str):  # noqa: ANN201 - an annotation object
    return Ptr[getattr(hpvm, dtype)]


def all_reduce_graph(dtype: str, op: str):  # noqa: ANN201
    node = hpvm.comm.all_reduce(getattr(hpvm, dtype), op=op)

    @hpvm.graph
    def g(x: InOut[ptr(dtype)], x_bytes: i64):
        hpvm.node(node, buf=x, buf_bytes=x_bytes)
    return g


def run(graph, *args) -> None:  # noqa: ANN001
    hpvm.wait(hpvm.launch(graph, *args))


def check_all_reduce() -> None:
    cases = [("f32", "sum", 1000), ("f32", "max", 77), ("f32", "min", 5000), ("f32", "sum", 300_001),
             ("bf16", "sum", 4099), ("bf16", "sum", 200_003), ("f16", "max", 999), ("f64", "sum", 70_001),
             ("i32", "sum", 1234), ("i8", "sum", 515), ("u8", "max", 300), ("i64", "min", 1)]
    for salt, (dtype, op, n) in enumerate(cases):
        parts = inputs(dtype, n, salt)
        buf = on_heap(parts[RANK])
        run(all_reduce_graph(dtype, op), buf, buf.nbytes)
        check(f"all_reduce {dtype} {op} n={n}", buf, reference(parts, op, dtype), dtype)


def check_moves() -> None:
    for salt, (dtype, n) in enumerate([("f32", 1001), ("bf16", 64), ("i32", 0)], start=100):
        parts = inputs(dtype, n, salt)
        t = getattr(hpvm, dtype)
        gather, bcast = hpvm.comm.all_gather(t), hpvm.comm.broadcast(t, root=WORLD - 1)

        @hpvm.graph
        def g(src: In[ptr(dtype)], src_bytes: i64, dst: Out[ptr(dtype)], dst_bytes: i64,
              b: InOut[ptr(dtype)], b_bytes: i64):
            hpvm.node(gather, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)
            hpvm.node(bcast, buf=b, buf_bytes=b_bytes)

        src = on_heap(parts[RANK])
        dst = hpvm.symmetric.zeros(n * WORLD, TORCH[dtype])
        b = on_heap(parts[(RANK + 1) % WORLD])
        run(g, src, src.nbytes, dst, dst.nbytes, b, b.nbytes)
        check(f"all_gather {dtype}", dst, torch.cat(parts).to(torch.float64).numpy(), dtype)
        check(f"broadcast {dtype}", b, parts[0].to(torch.float64).numpy(), dtype)


def check_reduce_scatter() -> None:
    for salt, (dtype, op, n) in enumerate([("f32", "sum", 1000), ("bf16", "max", 333)], start=200):
        parts = inputs(dtype, n * WORLD, salt)
        node = hpvm.comm.reduce_scatter(getattr(hpvm, dtype), op=op)

        @hpvm.graph
        def g(src: In[ptr(dtype)], src_bytes: i64, dst: Out[ptr(dtype)], dst_bytes: i64):
            hpvm.node(node, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)

        src = on_heap(parts[RANK])
        dst = hpvm.symmetric.empty(n, TORCH[dtype])
        run(g, src, src.nbytes, dst, dst.nbytes)
        whole = reference(parts, op, dtype)
        check(f"reduce_scatter {dtype} {op}", dst, whole[RANK * n:(RANK + 1) * n], dtype)


def check_rmsnorm() -> None:
    for salt, (dtype, rows, hidden) in enumerate([("f32", 7, 96), ("bf16", 3, 128)], start=300):
        xs = inputs(dtype, rows * hidden, salt)
        residual_in = inputs(dtype, rows * hidden, salt + 50)[0]  # the same on every rank
        weight_in = inputs(dtype, hidden, salt + 60)[0]
        node = hpvm.comm.all_reduce_rmsnorm(getattr(hpvm, dtype), eps=1e-5)

        @hpvm.graph
        def g(x: InOut[ptr(dtype)], x_bytes: i64, r: InOut[ptr(dtype)], r_bytes: i64,
              w: In[ptr(dtype)], w_bytes: i64, hidden: i64):
            hpvm.node(node, x=x, x_bytes=x_bytes, residual=r, residual_bytes=r_bytes, weight=w,
                      weight_bytes=w_bytes, hidden=hidden)

        x, r, w = on_heap(xs[RANK]), on_heap(residual_in), on_heap(weight_in)
        run(g, x, x.nbytes, r, r.nbytes, w, w.nbytes, hidden)
        total = reference(xs, "sum", dtype) + residual_in.to(torch.float64).numpy()
        rows_ = total.reshape(rows, hidden)
        want = rows_ / np.sqrt((rows_ ** 2).mean(axis=1, keepdims=True) + 1e-5) \
            * weight_in.to(torch.float64).numpy()
        check(f"all_reduce_rmsnorm {dtype} residual", r, total, dtype)
        check(f"all_reduce_rmsnorm {dtype} x", x, want.reshape(-1), dtype)


@hpvm.leaf
def scale(x: InOut[Ptr[f32]], x_bytes: i64, by: f32) -> i64:
    i = hpvm.instance_id(0)
    x[i] = x[i] * by
    return 1


@hpvm.leaf
def shift(ready: i64, x: InOut[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
    i = hpvm.instance_id(0)
    y[i] = x[i] + f32(1.0)


SUM_F32 = hpvm.comm.all_reduce(f32)


@hpvm.graph
def pipeline(x: InOut[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, by: f32, n: i64):
    s = hpvm.node(scale, grid=n, x=x, x_bytes=x_bytes, by=by)
    hpvm.node(SUM_F32, buf=x, buf_bytes=x_bytes)  # runs after `scale`, before `shift` (creation order)
    hpvm.node(shift, grid=n, ready=hpvm.all_to_all(s.out[0]), x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


def check_graph_with_compute() -> None:
    n = 2500
    parts = inputs("f32", n, 400)
    x = on_heap(parts[RANK])
    y = hpvm.symmetric.empty(n, torch.float32)
    for _ in range(2):  # a second launch of the same graph and buffers
        x.copy_(parts[RANK])
        run(pipeline, x, x.nbytes, y, y.nbytes, float(RANK + 1), n)
        want = sum(p.to(torch.float64).numpy() * (q + 1) for q, p in enumerate(parts))
        check("scale -> all_reduce -> shift", y, want + 1.0, "f32")


def check_bit_identical() -> None:
    """One-shot, two-shot and (two GPU ranks) the stream kernel give the same bits, and so does
    every rank (bf16: rounding matters)."""
    global checks
    n = 50_001
    parts = inputs("bf16", n, 500)
    one, two, three = on_heap(parts[RANK]), on_heap(parts[RANK]), on_heap(parts[RANK])
    graph = all_reduce_graph("bf16", "sum")
    for buf, oneshot, stream in ((one, str(1 << 62), str(1 << 62)), (two, "0", str(1 << 62)), (three, "0", "0")):
        os.environ["HPVM_COMM_ONESHOT_BYTES"], os.environ["HPVM_COMM_STREAM_BYTES"] = oneshot, stream
        run(graph, buf, buf.nbytes)
    del os.environ["HPVM_COMM_ONESHOT_BYTES"], os.environ["HPVM_COMM_STREAM_BYTES"]
    gather = hpvm.comm.all_gather(hpvm.bf16)

    @hpvm.graph
    def g(src: In[ptr("bf16")], src_bytes: i64, dst: Out[ptr("bf16")], dst_bytes: i64):
        hpvm.node(gather, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)

    everyone = hpvm.symmetric.empty(n * WORLD, torch.bfloat16)
    run(g, one, one.nbytes, everyone, everyone.nbytes)
    assert torch.equal(one.view(torch.int16), two.view(torch.int16)), "one-shot and two-shot differ"
    assert torch.equal(one.view(torch.int16), three.view(torch.int16)), "one-shot and stream differ"
    for q in range(WORLD):
        assert torch.equal(everyone[q * n:(q + 1) * n].view(torch.int16), one.view(torch.int16)), q
    checks += 1


def check_translation() -> None:
    """Iris's translation: my pointer into a buffer, moved to rank q's heap, reads q's element."""
    import ctypes

    from hpvm_py.distributed import ranks

    global checks
    heap = ranks.current().heap
    x = hpvm.symmetric.empty(8, torch.int64)
    x.copy_(torch.arange(8) + 100 * RANK)
    if x.is_cuda:  # the host barrier below orders the ranks, not their streams
        torch.cuda.synchronize()
    run(all_reduce_graph("i64", "max"), x, 0)  # moves nothing, but a barrier: every rank has written x
    for q in range(WORLD):
        peer = heap.translate(x.data_ptr() + 3 * 8, q)
        if heap.device == "host":
            assert ctypes.c_int64.from_address(peer).value == 100 * q + 3
        else:  # a device address: read through the tensor this process maps there
            view = heap.tensor(q, peer - heap.bases[q], 1, torch.int64)
            assert view.data_ptr() == peer and int(view.cpu()[0]) == 100 * q + 3
    checks += 1


with hpvm.runtime(TARGET):
    if os.environ.get("HPVM_COMM_FORCE_REMOTE") != "1":  # the engine path maps no peer heap
        check_translation()
        check_bit_identical()
    check_all_reduce()
    check_moves()
    check_reduce_scatter()
    check_rmsnorm()
    check_graph_with_compute()
paths = sorted(k.removeprefix("collectives_") for k in hpvm.stats() if k.startswith("collectives_"))
report(RANK, f"rank {RANK}: {checks} checks ok; paths {','.join(paths)}")
