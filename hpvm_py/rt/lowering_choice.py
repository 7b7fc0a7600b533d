"""Which lowering runs a GPU leaf's launches: the Triton block program of target `gpu` or the
one-thread-per-instance LLVM NVPTX kernel of target `nvptx`, for leaves that the runtime's target
placed (nothing pinned them) and that both could run, chosen by timing both.
(docs/architecture.md, "Module notes": rt/lowering_choice.py)"""
from __future__ import annotations

import functools
import threading
import warnings
from typing import Any, Callable

import numpy as np

from ..backends import registry
from ..backends.base import BufferArg, LeafKernel, code_version
from ..errors import CompileError, HPVMError, HPVMWarning, LaunchError
from ..ir import kernel as K
from ..ir.context import NodeContext, instance_counts
from ..support import cache, log, settings, stats
from ..support.version import VERSION
from . import lowering_trial as trial
from .placement import RUNTIME, Placement

LOWERINGS = {"gpu": "triton", "nvptx": "nvptx"}  # a GPU target -> its lowering in HPVM_GPU_LOWERING
MODES = ("auto", "off", *LOWERINGS.values())
MIN_INSTANCES = 1 << 20  # a launch is timed from this many instances,
MIN_BYTES = 1 << 26  # or from this many bytes of buffer arguments (64 MiB)
MARGIN = 0.95  # the other target's lowering is kept when it takes at most this share of the time
SUFFIX = ".lowering.json"  # the disk cache's entries

# (leaf, context, target, checked) -> kernel: the compile path's (rt/compiler.py)
CompileLeaf = Callable[[K.LeafFunc, NodeContext, str, bool], LeafKernel]

_log = log.logger("lowering")
_kept: dict[str, str] = {}  # decision key -> the target whose lowering it keeps (timed or read)
_warned: set[tuple[str, str]] = set()  # (leaf or setting, target) already warned about
_lock = threading.RLock()  # held while a size class is decided (one thread times it) or a warning noted


def mode() -> str:
    """HPVM_GPU_LOWERING: auto, off, triton or nvptx."""
    value = settings.GPU_LOWERING.get()
    if value not in MODES:
        raise LaunchError(f"HPVM_GPU_LOWERING={value!r}: expected {', '.join(MODES)}")
    return value


def choice_for(placement: Placement, func: Any, ctx: NodeContext,
               compile_leaf: CompileLeaf) -> "LoweringChoice | None":
    """The lowering choice of a leaf node, or None where there is none to make: only a leaf that
    the runtime's GPU target placed has one (a hint, its leaf's target= or a fallback pins the
    lowering), and not one with remote accesses (its copies would be other ranks' memory)."""
    if placement.origin != RUNTIME or placement.target not in LOWERINGS or \
            not isinstance(func, K.LeafFunc) or next(K.remote_accesses(func.body), None) is not None:
        return None
    return LoweringChoice(func, ctx, placement.target, compile_leaf)


def measurable(device: str) -> bool:
    """Whether timings on `device` mean something: a CUDA GPU, not the fake device that Triton's
    interpreter runs on."""
    return device.startswith("cuda")


def size_class(parents: int, leaves: int, call: list[Any]) -> str:
    """Powers of two (rounded up) of the instances per parent, of the instances in all and of
    each buffer argument's bytes."""
    def log2(n: int) -> int:
        return max(0, n - 1).bit_length()
    sizes = ".".join(str(log2(a.nbytes)) for a in call if isinstance(a, BufferArg))
    return f"{log2(leaves)}/{log2(parents * leaves)}/{sizes}"


class LoweringChoice:
    """One leaf node's lowerings: its target's kernels (compiled with the plan, handed in) and the
    other GPU target's (compiled on first need), and the target each size class keeps."""

    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext, target: str, compile_leaf: CompileLeaf):
        self.leaf = leaf
        self.ctx = ctx
        self.target = target
        self.other = next(t for t in LOWERINGS if t != target)
        self._compile = compile_leaf
        self._others: dict[bool, LeafKernel | CompileError] = {}  # checked -> kernel, or why not
        self._classes: dict[tuple[bool, str], str] = {}  # (checked, size class) -> target kept
        # a leaf with a loop: on few instances the lowerings may differ 200x (the HPVM suite's
        # CAVA, whose loops nvptx shares between the threads of each instance: passes/lanes.py)
        # or 12x (its pipeline's one block reducing a whole image), so any size is timed
        self.loops = any(isinstance(s, K.For) for s in K.walk_stmts(leaf.body))

    def kernel_for(self, own: LeafKernel, checked: bool, call: list[Any],
                   outputs: list[np.ndarray | None], extents: list[tuple[int, ...]],
                   device: str) -> LeafKernel:
        """The kernel a launch runs: `own` (its target's, checked or not, as the bounds proof
        chose) or the other target's of the same variant, as HPVM_GPU_LOWERING says; `auto`
        times both on the first launch of a size class worth it (on a CUDA GPU: MIN_INSTANCES
        or MIN_BYTES, or any size for a leaf with a loop), on copies of what it writes, and
        keeps the faster."""
        how = mode()
        if how == "off" or how == LOWERINGS[self.target]:
            return own
        if how != "auto":
            return self._forced(own, checked)
        parents, leaves = instance_counts(extents)
        instances = parents * leaves
        if not instances or not measurable(device) or (
                instances < MIN_INSTANCES and not self.loops and
                sum(a.nbytes for a in call if isinstance(a, BufferArg)) < MIN_BYTES):
            return own
        size = size_class(parents, leaves, call)
        kept = self._classes.get((checked, size))
        if kept is None:
            kept = self._decide(own, checked, size, call, outputs, extents, device)
        if kept == self.target:
            return own
        other = self._others[checked]
        assert isinstance(other, LeafKernel)  # kept only once compiled
        return other

    def _forced(self, own: LeafKernel, checked: bool) -> LeafKernel:
        """HPVM_GPU_LOWERING names the other target's lowering: its kernel, where it can run."""
        if not registry.available(self.other):
            self._warn(("HPVM_GPU_LOWERING", self.other),
                       f"HPVM_GPU_LOWERING={LOWERINGS[self.other]}: target {self.other!r} cannot run "
                       f"here ({registry.why_unavailable(self.other)}); leaves run their target's "
                       "lowering")
            return own
        other = self._other(checked)
        return own if other is None else other

    def _other(self, checked: bool) -> LeafKernel | None:
        """The other target's kernel (compiled once), or None when it cannot be compiled (a
        warning says so, once)."""
        found = self._others.get(checked)
        if found is None:
            try:
                found = self._compile(self.leaf, self.ctx, self.other, checked)
            except CompileError as exc:
                found = exc
            self._others[checked] = found
        if isinstance(found, CompileError):
            self._fell_back(self.other, found)
            return None
        return found

    def _decide(self, own: LeafKernel, checked: bool, size: str, call: list[Any],
                outputs: list[np.ndarray | None], extents: list[tuple[int, ...]], device: str) -> str:
        """The target whose lowering a size class keeps: remembered in this process, read from the
        disk cache, else timed now."""
        with _lock:
            kept = self._classes.get((checked, size))
            if kept is not None:
                return kept
            kept = self.target
            if registry.available(self.other):
                key = decision_key(self.leaf, self.ctx, checked, size, device)
                found = _kept.get(key) or _stored(key)
                if found is None:
                    kept = self._timed(key, size, own, checked, call, outputs, extents)
                elif found == self.target or self._other(checked) is not None:
                    kept = found
            self._classes[(checked, size)] = kept
            return kept

    def _timed(self, key: str, size: str, own: LeafKernel, checked: bool, call: list[Any],
               outputs: list[np.ndarray | None], extents: list[tuple[int, ...]]) -> str:
        """Time both lowerings on copies of the written buffers; the faster one is remembered
        (in memory and on disk). A lowering that cannot run the launch loses (a warning says
        so); when neither can, the target's own error is raised."""
        other = self._other(checked)
        if other is None:
            return self.target
        if trial.overlapping(self.leaf, call):
            _log.info("leaf %s: a written buffer overlaps another one, so the lowerings are not "
                      "timed: it keeps target %s's", self.leaf.name, self.target)
            return self.target
        try:
            scratch = trial.scratch_for(self.leaf, call)
        except (MemoryError, RuntimeError) as exc:  # torch's out-of-memory error is a RuntimeError
            _log.info("leaf %s: no room to copy its written buffers (%s), so the lowerings are "
                      "not timed: it keeps target %s's", self.leaf.name, exc, self.target)
            return self.target
        _log.info("hpvm: timing the gpu (Triton) and nvptx lowerings of leaf %s (once per size "
                  "class; HPVM_GPU_LOWERING=off turns this off)", self.leaf.name)
        seconds: dict[str, float] = {}
        failed: dict[str, HPVMError] = {}
        for target, kernel in ((self.target, own), (self.other, other)):
            try:
                seconds[target] = trial.time_lowering(kernel, self.leaf, scratch, outputs, extents)
            except (CompileError, LaunchError) as exc:
                failed[target] = exc
        if self.target in failed and self.other in failed:
            raise failed[self.target]
        if failed:
            (target, error), = failed.items()
            self._fell_back(target, error)
            return self.other if target == self.target else self.target
        kept = self.other if seconds[self.other] <= MARGIN * seconds[self.target] else self.target
        _log.info("leaf %s, launches of size class %s: gpu (Triton) %.4f ms, nvptx %.4f ms: keeps "
                  "%s", self.leaf.name, size, seconds["gpu"] * 1e3, seconds["nvptx"] * 1e3,
                  kept)
        stats.bump("lowering_timed")
        _remember(key, kept)
        cache.store_json(key, SUFFIX, {"kept": kept, "seconds": seconds})
        return kept

    def _fell_back(self, target: str, error: HPVMError) -> None:
        """A lowering failed: the leaf's launches run the other one (a warning, once per leaf)."""
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if self._warn((self.leaf.name, target),
                      f"leaf {K.shown_name(self.leaf)}: its {target} lowering failed ({first}); its launches "
                      f"run the {next(t for t in LOWERINGS if t != target)} lowering instead "
                      "(HPVM_GPU_LOWERING=off keeps each leaf on its target's)"):
            stats.bump("lowering_fallbacks")

    def _warn(self, what: tuple[str, str], text: str) -> bool:
        """Warn once per process about `what` (at the leaf's line); False when already warned."""
        with _lock:
            if what in _warned:
                return False
            _warned.add(what)
        loc = self.leaf.loc
        if loc is not None:
            warnings.warn_explicit(text, HPVMWarning, loc.file, loc.line)
        else:
            warnings.warn(text, HPVMWarning, stacklevel=2)
        return True


def _remember(key: str, kept: str) -> None:
    """A decision timed or read from disk: kept for this process, counted in stats()."""
    _kept[key] = kept
    stats.bump(f"lowering_kept_{LOWERINGS[kept]}")


def _stored(key: str) -> str | None:
    """A decision an earlier process stored, or None."""
    found = cache.load_json(key, SUFFIX)
    kept = None if found is None else found.get("kept")
    if not isinstance(kept, str) or kept not in LOWERINGS:
        return None
    stats.bump("lowering_disk_hits")
    _remember(key, kept)
    return kept


def decision_key(leaf: K.LeafFunc, ctx: NodeContext, checked: bool, size: str, device: str) -> str:
    """The disk cache's key of a decision: the leaf's IR, its context, the kernels' variant (and
    the settings that change either lowering's code: the gpu target's dot precision, the nvptx
    architecture), the GPU's model, the code that made both lowerings, and the size class."""
    return cache.content_key("lowering", repr(leaf), ctx.key(), str(checked),
                             settings.GPU_CHECK.get(), settings.DOT_PRECISION.get(),
                             settings.NVPTX_ARCH.get(), device_name(device), *_versions(), size)


@functools.cache
def _versions() -> tuple[str, ...]:
    import triton

    return VERSION, code_version(("triton", "nvptx", "cpu")), triton.__version__


@functools.cache
def device_name(device: str) -> str:
    """The GPU's model (the faster lowering may differ between models)."""
    if not measurable(device):
        return device
    import torch

    return torch.cuda.get_device_name(torch.device(device))
