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
            _errors[target] = f"{module_name}: {exc}"
            return None
        _instances[target] = backend
        return backend


def available(target: str) -> bool:
    backend = get(target)
    if backend is None:
        return False
    usable = getattr(backend, "usable", None)
    return usable() if callable(usable) else True


def why_unavailable(target: str) -> str:
    backend = get(target)
    why = getattr(backend, "why_unusable", None)
    if callable(why):
        return why()
    return _errors.get(target, "unknown target" if target not in _BACKENDS else "not usable here")
