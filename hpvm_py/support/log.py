"""The `hpvm_py` logger: progress (such as autotuning) and IR dumps.

Quiet by default, as a library should be: HPVM_LOG=info (or debug) prints the log to stderr, and
HPVM_DUMP_IR prints the dumps it asks for whatever HPVM_LOG says. A program that configures
`logging` itself sees the records under `hpvm_py.*` as any other library's.
"""
from __future__ import annotations

import logging
import sys
import threading

from . import settings

ROOT = "hpvm_py"
_lock = threading.Lock()
_handler: logging.Handler | None = None
_configured = False


def logger(part: str) -> logging.Logger:
    """The logger of one part of hpvm_py (`hpvm_py.<part>`), configured from HPVM_LOG on first use."""
    _configure()
    return logging.getLogger(f"{ROOT}.{part}")


def dumps() -> logging.Logger:
    """The logger of IR dumps: it prints at INFO once HPVM_DUMP_IR asked for a dump."""
    dump = logger("dump")
    with _lock:
        _attach_stderr()
        dump.setLevel(logging.INFO)
    return dump


def _configure() -> None:
    """Read HPVM_LOG once: a level sets the `hpvm_py` logger's level and prints it to stderr."""
    global _configured
    with _lock:
        if _configured:
            return
        _configured = True
        level = (settings.LOG.text() or "").strip().upper()
        if level:
            if level not in ("DEBUG", "INFO", "WARNING"):
                settings.warn(settings.LOG, f"{settings.LOG.name}={settings.LOG.get()!r}: expected "
                              "info or debug (or warning); the log is printed at info")
            logging.getLogger(ROOT).setLevel(level if level in ("DEBUG", "INFO", "WARNING") else "INFO")
            _attach_stderr()


def _attach_stderr() -> None:
    """One stderr handler on the `hpvm_py` logger (the caller holds _lock)."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler(sys.stderr)
        _handler.setFormatter(logging.Formatter("%(message)s"))
        logging.getLogger(ROOT).addHandler(_handler)
