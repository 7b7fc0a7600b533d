"""The targets table (backends/registry.py serves its backends), and how a placement is spelled in
`@hpvm.leaf(target=...)`, `hpvm.hint(node, ...)` and the textual IR: a target name, for a GPU
target optionally with a device index ("gpu:1": rt/placement.py resolves it), or "any" (no
preference). Adding a target is one Backend subclass and one row here (docs/backends.md)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Target:
    """A row of the table: the target's Backend subclass, and what must be known of the target
    without importing it (its packages may be missing here)."""

    backend: Any  # the Backend subclass, or (module, class name): imported on first use
    gpu: bool = False  # runs on a GPU: a placement may name one ("gpu:1"), its buffers go there
    leaf: bool = True  # @hpvm.leaf(target=...) may name it
    reference: bool = False  # a graph compiled for it runs every node on it, placements ignored
    fallback: tuple[str, str] | None = None  # (target, rule): a leaf whose compile fails by that
    # rule, placed here by the runtime's target only, moves to that target where it runs
    passes: tuple[str, ...] = ()  # its backend passes' names, in order (HPVM_DUMP_IR checks names
    # against them without importing the target; tests/test_backend_passes.py holds them to its
    # Pipeline)


# the order is the one error messages list the targets in
TARGETS: dict[str, Target] = {
    "cpu": Target(("hpvm_py.backends.cpu", "CpuBackend"), passes=("localize", "privatise", "clip")),
    "gpu": Target(("hpvm_py.backends.triton", "TritonBackend"), gpu=True,
                  fallback=("nvptx", "gpu-supported"),
                  passes=("localize", "dotmatch", "privatise", "gridtiles", "rowguard", "spread")),
    "nvptx": Target(("hpvm_py.backends.nvptx", "NvptxBackend"), gpu=True, passes=("localize",)),
    "python": Target(("hpvm_py.backends.python", "PythonBackend"), leaf=False, reference=True),
}


def leaf_targets() -> tuple[str, ...]:
    """What `@hpvm.leaf(target=...)` may name."""
    return ("any",) + tuple(name for name, row in TARGETS.items() if row.leaf)


def hint_targets() -> tuple[str, ...]:
    """What a node hint may name."""
    return ("any",) + tuple(TARGETS)


def is_gpu(target: str) -> bool:
    """Whether `target` runs on a GPU (its kernels, and the buffers they use, are there)."""
    row = TARGETS.get(target)
    return row is not None and row.gpu


def split_target(spec: str) -> tuple[str, int | None]:
    """("gpu", 1) for "gpu:1", ("cpu", None) for "cpu"; the spelling is assumed valid."""
    name, _, index = spec.partition(":")
    return name, (int(index) if index else None)


def canonical_target(spec: str) -> str:
    """The one spelling kept in the IR for a valid spec ("gpu:01" -> "gpu:1")."""
    name, index = split_target(spec)
    return name if index is None else f"{name}:{index}"


def target_problem(spec: object, leaf: bool) -> str | None:
    """Why `spec` is not a placement that a leaf's target (leaf) or a hint may name (None when it
    is one)."""
    allowed = leaf_targets() if leaf else hint_targets()
    gpus = [name for name, row in TARGETS.items() if row.gpu]
    forms = f"one of {', '.join(allowed)}, or {' / '.join(f'{g}:N' for g in gpus)} for GPU number N"
    if not isinstance(spec, str):
        return f"a target is a string ({forms}), not {type(spec).__name__}"
    name, colon, index = spec.partition(":")
    if name not in allowed:
        return f"{spec!r} is not a target: {forms}"
    if colon and (name not in gpus or not index.isdigit() or not index.isascii()):
        return (f"{spec!r}: only the GPU targets ({', '.join(gpus)}) take a device index, written "
                f"as a number after a colon (gpu:1)")
    return None
