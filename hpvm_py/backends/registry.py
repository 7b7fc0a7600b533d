"""Which backends exist on this machine; each is created once, on first use."""
from __future__ import annotations

import importlib
import threading
from typing import Any

# target -> (module, class); a backend whose import fails is unavailable, with the reason kept
_BACKENDS = {
    "cpu": ("hpvm_py.backends.cpu", "CpuBackend"),
    "python": ("hpvm_py.backends.python", "PythonBackend"),
    "gpu": ("hpvm_py.backends.triton", "TritonBackend"),
    "nvptx": ("hpvm_py.backends.nvptx", "NvptxBackend"),
}
# a missing top-level package -> how to get it
_INSTALL = {
    "triton": "pip install 'hpvm-py[gpu]' (Triton, with torch)",
    "torch": "pip install torch",
    "cuda": "pip install cuda-bindings (NVIDIA's CUDA Python bindings)",
    "llvmlite": "pip install llvmlite",
}
_instances: dict[str, Any] = {}
_errors: dict[str, str] = {}
_lock = threading.Lock()


def get(target: str) -> Any | None:
    with _lock:
        if target in _instances:
            return _instances[target]
        if target in _errors or target not in _BACKENDS:
            return None
        module_name, class_name = _BACKENDS[target]
        try:
            module = importlib.import_module(module_name)
            backend = getattr(module, class_name)()
        except ImportError as exc:
            _errors[target] = _import_failure(target, module_name, exc)
            return None
        _instances[target] = backend
        return backend


def _import_failure(target: str, module_name: str, exc: ImportError) -> str:
    """Why a backend's import failed, in terms of what to install."""
    missing = getattr(exc, "name", None) or ""
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
    backend = get(target)
    if backend is None:
        return False
    usable = getattr(backend, "usable", None)
    return usable() if callable(usable) else True


def compilable(target: str) -> bool:
    """Whether leaves can be compiled for `target` here; a backend whose toolchain works without
    its device (nvptx: llvmlite and ptxas) says so with can_compile(), others need to be usable."""
    backend = get(target)
    if backend is None:
        return False
    can_compile = getattr(backend, "can_compile", None)
    return can_compile() if callable(can_compile) else available(target)


def compiles_at_launch(target: str) -> bool:
    """Whether `target`'s kernels are built when they launch, for the device they run on (the gpu
    target: Triton's JIT): where such a target cannot run, a launch cannot compile its leaves
    either, which is a CompileError rather than a LaunchError (docs/placement.md)."""
    return bool(getattr(get(target), "compiles_at_launch", False))


def why_unavailable(target: str) -> str:
    """The reason `available(target)` is false: from the backend's own import error or its
    `why_unusable()` (a missing driver or device)."""
    if target not in _BACKENDS:
        return f"there is no target {target!r} (targets: {', '.join(sorted(_BACKENDS))})"
    backend = get(target)
    if backend is None:
        return _errors[target]
    why = getattr(backend, "why_unusable", None)
    return why() if callable(why) else f"the {target} backend reports that it cannot run here"
