"""Time printing and parsing the textual IR of a large graph (5,000 leaf nodes in one graph).

Run from the repository root: `python benchmarks/text_ir_speed.py [nodes]`. Each node takes the
previous node's output through an edge and a graph parameter through a bind, so the text has
one node line, one edge and one or two binds per node. The target is under 1 s for printing and
parsing together; the best of a few runs is reported, so that one-time costs (building the
parser's tables) are shown apart.
"""
from __future__ import annotations

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import hpvm_py as hpvm  # noqa: E402
from hpvm_py import f32, i64  # noqa: E402
from hpvm_py.ir.parser import parse_module  # noqa: E402
from hpvm_py.ir.printer import print_module  # noqa: E402

NODES = int(sys.argv[1]) if len(sys.argv) > 1 else 5000


@hpvm.leaf
def step(x: f32, scale: f32, n: i64) -> f32:
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    if i < n:
        return x * scale + 1.0
    return x


@hpvm.graph
def chain(x: f32, scale: f32, n: i64) -> f32:
    prev = hpvm.node(step, grid=n, x=x, scale=scale, n=n)
    for _ in range(NODES - 1):
        prev = hpvm.node(step, grid=n, x=prev.out[0], scale=scale, n=n)
    return prev.out[0]


def _best(fn, repeat: int = 3) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    start = time.perf_counter()
    module = chain.module()
    build = time.perf_counter() - start
    start = time.perf_counter()
    parse_module("module @x graph @x() -> () {}")
    tables = time.perf_counter() - start
    print_time, text = _best(lambda: print_module(module))
    parse_time, parsed = _best(lambda: parse_module(text))
    assert parsed == module and print_module(parsed) == text
    print(f"nodes: {NODES}, text: {len(text):,} bytes, {text.count(chr(10)):,} lines")
    print(f"front end (build the module): {build:.3f} s; parser tables (once): {tables:.3f} s")
    print(f"print: {print_time:.3f} s  parse: {parse_time:.3f} s  "
          f"total: {print_time + parse_time:.3f} s")


if __name__ == "__main__":
    main()
