"""Run under `mpiexec -n N python dist_adversarial.py SEED STEPS`: a random sequence of collectives
(derived from SEED, the same on every rank) with odd sizes (0, 1, primes, not multiples of the
world size or of the two-shot slices), every element type (integer sums wrap), every reduction,
relaunches of the same graph with reused and fresh buffers; about a third of the steps have one
rank disagree (another size, size argument, element type, reduction, root or collective, a bad
size, a buffer off the heap or at another offset, or a rank that runs another collective
instead). Every result is compared with NumPy computed on each rank from every rank's inputs,
bit for bit (on the engine path with more than two ranks, floats within a tolerance: MPI's
order); every disagreement must raise DistributedError on every rank, naming the faulty rank,
and leave the ranks in step. Then:

- max and min of floats with NaNs and signed zeros at every rank position: the same bits on
  every rank, the NaN kept (the engine path once dropped it depending on the rank holding it);
- buffers of one call that overlap (all_gather's src inside its dst): DistributedError on every
  rank (the heap path silently gave every rank rank 0's block);
- (heap path) a quantized all-reduce the ranks disagree on leaves every rank's heap with the same
  free bytes (each rank once reserved the workspace of its own call before the agreement).

HPVM_COMM_FORCE_REMOTE=1 runs it on the engine path. Reports `ADV <check> ok` lines.
"""
# no `from __future__ import annotations`: graph annotations use closure variables

import itertools
import os
import sys

import numpy as np
import torch

import hpvm_py as hpvm
from dist_report import report
from hpvm_py import In, InOut, Out, Ptr, f32, i64
from hpvm_py.errors import DistributedError, HPVMError

SEED, STEPS = int(sys.argv[1]), int(sys.argv[2])
hpvm.distributed.init(timeout=30, device="cpu")
RANK, WORLD = hpvm.distributed.rank(), hpvm.distributed.world_size()
REMOTE = os.environ.get("HPVM_COMM_FORCE_REMOTE") == "1"
TORCH = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
         "i32": torch.int32, "i8": torch.int8, "u8": torch.uint8, "i64": torch.int64, "i16": torch.int16}
INTS = {"i32": np.int32, "i8": np.int8, "u8": np.uint8, "i64": np.int64, "i16": np.int16}
FLOATS = ("f32", "f16", "bf16", "f64")
DTYPES = list(TORCH)
SIZES = [0, 1, 2, 3, 5, 7, 13, 63, 64, 65, 127, 257, 1000, 4097, 16411, 40009, 131101]
NEXT_OP = {"sum": "max", "max": "min", "min": "sum"}


def gen(rng: np.random.Generator, dtype: str, n: int) -> torch.Tensor:
    """Floats whose magnitudes vary by e^6; integers over the whole range (sums overflow)."""
    if dtype in FLOATS:
        return torch.from_numpy(rng.standard_normal(n) * np.exp(rng.uniform(-3, 3, n))).to(TORCH[dtype])
    info = np.iinfo(INTS[dtype])
    return torch.from_numpy(rng.integers(info.min, info.max, n, endpoint=True).astype(INTS[dtype]))


def reduced(parts: list[torch.Tensor], op: str, dtype: str) -> torch.Tensor:
    """parts combined in rank order; f16 and bf16 in f32, rounded once; integer sums wrap."""
    wide = dtype in ("f16", "bf16")
    acc = (parts[0].to(torch.float32) if wide else parts[0]).numpy().copy()
    for p in parts[1:]:
        q = (p.to(torch.float32) if wide else p).numpy()
        acc = np.add(acc, q, dtype=acc.dtype) if op == "sum" else (np.maximum if op == "max" else np.minimum)(acc, q)
    return torch.from_numpy(acc).to(TORCH[dtype])


def same(got: torch.Tensor, want: torch.Tensor, dtype: str, what: str) -> None:
    if REMOTE and WORLD > 2 and dtype in FLOATS:  # MPI's order of a sum of three or more
        ok = torch.allclose(got.double(), want.double(), rtol=1e-2 if dtype in ("f16", "bf16") else 1e-5,
                            atol=1e-3, equal_nan=True)
    elif got.numel() == 0 or want.numel() == 0:
        ok = got.shape == want.shape
    else:
        ok = torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8))
    if not ok:
        g, w = got.double().numpy(), want.double().numpy()
        bad = np.flatnonzero(~((g == w) | (np.isnan(g) & np.isnan(w))))
        raise AssertionError(f"rank {RANK}: {what}: {bad.size} of {g.size} differ, at {bad[:5]}: got "
                             f"{g[bad[:5]]}, want {w[bad[:5]]}")


_graphs: dict = {}


def graph(kind: str, dtype: str, **options):  # noqa: ANN201 - a graph
    key = (kind, dtype, tuple(sorted(options.items())))
    if key not in _graphs:
        t = getattr(hpvm, dtype)
        if kind in ("all_reduce", "broadcast"):
            node = getattr(hpvm.comm, kind)(t, **options)

            @hpvm.graph
            def g(x: InOut[Ptr[t]], x_bytes: i64):
                hpvm.node(node, buf=x, buf_bytes=x_bytes)
        else:
            node = getattr(hpvm.comm, kind)(t, **options)

            @hpvm.graph
            def g(src: In[Ptr[t]], src_bytes: i64, dst: Out[Ptr[t]], dst_bytes: i64):
                hpvm.node(node, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes)
        _graphs[key] = g
    return _graphs[key]


def options(kind: str, op: str, root: int) -> dict:
    return {"all_reduce": {"op": op}, "reduce_scatter": {"op": op}, "broadcast": {"root": root},
            "all_gather": {}}[kind]


_pool: dict = {}


def heap(dtype: str, n: int, reuse: bool) -> torch.Tensor:
    """A heap buffer (every rank allocates the same sequence): the last one of that type and
    length again, or a fresh one."""
    if not (reuse and (dtype, n) in _pool):
        _pool[(dtype, n)] = hpvm.symmetric.empty(n, TORCH[dtype])
    return _pool[(dtype, n)]


SYNC = hpvm.symmetric.empty(1, torch.int64)


def in_step() -> None:
    SYNC.fill_(1)
    hpvm.wait(hpvm.launch(graph("all_reduce", "i64", op="sum"), SYNC, SYNC.nbytes))
    assert int(SYNC[0]) == WORLD, (RANK, int(SYNC[0]))


FAULTS = ["size", "size_arg", "dtype", "op", "root", "kind", "bad_arg", "off_heap", "offset", "other_call"]


def random_steps() -> tuple[int, int]:
    rng = np.random.default_rng(SEED)
    checks = faults = 0
    for step in range(STEPS):
        kind = str(rng.choice(["all_reduce", "all_reduce", "broadcast", "all_gather", "reduce_scatter"]))
        dtype, op = str(rng.choice(DTYPES)), str(rng.choice(["sum", "max", "min"]))
        n, root, reuse = int(rng.choice(SIZES)), int(rng.integers(0, WORLD)), bool(rng.random() < 0.6)
        if TORCH[dtype].itemsize * n * WORLD > (1 << 20) and rng.random() < 0.7:
            n = int(rng.choice(SIZES[:12]))
        fault, faulty = str(rng.choice(["none"] * 6 + FAULTS)), int(rng.integers(0, WORLD))
        if (fault == "root" and kind != "broadcast") or (fault == "op" and kind in ("broadcast", "all_gather")) \
                or (fault in ("size_arg", "bad_arg", "offset", "off_heap") and n < 2) \
                or (fault in ("offset", "off_heap") and REMOTE) \
                or (fault == "other_call" and REMOTE and (kind, dtype, op, n) == ("all_reduce", "i64", "sum", 1)):
            # the engine takes any buffer (offsets are not compared): a call like in_step() agrees
            fault = "none"
        two = kind in ("all_gather", "reduce_scatter")
        src_n = n * WORLD if kind == "reduce_scatter" else n
        dst_n = n * WORLD if kind == "all_gather" else n
        src = heap(dtype, src_n, reuse)
        dst = heap(dtype, dst_n, reuse) if two else None
        if fault == "size":  # every rank allocates them: only the faulty one passes them
            alt_src = heap(dtype, src_n + WORLD, reuse)
            alt_dst = heap(dtype, (src_n + WORLD) * (WORLD if kind == "all_gather" else 1)
                           // (WORLD if kind == "reduce_scatter" else 1), reuse) if two else None
        extra = hpvm.symmetric.empty(src_n, TORCH[dtype]) if fault == "offset" else None
        what = f"step {step}: {kind} {dtype} {op} n={n} root={root} fault={fault} faulty={faulty}"
        for rep in range(int(rng.integers(1, 3)) if fault == "none" else 1):
            parts = [gen(rng, dtype, src_n) for _ in range(WORLD)]
            src.copy_(parts[RANK])
            if dst is not None:
                dst.copy_(gen(rng, dtype, dst_n))
            k, t, o, r = kind, dtype, op, root
            args = [src, src.nbytes] + ([dst, dst.nbytes] if two else [])
            es = TORCH[dtype].itemsize
            mine = fault != "none" and RANK == faulty
            if mine and fault == "size":
                args = [alt_src, alt_src.nbytes] + ([alt_dst, alt_dst.nbytes] if two else [])
            elif mine and fault == "size_arg":  # the same buffers, one element fewer
                args[1] -= es * (WORLD if kind == "reduce_scatter" else 1)
                if two:
                    args[3] -= es * (WORLD if kind == "all_gather" else 1)
            elif mine and fault == "dtype":  # the same bytes as another type
                t = next((d for d in DTYPES if d != dtype and TORCH[d].itemsize == es), "u8")
                args[0] = src.view(TORCH[t])
                if two:
                    args[2] = dst.view(TORCH[t])
            elif mine and fault == "op":
                o = NEXT_OP[op]
            elif mine and fault == "root":
                r = (root + 1) % WORLD
            elif mine and fault == "kind":
                k = {"all_reduce": "broadcast", "broadcast": "all_reduce", "all_gather": "reduce_scatter",
                     "reduce_scatter": "all_gather"}[kind]
                if two:
                    args = args[2:] + args[:2]
            elif mine and fault == "bad_arg":
                args[1] -= 1
            elif mine and fault == "off_heap":
                args[0] = parts[RANK].clone()
            elif mine and fault == "offset":
                extra.copy_(parts[RANK])
                args[0] = extra
            error = None
            try:
                if mine and fault == "other_call":
                    in_step()
                else:
                    hpvm.wait(hpvm.launch(graph(k, t, **options(k, o, r)), *args))
            except HPVMError as exc:
                error = exc
            if fault != "none":
                assert isinstance(error, DistributedError), (RANK, what, repr(error))
                assert f"rank {faulty}" in str(error) or (mine and fault in ("bad_arg", "off_heap")), \
                    (RANK, what, str(error))
                faults += 1
                in_step()
                continue
            assert error is None, (RANK, what, str(error))
            if kind == "all_reduce":
                same(src, reduced(parts, op, dtype), dtype, what)
            elif kind == "broadcast":
                same(src, parts[root], dtype, what)
            elif kind == "all_gather":
                same(dst, torch.cat(parts), dtype, what)
            else:
                same(dst, reduced(parts, op, dtype)[RANK * n:(RANK + 1) * n], dtype, what)
            checks += 1
    return checks, faults


def check_nan_max_min() -> None:
    """Every assignment of these values to the ranks, per element: the heap path's rank-order
    torch.maximum / minimum, which keeps NaN, and the same bits on every rank."""
    values = [np.nan, 1.0, -0.0, 0.0, -np.inf]
    columns = list(itertools.product(range(len(values)), repeat=WORLD))
    parts = [torch.tensor([values[c[q]] for c in columns], dtype=torch.float64) for q in range(WORLD)]
    everyone = hpvm.symmetric.empty(len(columns) * WORLD, torch.float64)
    gather = graph("all_gather", "f64")
    for dtype, op in itertools.product(FLOATS, ("max", "min")):
        mine = [p.to(TORCH[dtype]) for p in parts]
        x = heap(dtype, len(columns), True)
        x.copy_(mine[RANK])
        hpvm.wait(hpvm.launch(graph("all_reduce", dtype, op=op), x, x.nbytes))
        stacked = np.stack([p.double().numpy() for p in mine])
        has_nan = np.isnan(stacked).any(axis=0)
        got = x.double().numpy()
        assert np.array_equal(np.isnan(got), has_nan), (RANK, dtype, op, "NaN not propagated",
                                                        stacked[:, np.isnan(got) != has_nan][:, :3])
        assert np.array_equal(got[~has_nan], (np.max if op == "max" else np.min)(stacked, axis=0)[~has_nan])
        # every rank's bits (through an f64 copy on the heap: NaN payloads and signed zeros kept)
        wide = heap("f64", len(columns), True)
        wide.copy_(x.double())
        hpvm.wait(hpvm.launch(gather, wide, wide.nbytes, everyone, everyone.nbytes))
        rows = everyone.view(WORLD, -1).view(torch.int64)
        assert all(torch.equal(rows[0], rows[q]) for q in range(WORLD)), (RANK, dtype, op, "ranks differ")
    report(RANK, "ADV nan ok")


def check_quantized_disagreement_keeps_heaps_alike() -> None:
    os.environ["HPVM_COMM_QUANTIZE_BYTES"] = "0"
    node = hpvm.comm.all_reduce(f32, quantize="int8" if RANK == WORLD // 2 else "int4")

    @hpvm.graph
    def quick(x: InOut[Ptr[f32]], x_bytes: i64):
        hpvm.node(node, buf=x, buf_bytes=x_bytes)

    x = hpvm.symmetric.zeros(100_003, torch.float32)
    try:
        hpvm.wait(hpvm.launch(quick, x, x.nbytes))
        raise AssertionError(f"rank {RANK}: no error for different quantize= formats")
    except DistributedError as exc:
        assert "quantization" in str(exc), str(exc)
    del os.environ["HPVM_COMM_QUANTIZE_BYTES"]
    free = hpvm.symmetric.empty(1, torch.int64)
    everyone = hpvm.symmetric.empty(WORLD, torch.int64)
    free.fill_(hpvm.symmetric.free_bytes())
    hpvm.wait(hpvm.launch(graph("all_gather", "i64"), free, free.nbytes, everyone, everyone.nbytes))
    assert len(set(everyone.tolist())) == 1, (RANK, "free bytes differ between ranks", everyone.tolist())
    report(RANK, "ADV workspace ok")


def check_overlapping_buffers() -> None:
    """all_gather with src = dst[:n] and reduce_scatter with dst = src[:n], at the same offsets on
    every rank: each rank raises DistributedError (collective-arguments). The heap path once ran
    them and every rank silently got rank 0's block in every block; the engine path got an
    InternalError from MPI on one rank and a timeout on the others."""
    n = 1001
    whole = hpvm.symmetric.empty(n * WORLD, torch.float32)
    for kind, args in (("all_gather", (whole[:n], n * 4, whole, whole.nbytes)),
                       ("reduce_scatter", (whole, whole.nbytes, whole[:n], n * 4))):
        whole.fill_(RANK + 1.0)
        try:
            hpvm.wait(hpvm.launch(graph(kind, "f32", **options(kind, "sum", 0)), *args))
            raise AssertionError(f"rank {RANK}: {kind} with overlapping buffers: no error")
        except DistributedError as exc:
            assert exc.rule == "collective-arguments" and "overlap" in str(exc), str(exc)
        in_step()
    report(RANK, "ADV overlap ok")


with hpvm.runtime("cpu"):
    checks, faults = random_steps()
    assert checks > STEPS // 3 and faults > STEPS // 6, (checks, faults)
    report(RANK, "ADV random ok")
    check_nan_max_min()
    check_overlapping_buffers()
    if not REMOTE:
        check_quantized_disagreement_keeps_heaps_alike()
    in_step()
report(RANK, f"ADV done {checks} checks {faults} faults")
