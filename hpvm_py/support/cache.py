"""Compiled-artifact cache: in memory, and on disk keyed by a content hash.

The key hashes everything the artifact depends on (the IR text, the node context, the target and
the versions of hpvm-py and the code generator), so a stale entry is never used. The directory is
$HPVM_CACHE_DIR, else the user cache directory ($XDG_CACHE_HOME/hpvm-py or ~/.cache/hpvm-py).
HPVM_NO_CACHE=1 bypasses the disk cache (reads and writes). HPVM_CACHE_MAX_BYTES bounds its size:
a write that would take it past the bound first removes the entries used least recently (a hit
marks its entry used), down to three quarters of it.

The cache holds machine code that is loaded and run, so it trusts nothing it did not write: the
directory is made private (0700), one that another user owns or may write is not used (a
warning says so, once), and each entry is checked against the SHA-256 of its contents, kept
beside it, before it is used (docs/security.md).
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from ..errors import HPVMWarning
from . import log, profile, settings, stats

_SUM = ".sha256"  # beside each entry: the digest of its contents
_refused: set[Path] = set()  # directories already warned about
_log = log.logger("cache")
_KEY_CHARS = frozenset("0123456789abcdef")
# A process measures the directory at its first write, then again once it has written a sixteenth
# of the bound since (other processes write there too: a bound is kept within about that much).
_MEASURE_EVERY = 16
_STALE_TEMP_SECONDS = 3600.0  # a .tmp- file this old was left by a process that died writing it
_written = {"bytes": 0, "measured": 0}  # since the last measure; measures made by this process
_trim_lock = threading.Lock()
_WRITE_TRIES = 3  # writes of an entry whose folder another process's clear() removed meanwhile


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
        data = _read_regular(path)
        expected = _read_regular(path.with_name(path.name + _SUM)).strip()
    except OSError:
        stats.bump("cache_disk_misses")
        return None
    if hashlib.sha256(data).hexdigest().encode() != expected:  # (bytes: a digest may be garbage)
        stats.bump("cache_disk_misses")
        return None
    problem = check(data) if check is not None else None
    if problem is not None:
        _log.info("hpvm: the disk cache's entry %s is not usable (%s): made again", path, problem)
        stats.bump("cache_disk_misses")
        return None
    stats.bump("cache_disk_hits")
    try:
        os.utime(path)  # used now: the trim removes the entries used least recently first
    except OSError:
        pass
    if profile.on:
        profile.complete("cache", f"disk cache hit ({suffix})", profile.now(), args={"key": key[:16]})
    return data


def _read_regular(path: Path) -> bytes:
    """The bytes of a regular file; OSError for anything else at the path (a FIFO would make the
    read wait forever, and clear() removes only regular files, so every compile would hang)."""
    with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        return f.read()


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
    _make_room(root, len(data))
    try:
        return _write_entry(folder, f"{key}{suffix}", data)
    except OSError as exc:
        _warn_once(root, f"the compile cache {root} could not be written ({exc.strerror or exc}): "
                   "compiled code is not kept between runs; free space there, make it writable, "
                   f"or set {settings.CACHE_DIR.name} (or {settings.NO_CACHE.name}=1)")
        return None


def _write_entry(folder: Path, name: str, data: bytes) -> Path:
    """Write an entry and its digest (the digest first) into the key's folder, made if need be.
    clear() in another process removes a key's folder once it holds nothing of the cache (or only
    the digest just written, taken for an entry): between the mkdir and a write here, it fails
    the write with ENOENT (or the mkdir with EEXIST), and the cache, usable, would be reported
    unwritable; the folder is made again and the entry written again, a few times."""
    for _ in range(_WRITE_TRIES - 1):
        try:
            return _write_files(folder, name, data)
        except (FileNotFoundError, FileExistsError):
            pass
    return _write_files(folder, name, data)


def _write_files(folder: Path, name: str, data: bytes) -> Path:
    folder.mkdir(mode=0o700, exist_ok=True)
    final = folder / name
    _write(folder, final.with_name(final.name + _SUM), hashlib.sha256(data).hexdigest().encode())
    _write(folder, final, data)
    return final


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


def max_bytes() -> int:
    """HPVM_CACHE_MAX_BYTES (0: no bound)."""
    return settings.byte_count(settings.CACHE_MAX_BYTES) or 0


def _make_room(root: Path, coming: int) -> None:
    """Before a write of `coming` bytes: at this process's first write, and after each sixteenth of
    the bound written, the directory is measured and trimmed when the write would take it past."""
    bound = max_bytes()
    if not bound:
        return
    with _trim_lock:
        _written["bytes"] += coming
        if _written["measured"] and _written["bytes"] < bound // _MEASURE_EVERY:
            return
        _written["bytes"], _written["measured"] = 0, _written["measured"] + 1
    trim(root, bound, coming)


class Entry:
    """One cached artifact: its files (the entry and its digest), their bytes, when last used."""

    def __init__(self, used: float) -> None:
        self.used = used
        self.nbytes = 0
        self.paths: list[Path] = []


def entries(root: Path) -> list[Entry]:
    """The cache's entries, least recently used first (a stale .tmp- file is removed on the way).
    Only what this module writes is looked at: files named by a key in folders named by the key's
    first two characters, whatever else the directory holds."""
    found: dict[str, Entry] = {}
    now = time.time()
    for folder in _key_folders(root):
        try:
            listing = list(os.scandir(folder))
        except OSError:
            continue
        for item in listing:
            try:
                info = item.stat(follow_symlinks=False)
            except OSError:
                continue  # removed meanwhile (another process's trim)
            if not stat.S_ISREG(info.st_mode):
                continue
            if item.name.startswith(".tmp-"):
                if now - info.st_mtime > _STALE_TEMP_SECONDS:
                    _unlink(Path(item.path))
                continue
            key = item.name[:64]
            if len(key) != 64 or not _KEY_CHARS.issuperset(key) or key[:2] != folder.name:
                continue
            entry = found.setdefault(item.name.removesuffix(_SUM), Entry(info.st_mtime))
            entry.nbytes += info.st_size
            entry.paths.append(Path(item.path))
            if not item.name.endswith(_SUM):
                entry.used = info.st_mtime  # (the digest is written first: the entry says when)
    return sorted(found.values(), key=lambda entry: entry.used)


def _key_folders(root: Path) -> list[Path]:
    try:
        return [Path(item.path) for item in os.scandir(root) if item.is_dir(follow_symlinks=False)
                and len(item.name) == 2 and _KEY_CHARS.issuperset(item.name)]
    except OSError:
        return []


def trim(root: Path, bound: int, coming: int = 0) -> int:
    """Remove the entries used least recently until the cache and `coming` more bytes fit in three
    quarters of `bound`, when they do not fit in `bound`; the bytes removed. An entry another
    process reads meanwhile is a miss there (it compiles again), never a wrong artifact: each read
    checks the entry against its digest."""
    held = entries(root)
    total = sum(entry.nbytes for entry in held) + coming
    if total <= bound:
        return 0
    goal, removed = bound * 3 // 4, 0
    for entry in held:
        if total - removed <= goal:
            break
        for path in entry.paths:
            _unlink(path)
        removed += entry.nbytes
    _log.info("hpvm: the disk cache %s held more than %d bytes: %d bytes of the entries used least "
              "recently removed", root, bound, removed)
    stats.bump("cache_disk_trims")
    return removed


def held() -> tuple[Path, list[Entry]]:
    """The directory and its entries (`hpvmc cache`): none where it may not be used, as compiles
    and clear() see it (a warning says why)."""
    root = cache_dir()
    return root, entries(root) if _usable_dir() is not None else []


def clear() -> tuple[Path, int, int]:
    """Remove every entry: the directory, the entries and the bytes removed (`hpvmc cache --clear`)."""
    root = cache_dir()
    if _usable_dir() is None:
        return root, 0, 0
    held = entries(root)
    for entry in held:
        for path in entry.paths:
            _unlink(path)
    for folder in _key_folders(root):
        try:
            folder.rmdir()
        except OSError:
            pass  # not empty: it holds something this module did not write
    return root, len(held), sum(entry.nbytes for entry in held)


def _unlink(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass  # removed by another process already, or not ours to remove


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
