"""A Graphviz picture of a module's hierarchy.

Internal nodes are nested clusters (their inputs and outputs as record nodes at the border), leaves
are boxes labelled with their function and grid. Edges are styled by kind: one-to-one solid,
all-to-all bold with a diamond head, streaming dashed; binds are thin grey arrows.
"""
from __future__ import annotations

import json

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


class _DotWriter:
    def __init__(self, module: D.Module):
        self.module = module
        self.lines: list[str] = []
        self.counter = 0

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
                ends[child.name] = self.graph(fn, child_path, inner, child)
            else:
                kind = "library" if isinstance(fn, D.LibraryFunc) else "leaf"
                hint = f"\\nhint: {child.hint}" if child.hint else ""
                title = child.name if child.name == child.func else f"{child.name}: {child.func}"
                text = f"{title}\\n{kind} {_grid(child)}{hint}"
                shape = "box3d" if child.dims else "box"
                self.lines.append(f"{inner}{_q(child_path)} [shape={shape}, style=filled, "
                                  f"fillcolor=\"#dce9f7\", label=\"{text}\"];")
                ends[child.name] = (child_path, child_path)
        for e in g.edges:
            self.lines.append(inner + self.arrow(ends[e.src][1], e.src_port, ends[e.dst][0], e.dst_port,
                                                 g, e.src, e.dst, _edge_style(e)))
        for b in g.input_binds:
            dst = ends[b.dst][0]
            port = f":p{b.dst_port}" if dst.endswith("/in") else ""
            style = "color=\"#888888\", style=dashed" if b.stream else "color=\"#888888\""
            self.lines.append(f"{inner}{_q(ins)}:p{b.parent_port} -> {_q(dst)}{port} [{style}];")
        for i, c in enumerate(g.const_binds):
            dst = ends[c.dst][0]
            port = f":p{c.dst_port}" if dst.endswith("/in") else ""
            const = f"{path}/const{i}"
            self.lines.append(f"{inner}{_q(const)} [shape=plaintext, label={_q(literal(c.value.value))}];")
            self.lines.append(f"{inner}{_q(const)} -> {_q(dst)}{port} [color=\"#888888\"];")
        for i, x in enumerate(g.expr_binds):
            dst = ends[x.dst][0]
            port = f":p{x.dst_port}" if dst.endswith("/in") else ""
            node = f"{path}/expr{i}"
            self.lines.append(f"{inner}{_q(node)} [shape=plaintext, label={_q(D.dim_text(x.expr))}];")
            self.lines.append(f"{inner}{_q(node)} -> {_q(dst)}{port} [color=\"#888888\"];")
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


def module_to_dot(module: D.Module) -> str:
    return _DotWriter(module).run()
