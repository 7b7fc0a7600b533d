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
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from ...errors import DistributedError, HPVMTimeoutError
from .. import chooser, ranks
from ..reduction_arith import add_rmsnorm
from ..call import OPS
from .heap import MAX_BLOCKS, GpuHeap
from .replay import Replays


@dataclass(frozen=True)
class Tuning:
    """Chunk size, warps per program and the most programs of one kernel."""

    block_bytes: int
    warps: int
    programs: int


# 16 KiB chunks keep 2 programs of 8 warps per SM with about 4 MiB in flight per GPU. On 2 x H200
# one sweep of `benchmarks/collectives.py --gpu --sweep` found no shape clearly faster (at most 6% at
# 16 MiB in one run, 2% from 256 MiB), and 32 KiB chunks of one-shot in 4 warps run 3.5x slower
# (docs/performance.md).
TUNING = {
    "one_shot": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    "two_shot": Tuning(block_bytes=16 << 10, warps=8, programs=264),
    "direct": Tuning(block_bytes=16 << 10, warps=8, programs=264),
}
_MAX_ELEMENTS = (1 << 31) - 1  # kernel offsets are 32-bit
# status words of kernels that met bad data (moe_launch.py); a wait that timed out writes its rank + 1
BAD_ROUTE, BAD_SLOT = 1 << 20, (1 << 20) + 1
_BAD_DATA = {BAD_ROUTE: "expert ids outside [-1, experts) (those rows were routed nowhere)",
             BAD_SLOT: "slots outside [-1, experts x capacity), not moe_dispatch's (those rows are zero)"}
_replays = Replays()


def _kernels() -> ModuleType:
    """kernels.py, the Triton kernels: loaded by the first collective that launches one, as the
    backends are (backends/registry.py), so that `import hpvm_py` does not import Triton."""
    return importlib.import_module(f"{__package__}.kernels")


def _run(key: tuple, launch: Any) -> None:
    """Replay the graph of this call, or run it for the first time (the key holds everything
    the launch depends on: the tensors' addresses and sizes, options, tuning and timeout)."""
    import torch

    if torch.cuda.is_current_stream_capturing():  # the user's own graph: graphs do not nest
        launch()
        return
    world = ranks.current()
    key = (id(world), world.timeout if world else 0.0) + key
    graph = _replays.lookup(key)
    if graph is not None:
        graph.replay()
    else:
        _replays.first(key, launch)


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


def _common(world: Any, heap: GpuHeap) -> dict:
    return dict(ctrl=heap.control, bases=heap.bases_tensor, rank=world.rank,
                status_addr=heap.status.data_ptr(), timeout_ns=int(world.timeout * 1e9),
                WORLD=world.size)


def all_reduce(x: Any, op: str = "sum", algorithm: str | None = None) -> None:
    """x = x(rank 0) op x(rank 1) op ..., in place (op: sum, max, min). algorithm: "one_shot" or
    "two_shot"; None lets the chooser pick by size and world size."""
    world = ranks.current()
    size = world.size if world is not None else 1
    algorithm = algorithm or chooser.choose_gpu("all_reduce", x.numel() * x.element_size(), size)
    _run(("all_reduce", op, algorithm, TUNING.get(algorithm)) + _key(x),
         lambda: _all_reduce(x, op, algorithm))


def _all_reduce(x: Any, op: str, algorithm: str) -> None:
    K = _kernels()
    world, heap = _heap()
    buf = _flat(heap, x, "x")
    if op not in OPS:
        raise DistributedError(f"op={op!r} is not one of {', '.join(OPS)}")
    if algorithm not in ("one_shot", "two_shot"):
        raise DistributedError(f"algorithm={algorithm!r} is not one_shot or two_shot")
    if buf.numel() == 0:
        return
    tuning = TUNING[algorithm]
    programs, block = _grid(buf.numel(), tuning, buf.element_size())
    kernel = K.all_reduce_one_shot if algorithm == "one_shot" else K.all_reduce_two_shot
    if algorithm == "two_shot":
        programs = min(programs, max(1, -(-buf.numel() // (world.size * block))))
    kernel[(programs,)](buf, buf.numel(), OP=OPS.index(op), WIDEN=_widen(buf), ELEM=buf.element_size(),
                        BLOCK=block, num_warps=tuning.warps, **_common(world, heap))


def all_gather(src: Any, dst: Any) -> None:
    """dst = src(rank 0) ‖ src(rank 1) ‖ ... (dst holds world_size x src)."""
    _run(("all_gather", TUNING["direct"]) + _key(src, dst), lambda: _all_gather(src, dst))


def _all_gather(src: Any, dst: Any) -> None:
    K = _kernels()
    world, heap = _heap()
    s, d = _flat(heap, src, "src"), _flat(heap, dst, "dst")
    if d.numel() != world.size * s.numel() or s.dtype != d.dtype:
        raise DistributedError(f"all_gather: dst must hold world_size ({world.size}) x src elements "
                               f"of src's type; src {s.numel()} {s.dtype}, dst {d.numel()} {d.dtype}")
    if s.numel() == 0:
        return
    programs, block = _grid(s.numel(), TUNING["direct"], s.element_size())
    K.all_gather[(programs,)](s, d, s.numel(), ELEM=s.element_size(), BLOCK=block,
                              num_warps=TUNING["direct"].warps, **_common(world, heap))


def reduce_scatter(src: Any, dst: Any, op: str = "sum") -> None:
    """dst = block `rank` of (src(rank 0) op src(rank 1) op ...) (src holds world_size x dst)."""
    _run(("reduce_scatter", op, TUNING["direct"]) + _key(src, dst), lambda: _reduce_scatter(src, dst, op))


def _reduce_scatter(src: Any, dst: Any, op: str) -> None:
    K = _kernels()
    world, heap = _heap()
    s, d = _flat(heap, src, "src"), _flat(heap, dst, "dst")
    if s.numel() != world.size * d.numel() or s.dtype != d.dtype:
        raise DistributedError(f"reduce_scatter: src must hold world_size ({world.size}) x dst "
                               f"elements of dst's type; src {s.numel()} {s.dtype}, dst {d.numel()} {d.dtype}")
    if d.numel() == 0:
        return
    programs, block = _grid(d.numel(), TUNING["direct"], d.element_size())
    K.reduce_scatter[(programs,)](s, d, d.numel(), OP=OPS.index(op), WIDEN=_widen(d),
                                  ELEM=d.element_size(), BLOCK=block, num_warps=TUNING["direct"].warps,
                                  **_common(world, heap))


def broadcast(x: Any, root: int = 0) -> None:
    """x = x(root) on every rank."""
    _run(("broadcast", root, TUNING["direct"]) + _key(x), lambda: _broadcast(x, root))


def _broadcast(x: Any, root: int) -> None:
    K = _kernels()
    world, heap = _heap()
    buf = _flat(heap, x, "x")
    if not 0 <= root < world.size:
        raise DistributedError(f"broadcast: root {root} is not a rank of this world of {world.size}")
    if buf.numel() == 0:
        return
    programs, block = _grid(buf.numel(), TUNING["direct"], buf.element_size())
    K.broadcast[(programs,)](buf, buf.numel(), root, ELEM=buf.element_size(), BLOCK=block,
                             num_warps=TUNING["direct"].warps, **_common(world, heap))


# rows of at most this many elements are normalised by one program (registers hold a row)
RMSNORM_MAX_HIDDEN = 16384


def all_reduce_rmsnorm(x: Any, residual: Any, weight: Any, hidden: int, eps: float) -> None:
    """residual += all_reduce_sum(x); x = rmsnorm(residual) * weight, by rows of `hidden`."""
    _run(("all_reduce_rmsnorm", hidden, eps, TUNING["one_shot"]) + _key(x, residual, weight),
         lambda: _all_reduce_rmsnorm(x, residual, weight, hidden, eps))


def _all_reduce_rmsnorm(x: Any, residual: Any, weight: Any, hidden: int, eps: float) -> None:
    import triton

    K = _kernels()
    world, heap = _heap()
    xs, rs = _flat(heap, x, "x"), _flat(heap, residual, "residual")
    w = _flat(heap, weight, "weight")
    if hidden <= 0 or xs.numel() % hidden or rs.numel() != xs.numel() or w.numel() != hidden:
        raise DistributedError(f"all_reduce_rmsnorm: x and residual must hold whole rows of hidden = "
                               f"{hidden} elements and weight one row")
    if xs.numel() == 0:
        return
    if hidden > RMSNORM_MAX_HIDDEN:  # a row no longer fits one program: all-reduce, then normalise
        all_reduce(xs, "sum")
        out, r = add_rmsnorm(xs.float() if _widen(xs) else xs, rs, w, hidden, eps)
        rs.copy_(r)
        xs.copy_(out)
        return
    rows = xs.numel() // hidden
    programs = min(rows, TUNING["one_shot"].programs, MAX_BLOCKS)
    block = triton.next_power_of_2(hidden)
    K.all_reduce_rmsnorm[(programs,)](xs, rs, w, rows, hidden, float(eps), WIDEN=_widen(xs),
                                      ELEM=xs.element_size(), BLOCK=block,
                                      num_warps=min(16, max(1, block // 512)), **_common(world, heap))


def synchronize() -> None:
    """Wait for this rank's device; HPVMTimeoutError naming the rank when a kernel's wait for it
    timed out (the ranks are out of step then: finalize)."""
    import torch

    world, heap = _heap()
    torch.cuda.synchronize(heap.device)
    raise_if_failed(world, heap)


def raise_if_failed(world: Any, heap: GpuHeap, what: str = "a GPU collective", loc: Any = None) -> None:
    missing = heap.failed_rank()
    if missing is not None:
        heap.clear_failure()
        if missing + 1 in _BAD_DATA:
            raise DistributedError(f"{what}: an earlier moe kernel on this rank met {_BAD_DATA[missing + 1]}",
                                   loc, rule="moe-data")
        raise HPVMTimeoutError(f"{what}: rank {missing} did not arrive within {world.timeout:g} s (a "
                               "kernel's wait on the device gave up; a rank failed, exited, or skipped "
                               "a collective; the timeout is HPVM_COMM_TIMEOUT or hpvm.distributed.init("
                               "timeout=...)); the ranks are out of step now: finalize", loc,
                               rule="rank-arrival")
