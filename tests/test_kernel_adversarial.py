"""Adversarial leaves for the analyses that pick faster code when they can prove something.

Two holes found by generated leaves, each with its regression, then seeded generators that keep
attacking the same analyses (every target compared with the python target, bit for bit):

- gpu (backends/triton/controlflow.py, `while_`): the body of a divergent `while` loop ran under
  the loop's own mask only, without `live`: a lane that returned in the body still ran the rest
  of that iteration (its stores and atomics), until the loop's mask was recomputed at its end.
- passes/uniform.py (`Uniformity`): the variable of a `for` loop with uniform bounds counted as
  uniform even when the body breaks under a per-instance condition, although after such a loop
  each instance holds the value at which it broke. The cpu target's loop plan then ran the loop at
  group level and refused the (barrier-free) leaf with a `barrier-uniform` CompileError, and the
  verifier let a barrier under a condition on that variable through (a divergent barrier).

The generators: leaves under a replicated parent (the gpu target's grid tiles, the cpu target's
row plans) that reuse instance-id names as locals, as loop variables and through tuple unpacking
and augmented assignment, loop with negative, zero and data-dependent steps, leave loops by
break/continue/return, guard with `!=`, chained comparisons and early returns, call helpers, cast
through narrow types and share a scratch array across barriers; and divergent `while` loops that
return, break and continue (with and without outputs).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py.errors import HPVMError, VerificationError
from hpvm_py.ir import kernel as K
from hpvm_py.passes.uniform import Uniformity
from hpvm_py.types import i1, i64

COMPILED = [t for t in TARGETS if t != "python"]


def _run(module, target: str, args: list, outs: list[int]):
    """(outcome, arrays): 'ok' with copies of the arrays at `outs`, or the error's class name."""
    args = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    try:
        with hpvm.runtime(target):
            result = hpvm.wait(hpvm.launch(module.root, *args))
            for i in outs:
                hpvm.request_memory(args[i])
    except HPVMError as e:
        return type(e).__name__, []
    return "ok", [args[i] for i in outs] + ([] if result is None else [np.asarray(result)])


def _agree(source: str, args: list, outs: list[int]) -> None:
    module = load(source)
    expected = _run(module, "python", args, outs)
    for target in COMPILED:
        got = _run(module, target, args, outs)
        assert got[0] == expected[0] and len(got[1]) == len(expected[1]) and all(
            np.array_equal(g, e) for g, e in zip(got[1], expected[1])), \
            f"{target} differs from python:\n{source}\n{target}: {got}\npython: {expected}"


# -- a return inside a divergent while loop ------------------------------------------------------

WHILE_RETURN = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def leaf(out: InOut[Ptr[i64]], out_bytes: i64, k: i64):
    i = hpvm.instance_id(0)
    t = 0
    while t < k:
        t += 1
        if i > 1:
            if i < 6:
                return
            out[i] = 1000
    out[i] = 5


@hpvm.graph
def root(out: InOut[Ptr[i64]], out_bytes: i64, k: i64):
    hpvm.node(leaf, grid=8, out=out, out_bytes=out_bytes, k=k)
'''


@pytest.mark.parametrize("target", TARGETS)
def test_a_lane_that_returns_in_a_while_loop_skips_the_rest_of_its_iteration(target: str) -> None:
    module = load(WHILE_RETURN)
    out = np.full(8, 7, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, out, out.nbytes, 1))
        hpvm.request_memory(out)
    assert out.tolist() == [5, 5, 7, 7, 7, 7, 5, 5]


WHILE_TEMPLATE = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i64


@hpvm.leaf
def leaf(inp: In[Ptr[i64]], inp_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64,
         hist: InOut[Ptr[i64]], hist_bytes: i64, k: i64){ret}:
    i = hpvm.instance_id(0)
    x = inp[i]
    t = 0
    while t < {bound}:
        t += 1
{body}
    out[i] = x * 10 + t
{tail}


@hpvm.graph
def root(inp: In[Ptr[i64]], inp_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64,
         hist: InOut[Ptr[i64]], hist_bytes: i64, k: i64){ret}:
    n = hpvm.node(leaf, grid={grid}, inp=inp, inp_bytes=inp_bytes, out=out, out_bytes=out_bytes,
                  hist=hist, hist_bytes=hist_bytes, k=k)
{graph_tail}
'''
WHILE_BODIES = [
    "        if x > t:\n            if x < 3:\n                return{rv}\n            out[i] = 1000 + t\n"
    "        x -= 1",
    "        for j in range(3):\n            if x == j + t:\n                return{rv}\n"
    "            hpvm.atomic_add(hist, i % 4, 1)\n        x += 1",
    "        if x % 2 == 0:\n            x += 3\n            continue\n        if x > 4:\n"
    "            return{rv}\n        hpvm.atomic_add(hist, (x + 8) % 4, 1)\n        out[i] = t",
    "        t2 = 0\n        while t2 < x:\n            t2 += 1\n            if t2 == 2:\n"
    "                return{rv}\n            out[i] = 500 + t2\n        x += 1\n        if x > 5:\n"
    "            break",
]


@pytest.mark.parametrize("seed", range(3))
def test_generated_returns_breaks_and_continues_in_while_loops(seed: int) -> None:
    rng = random.Random(9100 + seed)
    data = np.random.default_rng(seed)
    for _ in range(4):
        ret = rng.random() < 0.3
        source = WHILE_TEMPLATE.format(
            ret=" -> i64" if ret else "", bound=rng.choice(["k", "3", "i % 4"]),
            body=rng.choice(WHILE_BODIES).replace("{rv}", " x" if ret else ""),
            tail="    return t" if ret else "", graph_tail="    return n.out[0]" if ret else "",
            grid=rng.choice([1, 5, 8, 33]))
        inp = data.integers(-3, 8, 40).astype(np.int64)
        out, hist = np.full(40, -7, np.int64), np.zeros(4, np.int64)
        _agree(source, [inp, inp.nbytes, out, out.nbytes, hist, hist.nbytes, rng.choice([0, 1, 2, 4])],
               [2, 4])


# -- the variable of a loop that some instances leave early ----------------------------------------

BROKEN_LOOP = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def leaf(inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    for v in range(4):
        if inp[i] > v:
            break
{after}


@hpvm.graph
def root(inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, n: i64):
    hpvm.node(leaf, grid=n, inp=inp, inp_bytes=inp_bytes, out=out, out_bytes=out_bytes, n=n)
'''


def test_a_loop_left_by_a_per_instance_break_leaves_its_variable_per_instance() -> None:
    """`range(v, n)` after the loop is no group-level loop: the cpu target compiled the leaf."""
    after = "    acc = 0\n    for w in range(v, n):\n        acc += inp[i] * w\n    out[i] = acc"
    inp = np.array([3, -1, 0, 2, 1, 4, -2, 0, 1, 3, 2, -1, 0, 0, 5, 1], np.int64)
    out = np.zeros(16, np.int64)
    _agree(BROKEN_LOOP.format(after=after), [inp, inp.nbytes, out, out.nbytes, 16], [2])


def test_a_barrier_under_a_condition_on_such_a_variable_is_divergent() -> None:
    after = "    if v == 2:\n        hpvm.barrier()\n    out[i] = v"
    module = load(BROKEN_LOOP.format(after=after))
    inp = np.array([3, 0, 2, 1, 0, 0, 5, 1], np.int64)
    out = np.zeros(8, np.int64)
    with pytest.raises(VerificationError, match="barrier-uniform"):
        with hpvm.runtime("python"):
            hpvm.wait(hpvm.launch(module.root, inp, inp.nbytes, out, out.nbytes, 8))


def test_uniformity_of_loop_variables() -> None:
    def const(value: int) -> K.Const:
        return K.Const(type=i64, value=value)

    def loop(var: str, cond: K.Expr) -> K.For:
        return K.For(var=var, start=const(0), stop=const(4), step=const(1),
                     body=[K.If(cond=cond, then=[K.Break()], orelse=[])])

    per_instance = K.Compare(op="gt", lhs=K.InstanceId(type=i64, level=0, dim=0), rhs=const(1),
                             type=i1)
    same = K.Compare(op="gt", lhs=const(2), rhs=const(1), type=i1)
    leaf = K.LeafFunc(name="leaf", params=[], outputs=[], locals={"v": i64, "w": i64},
                      body=[loop("v", per_instance), loop("w", same)])
    uniform = Uniformity(leaf, (), frozenset())
    assert "v" not in uniform.locals and "w" in uniform.locals


# -- generated leaves ----------------------------------------------------------------------------

HELPER = '''
@hpvm.func
def h1(a: i64, b: i64) -> i64:
    c = a * 3 - b
    if c > b:
        return c - a
    else:
        return b + (a & 7)
'''
SHAPES = {  # the leaf's ids and counts, its grid, its parent's grid (None: no parent)
    "1x1": (["lane = hpvm.get_node_instance_id_x(me)", "block = hpvm.get_node_instance_id_x(parent)",
             "W = hpvm.get_num_node_instances_x(me)", "NB = hpvm.get_num_node_instances_x(parent)",
             "g = block * W + lane"], ["lane", "block"], "(WX,)", "(BX,)"),
    "2x2": (["lane = hpvm.get_node_instance_id_x(me)", "block = hpvm.get_node_instance_id_x(parent)",
             "ly = hpvm.get_node_instance_id_y(me)", "by = hpvm.get_node_instance_id_y(parent)",
             "W = hpvm.get_num_node_instances_x(me)", "NB = hpvm.get_num_node_instances_x(parent)",
             "H = hpvm.get_num_node_instances_y(me)", "g = ((by * H + ly) * NB + block) * W + lane"],
            ["lane", "block", "ly", "by"], "(WX, WY)", "(BX, BY)"),
    "flat": (["lane = hpvm.get_node_instance_id_x(me)", "W = hpvm.get_num_node_instances_x(me)",
              "NB = 1", "g = lane"], ["lane"], "(WX,)", None),
    "3x1": (["lane = hpvm.get_node_instance_id_x(me)", "ly = hpvm.get_node_instance_id_y(me)",
             "lz = hpvm.get_node_instance_id_z(me)", "block = hpvm.get_node_instance_id_x(parent)",
             "W = hpvm.get_num_node_instances_x(me)", "H = hpvm.get_num_node_instances_y(me)",
             "D = hpvm.get_num_node_instances_z(me)", "NB = hpvm.get_num_node_instances_x(parent)",
             "g = ((block * D + lz) * H + ly) * W + lane"], ["lane", "ly", "lz", "block"],
            "(WX, WY, WZ)", "(BX,)"),
}
PARAMS = ("inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64, "
          "hist: InOut[Ptr[i64]], hist_bytes: i64, n: i64, k: i64, NI: i64")
ARGS = ("inp=inp, inp_bytes=inp_bytes, out=out, out_bytes=out_bytes, hist=hist, "
        "hist_bytes=hist_bytes, n=n, k=k, NI=NI")


class _Leaf:
    """One generated leaf: every instance writes out[g] only (its own element), atomics add to
    `hist`, every load is in bounds (`% NI`), so the result is the same in any instance order."""

    def __init__(self, rng: random.Random, shape: str, barrier: bool):
        self.r = rng
        self.shape = shape
        self.pre, self.ids, self.grid, self.parent_grid = SHAPES[shape]
        self.barrier = barrier and self.parent_grid is not None
        self.vars = ["a0", "a1", "a2"]
        self.lines: list[str] = []
        self.loops = 0
        self.counter = 0
        self.returns = True

    def atom(self) -> str:
        r, c = self.r, self.r.random()
        if c < 0.35:
            return r.choice(self.vars + self.ids)
        if c < 0.5:
            return str(r.choice([0, 1, 2, 3, 4, -1, 7, 16, 255, 256, -128]))
        if c < 0.6:
            return r.choice(["n", "k", "W", "NB"])
        if c < 0.75:
            return f"inp[({self.expr(1)}) % NI]"
        if c < 0.8:
            return "g"
        if "block" in self.ids:  # the grid-tiles coordinate's pattern, and others like it
            return r.choice(["(block * 4 + lane)", "(block * W + lane)", "(lane * 4 + block)"])
        return r.choice(["(lane + 1)", "(lane * 2)", "(lane - 1)"])

    def expr(self, depth: int = 2) -> str:
        r = self.r
        if depth <= 0:
            return self.atom()
        c = r.random()
        if c < 0.3:
            return self.atom()
        if c < 0.6:
            op = r.choice(["+", "-", "*", "//", "%", "&", "|", "^", "<<", ">>", "+", "-"])
            return f"({self.expr(depth - 1)} {op} {self.expr(depth - 1)})"
        if c < 0.68:
            t = r.choice(["i8", "u8", "i32", "u32", "u64", "i16", "u16"])
            return f"hpvm.i64(hpvm.{t}({self.expr(depth - 1)}))"
        if c < 0.75:
            return f"({self.expr(depth - 1)} if {self.cond(depth - 1)} else {self.expr(depth - 1)})"
        if c < 0.82:
            return f"{r.choice(['min', 'max'])}({self.expr(depth - 1)}, {self.expr(depth - 1)})"
        if c < 0.86:
            return f"h1({self.expr(depth - 1)}, {self.expr(depth - 1)})"
        if c < 0.9:
            return f"abs({self.expr(depth - 1)})"
        if c < 0.95:
            return f"(-{self.expr(depth - 1)})"
        return f"int({self.cond(depth - 1)})"

    def cond(self, depth: int = 1) -> str:
        r, c = self.r, self.r.random()
        if c < 0.55 or depth <= 0:
            return f"({self.expr(1)} {r.choice(['<', '<=', '>', '>=', '==', '!='])} {self.expr(1)})"
        if c < 0.7:
            return f"({self.expr(1)} < {self.expr(1)} <= {self.expr(1)})"
        if c < 0.85:
            return f"({self.cond(depth - 1)} {r.choice(['and', 'or'])} {self.cond(depth - 1)})"
        return f"(not {self.cond(depth - 1)})"

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def target(self) -> str:
        # now and then an instance id's name: passes that read through locals assigned once
        return self.r.choice(self.ids) if self.r.random() < 0.12 else self.r.choice(self.vars)

    def statement(self, indent: int, budget: int) -> None:
        r = self.r
        kinds = ["assign", "assign", "aug", "tuple", "store", "atomic"]
        kinds += ["if", "for", "for", "while"] if budget > 0 else []
        kinds += ["break", "continue"] if self.loops else []
        kinds += ["return"] if self.returns else []
        kind = r.choice(kinds)
        if kind == "assign":
            self.emit(indent, f"{self.target()} = {self.expr()}")
        elif kind == "aug":
            op = r.choice(["+=", "-=", "*=", "//=", "%=", "^=", "|=", "&=", "<<=", ">>="])
            self.emit(indent, f"{self.target()} {op} {self.expr(1)}")
        elif kind == "tuple":
            a, b = self.target(), self.target()
            b = b if a != b else ("a2" if a != "a2" else "a1")
            self.emit(indent, f"{a}, {b} = {self.expr(1)}, {self.expr(1)}")
        elif kind == "store":
            self.emit(indent, f"out[g] = {self.expr()}")
        elif kind == "atomic":
            self.emit(indent, f"hpvm.atomic_add(hist, ({self.expr(1)}) % 16, {self.expr(1)})")
        elif kind == "return":
            self.emit(indent, f"if {self.cond()}:")
            self.emit(indent + 1, "return")
        elif kind == "if":
            self.emit(indent, f"if {self.cond()}:")
            self.block(indent + 1, budget - 1)
            if r.random() < 0.3:
                self.emit(indent, f"elif {self.cond()}:")
                self.block(indent + 1, budget - 1)
            if r.random() < 0.4:
                self.emit(indent, "else:")
                self.block(indent + 1, budget - 1)
        elif kind == "for":
            var = self.target() if r.random() < 0.6 else f"v{self.counter}"
            self.counter += 1
            start = r.choice(["0", "1", "k", "lane", "a0 % 5", "-2", "n - 1", "3"])
            stop = r.choice(["3", "4", "k", "lane + 2", "W", "a1 % 6", "-1", "0", "2"])
            step = r.choice(["", "", ", 2", ", -1", ", -2", ", k", ", (inp[lane % NI] % 3)", ", 3"])
            self.emit(indent, f"for {var} in range({start}, {stop}{step}):")
            self.loops += 1
            self.block(indent + 1, budget - 1)
            self.loops -= 1
        elif kind == "while":
            t = f"t{self.counter}"
            self.counter += 1
            self.emit(indent, f"{t} = 0")
            self.emit(indent, f"while {t} < {r.choice(['3', '2', 'k % 4', 'lane % 3'])}:")
            self.emit(indent + 1, f"{t} += 1")
            self.loops += 1
            self.block(indent + 1, budget - 1)
            self.loops -= 1
        else:  # break, continue
            self.emit(indent, f"if {self.cond()}:")
            self.emit(indent + 1, kind)

    def block(self, indent: int, budget: int) -> None:
        for _ in range(self.r.randint(1, 3)):
            self.statement(indent, budget)

    def source(self) -> str:
        r = self.r
        pre = list(self.pre)
        if self.barrier:  # a scratch row shared by the parent instance's leaf instances
            pre = ["sx = hpvm.get_node_instance_id_x(me)", "sc = hpvm.malloc(WX * 8, hpvm.i64)"] + pre
        elif r.random() < 0.3:
            pre += r.choice(["if g >= n:", "if lane >= k:", "if not (0 < lane < W - 1):",
                             "if lane != k:"]), "    return"
        pre += [f"{v} = {r.choice(['0', 'lane', 'g', 'k', 'inp[g % NI]', str(i)])}"
                for i, v in enumerate(self.vars)]
        if self.barrier:
            self.returns = False  # no instance may leave before a barrier
            self.block(1, 2)
            self.emit(1, f"sc[sx] = {self.expr()}")
            if r.random() < 0.5:
                self.emit(1, f"for bt in range({r.choice(['k % 3', '2', 'NB', 'W - 1'])}):")
                self.emit(2, "hpvm.barrier()")
                self.emit(2, "a0 += sc[(sx + bt + 1) % WX]")
                self.emit(2, "hpvm.barrier()")
                self.emit(2, f"sc[sx] = a0 + {self.expr(1)}")
            self.emit(1, "hpvm.barrier()")
            self.emit(1, f"{self.target()} = sc[({self.expr(1)}) % WX]")
            self.returns = r.random() < 0.5
            self.block(1, 2)
        else:
            self.block(1, 3)
        if r.random() < 0.5:
            self.emit(1, f"out[g] = {self.expr()}")
        if r.random() < 0.3:
            self.emit(1, f"if {self.cond()}:")
            self.emit(2, f"out[g] = {self.expr()}")
        body = "\n".join("    " + line for line in pre) + "\n" + "\n".join(self.lines)
        parent = "    parent = hpvm.get_parent_node(me)\n" if self.parent_grid else ""
        source = f"import hpvm_py as hpvm\nfrom hpvm_py import In, Out, InOut, Ptr, i64\n{HELPER}\n\n" \
                 f"@hpvm.leaf\ndef leaf({PARAMS}):\n    me = hpvm.get_node()\n{parent}{body}\n\n\n"
        if self.parent_grid:
            source += f"@hpvm.graph\ndef inner({PARAMS}):\n    hpvm.node(leaf, grid={self.grid}, {ARGS})\n\n\n" \
                      f"@hpvm.graph\ndef root({PARAMS}):\n    hpvm.node(inner, grid={self.parent_grid}, {ARGS})\n"
        else:
            source += f"@hpvm.graph\ndef root({PARAMS}):\n    hpvm.node(leaf, grid={self.grid}, {ARGS})\n"
        return source


def _generated(seed: int, barrier: bool) -> None:
    rng = random.Random(seed)
    leaf = _Leaf(rng, rng.choice(["1x1", "1x1", "2x2", "flat", "3x1"]), barrier)
    source = leaf.source()
    sizes = {"WX": rng.choice([1, 2, 3, 4, 5, 8, 16]), "WY": rng.choice([1, 2, 3]),
             "WZ": rng.choice([1, 2]), "BX": rng.choice([1, 2, 3, 5]), "BY": rng.choice([1, 2])}
    for key, value in sizes.items():
        source = source.replace(key, str(value))
    total = sizes["WX"] * {"1x1": sizes["BX"], "2x2": sizes["WY"] * sizes["BX"] * sizes["BY"],
                           "flat": 1, "3x1": sizes["WY"] * sizes["WZ"] * sizes["BX"]}[leaf.shape]
    data = np.random.default_rng(seed)
    ni = rng.choice([1, 3, 7, 16, 33])
    inp = data.integers(-6, 7, ni).astype(np.int64)
    if rng.random() < 0.3:
        inp[data.integers(0, ni)] = rng.choice([2**63 - 1, -2**63, 2**31, -1, 255, 128])
    out = data.integers(100, 200, total).astype(np.int64)  # Out: unwritten elements keep these
    hist = np.zeros(16, np.int64)
    n, k = rng.choice([total, total - 1, total + 3, 1]), rng.choice([0, 1, 2, 3, -1, 5, total])
    _agree(source, [inp, inp.nbytes, out, out.nbytes, hist, hist.nbytes, n, k, ni], [2, 4])


# (a store under an `if` leaves part of `out` unwritten: the leaf is warned about, as it should be)
@pytest.mark.filterwarnings("ignore::hpvm_py.errors.HPVMWarning")
@pytest.mark.parametrize("seed", range(4))
def test_generated_leaves_reusing_ids_loops_and_guards(seed: int) -> None:
    for j in range(10):
        _generated(7700 + 10 * seed + j, barrier=False)


@pytest.mark.filterwarnings("ignore::hpvm_py.errors.HPVMWarning")
@pytest.mark.parametrize("seed", range(2))
def test_generated_leaves_sharing_scratch_across_barriers(seed: int) -> None:
    for j in range(8):
        _generated(8800 + 8 * seed + j, barrier=True)
