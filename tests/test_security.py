"""The trust model of docs/security.md, tried as an attacker would: messages in the launcher's
key-value store that name code, a compile cache another user may write or that was tampered
with, and an AOT bundle that carries Python."""
from __future__ import annotations

import os
import pickle
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.distributed import wire
from hpvm_py.errors import DistributedError, HPVMWarning, ParseError
from hpvm_py.support import cache
from programs import out_coverage as P


class _Payload:
    """Unpickling it would create a file: the proof that code ran."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def test_store_messages_carry_data_only(tmp_path: Path) -> None:
    sent = {"host": "h", "heap": 1 << 20, "words": [1, 2, 3], "pair": (None, "error text"),
            "blob": b"\x00\x01"}
    assert wire.decode(wire.encode(sent)) == sent
    marker = tmp_path / "ran"
    with pytest.raises(DistributedError, match="refused"):
        wire.decode(pickle.dumps(_Payload(marker)))
    with pytest.raises(DistributedError, match="os.system|posix.system"):
        wire.decode(pickle.dumps(os.system))
    assert not marker.exists()


def _launch(target: str) -> np.ndarray:
    a = np.arange(16, dtype=np.float32)
    c = np.zeros(16, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.copy_graph, a, c, 16))
    np.testing.assert_array_equal(c, a)
    return c


def test_cache_is_private_and_checked(tmp_path: Path, monkeypatch, compiled_target: str) -> None:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    assert cache.store("ab" * 32, ".bin", b"code") is not None
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert cache.load("ab" * 32, ".bin") == b"code"
    entry = folder / "ab" / ("ab" * 32 + ".bin")
    entry.write_bytes(b"evil")  # tampered: its digest no longer matches
    assert cache.load("ab" * 32, ".bin") is None
    # a whole launch with every entry of the cache tampered with recompiles and runs right
    _launch(compiled_target)
    for path in folder.rglob("*"):
        if path.is_file() and not path.name.endswith(".sha256") and path.suffix != ".py":
            path.write_bytes(b"\x00" * 16)
    done = subprocess.run([sys.executable, "-c", _RELAUNCH.format(target=compiled_target)],
                          env={**os.environ, "HPVM_CACHE_DIR": str(folder)}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ok" in done.stdout


_RELAUNCH = """
import numpy as np, hpvm_py as hpvm, sys
sys.path.insert(0, "tests")
from programs import out_coverage as P
a = np.arange(16, dtype=np.float32); c = np.zeros(16, np.float32)
with hpvm.runtime("{target}"):
    hpvm.wait(hpvm.launch(P.copy_graph, a, c, 16))
assert (c == a).all()
print("ok")
"""


def test_a_cache_others_may_write_is_not_used(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    monkeypatch.setattr(cache, "_refused", set())
    with pytest.warns(HPVMWarning, match="writable by another user"):
        assert cache.store("cd" * 32, ".bin", b"code") is None
    assert cache.load("cd" * 32, ".bin") is None
    assert not any(folder.iterdir())


def test_bundles_are_parsed_never_run(tmp_path: Path) -> None:
    """An AOT bundle is text IR: Python in it, or beside it, never runs."""
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    marker = tmp_path / "ran"
    (bundle / "__init__.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (bundle / "root.py").write_text(f"open({str(marker)!r}, 'w')\n")
    (bundle / "root.hpvm").write_text(f"__import__('os').system('touch {marker}')\n")
    with pytest.raises(ParseError):
        hpvm.load(bundle)
    assert not marker.exists()
