"""Generated Triton source -> a `triton.jit` function.

triton.jit reads its function's source through `inspect`, so the code must live in a real file: it
is written to the artifact cache under its content hash (a second process reuses the file, and
Triton's own cache then holds the compiled binary) and imported from there.
"""
from __future__ import annotations

import importlib.util
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from ...support import cache, stats

_SUFFIX = ".triton.py"
_modules: dict[str, Any] = {}
_lock = threading.Lock()


def load_kernel(text: str, digest: str, kernel: str) -> Any:
    """The jit function `kernel` of the module `text` (imported once per process)."""
    with _lock:
        module = _modules.get(digest)
        if module is None:
            module = _modules[digest] = _import(text, digest)
    return getattr(module, kernel)


def _import(text: str, digest: str) -> Any:
    data = text.encode()
    path = None
    if cache.load(digest, _SUFFIX) == data:
        path = cache.cache_dir() / digest[:2] / f"{digest}{_SUFFIX}"
    else:
        stats.bump("gpu_compiles")
        path = cache.store(digest, _SUFFIX, data)
    if path is None:  # no usable cache directory: a private temporary file
        folder = Path(tempfile.mkdtemp(prefix="hpvm-triton-"))
        path = folder / f"{digest}{_SUFFIX}"
        path.write_bytes(data)
    name = f"hpvm_triton_{digest[:24]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
