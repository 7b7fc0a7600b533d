"""Block shapes of large gpu launches, chosen by timing them (autotuning).
(docs/architecture.md, "Module notes": backends/triton/autotune.py)"""
from __future__ import annotations

import functools

import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

from ...errors import CompileError, HPVMError
from ...ir import kernel as K
from ...support import cache, log, settings
from ..base import BufferArg
from ...device import faults

MIN_INSTANCES = 1 << 20  # smaller launches take microseconds: not worth a tuning pass
# a tl.dot launch's outputs each take a whole loop over k: from this many, its time is worth it (the
# tensor-parallel MLP's 256 x 1024 output with k = 2048 took 60 µs in dot_config's blocks)
MIN_DOT_OUTPUTS = 1 << 16
LANES = (256, 512, 1024)
WARPS = (2, 4, 8)
TILE_WIDTH = 128  # the narrower tiles candidates() adds for grid tiles
_REPEATS = 3  # timed runs per shape (the fastest counts), after one warm-up run


@dataclass(frozen=True)
class Shape:
    """Lanes per program and warps per program; for tiles of the combined grid (gridtiles.py),
    `width`: lanes along x at most (0: as many as the grid has, up to `lanes`)."""

    lanes: int
    warps: int
    width: int = 0


_log = log.logger("autotune")
_chosen: dict[str, Any] = {}
_lock = threading.Lock()


def enabled() -> bool:
    return settings.AUTOTUNE.on()


def repeatable_leaf(leaf: K.LeafFunc) -> bool:
    """Whether the leaf's code lets a launch run again with the same result, its InOut buffers
    put back between runs (the tuner runs those on copies); asked once per kernel."""
    body = leaf.body
    return not (any(isinstance(e, K.Atomic) for e in K.walk_all_exprs(body))
                or next(K.remote_accesses(body), None))


def repeatable(leaf: K.LeafFunc, args: list[Any]) -> bool:
    """Whether running this launch of a repeatable leaf again computes the same result: no input
    buffer overlaps an output buffer."""
    spans: dict[str, list[tuple[int, int]]] = {"in": [], "out": []}
    for p, arg in zip(leaf.params, args):
        if p.direction in spans and isinstance(arg, BufferArg) and arg.nbytes:
            start = arg.obj.data_ptr() if hasattr(arg.obj, "data_ptr") else arg.obj.ctypes.data
            spans[p.direction].append((start, start + arg.nbytes))
    return not any(a < d and c < b for a, b in spans["in"] for c, d in spans["out"])


def candidates(lanes_wanted: int, tiles: bool = False) -> list[Shape]:
    """The shapes to time for a launch whose programs would cover up to `lanes_wanted` lanes;
    for tiles, also tiles TILE_WIDTH wide with four lanes a thread (the rows of a 3-D stencil's
    program then share their neighbours' rows)."""
    shapes = [Shape(lanes, warps) for lanes in LANES if lanes <= lanes_wanted for warps in WARPS
              if warps * 32 <= lanes]
    if tiles:
        shapes += [Shape(lanes, lanes // 128, TILE_WIDTH) for lanes in LANES
                   if TILE_WIDTH < lanes <= lanes_wanted]
    return shapes


def size_class(parents: int, leaf_instances: int) -> str:
    def log2(n: int) -> int:
        return max(0, math.ceil(math.log2(max(1, n))))
    return f"{log2(leaf_instances)}/{log2(parents * leaf_instances)}"


def choose(key: str, shapes: list[Any], time_one: Callable[[Any], float], leaf: str) -> Any:
    """The fastest of `shapes` (frozen dataclasses of one type: Shape, or a tl.dot kernel's
    DotConfig; timed by time_one, in seconds; a shape that fails to compile counts as infinitely
    slow), remembered under `key` in memory and on disk. Errors of the kernel's runs (a fault, an
    out-of-bounds access) end the tuning and reach the launch."""
    with _lock:
        if key in _chosen:
            return _chosen[key]
        stored = cache.load_json(key, ".tune.json")
        if stored is not None:
            try:
                found = type(shapes[0])(**stored)
            except (ValueError, TypeError):
                found = None
            if found in shapes:
                _chosen[key] = found
                return found
        _log.info("hpvm: tuning the block shape of leaf %s (%d shapes, once per size class; "
                  "HPVM_AUTOTUNE=0 turns this off)", leaf, len(shapes))
        times = {}
        failure: CompileError | None = None
        for shape in shapes:
            try:
                times[shape] = time_one(shape)
            except CompileError as exc:  # a shape Triton cannot compile is just not chosen (a
                times[shape] = math.inf  # kernel fault or an out-of-bounds access is reported)
                failure = exc
        best = min(shapes, key=lambda s: times[s])
        if math.isinf(times[best]):
            assert failure is not None
            raise failure
        _chosen[key] = best
        cache.store_json(key, ".tune.json", best.__dict__)
        return best


def tuning_key(digest: str, layout: str, device_name: str, parents: int, leaf_instances: int) -> str:
    import triton

    return cache.content_key("autotune", digest, layout, device_name, triton.__version__,
                             size_class(parents, leaf_instances))


def device_name(device: Any) -> str:
    """The GPU's name (the best shape differs between GPUs)."""
    import torch

    if getattr(device, "type", device) != "cuda":
        return str(device)
    return torch.cuda.get_device_name(device)


@functools.cache
def _multiprocessors(device: int) -> int:
    import torch

    return torch.cuda.get_device_properties(device).multi_processor_count


def multiprocessors() -> int:
    """The current GPU's multiprocessors (SMs)."""
    import torch

    return _multiprocessors(torch.cuda.current_device())


def time_launch(launch: Any, restore: Callable[[], Any] = lambda: None) -> float:
    """Seconds one run of a prepared launch takes on the GPU (the fastest of a few; `restore`
    runs before each, outside the timed events: it puts back what a run changed). A fault of
    the kernel is reported as at any launch (device/faults.py)."""
    import torch

    leaf = launch.kernel.leaf
    best = math.inf
    try:
        restore()
        launch.start()  # compiles this shape
        torch.cuda.synchronize()
        for _ in range(_REPEATS):
            restore()
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            launch.start()
            end.record()
            end.synchronize()
            best = min(best, begin.elapsed_time(end) / 1e3)
    except HPVMError:
        raise
    except Exception as exc:  # noqa: BLE001 - CUDA reports a kernel's fault at the next wait
        raise faults.reported(exc, leaf.name, leaf.loc) from None
    return best
