"""Compiled-artifact cache: in memory, and on disk keyed by a content hash.

The key hashes everything the artifact depends on (the IR text, the node context, the target and
the versions of hpvm-py and the code generator), so a stale entry is never used. The directory is
$HPVM_CACHE_DIR, else the user cache directory ($XDG_CACHE_HOME/hpvm-py or ~/.cache/hpvm-py).
HPVM_NO_CACHE=1 bypasses the disk cache (reads and writes).

The cache holds machine code that is loaded and run, so it trusts nothing it did not write: the
directory is made private (0700), one that another user owns or may write is not used (a
warning says so, once), and each entry is checked against the SHA-256 of its contents, kept
beside it, before it is used (docs/security.md).
"""
from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

from ..errors import HPVMWarning
from . import log, profile, settings, stats

_SUM = ".sha256"  # beside each entry: the digest of its contents
_refused: set[Path] = set()  # directories already warned about
_log = log.logger("cache")


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


def load(key: str, suffix: str, check: Callable[[bytes], str | None] | None = None) -> bytes | None:
    """The cached artifact, or None (counted as a disk hit or miss). An entry whose contents do
    not match its digest is a miss, and so is one that `check` finds a problem with (a digest only
    proves the bytes are the ones written: an object file that would crash the loader is refused
    before it reaches it)."""
    folder = _usable_dir()
    if folder is None:
        return None
    path = folder / key[:2] / f"{key}{suffix}"
    try:
        data = path.read_bytes()
        expected = path.with_name(path.name + _SUM).read_text().strip()
    except OSError:
        stats.bump("cache_disk_misses")
        return None
    if hashlib.sha256(data).hexdigest() != expected:
        stats.bump("cache_disk_misses")
        return None
    problem = check(data) if check is not None else None
    if problem is not None:
        _log.info("hpvm: the disk cache's entry %s is not usable (%s): made again", path, problem)
        stats.bump("cache_disk_misses")
        return None
    stats.bump("cache_disk_hits")
    if profile.on:
        profile.complete("cache", f"disk cache hit ({suffix})", profile.now(), args={"key": key[:16]})
    return data


def load_json(key: str, suffix: str) -> dict[str, Any] | None:
    """A decision kept by store_json() (a JSON object), or None: a miss, or an entry that is not
    one (its reader then decides again)."""
    data = load(key, suffix)
    if data is None:
        return None
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def store_json(key: str, suffix: str, value: dict[str, Any]) -> Path | None:
    return store(key, suffix, json.dumps(value).encode())


def store(key: str, suffix: str, data: bytes) -> Path | None:
    """Write atomically (temporary files renamed into place, the digest first), so concurrent
    writers are safe. A write that fails (a read-only or full cache directory) only costs
    recompilation: a warning names the directory, once, and no partial file is left."""
    root = _usable_dir(create=True)
    if root is None:
        return None
    folder = root / key[:2]
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        final = folder / f"{key}{suffix}"
        _write(folder, final.with_name(final.name + _SUM), hashlib.sha256(data).hexdigest().encode())
        _write(folder, final, data)
        return final
    except OSError as exc:
        _warn_once(root, f"the compile cache {root} could not be written ({exc.strerror or exc}): "
                   "compiled code is not kept between runs; free space there, make it writable, "
                   f"or set {settings.CACHE_DIR.name} (or {settings.NO_CACHE.name}=1)")
        return None


def _write(folder: Path, final: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, final)
    except BaseException:
        # a full disk fails the write half-way: the partial temporary file would stay forever
        # (nothing reads .tmp- files, and nothing else removes them)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _warn_once(folder: Path, text: str) -> None:
    """A warning about the cache directory, once per directory and process (every compile would
    repeat it)."""
    if folder in _refused:
        return
    _refused.add(folder)
    warnings.warn(text, HPVMWarning, stacklevel=3)


def _usable_dir(create: bool = False) -> Path | None:
    """The cache directory when it may be used: enabled, a directory, and private to this user
    (made so when created here)."""
    if disabled():
        return None
    folder = cache_dir()
    try:
        if create:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = folder.stat()
    except FileNotFoundError:
        return None  # not made yet: a read before the first write
    except OSError as exc:
        # a path through a file, or a parent this user may not enter or write
        _warn_once(folder, f"the compile cache {folder} cannot be used ({exc.strerror or exc}): "
                   f"compiled code is not kept between runs; set {settings.CACHE_DIR.name} to a "
                   f"directory this user may write (or {settings.NO_CACHE.name}=1)")
        return None
    if not stat.S_ISDIR(info.st_mode):
        _warn_once(folder, f"the compile cache {folder} is not a directory: compiled code is not "
                   f"kept between runs; set {settings.CACHE_DIR.name} to a directory (or "
                   f"{settings.NO_CACHE.name}=1)")
        return None
    if info.st_uid == os.getuid() and not info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return folder
    _warn_once(folder, f"the compile cache {folder} is owned or writable by another user: it is not "
               "used (compiled code from it would run here); make it private (chmod 700) "
               f"or set {settings.CACHE_DIR.name}")
    return None
