"""Every environment variable is declared once in hpvm_py/support/settings.py, read through it, and
documented in docs/settings.md; the hpvm_py logger is quiet unless asked."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from hpvm_py.support import settings

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "hpvm_py"


def test_no_module_reads_an_hpvm_variable_itself():
    readers = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for line in path.read_text().splitlines():
            if re.search(r"environ(\.get)?[\[(]\s*[\"']HPVM", line) or "getenv(" in line:
                readers.setdefault(str(path.relative_to(ROOT)), []).append(line.strip())
    assert not readers, f"read these through hpvm_py.support.settings: {readers}"


def test_every_variable_the_package_names_is_declared():
    declared = {s.name for s in settings.SETTINGS}
    named = set()
    for path in PACKAGE.rglob("*.py"):
        named |= set(re.findall(r"\bHPVMC?_[A-Z_]+[A-Z]\b", path.read_text()))
    assert named <= declared, f"undeclared: {sorted(named - declared)}"
    assert len(declared) == len(settings.SETTINGS)


def test_the_docs_list_every_setting():
    text = (ROOT / "docs" / "settings.md").read_text()
    missing = [s.name for s in settings.SETTINGS if f"| `{s.name}` |" not in text]
    assert not missing


def test_flags_and_text(monkeypatch):
    monkeypatch.delenv("HPVM_STREAM_ITEMS", raising=False)
    assert settings.STREAM_ITEMS.on()
    monkeypatch.setenv("HPVM_STREAM_ITEMS", "0")
    assert not settings.STREAM_ITEMS.on()
    monkeypatch.setenv("HPVM_NO_CACHE", "")
    assert not settings.NO_CACHE.on()
    monkeypatch.setenv("HPVM_NO_CACHE", "yes")
    assert settings.NO_CACHE.on()
    monkeypatch.setenv("HPVM_HEAP_DIR", "")
    assert settings.HEAP_DIR.get() == "/dev/shm" and settings.HEAP_DIR.text() is None


def test_hpvmc_config_lists_the_variables_with_their_values():
    env = {**os.environ, "HPVM_AUTOTUNE": "0"}
    done = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "config"], capture_output=True,
                          text=True, env=env, check=True)
    for s in settings.SETTINGS:
        assert s.name in done.stdout
    assert re.search(r"HPVM_AUTOTUNE\s+flag\s+1\s+0\s", done.stdout)


_LOGS = "import logging; from hpvm_py.support import log; log.logger('t').info('progress note')"


def test_the_logger_is_quiet_by_default_and_speaks_with_hpvm_log():
    env = {k: v for k, v in os.environ.items() if k != "HPVM_LOG"}
    quiet = subprocess.run([sys.executable, "-c", _LOGS], capture_output=True, text=True, env=env)
    assert quiet.returncode == 0 and "progress note" not in quiet.stderr
    loud = subprocess.run([sys.executable, "-c", _LOGS], capture_output=True, text=True,
                          env={**env, "HPVM_LOG": "info"})
    assert loud.returncode == 0 and "progress note" in loud.stderr
