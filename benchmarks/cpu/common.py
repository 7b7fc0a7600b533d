"""Shared pieces of the cpu benchmarks: launching a leaf directly and timing against peers."""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from hpvm_py.backends.base import BufferArg, NodeContext  # noqa: E402
from hpvm_py.backends.cpu import CpuBackend  # noqa: E402
from hpvm_py.runtime.pool import get_pool  # noqa: E402
from hpvm_py.types import PtrType  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "11"))


def buffer(array: np.ndarray) -> BufferArg:
    return BufferArg(obj=array, address=array.ctypes.data, nbytes=array.nbytes,
                     array=array.reshape(-1))


def launcher(leaf: Any, extents: list[tuple[int, ...]], *args: Any) -> Callable[[], None]:
    """A no-argument function that launches the compiled leaf once (uniform scalars, buffers)."""
    ir = leaf.ir
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in ir.params)
    ctx = NodeContext(level_dims=tuple(len(e) for e in extents), input_modes=modes,
                      output_modes=())
    kernel = CpuBackend().compile_leaf(ir, ctx)
    values = [buffer(a) if isinstance(p.type, PtrType) else p.type(a) for p, a in zip(ir.params, args)]
    return lambda: kernel.launch(values, [], extents)


def measure(candidates: dict[str, Callable[[], None]], reps: int = REPS) -> dict[str, float]:
    """Median milliseconds of each candidate. Each runs in a block of consecutive calls after a
    warm-up call (so it finds the caches as its own previous call left them, not as another
    candidate did), and the blocks run twice, in one order and then the reverse, so that drifting
    machine load affects every candidate alike."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for sweep in (order, order[::-1]):
        for name in sweep:
            fn = candidates[name]
            fn()
            for _ in range((reps + 1) // 2):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: sorted(ts)[len(ts) // 2] * 1e3 for name, ts in times.items()}


def report(title: str, results: dict[str, float], peer: str, ours: str = "hpvm-cpu",
           reps: int = REPS) -> float:
    """Print one table row per candidate and the ratio peer/ours (> 1: hpvm-py is faster)."""
    ratio = results[peer] / results[ours]
    print(f"{title}  (threads: {get_pool().threads}, median of {reps})")
    for name, ms in results.items():
        print(f"  {name:<22} {ms:9.3f} ms")
    print(f"  ratio {peer} / {ours}: {ratio:.2f}x")
    return ratio
