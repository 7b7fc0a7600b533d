"""Generated programs against the lanes analysis (passes/lanes.py): random leaves that loop over
columns with private temporaries, carried sums, stores with random strides and offsets, loads of
written buffers, conditional stores and inner loops. Whenever the analysis admits a leaf and its
launch check holds, the leaf must compute the same on the cpu target with its loop run in the
lanes' order (lane after lane) and backwards: the order the GPU's lanes would impose must not
matter. Each program is also run as written, and every variant's results are compared."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.passes.lanes import atom_values, lane_loop
from hpvm_py.types import PtrType

pytestmark = pytest.mark.skipif("cpu" not in __import__("conftest").TARGETS, reason="the cpu target")

COLS_MAX = 40
MARGIN = 3 * COLS_MAX + 20  # stores with a negative stride start this far into the row
SPAN = 2 * MARGIN + 3 * COLS_MAX + 40  # a row's elements in y and z
ROWS = 5

HEADER = """import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64


@hpvm.leaf
def body(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]],
         z_bytes: i64, cols: i64, a: i64, b: i64, s: i64) -> i64:
    row = hpvm.get_node_instance_id_x(hpvm.get_node())
    base = row * SPAN
"""

GRAPH = """

@hpvm.graph
def root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]],
         z_bytes: i64, rows: i64, cols: i64, a: i64, b: i64, s: i64) -> i64:
    node = hpvm.node(body, grid=rows, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, z=z,
                     z_bytes=z_bytes, cols=cols, a=a, b=b, s=s)
    return node.out[0]
"""

LOOPS = {"as written": ["    for col in range(cols):"],
         "lanes": ["    for lane in range(4):", "        for col in range(lane, cols, 4):"],
         "backwards": ["    for col in range(cols - 1, -1, -1):"]}


def program(rng: np.random.Generator) -> tuple[list[str], list[str], str]:
    """(statements before the loop, the loop body, the return statement)."""
    pre, body = [], []
    temps = []
    carried = rng.random() < 0.3
    if carried:
        pre.append("acc: f32 = 0.0")
    for _ in range(int(rng.integers(2, 6))):
        kind = rng.choice(["temp", "store", "carried", "load-written", "if-store", "inner",
                           "stale-temp"], p=[0.25, 0.3, 0.08, 0.07, 0.12, 0.1, 0.08])
        load_at = f"base + (col * {int(rng.integers(1, 4))} + {int(rng.integers(0, 9))}) % SPAN"
        if kind == "temp":
            name = f"t{len(temps)}"
            body.append(f"{name} = x[{load_at}] * {float(rng.integers(-3, 4))}")
            temps.append(name)
        elif kind in ("store", "if-store"):
            buffer = rng.choice(["y", "z"])
            stride = rng.choice(["1", "2", "3", "-1", "a", "-2"])
            offset = rng.choice(["0", "1", "5", "b", "s", "-b", "2 * s"])
            value = rng.choice(temps) if temps and rng.random() < 0.7 else f"x[{load_at}]"
            store = f"{buffer}[base + MARGIN + col * {stride} + {offset}] = {value} + 1.0"
            if kind == "if-store" and temps:
                body.append(f"if {rng.choice(temps)} > 0.0:")
                body.append("    " + store)
            else:
                body.append(store)
        elif kind == "carried":
            if not carried:
                pre.append("acc: f32 = 0.0")
                carried = True
            body.append(f"acc = acc + x[{load_at}]")
            body.append("y[base + MARGIN + col] = acc")
        elif kind == "load-written":
            name = f"t{len(temps)}"
            body.append(f"{name} = y[base + MARGIN + col + {int(rng.integers(-2, 3))}]")
            temps.append(name)
        elif kind == "inner":
            name = f"t{len(temps)}"
            body.append(f"{name}: f32 = 0.0")
            body.append("for k in range(3):")
            body.append(f"    {name} = {name} + x[base + (col + k) % SPAN]")
            temps.append(name)
        elif kind == "stale-temp":  # read before it is written: the last iteration's value
            if "tc: f32 = 0.0" not in pre:
                pre.append("tc: f32 = 0.0")
            body.append("z[base + MARGIN + col] = tc")
            body.append(f"tc = x[{load_at}]")
    if not body:
        body.append("y[base + MARGIN + col] = 1.0")
    ret = "return y_bytes"
    if rng.random() < 0.1:  # the loop's last column, returned
        pre.append("last = 0")
        body.append("last = col")
        ret = "return last"
    return pre, body, ret


def source(pre: list[str], body: list[str], ret: str, loop: str) -> str:
    lines = [HEADER.replace("SPAN", str(SPAN))]
    lines += [f"    {line}" for line in pre]
    lines += LOOPS[loop]
    indent = "    " * (len(LOOPS[loop]) + 1)
    lines += [indent + line.replace("SPAN", str(SPAN)).replace("MARGIN", str(MARGIN)) for line in body]
    lines.append(f"    {ret}")
    return "\n".join(lines) + GRAPH


def run(module, params: dict, x: np.ndarray) -> tuple:
    y = np.zeros(ROWS * SPAN, np.float32)
    z = np.zeros(ROWS * SPAN, np.float32)
    try:
        with hpvm.runtime("cpu"):
            out = hpvm.wait(hpvm.launch(module.root, x, x.nbytes, y, y.nbytes, z, z.nbytes, ROWS,
                                        params["cols"], params["a"], params["b"], params["s"]))
    except hpvm.errors.HPVMError as exc:
        return ("error", type(exc).__name__)
    return (int(out), y, z)


def same(p: tuple, q: tuple) -> bool:
    if p[0] == "error" or q[0] == "error":
        return p == q
    return p[0] == q[0] and np.array_equal(p[1], q[1], equal_nan=True) and \
        np.array_equal(p[2], q[2], equal_nan=True)


def test_admitted_loops_compute_the_same_in_any_order() -> None:
    rng = np.random.default_rng(20261127)
    admitted = split = refused = 0
    for case in range(60):
        pre, body, ret = program(rng)
        module = load(source(pre, body, ret, "as written"))
        leaf = module.body.ir
        modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
        lanes = lane_loop(leaf, modes)
        if lanes is None:
            refused += 1
            continue
        admitted += 1
        others = {name: load(source(pre, body, ret, name)) for name in ("lanes", "backwards")}
        for _ in range(3):
            params = {"cols": int(rng.integers(1, COLS_MAX + 1)), "a": int(rng.integers(-2, 4)),
                      "b": int(rng.integers(0, 6)), "s": int(rng.integers(0, 4))}
            if not lanes.holds(atom_values(params, [(ROWS,)])):
                continue
            split += 1
            x = rng.standard_normal(ROWS * SPAN).astype(np.float32)
            written = run(module, params, x)
            for name, other in others.items():
                assert same(written, run(other, params, x)), (name, params, pre, body, ret)
    assert admitted >= 15 and refused >= 15 and split >= 20, (admitted, refused, split)
