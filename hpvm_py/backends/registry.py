"""The backends of the targets table (ir/targets.py's TARGETS, docs/backends.md "Adding a target").

A row names the Backend subclass itself, or (module, class name) for a backend imported on first
use: its packages (llvmlite, triton, cuda-bindings) stay out of `import hpvm_py`, and a backend
whose import fails is listed but unavailable, with the reason kept. Each backend is created once.
"""
from __future__ import annotations

import importlib
import threading

from ..ir.targets import TARGETS, Target  # noqa: F401 - the one table, and its row
from .base import Backend
# a missing top-level package -> how to get it
_INSTALL = {
    "triton": "pip install 'hpvm-py[gpu]' (Triton, with torch)",
    "torch": "pip install torch",
    "cuda": "pip install cuda-bindings (NVIDIA's CUDA Python bindings)",
    "llvmlite": "pip install llvmlite",
}
_instances: dict[str, Backend] = {}
_errors: dict[str, str] = {}
_lock = threading.Lock()


def get(target: str) -> Backend | None:
    """The backend of `target`, or None where there is no such target or it failed to import."""
    with _lock:
        if target in _instances:
            return _instances[target]
        if target in _errors or target not in TARGETS:
            return None
        row = TARGETS[target].backend
        if not isinstance(row, tuple):
            backend = _instances[target] = row()
            return backend
        module_name, class_name = row
        try:
            backend = getattr(importlib.import_module(module_name), class_name)()
        except ImportError as exc:
            _errors[target] = _import_failure(target, module_name, exc)
            return None
        _instances[target] = backend
        return backend


def _import_failure(target: str, module_name: str, exc: ImportError) -> str:
    """Why a backend's import failed, in terms of what to install."""
    missing = exc.name or ""
    if missing and (missing == module_name or module_name.startswith(missing + ".")
                    or missing.startswith(module_name + ".")):
        return f"this installation of hpvm-py has no {target} backend (module {module_name} is missing)"
    package = missing.split(".")[0]
    if package:
        how = _INSTALL.get(package, f"pip install {package}")
        return (f"the {target} backend needs the Python package '{package}', which is not installed "
                f"here ({how})")
    return f"the {target} backend failed to import: {exc}"


def available(target: str) -> bool:
    """Whether `target`'s kernels can run here."""
    backend = get(target)
    return backend is not None and backend.available()


def compilable(target: str) -> bool:
    """Whether leaves can be compiled for `target` here; a backend whose toolchain works without
    its device (nvptx: llvmlite and ptxas) says so with compilable(), others need to run here."""
    backend = get(target)
    return backend is not None and backend.compilable()


def compiles_at_launch(target: str) -> bool:
    """Whether `target`'s kernels are built when they launch, for the device they run on (the gpu
    target: Triton's JIT): where such a target cannot run, a launch cannot compile its leaves
    either, which is a CompileError rather than a LaunchError (docs/placement.md)."""
    backend = get(target)
    return backend is not None and backend.compiles_at_launch


def why_unavailable(target: str) -> str:
    """The reason `available(target)` is false: from the backend's own import error or its
    why_unavailable() (a missing driver or device)."""
    if target not in TARGETS:
        return f"there is no target {target!r} (targets: {', '.join(sorted(TARGETS))})"
    backend = get(target)
    if backend is None:
        return _errors[target]
    return backend.why_unavailable()


def emitter(kind: str) -> str | None:
    """The first target (in table order) whose backend emits `kind` (`hpvmc compile --emit`)."""
    for target in TARGETS:
        backend = get(target)
        if backend is not None and kind in backend.emits:
            return target
    return None
