"""The environment of a benchmark's child processes (ranks, or one benchmark run by another)."""
from __future__ import annotations

import os


def child_env(root: str, **extra: str) -> dict[str, str]:
    """This process's environment with the repository first on PYTHONPATH, ahead of the caller's
    (packages installed there, such as lark from a wheel on the GPU machines, stay importable),
    and `extra` set."""
    env = dict(os.environ, **extra)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))
    return env
