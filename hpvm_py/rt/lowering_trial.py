"""Timing one lowering of a leaf launch without touching what the launch writes: every buffer the
leaf may write is copied once (its scratch copy), put back from the original before each run, and
the kernel runs on the copies (rt/lowering_choice.py decides with the times). So timing a leaf
with atomics or InOut buffers several times leaves the user's buffers as they were; the launch
itself then runs once, on them, with the lowering kept."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any, Callable

import numpy as np

from ..backends.base import BufferArg, LeafKernel, PreparedLaunch
from ..device import faults
from ..errors import HPVMError
from ..ir import kernel as K
from ..types import PtrType
from .buffers import span

REPEATS = 3  # timed runs per lowering (the fastest counts), after one run that compiles it

@dataclass
class Scratch:
    """A launch's arguments with every written buffer replaced by a copy of it."""

    args: list[Any]
    copies: list[tuple[Any, Any]]  # (the copy, the launch's own buffer)

    def restore(self) -> None:
        """Put the copies back to the launch's buffers' contents (a run changed them)."""
        for copy, original in self.copies:
            if isinstance(copy, np.ndarray):
                np.copyto(copy, original)
            else:
                copy.copy_(original)


def written(leaf: K.LeafFunc) -> list[int]:
    """The pointer parameters a launch may write (Out and InOut)."""
    return [i for i, p in enumerate(leaf.params)
            if isinstance(p.type, PtrType) and p.direction in ("out", "inout")]


def overlapping(leaf: K.LeafFunc, args: list[Any]) -> bool:
    """Whether a written buffer shares memory with another buffer argument: the copies would
    not behave as the launch does (it would read what it writes)."""
    spans = {i: (arg.address, arg.address + arg.nbytes) for i, arg in enumerate(args)
             if isinstance(arg, BufferArg) and arg.nbytes}
    for i in written(leaf):
        if i in spans:
            a, b = spans[i]
            if any(a < d and c < b for j, (c, d) in spans.items() if j != i):
                return True
    return False


def scratch_for(leaf: K.LeafFunc, args: list[Any]) -> Scratch:
    """Copies of the written buffers (device memory: MemoryError or torch's out-of-memory
    RuntimeError where there is no room)."""
    trial = list(args)
    copies = []
    for i in written(leaf):
        arg = args[i]
        if not isinstance(arg, BufferArg):
            continue
        original = arg.obj
        copy = original.copy() if isinstance(original, np.ndarray) else original.clone()
        address, _ = span(copy)
        trial[i] = replace(arg, obj=copy, address=address, array=None, view=None)
        copies.append((copy, original))
    return Scratch(trial, copies)


def time_lowering(kernel: LeafKernel, leaf: K.LeafFunc, scratch: Scratch,
                  outputs: list[np.ndarray | None], extents: list[tuple[int, ...]]) -> float:
    """Seconds one launch of `kernel` takes on the scratch copies (outputs go to fresh arrays).
    A lowering that cannot run this launch raises its CompileError or LaunchError; a fault of the
    kernel is reported as at any launch (device/faults.py)."""
    fresh = [None if out is None else np.zeros_like(out) for out in outputs]
    prepared = kernel.prepare(scratch.args, fresh, extents)
    try:
        return cuda_timer(prepared, scratch.restore)
    except HPVMError:
        raise
    except Exception as exc:  # noqa: BLE001 - CUDA reports a kernel's fault at the next wait
        raise faults.reported(exc, leaf.name, leaf.loc) from None


def cuda_timer(prepared: PreparedLaunch, restore: Callable[[], None]) -> float:
    """Seconds of the fastest of REPEATS runs of a prepared launch, timed by CUDA events on the
    current stream (the copies are put back outside the events), after one run that compiles or
    loads its kernel."""
    import torch

    restore()
    prepared.run()
    torch.cuda.synchronize()
    best = math.inf
    for _ in range(REPEATS):
        restore()
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        prepared.run()
        end.record()
        end.synchronize()
        best = min(best, begin.elapsed_time(end) / 1e3)
    return best
