"""The colours of `hpvmc viz --profile`: a node by the time it ran (white to red, the slowest red,
its time in the label), an edge or bind into a node by the bytes it moved (wider and bluer,
labelled). The numbers come from support/profile.py's summary() of a trace of the graph."""
from __future__ import annotations

import json
import re

from . import dfg as D


def _heat(fraction: float, cold: tuple[int, int, int], hot: tuple[int, int, int]) -> str:
    f = min(1.0, max(0.0, fraction))
    return "#" + "".join(f"{round(c + (h - c) * f):02x}" for c, h in zip(cold, hot))


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def _bytes(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{int(n)} B"
        n /= 1024
    return f"{n} B"


def _base(name: str) -> str:
    return re.sub(r"_\d+$", "", name)


def _loosely(table: dict) -> dict:
    loose: dict = {}
    for key, value in table.items():
        short = (_base(key[0]), _base(key[1])) + tuple(key[2:])
        loose[short] = loose.get(short, 0) + value
    return loose


class Heat:
    """Node fills and edge attributes from a profile's summary (none: the plain picture)."""

    def __init__(self, module: D.Module, profile: dict | None):
        self.module = module
        self.times: dict = (profile or {}).get("times", {})
        self.moved: dict = (profile or {}).get("bytes", {})
        # IR names are unique per process (a program loaded twice: root, root_2): a trace of
        # another process is matched on the names without that suffix when the exact one misses
        self.loose_times = _loosely(self.times)
        self.loose_moved = _loosely(self.moved)
        self.max_time = max(self.times.values(), default=0.0) or 1.0
        self.max_bytes = max(self.moved.values(), default=0) or 1

    def timed(self, g: D.GraphFunc, name: str) -> tuple[str | None, str]:
        """A node's fill colour (None: the default) and label suffix from the profile."""
        seconds = self.times.get((g.name, name), self.loose_times.get((_base(g.name), _base(name))))
        if seconds is None:
            return (None, "") if not self.times else ("#ffffff", "\\nnot run")
        return _heat(seconds / self.max_time, (255, 255, 255), (215, 48, 31)), f"\\n{_seconds(seconds)}"

    def carried(self, g: D.GraphFunc, node: str, port: int) -> str:
        """Attributes of an edge or bind into input `port` of `node` by the bytes it moved."""
        fn = self.module.functions.get(g.node(node).func)
        params = getattr(fn, "params", [])
        if not self.moved or port >= len(params):
            return ""
        nbytes = self.moved.get((g.name, node, params[port].name),
                                self.loose_moved.get((_base(g.name), _base(node), params[port].name)))
        if not nbytes:
            return ""
        f = nbytes / self.max_bytes
        return (f", penwidth={1 + 5 * f:.2f}, color={json.dumps(_heat(f, (170, 170, 170), (20, 60, 200)))}, "
                f"xlabel={json.dumps(_bytes(nbytes))}")
