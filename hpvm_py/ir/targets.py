"""How a placement is spelled: `@hpvm.leaf(target=...)`, `hpvm.hint(node, ...)` and the textual IR.

A spelling is a target name, and for the GPU targets optionally a device index: "gpu:1" is the
`gpu` target on the second GPU of the runtime's GPU kind (rt/placement.py resolves it).
"any" means no preference: the node runs where the rest of the policy puts it.
"""
from __future__ import annotations

LEAF_TARGETS = ("any", "cpu", "gpu", "nvptx")
HINT_TARGETS = ("any", "cpu", "gpu", "nvptx", "python")
GPU_TARGETS = ("gpu", "nvptx")


def split_target(spec: str) -> tuple[str, int | None]:
    """("gpu", 1) for "gpu:1", ("cpu", None) for "cpu"; the spelling is assumed valid."""
    name, _, index = spec.partition(":")
    return name, (int(index) if index else None)


def canonical_target(spec: str) -> str:
    """The one spelling kept in the IR for a valid spec ("gpu:01" -> "gpu:1")."""
    name, index = split_target(spec)
    return name if index is None else f"{name}:{index}"


def target_problem(spec: object, allowed: tuple[str, ...]) -> str | None:
    """Why `spec` is not a placement among `allowed` (None when it is one)."""
    forms = f"one of {', '.join(allowed)}, or gpu:N / nvptx:N for GPU number N"
    if not isinstance(spec, str):
        return f"a target is a string ({forms}), not {type(spec).__name__}"
    name, colon, index = spec.partition(":")
    if name not in allowed:
        return f"{spec!r} is not a target: {forms}"
    if colon and (name not in GPU_TARGETS or not index.isdigit() or not index.isascii()):
        return (f"{spec!r}: only the GPU targets (gpu, nvptx) take a device index, written as a "
                f"number after a colon (gpu:1)")
    return None
