"""Hand-edited variants of the gpu target's privatised histogram kernel (64M int32 -> 256 bins),
to choose what the code generator should emit (docs/performance.md, "Histogram").

Each variant is the generated kernel of examples/histogram.py with one idea applied:
  gen      the generated kernel itself (hpvm_py's TritonKernel, launched directly)
  i32      lane ids, offsets and the bin index range test in 32 bits, one unsigned range compare
  full     i32 + a block-uniform branch: a block wholly inside the grid runs with m0 all true
  unmasked full + a block reduction that the block's indices are all in range: then tl.histogram
           without its mask (one warp ballot less per element)
  bound    tl.histogram(data & 255) of full blocks, no range test: what tl.histogram costs alone
  load     the loads alone (a sum): the memory floor
  l2       counts per program in global memory (L2 atomics), merged once per program

`bench` also writes each variant's SASS opcode counts (opcodes.txt) and some SASS files to $OUT.
`sass` prints opcode counts compiled here for sm_90 with this machine's Triton; note that Triton 3.9
lowers tl.histogram to a shared-memory atomic per element, 3.6 (the GPU machines) to warp ballots.

usage: python histogram_variants.py sass         (CPU: triton + ptxas + nvdisasm, no GPU)
       python histogram_variants.py bench        (GPU: exactness, times, sweep, peers)
"""
from __future__ import annotations

import collections
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

from hpvm_py.backends.triton.loader import load_kernel  # noqa: E402
from hpvm_py.backends.triton.prelude import HEADER  # noqa: E402

KERNELS = HEADER + '''

@triton.jit
def _counts(data, lin, m0, nbins, count, NB: tl.constexpr):
    """The generated kernel's block: the index (floored modulo), its range test, the histogram."""
    i = lin.to(tl.int64)
    idx = _smod_by(tl.load(data + i, mask=m0, other=0), nbins,
                   tl.full([], -2147483648, tl.int32)).to(tl.int64)
    ok = m0 & (idx.to(tl.uint64, bitcast=True) < count)
    return tl.histogram(idx.to(tl.int32), NB, mask=ok)


@triton.jit
def h_i32(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr):
    counts = tl.zeros([NB], tl.int32)
    for it in range(ITERS):
        pid = tl.program_id(0)
        lin = ((pid % LB) * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        counts = counts + _counts(data, lin, lin < L, nbins, count, NB)
    b = tl.arange(0, NB)
    tl.atomic_add(bins + b, counts, mask=(b < count) & (counts != 0))


@triton.jit
def h_full(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr,
           UNMASKED: tl.constexpr):
    """Full blocks apart from the partial last one; UNMASKED: a full block whose indices are all
    in range (one block reduction) counts without the histogram's mask."""
    counts = tl.zeros([NB], tl.int32)
    for it in range(ITERS):
        pid = tl.program_id(0)
        start = ((pid % LB) * ITERS + it) * BLOCK
        lin = start + tl.arange(0, BLOCK)
        if start + BLOCK <= L:
            m0 = tl.full([BLOCK], 1, tl.int1)
            if UNMASKED:
                i = lin.to(tl.int64)
                idx = _smod_by(tl.load(data + i, mask=m0, other=0), nbins,
                               tl.full([], -2147483648, tl.int32)).to(tl.int64)
                ok = m0 & (idx.to(tl.uint64, bitcast=True) < count)
                if tl.min(ok.to(tl.int32), 0) == 1:
                    counts = counts + tl.histogram(idx.to(tl.int32), NB)
                else:
                    counts = counts + tl.histogram(idx.to(tl.int32), NB, mask=ok)
            else:
                counts = counts + _counts(data, lin, m0, nbins, count, NB)
        else:
            counts = counts + _counts(data, lin, lin < L, nbins, count, NB)
    b = tl.arange(0, NB)
    tl.atomic_add(bins + b, counts, mask=(b < count) & (counts != 0))


@triton.jit
def h_bound(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr):
    counts = tl.zeros([NB], tl.int32)
    for it in range(ITERS):
        pid = tl.program_id(0)
        start = ((pid % LB) * ITERS + it) * BLOCK
        if start + BLOCK <= L:
            lin = start + tl.arange(0, BLOCK)
            counts = counts + tl.histogram(tl.load(data + lin) & (NB - 1), NB)
    b = tl.arange(0, NB)
    tl.atomic_add(bins + b, counts, mask=(b < count) & (counts != 0))


@triton.jit
def h_load(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr):
    acc = tl.zeros([BLOCK], tl.int32)
    for it in range(ITERS):
        pid = tl.program_id(0)
        start = ((pid % LB) * ITERS + it) * BLOCK
        if start + BLOCK <= L:
            lin = start + tl.arange(0, BLOCK)
            acc = acc + tl.load(data + lin)
    tl.atomic_add(bins + tl.program_id(0) % NB, tl.sum(acc, 0))


@triton.jit
def h_l2(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr):
    """Per-program counts in global memory (L2 atomics), merged once per program: bins must
    hold one zeroed row of NB per program after the first NB (the merged counts)."""
    pid = tl.program_id(0)
    mine = bins + NB + pid * NB
    for it in range(ITERS):
        start = ((pid % LB) * ITERS + it) * BLOCK
        lin = start + tl.arange(0, BLOCK)
        m0 = lin < L
        idx = _smod_by(tl.load(data + lin, mask=m0, other=0), nbins, tl.full([], -2147483648, tl.int32))
        tl.atomic_add(mine + idx, 1, mask=m0 & (idx.to(tl.uint32, bitcast=True) < count), sem="relaxed")
    tl.debug_barrier()  # every warp's atomics are done before the row is read
    b = tl.arange(0, NB)
    tl.atomic_add(bins + b, tl.load(mine + b), mask=b < count)


@triton.jit
def h_onehot(data, bins, nbins, LB, L, count, ITERS, BLOCK: tl.constexpr, NB: tl.constexpr,
             INT8: tl.constexpr):
    """Counts as a matrix product on tensor cores (NB = 256 only): with idx = 16 * hi + lo,
    counts[hi, lo] = sum over elements of onehot(hi)[hi, k] * onehot(lo)[k, lo]."""
    r = tl.arange(0, 16)
    if INT8:
        acc = tl.zeros([16, 16], tl.int32)
    else:
        acc = tl.zeros([16, 16], tl.float32)
    pid = tl.program_id(0)
    for it in range(ITERS):
        lin = ((pid % LB) * ITERS + it) * BLOCK + tl.arange(0, BLOCK)
        m0 = lin < L
        idx = _smod_by(tl.load(data + lin, mask=m0, other=0), nbins, tl.full([], -2147483648, tl.int32))
        ok = m0 & (idx.to(tl.uint32, bitcast=True) < count)
        hi = tl.where(ok, idx >> 4, 16)
        lo = idx & 15
        if INT8:
            a = (hi[None, :] == r[:, None]).to(tl.int8)
            b = (lo[:, None] == r[None, :]).to(tl.int8)
            acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        else:
            a = (hi[None, :] == r[:, None]).to(tl.float16)
            b = (lo[:, None] == r[None, :]).to(tl.float16)
            acc = tl.dot(a, b, acc)
    at = r[:, None] * 16 + r[None, :]
    counts = acc.to(tl.int32)
    tl.atomic_add(bins + at, counts, mask=(at < count) & (counts != 0))
'''

HAND = ("i32", "full", "unmasked", "bound", "load", "l2", "onehot", "onehot8")
FLAGS = {"full": {"UNMASKED": False}, "unmasked": {"UNMASKED": True},  # constexprs of h_full
         "onehot": {"INT8": False}, "onehot8": {"INT8": True}}  # of h_onehot


def module():
    import hashlib
    digest = hashlib.sha256(KERNELS.encode()).hexdigest()
    shared = {"full": "h_full", "unmasked": "h_full", "onehot8": "h_onehot"}
    return {name: load_kernel(KERNELS, digest, shared.get(name, f"h_{name}")) for name in HAND}


def opcodes(sass: str) -> collections.Counter:
    ops: collections.Counter = collections.Counter()
    for line in sass.splitlines():
        m = re.search(r"^\s*(?:/\*[0-9a-f]+\*/)?\s*(?:[-0-9a-f:Y]+\s+)?(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]+)", line)
        if m and ";" in line:
            ops[m.group(2).split(".")[0]] += 1
    return ops


def sass_report() -> None:
    """Opcode counts of the variants' SASS (sm_90), with the launch's specialisations."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import histogram
    import hpvm_py as hpvm
    from hpvm_py.backends.triton.codegen import generate

    n, nbins, block, iters, lb = 64 * 2**20, 256, 4096, 3, 5462
    kernels = module()
    gen_leaf, gen_ctx, _ = hpvm.compile(histogram.root, target="cpu").leaf_kernels()[0]
    source = generate(gen_leaf, gen_ctx, checked=False, interpreted=False)
    gen = load_kernel(source.text, source.digest, source.kernel)
    div16 = [["tt.divisibility", 16]]
    rows = {}
    for name, fn in [("gen", gen)] + list(kernels.items()):
        if name == "gen":
            sig = {k: ("i32" if v in ("i64",) else v) for k, v in source.arguments.items()}
            values = {"v_data_bytes__arg": 4 * n, "v_bins_bytes__arg": 4 * nbins, "v_nbins__arg": nbins,
                      "E0_0": n, "LB": lb, "L": n, "v_bins__count": nbins, "ITERS": iters}
            const = {"BLOCK": block, "NB_v_bins": nbins, "LANES32": True}
        else:
            sig = {"data": "*i32", "bins": "*i32", "nbins": "i32", "LB": "i32", "L": "i32",
                   "count": "i32", "ITERS": "i32", "BLOCK": "constexpr", "NB": "constexpr"}
            sig.update({flag: "constexpr" for flag in FLAGS.get(name, {})})
            values = {"nbins": nbins, "LB": lb, "L": n, "count": nbins, "ITERS": iters}
            const = {"BLOCK": block, "NB": nbins, **FLAGS.get(name, {})}
        names = list(sig)
        attrs = {(names.index(k),): div16 for k, t in sig.items()
                 if t.startswith("*") or (k in values and values[k] % 16 == 0)}
        compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=const, attrs=attrs),
                                  target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
        rows[name] = opcodes(compiled.asm["sass"])
        Path(f"/tmp/hist_{name}.sass").write_text(compiled.asm["sass"])
    keys = sorted(set().union(*rows.values()), key=lambda k: -rows["gen"].get(k, 0))
    print(f"{'opcode':<10}" + "".join(f"{n:>9}" for n in rows))
    for k in keys:
        print(f"{k:<10}" + "".join(f"{r.get(k, 0):>9}" for r in rows.values()))
    print(f"{'total':<10}" + "".join(f"{sum(r.values()):>9}" for r in rows.values()))


def geometry(n: int, block: int, programs: int) -> tuple[int, int]:
    """(grid, ITERS) as kernel.py chooses them for one parent instance."""
    blocks = -(-n // block)
    iters = max(1, min(blocks, blocks // programs))
    return -(-blocks // iters), iters


def bench() -> None:
    import torch
    import triton
    from triton.testing import do_bench

    import histogram
    import hpvm_py as hpvm
    from hpvm_py.backends.base import BufferArg
    from hpvm_py.backends.triton import kernel as tk
    from nvptx_histogram import nvptx_histogram

    print(torch.cuda.get_device_name(), "torch", torch.__version__, "triton", triton.__version__)
    kernels = module()
    dev = "cuda"

    def launch(name, data, bins, nbins, count, block, warps, programs, nb=256):
        grid, iters = geometry(data.numel(), block, programs)
        fn = kernels[name]
        return grid, lambda: fn[(grid,)](data, bins, nbins, grid, data.numel(), count, iters,
                                          BLOCK=block, NB=nb, num_warps=warps, **FLAGS.get(name, {}))

    def median(fn, per_call=5) -> float:
        return do_bench(lambda: [fn() for _ in range(per_call)], return_mode="median") / per_call

    # exactness: partial last blocks, negative values, indices past the buffer (counted nowhere)
    for n, nbins, lo in ((64 * 2**20, 256, 0), (64 * 2**20 - 1000, 300, -10**6)):
        data = torch.randint(lo, 10**6, (n,), device=dev, dtype=torch.int32)
        want = torch.bincount((data.long() % nbins), minlength=nbins)[:256].to(torch.int32)
        for name in ("i32", "full", "unmasked", "l2", "onehot", "onehot8"):
            for block, warps, programs in ((512, 4, 4224) if name.startswith("onehot") else (4096, 8, 4224),):
                grid, _ = geometry(n, block, programs)
                bins = torch.zeros(256 + (256 * grid if name == "l2" else 0), device=dev, dtype=torch.int32)
                launch(name, data, bins, nbins, 256, block, warps, programs)[1]()
                ok = torch.equal(bins[:256], want)
                print(f"exact {name:<9} n={n} nbins={nbins} block={block}: {ok}", flush=True)
                assert ok

    n, nbins = 64 * 2**20, 256
    data = torch.randint(0, 10**6, (n,), device=dev, dtype=torch.int32)
    bins = torch.zeros(256, device=dev, dtype=torch.int32)
    rows = []

    def record(label: str, ms: float) -> None:
        rows.append((label, ms))
        print(f"{label:<52} {ms:8.4f} ms", flush=True)

    args = (data, n * 4, bins, 1024, nbins, n)
    hpvm.init("gpu")
    hpvm.wait(hpvm.launch(histogram.root, *args))
    compiled = hpvm.compile(histogram.root, target="gpu")
    ((_, _, kernel),) = compiled.leaf_kernels()
    values = [BufferArg(obj=a, address=a.data_ptr(), nbytes=a.numel() * a.element_size(), array=None)
              if isinstance(a, torch.Tensor) else a for a in args[:5]]
    gen = kernel.prepare(values, [], [(n,)])
    record(f"gen {tk.GPU_PRIVATE}", median(gen.run))
    out = Path(__import__("os").environ.get("OUT", "/tmp"))
    sass = {"gen": gen.jit[gen.grid](*gen.call, **gen.options).asm["sass"]}
    for name in ("i32", "full", "unmasked", "bound"):
        sass[name] = launch(name, data, bins, nbins, 256, 4096, 8, 4224)[1]().asm["sass"]
    for name in ("gen", "full", "bound"):
        (out / f"{name}.sass").write_text(sass[name])
    counts = {name: opcodes(text) for name, text in sass.items()}
    table = [f"{'opcode':<10}" + "".join(f"{k:>9}" for k in counts)]
    for op in sorted(set().union(*counts.values()), key=lambda k: -counts["gen"].get(k, 0)):
        table.append(f"{op:<10}" + "".join(f"{c.get(op, 0):>9}" for c in counts.values()))
    table.append(f"{'total':<10}" + "".join(f"{sum(c.values()):>9}" for c in counts.values()))
    (out / "opcodes.txt").write_text("\n".join(table))
    print("\n".join(table), flush=True)
    for name in ("i32", "full", "unmasked", "bound", "load"):
        record(f"{name} 4096/8/4224", median(launch(name, data, bins, nbins, 256, 4096, 8, 4224)[1]))
    grid, _ = geometry(n, 4096, 4224)
    l2bins = torch.zeros(256 * (grid + 1), device=dev, dtype=torch.int32)
    record("l2 4096/8/4224 (zeroing included)",
           median(lambda: (l2bins.zero_(), launch("l2", data, l2bins, nbins, 256, 4096, 8, 4224)[1]())))
    sweep = {"full": ((2048, 4, 4224), (2048, 8, 4224), (4096, 4, 4224), (4096, 16, 4224), (4096, 8, 2112),
                      (8192, 8, 2112), (8192, 16, 2112), (1024, 4, 8448)),
             "bound": ((2048, 4, 4224), (4096, 8, 2112), (8192, 16, 2112))}
    sweep["onehot"] = sweep["onehot8"] = ((256, 4, 4224), (512, 4, 4224), (512, 8, 4224), (1024, 8, 4224),
                                          (512, 4, 2112), (1024, 4, 1056))
    for name, configs in sweep.items():
        for block, warps, programs in configs:
            record(f"{name} {block}/{warps}/{programs}",
                   median(launch(name, data, bins, nbins, 256, block, warps, programs)[1]))
    record("gen again", median(gen.run))
    record("torch.bincount(d % 256)", median(lambda: torch.bincount(data % nbins, minlength=nbins), 1))
    xs = torch.randint(0, 256, (n,), device=dev, dtype=torch.int32)
    peer = nvptx_histogram(xs, bins, 132 * 8)
    record("nvptx shared atomics (1056 groups of 256)", median(lambda: (bins.zero_(), peer()), 1))
    hpvm.cleanup()
    (out / "variants.txt").write_text("\n".join(f"{a}\t{b:.4f}" for a, b in rows))


if __name__ == "__main__":
    {"sass": sass_report, "bench": bench}[sys.argv[1]]()
