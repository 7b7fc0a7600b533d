"""Generated Triton source -> a `triton.jit` function.

triton.jit reads its function's source through `inspect`, so the code must live in a real file: it
is written to the artifact cache under its content hash (a second process reuses the file, and
Triton's own cache then holds the compiled binary), and the module is made from the checked text
under that file's name (_exec).
"""
from __future__ import annotations

import atexit
import importlib.util
import linecache
import shutil
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
    return _exec(path if path is not None else _private_file(data, digest), text, digest)


def _exec(path: Path, text: str, digest: str) -> Any:
    """The module of `text`, named after the file `path` that holds it. The text is compiled
    here rather than imported from the file: an import writes the bytecode to a __pycache__ folder
    beside it, into the cache, where neither its bound nor `hpvmc cache --clear` sees it, and
    would read a file that a trim or a clear may remove meanwhile. Triton reads a kernel's source
    through linecache (the interpreter at the kernel's first run): the text is kept there, never
    checked against the file, so a kernel whose entry is removed before its first run is still
    the one imported."""
    name = f"hpvm_triton_{digest[:24]}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    linecache.cache[str(path)] = (len(text), None, text.splitlines(True), str(path))
    sys.modules[name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)
    except BaseException:
        del sys.modules[name]  # a failed import leaves no half-made module to be found later
        raise
    return module


_private: list[Path] = []  # this process's folder for kernel files, made on first need


def _private_file(data: bytes, digest: str) -> Path:
    """A file of this process holding `data` (no usable cache directory: HPVM_NO_CACHE=1, or one
    that cannot be written). One temporary folder per process holds them all and is removed at
    exit: a folder per kernel, never removed, piled up in /tmp run after run."""
    if not _private:
        folder = Path(tempfile.mkdtemp(prefix="hpvm-triton-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _private.append(folder)
    path = _private[0] / f"{digest}{_SUFFIX}"
    path.write_bytes(data)
    return path
