"""A Graphviz picture of a module's hierarchy.

Internal nodes are nested clusters (their inputs and outputs as record nodes at the border), leaves
are boxes labelled with their function and grid. Edges are styled by kind: one-to-one solid,
all-to-all bold with a diamond head, streaming dashed; binds are thin grey arrows.

With a profile's summary (support/profile.py's summary() of a trace: `hpvmc viz --profile`),
nodes are coloured by the time they ran (white to red, the slowest red, the time in the label)
and edges and binds into a node are drawn wider and bluer by the bytes they moved (labelled).
"""
from __future__ import annotations

import json
import re

from . import dfg as D
from . import kernel as K
from .printer import literal


def _q(text: str) -> str:
    return json.dumps(text)


def _grid(node: D.Node) -> str:
    return "[" + ", ".join(D.dim_text(d) for d in node.dims) + "]" if node.dims else ""


def _record(ident: str, title: str, names: list[str]) -> str:
    ports = "|".join(f"<p{i}> {_escape(n)}" for i, n in enumerate(names)) or " "
    # without braces a record stacks its fields vertically under rankdir=LR
    return f"{_q(ident)} [shape=record, style=filled, fillcolor=\"#eeeeee\", label={_q(title + '|' + ports)}];"


def _escape(text: str) -> str:
    return "".join("\\" + c if c in "{}|<>" else c for c in text)


def _heat(fraction: float, cold: tuple[int, int, int], hot: tuple[int, int, int]) -> str:
    f = min(1.0, max(0.0, fraction))
    return "#" + "".join(f"{round(c + (h - c) * f):02x}" for c, h in zip(cold, hot))


def _seconds(s: float) -> str:
    return f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.3g} {unit}" if unit != "B" else f"{n} B"
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


class _DotWriter:
    def __init__(self, module: D.Module, profile: dict | None = None):
        self.module = module
        self.lines: list[str] = []
        self.counter = 0
        self.times: dict = (profile or {}).get("times", {})
        self.moved: dict = (profile or {}).get("bytes", {})
        # IR names are unique per process (a program loaded twice: root, root_2): a trace of
        # another process is matched on the names without that suffix when the exact one misses
        self.loose_times = _loosely(self.times)
        self.loose_moved = _loosely(self.moved)
        self.max_time = max(self.times.values(), default=0.0) or 1.0
        self.max_bytes = max(self.moved.values(), default=0) or 1

    def timed(self, g: D.GraphFunc, name: str) -> tuple[str, str]:
        """A node's fill colour and label suffix from the profile ("" without one)."""
        seconds = self.times.get((g.name, name), self.loose_times.get((_base(g.name), _base(name))))
        if seconds is None:
            return ("#dce9f7", "") if not self.times else ("#ffffff", "\\nnot run")
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
        return (f", penwidth={1 + 5 * f:.2f}, color=\"{_heat(f, (170, 170, 170), (20, 60, 200))}\", "
                f"xlabel={_q(_bytes(nbytes))}")

    def run(self) -> str:
        root = self.module.root_func
        self.lines += [f"digraph {_q(root.name)} {{", "  compound=true; rankdir=LR;",
                       "  node [fontname=\"Helvetica\", fontsize=10];",
                       "  edge [fontname=\"Helvetica\", fontsize=9];"]
        self.graph(root, root.name, "  ", None)
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def graph(self, g: D.GraphFunc, path: str, indent: str, node: D.Node | None) -> tuple[str, str]:
        """Draw g as a cluster; returns the ids of its input and output record nodes."""
        self.counter += 1
        if node is None:
            label = f"{g.name} (root)"
        else:
            label = (node.name if node.name == g.name else f"{node.name}: {g.name}") + f" {_grid(node)}"
        self.lines.append(f"{indent}subgraph cluster_{self.counter} {{")
        inner = indent + "  "
        self.lines.append(f"{inner}label={_q(label)}; style=rounded; color=\"#555555\";")
        if node is not None and self.times:  # an internal node: its time in its title
            fill, note = self.timed(self.parent, node.name)
            self.lines[-1] = self.lines[-1].replace(_q(label), _q(label + note.replace("\\n", ", ")))
            self.lines.append(f"{inner}style=\"rounded,filled\"; fillcolor=\"{fill}\";")
        ins, outs = f"{path}/in", f"{path}/out"
        if g.params:
            self.lines.append(inner + _record(ins, "in", [p.name for p in g.params]))
        if g.outputs:
            self.lines.append(inner + _record(outs, "out", [o.name or str(i) for i, o in enumerate(g.outputs)]))
        ends: dict[str, tuple[str, str]] = {}
        for child in g.nodes:
            child_path = f"{path}/{child.name}"
            fn = self.module.functions.get(child.func)
            if isinstance(fn, D.GraphFunc):
                self.parent = g
                ends[child.name] = self.graph(fn, child_path, inner, child)
            else:
                kind = "library" if isinstance(fn, D.LibraryFunc) else "leaf"
                hint = f"\\nhint: {child.hint}" if child.hint else ""
                title = child.name if child.name == child.func else f"{child.name}: {child.func}"
                fill, note = self.timed(g, child.name)
                text = f"{title}\\n{kind} {_grid(child)}{hint}{note}"
                shape = "box3d" if child.dims else "box"
                self.lines.append(f"{inner}{_q(child_path)} [shape={shape}, style=filled, "
                                  f"fillcolor=\"{fill}\", label=\"{text}\"];")
                ends[child.name] = (child_path, child_path)
        for e in g.edges:
            self.lines.append(inner + self.arrow(ends[e.src][1], e.src_port, ends[e.dst][0], e.dst_port,
                                                 g, e.src, e.dst, _edge_style(e) +
                                                 self.carried(g, e.dst, e.dst_port)))
        for b in g.input_binds:
            dst = ends[b.dst][0]
            port = f":p{b.dst_port}" if dst.endswith("/in") else ""
            style = "color=\"#888888\", style=dashed" if b.stream else "color=\"#888888\""
            style += self.carried(g, b.dst, b.dst_port)
            self.lines.append(f"{inner}{_q(ins)}:p{b.parent_port} -> {_q(dst)}{port} [{style}];")
        for i, c in enumerate(g.const_binds):
            dst = ends[c.dst][0]
            port = f":p{c.dst_port}" if dst.endswith("/in") else ""
            const = f"{path}/const{i}"
            self.lines.append(f"{inner}{_q(const)} [shape=plaintext, label={_q(literal(c.value.value))}];")
            self.lines.append(f"{inner}{_q(const)} -> {_q(dst)}{port} [color=\"#888888\"];")
        for b in g.output_binds:
            src = ends[b.src][1]
            port = f":p{b.src_port}" if src.endswith("/out") else ""
            style = "color=\"#888888\", style=dashed" if b.stream else "color=\"#888888\""
            self.lines.append(f"{inner}{_q(src)}{port} -> {_q(outs)}:p{b.parent_port} [{style}];")
        self.lines.append(f"{indent}}}")
        return ins, outs

    def arrow(self, src: str, src_port: int, dst: str, dst_port: int, g: D.GraphFunc, src_name: str,
              dst_name: str, style: str) -> str:
        sp = f":p{src_port}" if src.endswith("/out") else ""
        dp = f":p{dst_port}" if dst.endswith("/in") else ""
        dst_fn = self.module.functions.get(g.node(dst_name).func)
        label = ""
        if isinstance(dst_fn, (K.LeafFunc, D.LibraryFunc)) and dst_port < len(dst_fn.params):
            label = dst_fn.params[dst_port].name
        return f"{_q(src)}{sp} -> {_q(dst)}{dp} [{style}, label={_q(label)}];"


def _edge_style(e: D.Edge) -> str:
    parts = ["penwidth=2.2", "arrowhead=diamond", "color=\"#b03030\""] if e.kind == D.ALL_TO_ALL \
        else ["color=\"#203080\""]
    if e.stream:
        parts.append("style=dashed")
    return ", ".join(parts)


def module_to_dot(module: D.Module, profile: dict | None = None) -> str:
    """The picture; `profile`: support/profile.py's summary() of a trace of the graph."""
    return _DotWriter(module, profile).run()
