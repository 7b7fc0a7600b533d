"""Streams over tests/differential/hierarchy.py's programs: its root's two children (the replicated
internal node `outer`, with graphs nested three levels deep, and the leaf `d`) become the stages of
a streaming root, and what each pop must give comes from running the items one by one through
`hierarchy.simulate` (docs/streaming.md, "What binds and edges mean in a streaming graph").

Per program, two choices make it mix kept and streaming connections:
- `kept_hist`: `hist` (which the atomics of both stages' leaves add to) is bound without
  `hpvm.streaming`: every item adds to the first push's histogram, in push order;
- `kept_edge`: the edge outer -> d does not stream: every item's d sees the first item's value.
Everything else streams: the buffers, sizes, `s` and the parameters p0..p3 (also those read only by
grids and expressions, which take each item's own values).
"""
from __future__ import annotations

from dataclasses import dataclass

from differential import hierarchy as H
from differential.choices import Choices


@dataclass
class StreamShape:
    h: H.Hierarchy
    kept_hist: bool
    kept_edge: bool
    source: str = ""


def generate(c: Choices) -> StreamShape:
    shape = StreamShape(H.generate(c), kept_hist=c.flag(), kept_edge=c.flag())
    shape.source = shape.h.source + stream_root(shape)
    return shape


def stream_root(shape: StreamShape) -> str:
    """`sroot`: hierarchy.source's `root`, with every bind streaming but the kept ones."""
    h = shape.h
    buffers = ["a", "out_a", "out_b", "out_a2", "out_c", "out_b2"]
    binds = [f"{b}=st({b}), {b}_bytes=st({b}_bytes)" for b in buffers]
    hist = "hist=hist, hist_bytes=hist_bytes" if shape.kept_hist else \
        "hist=st(hist), hist_bytes=st(hist_bytes)"
    outer_args = ", ".join(f"{p}=st({e})" if isinstance(e, str) else f"{p}={H.render(e)}"
                           for p, e in h.outer_params.items())
    grid = ""
    if h.outer_grid:
        g = h.outer_grid
        grid = "grid=" + (H.render(g[0]) if len(g) == 1 else "(" + ", ".join(H.render(e) for e in g) + ")") + ", "
    d = h.d_grid
    d_grid = H.render(d[0]) if len(d) == 1 else "(" + ", ".join(H.render(e) for e in d) + ")"
    params = ", ".join(f"{p}: i64" for p in H.PARAMS)
    signature = ", ".join(f"{b}: {'In' if b == 'a' else 'Out'}[Ptr[i64]], {b}_bytes: i64" for b in buffers)
    return "\n".join([
        "", "",
        "@hpvm.graph",
        f"def sroot({signature}, hist: InOut[Ptr[i64]], hist_bytes: i64, out_d: Out[Ptr[i64]], "
        f"out_d_bytes: i64, s: i64, {params}) -> tuple[i64, i64]:",
        "    st = hpvm.streaming",
        f"    o = hpvm.node(outer, {grid}{', '.join(binds)}, {hist}, s=st(s), {outer_args})",
        f"    d = hpvm.node(leaf_d, grid={d_grid}, out=st(out_d), out_bytes=st(out_d_bytes))",
        f"    hpvm.edge(o, d, hpvm.ALL_TO_ALL, 0, 0, stream={not shape.kept_edge})",
        "    return o.out[0], d.out[0]", ""])


def expected(shape: StreamShape, items: list[tuple[list[int], int, dict[str, int]]]
             ) -> list[H.Expected]:
    """Each item's buffers and pops, the items run in push order: (a, s, params) per item. With
    kept_hist the returned hists are the shared histogram after each item; with kept_edge, every
    d reads the first item's value from outer."""
    results: list[H.Expected] = []
    shared = [0] * H.HIST
    first_value: int | None = None
    for a, s, params in items:
        got = H.simulate(shape.h, a, s, params)
        if first_value is None:
            first_value = got.outputs[0]
        if shape.kept_edge and got.outputs[0] != first_value:
            got = H.simulate(shape.h, a, s, params, d_input=first_value)
        if shape.kept_hist:
            shared = [H.wrap(x + y) for x, y in zip(shared, got.hist)]
            got.hist = list(shared)
        results.append(got)
    return results
