"""Launching the GPU collective kernels on tensors of the device heap: the direct API (what the
runner of communication nodes calls after the ranks agreed, and what CUDA graphs capture).

Every rank must make the same calls with the same sizes, in the same order, as with NCCL. Nothing
here waits on the host: a kernel orders itself against its peers through the heap's flags, so a
sequence of calls can be captured in a CUDA graph and replayed. `synchronize()` waits for the
device and raises if a kernel's wait timed out. A call seen before is replayed from its own
one-kernel graph (replay.py): that is what makes small collectives cheap for the host.
"""
from __future__ import annotations

import importlib
import weakref
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Callable

from ...device.libcuda import context_synchronize
from ...errors import DistributedError, HPVMTimeoutError
from .. import chooser, ranks
from ..reduction_arith import add_rmsnorm
from ..call import OPS
from ..quantize import BITS, MODES, PAD, QMAX, Layout
from ..quantized import rows_fp8_torch
from .heap import (MAX_BLOCKS, MAX_SLOTS, MISMATCHED, ONE_SHOT_PUSH_BYTES, ONE_SHOT_PUSH_CHUNK,
                   ONE_SHOT_PUSH_PROGRAMS, GpuHeap)
from .replay import Replay, Replays


@dataclass(frozen=True)
class Tuning:
    """Chunk size, warps per program and the most programs of one kernel (and for the stream
    all-reduce, the ring slots per lane; for push, whether the first chunk goes with the arrival:
    kernels.all_reduce_push's EARLY)."""

    block_bytes: int
    warps: int
    programs: int
    slots: int = 0
    early: bool = False


# 16 KiB chunks keep 2 programs of 8 warps per SM with about 4 MiB in flight per GPU. On 2 x H200
# one sweep of `benchmarks/collectives.py --gpu --sweep` found no shape clearly faster (at most 6% at
# 16 MiB in one run, 2% from 256 MiB), and 32 KiB chunks of one-shot in 4 warps run 3.5x slower
# (docs/performance.md).
TUNING = {
    "one_shot": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    "two_shot": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    "direct": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    # provisional (not measured yet): chunks of 16 KiB of input, a divisor of quantize.PAD elements
    "quantized": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    # provisional (benchmarks/gpu/nvlink_ceilings.py sweeps it): 264 lanes of 4 slots of 16 KiB,
    # a ring workspace of 16.5 MiB (stream_kernels.py)
    "stream": Tuning(block_bytes=16 << 10, warps=8, programs=264, slots=4),
    # two-shot by stores (kernels.all_reduce_push): its scratch holds two slots of a chunk per
    # rank for each program (33 MiB on 4 ranks). On 4 x H200, once each program stored to its
    # peers in turn from the next rank on (2026-11-28, 10 shapes against NCCL, interleaved rounds:
    # benchmarks/RESULTS.md), 264 programs of 16 KiB chunks were among the fastest at every size
    # from 2 MiB (16 MiB 86.8 µs, 256 MiB 1,176) and 528 of 8 KiB, the best before, behind (92.5
    # and 1,197)
    "push": Tuning(block_bytes=16 << 10, warps=8, programs=264),
}
# Where a world size has its own measured shape. Two GPUs, push: on 2 x H200 (2026-11-27, six
# sweeps of 4-10 shapes, 1 MiB - 1 GiB, against NCCL in the same run: docs/performance.md) 512
# programs of 16 KiB chunks were 1-2% faster than 528 of 8 KiB from 16 MiB on, and the first chunk
# sent with the arrival saved 2-3 µs at every size (64 MiB: 199.6 µs against 205.0 for the two
# changes together; 1 MiB: 11.7 against 14.2). On 4 x H200 the same day the early chunk was
# slower at 16 MiB (109.2 against 101.4 µs; with 16 KiB chunks too, 114.1) and no faster from
# 64 MiB: four GPUs keep TUNING["push"].
TUNING_BY_WORLD = {("push", 2): Tuning(block_bytes=16 << 10, warps=8, programs=512, early=True)}


def shape_for(algorithm: str, world_size: int) -> Tuning | None:
    """The shape an algorithm runs in on this many ranks."""
    return TUNING_BY_WORLD.get((algorithm, world_size), TUNING.get(algorithm))

ALL_REDUCE_ALGORITHMS = ("one_shot", "one_shot_push", "two_shot", "push", "stream")
_MAX_ELEMENTS = (1 << 31) - 1  # kernel offsets are 32-bit
# status words of kernels that met bad data (moe_launch.py); a wait that timed out writes its rank + 1
BAD_ROUTE, BAD_SLOT = MISMATCHED + 1, MISMATCHED + 2
_BAD_DATA = {BAD_ROUTE: "expert ids outside [-1, experts) (those rows were routed nowhere)",
             BAD_SLOT: "slots outside [-1, experts x capacity), not moe_dispatch's (those rows are zero)"}
_replays = Replays()


def _kernels(name: str = "kernels") -> ModuleType:
    """kernels.py (or quant_kernels.py), the Triton kernels: loaded by the first collective that
    launches one, as the backends are (backends/registry.py), so that `import hpvm_py` does not
    import Triton."""
    return importlib.import_module(f"{__package__}.{name}")


def capturing() -> bool:
    """Whether this thread's CUDA stream is being captured into a graph (a replayed launch's,
    rt/replay.py, or the user's own): a kernel queued now runs only when the graph does."""
    import torch

    return torch.cuda.is_current_stream_capturing()


def _run(key: tuple, launch: Callable[[], None]) -> Replay | None:
    """Replay the graph of this call, or run it for the first time (the key holds everything
    the launch depends on: the tensors' addresses and sizes, options, tuning and timeout).
    Returns the graph (None inside the user's own capture)."""
    if capturing():  # the user's own graph: graphs do not nest
        launch()
        return None
    world = ranks.current()
    key = (id(world), world.timeout if world else 0.0) + key
    replay = _replays.lookup(key)
    # a graph's kernel points into the heap of the world it was captured in: a world made after
    # that one ended may have its id, so the graph also keeps the world (weakly) to compare
    if replay is None or replay.world() is not world:
        replay = _replays.first(key, launch)  # (in place of a dead world's graph)
        replay.world = weakref.ref(world) if world is not None else _no_world
        return replay
    replay()
    return replay


def _no_world() -> None:
    """What a graph captured without a world keeps of it."""
    return None


class Bound:
    """One call made again and again (a communication node's): its key is made once, and its
    graph, once found, is replayed while the world and its timeout are those it was made in."""

    def __init__(self, key: tuple, launch: Callable[[], None]):
        self._key, self._launch = key, launch
        self._replay: Replay | None = None
        self._made_in: tuple[Any, float] | None = None

    def __call__(self) -> None:
        world = ranks.current()
        if self._replay is not None and self._made_in == (world, world.timeout) and not capturing():
            self._replay()
            return
        self._replay = _run(self._key, self._launch)
        self._made_in = (world, world.timeout) if world is not None else None


def _call(key: tuple, launch: Callable[[], None], bind: bool) -> Bound | None:
    """Make the call now, or (bind) return it bound for later."""
    if bind:
        return Bound(key, launch)
    _run(key, launch)
    return None


def _key(*tensors: Any) -> tuple:
    return tuple((t.data_ptr(), t.numel(), t.dtype, t.is_contiguous()) for t in tensors)


def _heap() -> tuple[Any, GpuHeap]:
    world = ranks.current()
    if world is None or not isinstance(world.heap, GpuHeap):
        raise DistributedError("the GPU collectives need GPU ranks: hpvm.distributed.init() with "
                               "CUDA (device='cuda')", rule="distributed-init")
    if not world.single_host:
        raise DistributedError("the GPU collectives of the heap need every rank on one host (ranks "
                               "on several hosts use NCCL through communication nodes)",
                               rule="distributed-init")
    return world, world.heap


def _flat(heap: GpuHeap, t: Any, name: str) -> Any:
    if not t.is_contiguous() or str(t.device) != heap.device:
        raise DistributedError(f"{name} must be a contiguous tensor on {heap.device}, the heap's device")
    if t.numel() and not heap.contains(t.data_ptr(), t.numel() * t.element_size()):
        raise DistributedError(f"{name} is not on the symmetric heap: allocate it with "
                               "hpvm.symmetric.empty(shape, dtype) on every rank", rule="buffer-on-heap")
    if t.numel() > _MAX_ELEMENTS:
        raise DistributedError(f"{name} has {t.numel()} elements; one call takes at most {_MAX_ELEMENTS}")
    return t.reshape(-1)


def _widen(t: Any) -> bool:
    import torch

    return t.dtype in (torch.float16, torch.bfloat16)


def _grid(count: int, tuning: Tuning, esize: int) -> tuple[int, int]:
    block = max(16, tuning.block_bytes // esize)
    return min(max(1, -(-count // block)), tuning.programs, MAX_BLOCKS), block


def _common(world: Any, heap: GpuHeap, fingerprint: int) -> dict:
    return dict(ctrl=heap.control, bases=heap.bases_tensor, rank=world.rank,
                status_addr=heap.status.data_ptr(), timeout_ns=int(world.timeout * 1e9),
                fingerprint=_signed(fingerprint), WORLD=world.size)


def _signed(word: int) -> int:
    return word - (1 << 64) if word >= 1 << 63 else word


def all_reduce(x: Any, op: str = "sum", algorithm: str | None = None, *, fingerprint: int = 0,
               bind: bool = False) -> Bound | None:
    """x = x(rank 0) op x(rank 1) op ..., in place (op: sum, max, min). algorithm: "one_shot",
    "one_shot_push" (one-shot by stores, up to 512 KiB), "two_shot", "push" (two-shot by stores)
    or (two ranks) "stream"; None lets the chooser pick by size and world size
    (`choose`). fingerprint: the call's, as the ranks agreed on it (a communication node's; every
    rank must pass the same, else every kernel moves nothing and reports the mismatch:
    runner.py). bind: return the call, bound to be made later and again (every function here
    takes these two keywords)."""
    algorithm = algorithm or choose("all_reduce", x.numel() * x.element_size(), ranks.current(),
                                    elem_bytes=x.element_size())
    world_size = getattr(ranks.current(), "size", 1)
    return _call(("all_reduce", op, algorithm, shape_for(algorithm, world_size), fingerprint) + _key(x),
                 lambda: _all_reduce(x, op, algorithm, fingerprint), bind)


def choose(kind: str, nbytes: int, world: Any, quantize: str = "", elem_bytes: int = 2) -> str:
    """chooser.choose_gpu's pick for this world; two-shot instead where user allocations leave the
    stream all-reduce's ring or the push all-reduce's scratch no room at the end of the heap (every
    rank's heap holds the same allocations, so every rank picks the same). Nothing is reserved
    here: the kernel's launch reserves its workspace once the ranks agreed on the call, so that a
    call they disagree on leaves every heap as it was."""
    path = chooser.choose_gpu(kind, nbytes, world.size if world is not None else 1, quantize,
                              elem_bytes)
    if path == "stream" and not world.heap.workspace_fits(ring_bytes(TUNING["stream"])):
        return "two_shot"
    if path == "push" and not world.heap.workspace_fits(
            scratch_bytes(shape_for("push", world.size), world.size)):
        return "two_shot"
    return path


def ring_bytes(tuning: Tuning) -> int:
    """The stream all-reduce's workspace: a ring of `slots` chunks per lane (a chunk holds at least
    16 elements, so at most max(block_bytes, 128) bytes)."""
    return tuning.programs * tuning.slots * max(tuning.block_bytes, 128)


def reserve_ring(heap: Any) -> int | None:
    """The heap offset of the stream all-reduce's rings (reserved at the end of the heap), or None
    where user allocations stand."""
    return heap.reserve_workspace(ring_bytes(TUNING["stream"]))


def scratch_bytes(tuning: Tuning, world_size: int) -> int:
    """The push all-reduce's scratch: per program two slots of a chunk per rank."""
    return tuning.programs * 2 * world_size * max(tuning.block_bytes, 128)


def reserve_scratch(heap: Any, world_size: int) -> int | None:
    """The heap offset of the push all-reduce's scratch (reserved at the end of the heap, where
    the stream all-reduce's rings go: they never run at once), or None where user allocations
    stand."""
    return heap.reserve_workspace(scratch_bytes(shape_for("push", world_size), world_size))


def _all_reduce(x: Any, op: str, algorithm: str, fingerprint: int) -> None:
    K = _kernels()
    world, heap = _heap()
    buf = _flat(heap, x, "x")
    if op not in OPS:
        raise DistributedError(f"op={op!r} is not one of {', '.join(OPS)}")
    if algorithm not in ALL_REDUCE_ALGORITHMS:
        raise DistributedError(f"algorithm={algorithm!r} is not one of {', '.join(ALL_REDUCE_ALGORITHMS)}")
    if algorithm == "stream" and world.size != 2:
        raise DistributedError(f"algorithm='stream' is for two ranks, and this world has {world.size}")
    if buf.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    if algorithm == "stream":
        _all_reduce_stream(world, heap, buf, op, fingerprint)
        return
    if algorithm == "push":
        _all_reduce_push(world, heap, buf, op, fingerprint)
        return
    if algorithm == "one_shot_push":
        _all_reduce_one_shot_push(world, heap, buf, op, fingerprint)
        return
    tuning = TUNING[algorithm]
    programs, block = _grid(buf.numel(), tuning, buf.element_size())
    kernel = K.all_reduce_one_shot if algorithm == "one_shot" else K.all_reduce_two_shot
    if algorithm == "two_shot":
        programs = min(programs, max(1, -(-buf.numel() // (world.size * block))))
    kernel[(programs,)](buf, buf.numel(), OP=OPS.index(op), WIDEN=_widen(buf), ELEM=buf.element_size(),
                        BLOCK=block, num_warps=tuning.warps, **_common(world, heap, fingerprint))


def _all_reduce_stream(world: Any, heap: GpuHeap, buf: Any, op: str, fingerprint: int) -> None:
    """Two ranks: each pushes its buffer through rings in its peer's workspace (stream_kernels.py)."""
    tuning = TUNING["stream"]
    if not 2 <= tuning.slots <= MAX_SLOTS:
        raise DistributedError(f"TUNING['stream'].slots = {tuning.slots}: 2 to {MAX_SLOTS} ring slots per lane")
    offset = reserve_ring(heap)
    if offset is None:
        raise DistributedError(f"the stream all-reduce needs {ring_bytes(tuning)} bytes of workspace at "
                               f"the end of the symmetric heap, and {heap.free_bytes} bytes are free "
                               "(set HPVM_HEAP_BYTES larger)", rule="heap-capacity")
    programs, block = _grid(buf.numel(), tuning, buf.element_size())
    ring = heap.tensor(world.rank, offset, programs * tuning.slots * block, buf.dtype)
    _kernels("stream_kernels").all_reduce_stream[(programs,)](
        buf, buf.numel(), ring, OP=OPS.index(op), WIDEN=_widen(buf), ELEM=buf.element_size(), BLOCK=block,
        SLOTS=tuning.slots, num_warps=tuning.warps, **_common(world, heap, fingerprint))


def _all_reduce_one_shot_push(world: Any, heap: GpuHeap, buf: Any, op: str, fingerprint: int) -> None:
    """One-shot by stores: a chunk of 4 KiB per program, into the rows in the heap's header."""
    nbytes = buf.numel() * buf.element_size()
    if nbytes > ONE_SHOT_PUSH_BYTES:
        raise DistributedError(f"algorithm='one_shot_push' takes at most {ONE_SHOT_PUSH_BYTES} bytes, not {nbytes}")
    block = ONE_SHOT_PUSH_CHUNK // buf.element_size()
    rows = heap.tensor(world.rank, heap.rows_offset, 2 * ONE_SHOT_PUSH_PROGRAMS * world.size * block, buf.dtype)
    _kernels().all_reduce_one_shot_push[(-(-buf.numel() // block),)](
        buf, buf.numel(), rows, OP=OPS.index(op), WIDEN=_widen(buf), ELEM=buf.element_size(), BLOCK=block,
        PROGRAMS=ONE_SHOT_PUSH_PROGRAMS, num_warps=4, **_common(world, heap, fingerprint))


def _all_reduce_push(world: Any, heap: GpuHeap, buf: Any, op: str, fingerprint: int) -> None:
    """Two-shot by stores: every rank stores its copy of each peer's slice into that peer's
    scratch, reduces its own slice there and stores the result into every buffer (kernels.py)."""
    shape = shape_for("push", world.size)
    offset = reserve_scratch(heap, world.size)
    if offset is None:
        raise DistributedError(f"the push all-reduce needs {scratch_bytes(shape, world.size)} bytes of "
                               f"workspace at the end of the symmetric heap, and {heap.free_bytes} bytes are "
                               "free (set HPVM_HEAP_BYTES larger)", rule="heap-capacity")
    programs, block = _grid(buf.numel(), shape, buf.element_size())
    programs = min(programs, max(1, -(-buf.numel() // (world.size * block))))  # chunks of a slice
    scratch = heap.tensor(world.rank, offset, programs * 2 * world.size * block, buf.dtype)
    _kernels().all_reduce_push[(programs,)](
        buf, buf.numel(), scratch, OP=OPS.index(op), WIDEN=_widen(buf), ELEM=buf.element_size(), BLOCK=block,
        EARLY=shape.early, num_warps=shape.warps, **_common(world, heap, fingerprint))


def all_reduce_quantized(x: Any, quantize: str, *, fingerprint: int = 0,
                         bind: bool = False) -> Bound | None:
    """x = the quantized sum of x over the ranks, in place (quantize: fp8, int8 or int4; x: f16,
    bf16 or f32): each rank's x crosses as codes and per-32-element scales (docs/distributed.md,
    "Quantized all-reduce"), whatever its size (the threshold is the communication node's)."""
    return _call(("all_reduce_quantized", quantize, TUNING["quantized"], fingerprint) + _key(x),
                 lambda: _all_reduce_quantized(x, quantize, fingerprint), bind)


def _all_reduce_quantized(x: Any, mode: str, fingerprint: int) -> None:
    import torch

    K = _kernels("quant_kernels")
    world, heap = _heap()
    buf = _flat(heap, x, "x")
    if mode not in MODES:
        raise DistributedError(f"quantize={mode!r} is not one of {', '.join(MODES)}")
    if not _widen(buf) and buf.dtype != torch.float32:
        raise DistributedError(f"the quantized all-reduce takes float16, bfloat16 or float32, not {buf.dtype}")
    if buf.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    layout = Layout(buf.numel(), mode)
    offset = heap.reserve_workspace(layout.total)
    if offset is None:
        raise DistributedError(f"the quantized all-reduce needs {layout.total} bytes of workspace at "
                               f"the end of the symmetric heap, and {heap.free_bytes} bytes are free "
                               "(set HPVM_HEAP_BYTES larger)", rule="heap-capacity")
    codes = heap.tensor(world.rank, offset, layout.code_bytes, torch.uint8)
    scales = heap.tensor(world.rank, offset + layout.scales_offset, layout.groups, torch.float32)
    tuning = TUNING["quantized"]
    programs, block = _grid(buf.numel(), tuning, buf.element_size())
    assert PAD % block == 0, "a chunk must divide the payload's padding"
    # no FP fusion: a product fused into the next add would round differently from quantize.py
    K.all_reduce_quantized[(programs,)](buf, buf.numel(), codes, scales, MODE=MODES.index(mode),
                                        QMAX=QMAX[mode], CODE_BYTES=block * BITS[mode] // 8, BLOCK=block,
                                        num_warps=tuning.warps, enable_fp_fusion=False,
                                        enable_reflect_ftz=False,
                                        **_common(world, heap, fingerprint))


def all_gather(src: Any, dst: Any, *, fingerprint: int = 0, bind: bool = False) -> Bound | None:
    """dst = src(rank 0) ‖ src(rank 1) ‖ ... (dst holds world_size x src)."""
    return _call(("all_gather", TUNING["direct"], fingerprint) + _key(src, dst),
                 lambda: _all_gather(src, dst, fingerprint), bind)


def _all_gather(src: Any, dst: Any, fingerprint: int) -> None:
    K = _kernels()
    world, heap = _heap()
    s, d = _flat(heap, src, "src"), _flat(heap, dst, "dst")
    if d.numel() != world.size * s.numel() or s.dtype != d.dtype:
        raise DistributedError(f"all_gather: dst must hold world_size ({world.size}) x src elements "
                               f"of src's type; src {s.numel()} {s.dtype}, dst {d.numel()} {d.dtype}")
    if s.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    programs, block = _grid(s.numel(), TUNING["direct"], s.element_size())
    K.all_gather[(programs,)](s, d, s.numel(), ELEM=s.element_size(), BLOCK=block,
                              num_warps=TUNING["direct"].warps, **_common(world, heap, fingerprint))


def reduce_scatter(src: Any, dst: Any, op: str = "sum", *, fingerprint: int = 0,
                   bind: bool = False) -> Bound | None:
    """dst = block `rank` of (src(rank 0) op src(rank 1) op ...) (src holds world_size x dst)."""
    return _call(("reduce_scatter", op, TUNING["direct"], fingerprint) + _key(src, dst),
                 lambda: _reduce_scatter(src, dst, op, fingerprint), bind)


def _reduce_scatter(src: Any, dst: Any, op: str, fingerprint: int) -> None:
    K = _kernels()
    world, heap = _heap()
    s, d = _flat(heap, src, "src"), _flat(heap, dst, "dst")
    if s.numel() != world.size * d.numel() or s.dtype != d.dtype:
        raise DistributedError(f"reduce_scatter: src must hold world_size ({world.size}) x dst "
                               f"elements of dst's type; src {s.numel()} {s.dtype}, dst {d.numel()} {d.dtype}")
    if d.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    programs, block = _grid(d.numel(), TUNING["direct"], d.element_size())
    K.reduce_scatter[(programs,)](s, d, d.numel(), OP=OPS.index(op), WIDEN=_widen(d),
                                  ELEM=d.element_size(), BLOCK=block, num_warps=TUNING["direct"].warps,
                                  **_common(world, heap, fingerprint))


def broadcast(x: Any, root: int = 0, *, fingerprint: int = 0, bind: bool = False) -> Bound | None:
    """x = x(root) on every rank."""
    return _call(("broadcast", root, TUNING["direct"], fingerprint) + _key(x),
                 lambda: _broadcast(x, root, fingerprint), bind)


def _broadcast(x: Any, root: int, fingerprint: int) -> None:
    K = _kernels()
    world, heap = _heap()
    buf = _flat(heap, x, "x")
    if not 0 <= root < world.size:
        raise DistributedError(f"broadcast: root {root} is not a rank of this world of {world.size}")
    if buf.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    programs, block = _grid(buf.numel(), TUNING["direct"], buf.element_size())
    K.broadcast[(programs,)](buf, buf.numel(), root, ELEM=buf.element_size(), BLOCK=block,
                             num_warps=TUNING["direct"].warps, **_common(world, heap, fingerprint))


# rows of at most this many elements are normalised by one program (registers hold a row)
RMSNORM_MAX_HIDDEN = 16384


def all_reduce_rmsnorm(x: Any, residual: Any, weight: Any, hidden: int, eps: float,
                       out: Any = None, scales: Any = None, *, fingerprint: int = 0,
                       bind: bool = False) -> Bound | None:
    """residual += all_reduce_sum(x); x = rmsnorm(residual) * weight, by rows of `hidden`; with
    `out` (uint8, x's size) and `scales` (float32, one per row), also x's fp8 e4m3fn codes and
    per-row scales (quantize.rows_fp8 of x as stored)."""
    if (out is None) != (scales is None):
        raise DistributedError("all_reduce_rmsnorm: out and scales go together (the fp8 copy of x)")
    extra = () if out is None else _key(out, scales)
    return _call(("all_reduce_rmsnorm", hidden, eps, TUNING["one_shot"], fingerprint)
                 + _key(x, residual, weight) + extra,
                 lambda: _all_reduce_rmsnorm(x, residual, weight, hidden, eps, out, scales, fingerprint), bind)


def _all_reduce_rmsnorm(x: Any, residual: Any, weight: Any, hidden: int, eps: float, out: Any,
                        scales: Any, fingerprint: int) -> None:
    import torch
    import triton

    K = _kernels()
    world, heap = _heap()
    xs, rs = _flat(heap, x, "x"), _flat(heap, residual, "residual")
    w = _flat(heap, weight, "weight")
    if hidden <= 0 or xs.numel() % hidden or rs.numel() != xs.numel() or w.numel() != hidden:
        raise DistributedError(f"all_reduce_rmsnorm: x and residual must hold whole rows of hidden = "
                               f"{hidden} elements and weight one row")
    quant = out is not None
    if quant:
        out, scales = _flat(heap, out, "out"), _flat(heap, scales, "scales")
        if out.dtype != torch.uint8 or out.numel() != xs.numel() or scales.dtype != torch.float32 \
                or scales.numel() != xs.numel() // hidden:
            raise DistributedError("all_reduce_rmsnorm: out must be uint8 with one byte per element "
                                   "of x, scales float32 with one per row")
    if xs.numel() == 0:
        _announce(fingerprint)  # an empty call still meets its peers, and is checked
        return
    if hidden > RMSNORM_MAX_HIDDEN:  # a row no longer fits one program: all-reduce, then normalise
        all_reduce(xs, "sum", fingerprint=fingerprint)
        normed, r = add_rmsnorm(xs.float() if _widen(xs) else xs, rs, w, hidden, eps)
        rs.copy_(r)
        xs.copy_(normed)
        if quant:
            rows_fp8_torch(xs, hidden, out, scales)
        return
    rows = xs.numel() // hidden
    programs = min(rows, TUNING["one_shot"].programs, MAX_BLOCKS)
    block = triton.next_power_of_2(hidden)
    K.all_reduce_rmsnorm[(programs,)](xs, rs, w, out if quant else xs, scales if quant else xs, rows,
                                      hidden, float(eps), QUANT=quant, WIDEN=_widen(xs),
                                      ELEM=xs.element_size(), BLOCK=block,
                                      num_warps=min(16, max(1, block // 512)),
                                      **_common(world, heap, fingerprint))


def announce(fingerprint: int, *, bind: bool = False) -> Bound | None:
    """Take part in a call without moving data (it is empty, or this rank's own arguments are
    wrong): one program arrives with the call's fingerprint, so the peers' kernels see any
    difference and move nothing; every rank then raises (runner.py)."""
    return _call(("announce", fingerprint), lambda: _announce(fingerprint), bind)


def _announce(fingerprint: int) -> None:
    world, heap = _heap()
    _kernels().announce[(1,)](num_warps=1, **_common(world, heap, fingerprint))


def synchronize_device(heap: GpuHeap) -> None:
    """Wait for every stream of this rank's GPU (the heap's; init made it the current device),
    through libcuda where it loads: torch's synchronize costs the host a few microseconds more."""
    sync = context_synchronize()
    if sync is None or sync() != 0:  # an error shows again, and is raised, through torch
        import torch

        torch.cuda.synchronize(heap.device)


def synchronize() -> None:
    """Wait for this rank's device; HPVMTimeoutError naming the rank when a kernel's wait for it
    timed out (the ranks are out of step then: finalize)."""
    import torch

    world, heap = _heap()
    torch.cuda.synchronize(heap.device)
    raise_if_failed(world, heap)


def raise_if_failed(world: Any, heap: GpuHeap, what: str = "a GPU collective", loc: Any = None) -> None:
    code = heap.status_code()
    if code in _BAD_DATA:
        heap.clear_failure()
        raise DistributedError(f"{what}: an earlier moe kernel on this rank met {_BAD_DATA[code]}",
                               loc, rule="moe-data")
    missing = heap.failed_rank()
    if missing is not None:
        heap.clear_failure()
        raise HPVMTimeoutError(f"{what}: rank {missing} did not arrive within {world.timeout:g} s (a "
                               "kernel's wait on the device gave up; a rank failed, exited, or skipped "
                               "a collective; the timeout is HPVM_COMM_TIMEOUT or hpvm.distributed.init("
                               "timeout=...)); the ranks are out of step now: finalize", loc,
                               rule="rank-arrival")
