"""The caches of compiled code held to their promise that a change to anything the code depends on
never reuses a stale entry, and that other processes clearing the disk cache break nothing: global
constants that are equal but compile differently (0.0 and -0.0, NaNs of another sign or payload),
a seeded run of such constants through the memory and disk caches, the gpu target's kernel files
(no bytecode written into the cache, the source kept for Triton after a clear), and a clear in
another process racing a write."""
from __future__ import annotations

import hashlib
import os
import inspect
import random
import struct
import sys
import threading
import warnings
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import Out, Ptr, f64, i64
from hpvm_py.backends import registry
from hpvm_py.backends.triton import loader
from hpvm_py.support import cache

N = 4
# constants that compare equal to another (or to nothing) yet compile to other bits
SPECIAL = ("0000000000000000", "0000000000000080",  # 0.0, -0.0
           "000000000000f87f", "000000000000f8ff",  # nan, -nan
           "010000000000f87f", "efbeadde0000f8ff",  # NaNs with payloads
           "000000000000f07f", "000000000000f0ff", "000000000000f03f")  # inf, -inf, 1.0

K = 0.0  # read by put_k: a test assigns it, and the next launch must read the new value


@hpvm.leaf
def put_k(c: Out[Ptr[f64]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = K


@hpvm.graph
def put_graph(c: Out[Ptr[f64]], c_bytes: i64, n: i64):
    hpvm.node(put_k, grid=n, c=c, c_bytes=c_bytes)


def _value(bits: str) -> float:
    return struct.unpack("<d", bytes.fromhex(bits))[0]


def _launch_bits(target: str, bits: str) -> str:
    """The bits put_graph writes after K is set to the double of these (little-endian) bits."""
    global K
    K = _value(bits)
    c = np.zeros(N, np.float64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(put_graph, c, c.nbytes, N))
    return c[:1].tobytes().hex()


def _forget_compiled(target: str) -> None:
    """Drop what this process keeps in memory, so the next launch compiles or reads the disk."""
    put_graph.compiled_for.clear()
    type(registry.get(target))._memory.clear()


TARGETS = [t for t in ("python", "cpu", "gpu") if registry.available(t)]


@pytest.mark.parametrize("target", TARGETS)
def test_a_global_changed_from_zero_to_minus_zero_is_read_again(target: str) -> None:
    """0.0 == -0.0, so the check that a leaf's globals still hold what it was compiled from took
    K = -0.0 for the K = 0.0 it had read, and the launch wrote +0.0 (on every target)."""
    assert _launch_bits(target, SPECIAL[0]) == SPECIAL[0]
    assert _launch_bits(target, SPECIAL[1]) == SPECIAL[1]
    assert _launch_bits(target, SPECIAL[0]) == SPECIAL[0]


@pytest.mark.parametrize("target,through", [(t, way) for t in TARGETS for way in ("memory", "disk")
                                            if t != "python" or way == "memory"])  # (no disk)
def test_a_nan_of_another_sign_or_payload_is_not_served_a_kernel_made_for_another(
        target: str, through: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A leaf's repr, the key of the memory and disk caches, wrote every NaN as 'nan': a kernel
    compiled for K = nan was reused for K = -nan (and for payloads), whose code keeps its bits."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    for bits in SPECIAL[2:6]:
        if through == "disk":
            _forget_compiled(target)
        assert _launch_bits(target, bits) == bits


@pytest.mark.parametrize("target", [t for t in TARGETS if t != "gpu"])
def test_seeded_constants_through_the_caches_give_their_own_bits(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A seeded walk over special and random constants, each launch after a random choice of
    keeping the compiled graph, dropping the memory caches (a disk read) or clearing the disk
    cache too: every launch writes the constant's own bits."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    rng = random.Random(20240611)
    pool = list(SPECIAL) + [struct.pack("<d", rng.uniform(-1e3, 1e3)).hex() for _ in range(4)]
    for step in range(40):
        bits = rng.choice(pool)
        forget = rng.choice(("keep", "memory", "disk"))
        if forget != "keep":
            _forget_compiled(target)
        if forget == "disk":
            cache.clear()
        assert _launch_bits(target, bits) == bits, (step, forget)


_SOURCE = "def kernel():\n    return 42\n"


def _load_kernel(text: str) -> object:
    digest = hashlib.sha256(text.encode()).hexdigest()
    return loader.load_kernel(text, digest, "kernel")


def test_a_kernel_file_import_writes_no_bytecode_into_the_cache(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """The gpu target imported its kernel files from the cache: Python wrote a __pycache__ folder
    of bytecode there (twice the source's bytes), outside the bound and left by --clear."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # (as for a user; the tests set it)
    text = _SOURCE + "# no bytecode\n"
    assert _load_kernel(text)() == 42
    assert [p.name for p in folder.rglob("__pycache__")] == []
    cache.clear()
    assert list(folder.iterdir()) == []


def test_a_kernel_keeps_its_source_when_its_entry_is_cleared_before_its_first_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton's interpreter reads a kernel's source at its first run (to rewrite it); a clear (or
    a trim) in between left it no source, and it silently ran the kernel unrewritten."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    text = _SOURCE + "# cleared before its first run\n"
    kernel = _load_kernel(text)
    assert cache.clear()[1] == 1
    assert inspect.getsource(kernel) == _SOURCE


def test_a_clear_in_another_process_between_mkdir_and_write_loses_no_entry(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """clear() removes the emptied key folders: one removed between store()'s mkdir and its write
    failed the write, and the cache was reported unwritable (a warning, once: a real failure later
    went unsaid) though it was not."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    write = cache._write
    cleared: list[Path] = []

    def clear_first(folder: Path, final: Path, data: bytes) -> None:
        if not cleared:  # the other process's clear, at the worst moment
            cleared.append(cache.clear()[0])
            assert not folder.exists()
        write(folder, final, data)

    monkeypatch.setattr(cache, "_write", clear_first)
    key = "ab" * 32
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert cache.store(key, ".bin", b"kept") is not None
    assert cleared and cache.load(key, ".bin") == b"kept"


def _entry(folder: Path, key: str, suffix: str) -> Path:
    return folder / key[:2] / f"{key}{suffix}"


def test_a_digest_of_bytes_that_are_no_text_is_a_miss(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The digest was read as UTF-8 text: garbage there (a torn disk block) raised
    UnicodeDecodeError through every compile of the kernel, an internal error, until a clear."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    key = "cd" * 32
    assert cache.store(key, ".bin", b"entry") is not None
    _entry(folder, key, ".bin.sha256").write_bytes(b"\xff\xfe garbage")
    assert cache.load(key, ".bin") is None
    assert cache.store(key, ".bin", b"entry") is not None and cache.load(key, ".bin") == b"entry"


@pytest.mark.parametrize("which", [".bin", ".bin.sha256"])
def test_a_fifo_where_an_entry_belongs_is_a_miss_not_a_hang(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch,
                                                            which: str) -> None:
    """Reading a FIFO waits for a writer: every compile of the kernel hung, and --clear (which
    removes regular files only) did not help. Anything but a regular file is a miss."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    key = "ef" * 32
    assert cache.store(key, ".bin", b"entry") is not None
    fifo = _entry(folder, key, which)
    fifo.unlink()
    os.mkfifo(fifo)
    got: list[object] = []
    reader = threading.Thread(target=lambda: got.append(cache.load(key, ".bin")), daemon=True)
    reader.start()
    reader.join(20)
    if reader.is_alive():  # (let the stuck reader go: a writer that closes at once is its EOF)
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert got == [None]
    assert cache.store(key, ".bin", b"entry") is not None and cache.load(key, ".bin") == b"entry"
