"""Compiled-artifact cache: in memory, and on disk keyed by a content hash.

The key hashes everything the artifact depends on (the IR text, the node context, the target and
the versions of hpvm-py and the code generator), so a stale entry is never used. The directory is
$HPVM_CACHE_DIR, else the user cache directory ($XDG_CACHE_HOME/hpvm-py or ~/.cache/hpvm-py).
HPVM_NO_CACHE=1 bypasses the disk cache (reads and writes).
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from . import settings, stats


def cache_dir() -> Path:
    env = settings.CACHE_DIR.text()
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "hpvm-py"


def disabled() -> bool:
    return settings.NO_CACHE.on()


def content_key(*parts: str) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def load(key: str, suffix: str) -> bytes | None:
    """The cached artifact, or None (counted as a disk hit or miss)."""
    if disabled():
        return None
    path = cache_dir() / key[:2] / f"{key}{suffix}"
    try:
        data = path.read_bytes()
    except OSError:
        stats.bump("cache_disk_misses")
        return None
    stats.bump("cache_disk_hits")
    return data


def store(key: str, suffix: str, data: bytes) -> Path | None:
    """Write atomically (a temporary file renamed into place), so concurrent writers are safe."""
    if disabled():
        return None
    folder = cache_dir() / key[:2]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        final = folder / f"{key}{suffix}"
        os.replace(tmp, final)
        return final
    except OSError:
        return None  # a read-only or full cache directory only costs recompilation
