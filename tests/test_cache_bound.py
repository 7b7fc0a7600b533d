"""The disk cache's bound (HPVM_CACHE_MAX_BYTES): the entries used least recently go first, what the
cache did not write is never touched, and `hpvmc cache` says how full it is or empties it; the
"bytes" settings' one parser."""
from __future__ import annotations

import contextlib
import io
import os
import random
import time
from pathlib import Path

import pytest

from hpvm_py import cli
from hpvm_py.errors import DistributedError, HPVMError
from hpvm_py.support import cache, settings


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(root))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    # as a fresh process: its first write measures the directory
    monkeypatch.setattr(cache, "_written", {"bytes": 0, "measured": 0})
    return root


def key(n: int) -> str:
    return cache.content_key("entry", str(n))


def age(path: Path, seconds_ago: float) -> None:
    then = time.time() - seconds_ago
    os.utime(path, (then, then))


def stored(n: int) -> Path:
    return cache.cache_dir() / key(n)[:2] / f"{key(n)}.bin"


@pytest.mark.parametrize("text, value", [("12", 12), ("0", 0), ("4K", 4096), ("64m", 64 << 20),
                                         ("2G", 2 << 30), ("1T", 1 << 40)])
def test_byte_settings_take_digits_and_a_power_of_1024(monkeypatch: pytest.MonkeyPatch, text: str,
                                                       value: int) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", text)
    assert settings.byte_count(settings.CACHE_MAX_BYTES) == value


@pytest.mark.parametrize("text", ["1.5G", "-1", "64MB", "G", "\u0663", "0x10", "2 G", "1e9"])
def test_byte_settings_refuse_anything_else_naming_the_setting(monkeypatch: pytest.MonkeyPatch,
                                                               text: str) -> None:
    monkeypatch.setenv("HPVM_HEAP_BYTES", text)
    with pytest.raises(DistributedError, match=f"HPVM_HEAP_BYTES={text!r} must be a number of bytes"):
        settings.byte_count(settings.HEAP_BYTES, DistributedError)
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", text)
    with pytest.raises(HPVMError, match="HPVM_CACHE_MAX_BYTES"):
        cache.max_bytes()


def test_unset_byte_settings_take_their_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HPVM_CACHE_MAX_BYTES", raising=False)
    assert cache.max_bytes() == 2 << 30
    monkeypatch.delenv("HPVM_COMM_PUSH_BYTES", raising=False)
    assert settings.byte_count(settings.COMM_PUSH_BYTES) is None  # (no default: measured)


def test_a_write_past_the_bound_removes_the_least_recently_used_first(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "0")  # filled without a bound first
    for n in range(10):
        cache.store(key(n), ".bin", bytes(1000))
    order = list(range(10))
    random.Random(3).shuffle(order)
    for rank, n in enumerate(order):  # order[0] used longest ago
        age(stored(n), 1000 - rank)
    assert cache.load(key(order[0]), ".bin") == bytes(1000)  # a hit: used now
    # each entry is 1,000 bytes and a 64-byte digest: 10,640 held, 1,000 coming
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "11000")
    cache.store(key(99), ".bin", bytes(1000))
    left = {n for n in range(10) if stored(n).exists()}
    # down to three quarters of the bound (8,250 bytes, the new entry counted): 6 old ones left,
    # the one just used among them
    assert left == {order[0], *order[5:]}
    assert stored(99).exists() and cache.load(key(99), ".bin") == bytes(1000)
    for n in set(range(10)) - left:  # no digest left behind without its entry
        assert not stored(n).with_name(stored(n).name + ".sha256").exists()


def test_a_write_within_the_bound_removes_nothing(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "1M")
    for n in range(20):
        cache.store(key(n), ".bin", bytes(1000))
    assert all(stored(n).exists() for n in range(20))
    assert cache.trim(folder, 1 << 20) == 0


def test_no_bound_keeps_everything(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "0")
    for n in range(5):
        cache.store(key(n), ".bin", bytes(4096))
    assert all(stored(n).exists() for n in range(5))


def test_the_directory_is_measured_again_after_a_sixteenth_of_the_bound_is_written(
        folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[int] = []
    monkeypatch.setattr(cache, "trim", lambda root, bound, coming=0: measured.append(coming) or 0)
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "16000")  # a sixteenth: 1,000 bytes
    for n in range(7):
        cache.store(key(n), ".bin", bytes(400))
    # the first write, then each write that brings 1,000 bytes or more since the last measure
    # (the fourth: 1,200; the seventh)
    assert measured == [400, 400, 400]


def test_what_the_cache_did_not_write_is_never_removed(folder: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "0")
    cache.store(key(1), ".bin", bytes(5000))
    folder.joinpath("notes.txt").write_bytes(bytes(50_000))
    folder.joinpath("zz").mkdir()
    folder.joinpath("zz", key(2)).write_bytes(bytes(50_000))  # not a key's folder
    prefix = key(3)[:2]
    folder.joinpath(prefix).mkdir(exist_ok=True)
    folder.joinpath(prefix, "README").write_bytes(bytes(50_000))  # not a key
    wrong = "ff" if prefix != "ff" else "ee"
    folder.joinpath(wrong).mkdir(exist_ok=True)
    folder.joinpath(wrong, key(4)).write_bytes(bytes(50_000))  # a key in another key's folder
    fresh_temp = folder / key(1)[:2] / ".tmp-writing"
    fresh_temp.write_bytes(bytes(10))
    stale_temp = folder / key(1)[:2] / ".tmp-dead"
    stale_temp.write_bytes(bytes(10))
    age(stale_temp, 2 * 3600)
    assert [e.nbytes for e in cache.entries(folder)] == [5064]
    assert not stale_temp.exists() and fresh_temp.exists()  # a process died writing that one
    assert cache.trim(folder, 1000) == 5064
    root, count, nbytes = cache.clear()
    assert (root, count, nbytes) == (folder, 0, 0)
    for kept in (folder / "notes.txt", folder / "zz" / key(2), folder / prefix / "README",
                 folder / wrong / key(4), fresh_temp):
        assert kept.exists(), kept


def hpvmc(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(list(args))
    return code, out.getvalue()


def test_hpvmc_cache_says_how_full_and_clears(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_CACHE_MAX_BYTES", "64M")
    assert hpvmc("cache") == (0, f"{folder}: 0 entries, 0 bytes (at most 64.0 MiB: "
                                 "HPVM_CACHE_MAX_BYTES)\n")
    for n in range(3):
        cache.store(key(n), ".bin", bytes(2000))
    assert hpvmc("cache") == (0, f"{folder}: 3 entries, 6.0 KiB (at most 64.0 MiB: "
                                 "HPVM_CACHE_MAX_BYTES)\n")
    assert hpvmc("cache", "--clear") == (0, f"{folder}: 3 entries removed (6.0 KiB)\n")
    assert not any(folder.iterdir())  # the emptied key folders too
    monkeypatch.setenv("HPVM_NO_CACHE", "1")
    code, said = hpvmc("cache")
    assert code == 0 and "off (HPVM_NO_CACHE=1)" in said


def test_a_cache_another_user_may_write_is_never_cleared(folder: Path) -> None:
    cache.store(key(1), ".bin", bytes(100))
    folder.chmod(0o777)
    try:
        with pytest.warns(Warning, match="owned or writable by another user"):
            assert cache.clear()[1:] == (0, 0)
        assert stored(1).exists()
    finally:
        folder.chmod(0o700)
