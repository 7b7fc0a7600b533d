"""Analysis `bounds`: prove at launch that every memory access of a leaf stays in bounds.
(docs/architecture.md, "Module notes": passes/bounds.py)"""
from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ..ir import kernel as K
from ..ir.context import NodeContext
from ..support import log
from ..types import PtrType, ScalarType
from .bounds_analysis import BoundsAnalysis
from .intervals import Interval, is_int, wrap

_KEPT = 256  # proofs cached per leaf and node context
_log = log.logger("bounds")


class BoundsProof:
    """Per leaf and node context: decides, per launch, whether unchecked code is safe."""

    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext):
        self.leaf = leaf
        self.ctx = ctx
        self.has_accesses = any(isinstance(e, (K.Load, K.Atomic)) for e in K.walk_all_exprs(leaf.body)) \
            or any(isinstance(s, K.Store) for s in K.walk_stmts(leaf.body))
        self.remote = any(K.remote_accesses(leaf.body))  # ranks are checked against the world
        self._cache: dict[tuple, bool] = {}
        self._lock = threading.Lock()
        # the parameters whose values can change a proof: buffers, their size arguments (the
        # integer after each) and the integer scalars the body reads (an unread one, such as an
        # input that only orders the node after another, changes nothing)
        read = K.names_read(leaf.body)
        params = leaf.params
        self.relevant = [i for i, p in enumerate(params)
                         if isinstance(p.type, PtrType) or is_int(p.type) and (
                             p.name in read or i and isinstance(params[i - 1].type, PtrType))]

    def holds(self, args: list[Any], extents: list[tuple[int, ...]], world_size: int = 1) -> bool:
        """True when every access of this launch is provably in bounds (and every remote access
        names a rank in [0, world_size))."""
        if not self.has_accesses:
            return True
        try:
            key = (world_size, self._key(args, extents))
            cached = self._cache.get(key)
            if cached is not None:
                return cached
            values, limits = self._environment(args)
        except (TypeError, ValueError, OverflowError, IndexError, AttributeError):
            return False  # malformed arguments: the checked kernel reports them while packing
        analysis = BoundsAnalysis(self.leaf, values, limits, extents, self.ctx.level_dims, world_size)
        result = analysis.run()
        if not result:  # (HPVM_LOG=info: why a launch runs the slower checked code)
            _log.info("%s runs its bounds-checked code for these sizes: %s", self.leaf.name,
                      analysis.failure)
        with self._lock:
            if len(self._cache) >= _KEPT:
                self._cache.clear()
            self._cache[key] = result
        return result

    def _key(self, args: list[Any], extents: list[tuple[int, ...]]) -> tuple:
        """What the proof depends on, cheaply: extents, buffer sizes, integer scalars (arrays by
        their minimum and maximum)."""
        parts: list[Any] = [tuple(extents)]
        modes, params = self.ctx.input_modes, self.leaf.params
        for i in self.relevant:
            arg, mode = args[i], modes[i]
            if mode == "buffer":
                parts.append(arg.nbytes)
            elif mode == "uniform":
                parts.append(int(arg))
            else:
                parts.append(_array_range(arg, params[i].type))
        return tuple(parts)

    def _environment(self, args: list[Any]) -> tuple[dict[str, Interval], dict[str, int]]:
        """Integer scalars as the kernel receives them (wrapped to their type), and the number of
        elements of every pointer parameter (its size argument, never more than the buffer)."""
        values: dict[str, Interval] = {}
        limits: dict[str, int] = {}
        params = self.leaf.params
        for i in self.relevant:
            p, arg, mode = params[i], args[i], self.ctx.input_modes[i]
            t = p.type
            if isinstance(t, PtrType):
                real = arg.nbytes
                size = args[i + 1] if i + 1 < len(args) else real
                size = int(size) if np.ndim(size) == 0 else int(np.min(size)) if np.size(size) else 0
                limits[p.name] = max(0, min(size, real)) // t.elem.nbytes
            elif mode == "uniform":
                v = wrap(int(arg), t)
                values[p.name] = Interval(v, v)
            else:
                extremes = _array_range(arg, t)
                if extremes is not None:
                    values[p.name] = Interval(*extremes)
        return values, limits


def _array_range(arg: Any, t: ScalarType) -> tuple[int, int] | None:
    """Minimum and maximum of one value per instance (or per parent), converted to t as the
    kernel converts them (NumPy casts wrap); None when there are none."""
    arr = np.asarray(arg).reshape(-1)
    if arr.dtype != t.numpy_dtype:
        arr = arr.astype(t.numpy_dtype)
    return (int(arr.min()), int(arr.max())) if arr.size else None

