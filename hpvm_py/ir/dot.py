"""A Graphviz picture of a module's hierarchy (`hpvmc viz`, `hpvmc compile --emit dot`).

Internal nodes are nested clusters (their inputs and outputs as record nodes at the border), leaves
are boxes labelled with their function and grid (a 3-D box when replicated), library nodes
(collectives) are rounded boxes. Edges are styled by kind: one-to-one solid blue, all-to-all bold
red with a diamond head, streaming dashed; binds (a parent's input or output passed to or from a
child) are grey arrows, constants plain text. A legend cluster shows each of these.

Scalar and size binds (a parent's non-pointer input passed down, a constant) can be hidden: they
are most of the arrows of a real graph (an image pipeline passes its width and height, and every
buffer's byte size, to every stage). By default they are hidden in graphs with more than
`HIDE_SCALARS_ABOVE` arrows; the parent's `in` record still names them, a constant moves into the
label of the node it feeds, and the legend says how many arrows were hidden. Edges between
sibling nodes are always drawn, whatever they carry. With a profile (`hpvmc viz --profile`),
dot_heat.py colours the nodes by time and the edges by bytes moved.
"""
from __future__ import annotations

import json

from ..types import PtrType
from . import dfg as D
from . import kernel as K
from .dot_heat import Heat
from .printer import literal

HIDE_SCALARS_ABOVE = 20  # arrows in the whole picture: above it, scalar and size binds are hidden

_ONE_TO_ONE = "color=\"#203080\""
_ALL_TO_ALL = "penwidth=2.2, arrowhead=diamond, color=\"#b03030\""
_BIND = "color=\"#888888\""
_LEAF = "fillcolor=\"#dce9f7\""
_LIBRARY = "fillcolor=\"#f7e7c6\""


def _q(text: str) -> str:
    """A DOT quoted string. JSON's escapes are DOT's for `"` and `\\` (and `\\n` a line break
    in a label), but its default `\\uXXXX` for non-ASCII characters is not DOT: Graphviz would
    draw `größe` as `gr\\u00f6\\u00dfe`. DOT files are UTF-8, so the characters go as they are."""
    return json.dumps(text, ensure_ascii=False)


def _grid(node: D.Node) -> str:
    return "[" + ", ".join(D.dim_text(d) for d in node.dims) + "]" if node.dims else ""


def _record(ident: str, title: str, names: list[str]) -> str:
    ports = "|".join(f"<p{i}> {_escape(n)}" for i, n in enumerate(names)) or " "
    # without braces a record stacks its fields vertically under rankdir=LR. Only `"` is escaped
    # for DOT's quoted string: doubling backslashes (_q, _escape_label) would undo the ones
    # _escape put before `{}|<>` (a record field's own escape), and Graphviz would refuse the
    # label ("bad label format")
    label = (title + "|" + ports).replace('"', '\\"')
    return f"{_q(ident)} [shape=record, style=filled, fillcolor=\"#eeeeee\", label=\"{label}\"];"


def _escape(text: str) -> str:
    """A record field's text: `{}|<>` (the record syntax) and `\\` (its escape) escaped with a
    backslash, and a newline (a %name may hold one) as DOT's `\\n`."""
    text = "".join("\\" + c if c in "{}|<>\\" else c for c in text)
    return text.replace("\n", "\\n")


def count_arrows(module: D.Module) -> int:
    """The arrows a full picture of `module` draws: edges, input, constant and output binds of
    every graph of the hierarchy (each graph once per node that instantiates it)."""
    def arrows(g: D.GraphFunc) -> int:
        total = len(g.edges) + len(g.input_binds) + len(g.const_binds) + len(g.expr_binds) + len(g.output_binds)
        for child in g.nodes:
            fn = module.functions.get(child.func)
            if isinstance(fn, D.GraphFunc):
                total += arrows(fn)
        return total
    return arrows(module.root_func)


class _DotWriter:
    def __init__(self, module: D.Module, hide_scalars: bool, legend: bool, profile: dict | None):
        self.module = module
        self.heat = Heat(module, profile)
        self.parent = module.root_func  # the graph holding the internal node drawn next
        self.hide_scalars = hide_scalars
        self.legend = legend
        self.hidden = 0
        self.lines: list[str] = []
        self.counter = 0
        self.kinds: set[str] = set()  # what the picture holds, for the legend

    def run(self) -> str:
        root = self.module.root_func
        self.lines += [f"digraph {_q(root.name)} {{", "  compound=true; rankdir=LR;",
                       "  node [fontname=\"Helvetica\", fontsize=10];",
                       "  edge [fontname=\"Helvetica\", fontsize=9];"]
        self.graph(root, root.name, "  ", None, {})
        if self.legend:
            self.draw_legend()
        self.lines.append("}")
        return "\n".join(self.lines) + "\n"

    def graph(self, g: D.GraphFunc, path: str, indent: str, node: D.Node | None,
              consts: dict[int, str]) -> tuple[str, str]:
        """Draw g as a cluster; returns the ids of its input and output record nodes. `consts`:
        the constants bound to g's inputs whose arrows are hidden (shown in the `in` record)."""
        self.counter += 1
        if node is None:
            label = f"{K.shown_name(g)} (root)"
        else:
            func = K.shown_name(g)
            label = (node.name if node.name == func else f"{node.name}: {func}") + f" {_grid(node)}"
        self.lines.append(f"{indent}subgraph cluster_{self.counter} {{")
        inner = indent + "  "
        self.lines.append(f"{inner}label={_q(label)}; style=rounded; color=\"#555555\";")
        if node is not None and self.heat.times:  # an internal node: its time in its title
            fill, note = self.heat.timed(self.parent, node.name)
            self.lines[-1] = self.lines[-1].replace(_q(label), _q(label + note.replace("\\n", ", ")))
            self.lines.append(f"{inner}style=\"rounded,filled\"; fillcolor=\"{fill}\";")
        ins, outs = f"{path}/in", f"{path}/out"
        if g.params:
            self.lines.append(inner + _record(ins, "in", [p.name + (f" = {consts[i]}" if i in consts else "")
                                                          for i, p in enumerate(g.params)]))
        if g.outputs:
            self.lines.append(inner + _record(outs, "out", [o.name or str(i) for i, o in enumerate(g.outputs)]))
        folded: dict[str, dict[int, str]] = {}  # child -> its inputs' constants drawn in its label
        if self.hide_scalars:
            for c in g.const_binds:
                folded.setdefault(c.dst, {})[c.dst_port] = literal(c.value.value)
                self.hidden += 1
            for x in g.expr_binds:
                folded.setdefault(x.dst, {})[x.dst_port] = D.dim_text(x.expr)
                self.hidden += 1
        ends: dict[str, tuple[str, str]] = {}
        for child in g.nodes:
            child_path = f"{path}/{child.name}"
            fn = self.module.functions.get(child.func)
            if isinstance(fn, D.GraphFunc):
                self.kinds.add("internal")
                self.parent = g
                ends[child.name] = self.graph(fn, child_path, inner, child, folded.get(child.name, {}))
            else:
                library = isinstance(fn, D.LibraryFunc)
                self.kinds.add("library" if library else "replicated" if child.dims else "leaf")
                kind = "library" if library else "leaf"
                hint = f"\\nhint: {child.hint}" if child.hint else ""
                func = child.func if fn is None else K.shown_name(fn)
                title = child.name if child.name == func else f"{child.name}: {func}"
                params = fn.params if isinstance(fn, (K.LeafFunc, D.LibraryFunc)) else []
                values = "".join(f"\\n{_escape_label(params[p].name if p < len(params) else str(p))} = "
                                 f"{_escape_label(v)}" for p, v in sorted(folded.get(child.name, {}).items()))
                fill, note = self.heat.timed(g, child.name)
                text = f"{_escape_label(title)}\\n{kind} {_grid(child)}{hint}{values}{note}"
                shape = "box3d" if child.dims else "box"
                colour = f"fillcolor=\"{fill}\"" if fill else _LIBRARY if library else _LEAF
                style = f"shape=box, style=\"filled,rounded\", {colour}" if library else \
                    f"shape={shape}, style=filled, {colour}"
                self.lines.append(f"{inner}{_q(child_path)} [{style}, label=\"{text}\"];")
                ends[child.name] = (child_path, child_path)
        for e in g.edges:
            self.kinds.add("all-to-all" if e.kind == D.ALL_TO_ALL else "one-to-one")
            if e.stream:
                self.kinds.add("streaming")
            self.lines.append(inner + self.arrow(ends[e.src][1], e.src_port, ends[e.dst][0], e.dst_port,
                                                 g, e.src, e.dst,
                                                 _edge_style(e) + self.heat.carried(g, e.dst, e.dst_port)))
        for b in g.input_binds:
            if self.hide_scalars and not isinstance(g.params[b.parent_port].type, PtrType):
                self.hidden += 1
                continue
            self.kinds.add("bind")
            dst = ends[b.dst][0]
            port = f":p{b.dst_port}" if dst.endswith("/in") else ""
            style = f"{_BIND}, style=dashed" if b.stream else _BIND
            style += self.heat.carried(g, b.dst, b.dst_port)
            if b.stream:
                self.kinds.add("streaming")
            self.lines.append(f"{inner}{_q(ins)}:p{b.parent_port} -> {_q(dst)}{port} [{style}];")
        if not self.hide_scalars:
            for i, c in enumerate(g.const_binds):
                self.kinds.add("constant")
                dst = ends[c.dst][0]
                port = f":p{c.dst_port}" if dst.endswith("/in") else ""
                const = f"{path}/const{i}"
                self.lines.append(f"{inner}{_q(const)} [shape=plaintext, label={_q(literal(c.value.value))}];")
                self.lines.append(f"{inner}{_q(const)} -> {_q(dst)}{port} [{_BIND}];")
            for i, x in enumerate(g.expr_binds):
                self.kinds.add("constant")
                dst = ends[x.dst][0]
                port = f":p{x.dst_port}" if dst.endswith("/in") else ""
                node = f"{path}/expr{i}"
                self.lines.append(f"{inner}{_q(node)} [shape=plaintext, label={_q(D.dim_text(x.expr))}];")
                self.lines.append(f"{inner}{_q(node)} -> {_q(dst)}{port} [{_BIND}];")
        for b in g.output_binds:
            self.kinds.add("bind")
            src = ends[b.src][1]
            port = f":p{b.src_port}" if src.endswith("/out") else ""
            style = f"{_BIND}, style=dashed" if b.stream else _BIND
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

    def draw_legend(self) -> None:
        """A cluster naming each kind of node and arrow the picture holds."""
        lines = ["  subgraph cluster_legend {",
                 "    label=\"legend\"; style=dashed; color=\"#999999\"; fontsize=10;",
                 "    node [fontsize=9];"]
        nodes = [("leaf", "leaf node", f"shape=box, style=filled, {_LEAF}"),
                 ("replicated", "leaf node, replicated\\n(a grid of instances)", f"shape=box3d, style=filled, {_LEAF}"),
                 ("library", "library node\\n(a collective)", f"shape=box, style=\"filled,rounded\", {_LIBRARY}"),
                 ("internal", "internal node: a rounded\\nframe around its graph", "shape=box, style=rounded, color=\"#555555\""),
                 ("record", "in / out: the graph's\\nparameters and outputs", "shape=box, style=filled, fillcolor=\"#eeeeee\"")]
        column: list[str] = []
        for key, text, style in nodes:
            if key in self.kinds or key == "record":
                column.append(_q("legend/" + key))
                lines.append(f"    {column[-1]} [{style}, label=\"{text}\"];")
        arrows = [("one-to-one", "one-to-one edge (instance i to instance i)", _ONE_TO_ONE),
                  ("all-to-all", "all-to-all edge (after every source instance)", _ALL_TO_ALL),
                  ("streaming", "streaming (one value per item)", "style=dashed"),
                  ("bind", "bind: a parent's input or output", _BIND),
                  ("constant", "constant input", _BIND)]
        tails: list[str] = []
        heads: list[str] = []
        for i, (key, text, style) in enumerate(arrows):
            if key not in self.kinds:
                continue
            tails.append(_q(f"legend/a{i}"))
            heads.append(_q(f"legend/b{i}"))
            tail_label = "2.5" if key == "constant" else ""
            lines.append(f"    {tails[-1]} [shape=plaintext, label={_q(tail_label)}, width=0.1];")
            lines.append(f"    {heads[-1]} [shape=plaintext, label={_q(text)}];")
            lines.append(f"    {tails[-1]} -> {heads[-1]} [{style}];")
        if self.hidden:
            heads.append("\"legend/hidden\"")
            lines.append(f"    {heads[-1]} [shape=plaintext, label=\"{self.hidden} scalar and size "
                         "arrows hidden\\n(hpvmc viz --show-scalars draws them)\"];")
        for same in (column, tails, heads):  # three columns under rankdir=LR
            if same:
                lines.append(f"    {{rank=same; {'; '.join(same)};}}")
        lines.append("  }")
        self.lines += lines


def _escape_label(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\"", "\\\"")


def _edge_style(e: D.Edge) -> str:
    parts = [_ALL_TO_ALL if e.kind == D.ALL_TO_ALL else _ONE_TO_ONE]
    if e.stream:
        parts.append("style=dashed")
    return ", ".join(parts)


def module_to_dot(module: D.Module, hide_scalars: bool | None = None, legend: bool = True,
                  profile: dict | None = None) -> str:
    """The Graphviz text of `module`'s hierarchy.

    Args:
        module: the DFG module (a graph's `.module()`).
        hide_scalars: leave out the arrows of scalar and size inputs (a parent's non-pointer
            parameter passed to a child, a constant: it is written into the node's label instead).
            None (the default) hides them when the full picture has more than `HIDE_SCALARS_ABOVE`
            arrows.
        legend: draw a legend cluster (node and arrow kinds, how many arrows were hidden).
        profile: support/profile.py's summary() of a trace of the graph (`hpvmc viz --profile`):
            nodes coloured by time, edges into them by the bytes they moved (dot_heat.py).

    Returns:
        The text of a Graphviz `digraph`.
    """
    if hide_scalars is None:
        hide_scalars = count_arrows(module) > HIDE_SCALARS_ABOVE
    return _DotWriter(module, hide_scalars, legend, profile).run()
