"""Claims of the user guide tried with generated inputs (the documentation-claims hunt).

- docs/language.md, "Typing": expressions of int literals are folded with Python's exact
  arithmetic, except that `//` and `%` by zero give 0 and a shift by a negative amount or by 64
  or more gives what an i64 shift gives; a result that does not fit its type is an error, and so
  is an integer of more than 65,536 bits (before: `3 ** 10 ** 7` took seconds and
  `10 ** 10 ** 9` minutes or all memory in the front end, and a MemoryError came out as the
  graph body's error at the graph's line).
- docs/language.md, "Instances, edges and binds": grids are rectangular at every level; a count
  from a value that differs between a replicated internal node's instances fails the launch with
  an ExecutionError at the node's line, on every target (no test reached that error before).
- docs/language.md, "Instances, edges and binds": one-to-one grids that are not constants are
  checked at launch, at every relaunch with other sizes (one example tested it before).
- docs/language.md, "Memory" and the rules table: a negative instance count, or a grid of more
  than 2**63 - 1 instances counting every enclosing node's, fails the launch (`instance-counts`;
  the latter a LaunchError) before any node runs; products that wrap 64 bits included.
- docs/streaming.md, "What binds and edges mean in a streaming graph": a non-streaming bind keeps
  the first push's value (scalars and buffers of other sizes pushed later are ignored), streaming
  ones carry each push's (one example tested it before).
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py.errors import ExecutionError, FrontendError, HPVMError, LaunchError

HOST_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
I64_MIN, I64_MAX = -2 ** 63, 2 ** 63 - 1

# -- constant expressions ------------------------------------------------------------------------

FOLD_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64


@hpvm.leaf
def put(out: Out[Ptr[i64]], out_bytes: i64):
    out[0] = {E}


@hpvm.graph
def root(out: Out[Ptr[i64]], out_bytes: i64):
    hpvm.node(put, out=out, out_bytes=out_bytes)
'''
STORE_LINE = 8  # the line of `out[0] = ...` in FOLD_SOURCE
FOLD_OPS = ["+", "-", "*", "//", "%", "<<", ">>", "&", "|", "^", "**"]


class TooBig(Exception):
    """The oracle's integer of more than 65,536 bits."""


def fold(op: str, x: int, y: int) -> int:
    """The documented fold of two int literals: Python's exact arithmetic, `//` and `%` by zero 0,
    shifts outside [0, 64) as an i64 shift gives them."""
    if op in ("//", "%") and y == 0:
        r = 0
    elif op == "<<":
        r = x << y if 0 <= y < 64 else 0
    elif op == ">>":
        r = x >> y if 0 <= y < 64 else (-1 if x < 0 else 0)
    elif op == "**" and y > 0 and (abs(x).bit_length() - 1) * y > 1 << 16:
        raise TooBig()
    else:
        r = eval(f"x {op} y")
    if r.bit_length() > 1 << 16:
        raise TooBig()
    return r


Tree = int | tuple[str, "Tree", "Tree"]


def literal_tree(rng: random.Random, depth: int) -> Tree:
    """A random expression of int literals: an int, or (op, left, right)."""
    if depth == 0 or rng.random() < 0.25:
        return rng.choice([0, 1, -1, 2, 3, 7, -8, 63, 64, 65, -64, 2 ** 31, 2 ** 32 + 1, I64_MAX, I64_MIN,
                           2 ** 63, 2 ** 64, -2 ** 64 - 1, 10 ** 30, rng.randint(-1000, 1000)])
    op = rng.choice(FOLD_OPS)
    if op == "**":  # small exponents, and (of a literal: never a tower) ones past the limit
        exponent = rng.choice([0, 1, 2, 3, 5, 8, 40, 1000, 41352, 70000])
        return op, literal_tree(rng, depth - 1 if exponent <= 8 else 0), exponent
    return op, literal_tree(rng, depth - 1), literal_tree(rng, depth - 1)


def source_of(tree: Tree) -> str:
    return f"({tree})" if isinstance(tree, int) else f"({source_of(tree[1])} {tree[0]} {source_of(tree[2])})"


def value_of(tree: Tree) -> int:
    """The exact value of the tree by the documented fold; TooBig past the limit."""
    return tree if isinstance(tree, int) else fold(tree[0], value_of(tree[1]), value_of(tree[2]))


@pytest.mark.parametrize("seed", range(4))
def test_constant_expressions_fold_exactly_or_are_refused(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(12):
        tree = literal_tree(rng, 3)
        source = source_of(tree)
        try:
            value = value_of(tree)
            refused = not I64_MIN <= value <= I64_MAX
        except TooBig:
            refused = True
        for target in HOST_TARGETS:
            out = np.zeros(1, np.int64)
            if refused:
                with pytest.raises(FrontendError) as info:
                    module = load(FOLD_SOURCE.format(E=source))
                    with hpvm.runtime(target):
                        hpvm.wait(hpvm.launch(module.root, out, out.nbytes))
                assert info.value.loc is not None and info.value.loc.line == STORE_LINE, \
                    f"{source}: {info.value}"
                break  # refused by the front end: every target alike
            module = load(FOLD_SOURCE.format(E=source))
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, out, out.nbytes))
            assert int(out[0]) == value, f"{target}: {source}"


@pytest.mark.parametrize("expression", ["3 ** 10 ** 7 % 7", "(2 ** 40000) * (2 ** 40000) % 3",
                                        "(-3) ** 41352 % 10"])
def test_an_integer_too_big_to_fold_is_a_located_error(expression: str) -> None:
    with pytest.raises(FrontendError, match="constant expression overflows") as info:
        hpvm.compile(load(FOLD_SOURCE.format(E=expression)).root, target="python")
    assert info.value.loc is not None and info.value.loc.line == STORE_LINE


# -- grids are rectangular at every level ----------------------------------------------------------

RECT_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i64


@hpvm.leaf
def src(v: In[Ptr[i64]], v_bytes: i64) -> i64:
    return v[hpvm.instance_id(0)]


@hpvm.leaf
def leaf(c: InOut[Ptr[i64]], c_bytes: i64):
    hpvm.atomic_add(c, 0, 1)


@hpvm.graph
def inner2(c: InOut[Ptr[i64]], c_bytes: i64, k: i64):
    hpvm.node(leaf, grid={G2}, c=c, c_bytes=c_bytes)


@hpvm.graph
def inner(c: InOut[Ptr[i64]], c_bytes: i64, k: i64):
    hpvm.node({CHILD}, grid={G1}, c=c, c_bytes=c_bytes{KARG})


@hpvm.graph
def root(v: In[Ptr[i64]], v_bytes: i64, c: InOut[Ptr[i64]], c_bytes: i64, n: i64):
    a = hpvm.node(src, grid=n, v=v, v_bytes=v_bytes)
    hpvm.node(inner, grid=n, c=c, c_bytes=c_bytes, k=a.out[0])
'''
INNER2_NODE_LINE, INNER_NODE_LINE = 18, 23  # the lines of inner2's and inner's hpvm.node


def grid_size(grid: str, k: int) -> int:
    value = eval(grid, {}, {"k": k})
    return int(np.prod(value)) if isinstance(value, tuple) else value


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", range(3))
def test_a_count_that_differs_between_parent_instances_fails_at_its_node(target: str, seed: int) -> None:
    """docs/language.md, "Instances, edges and binds": an instance count inside a replicated
    internal node must come out the same in all its instances; one from a value that differs
    between them (here fed by a one-to-one edge, directly or bound one level further down) fails
    the launch with an ExecutionError at the node's line; equal values run every instance."""
    rng = random.Random(seed)
    for _ in range(3):
        deep = rng.random() < 0.5
        g1 = rng.choice(["2", "1", "k"]) if deep else rng.choice(["k", "k * 2", "(k, 2)", "k + 1"])
        g2 = rng.choice(["k", "(2, k)", "k - k + 3"])
        module = load(RECT_SOURCE.format(G1=g1, G2=g2, CHILD="inner2" if deep else "leaf",
                                         KARG=", k=k" if deep else ""))
        for _ in range(4):
            n = rng.randint(2, 5)
            base = rng.randint(0, 3)
            v = np.full(n, base, np.int64)
            if rng.random() < 0.6:
                v[rng.randrange(n)] = base + rng.choice([1, 2]) if base == 0 else rng.choice([0, base + 1])
            differs = len(set(v.tolist())) > 1
            c = np.zeros(1, np.int64)
            line = INNER_NODE_LINE if differs and "k" in g1 else \
                INNER2_NODE_LINE if differs and deep and "k" in g2 else None
            with hpvm.runtime(target):
                if line is not None:
                    with pytest.raises(ExecutionError, match="differs between instances") as info:
                        hpvm.wait(hpvm.launch(module.root, v, v.nbytes, c, c.nbytes, n))
                    assert info.value.loc is not None and info.value.loc.line == line
                    continue
                hpvm.wait(hpvm.launch(module.root, v, v.nbytes, c, c.nbytes, n))
            want = n * grid_size(g1, base) * (grid_size(g2, base) if deep else 1)
            assert int(c[0]) == want, f"{target}: grids {g1} / {g2 if deep else '-'} over {v.tolist()}"


# -- one-to-one grids known only at launch ---------------------------------------------------------

EDGE_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def src(c: InOut[Ptr[i64]], c_bytes: i64) -> i64:
    hpvm.atomic_add(c, 0, 1)
    return hpvm.instance_id(0) + 1


@hpvm.leaf
def dst(c: InOut[Ptr[i64]], c_bytes: i64, v: i64):
    hpvm.atomic_add(c, 1, v)


@hpvm.graph
def inner(c: InOut[Ptr[i64]], c_bytes: i64, n: i64, m: i64):
    a = hpvm.node(src, grid={GA}, c=c, c_bytes=c_bytes)
    hpvm.node(dst, grid={GB}, c=c, c_bytes=c_bytes, v=a.out[0])


@hpvm.graph
def root(c: InOut[Ptr[i64]], c_bytes: i64, n: i64, m: i64):
    hpvm.node(inner, grid={GP}, c=c, c_bytes=c_bytes, n={NA}, m={NB})
'''
EDGE_LINE = 20  # the line of the one-to-one edge (dst's node)
EDGE_GRIDS = [("n", "m"), ("(n, m)", "(m, n)"), ("(n, 2)", "(m, 2)"), ("n * 2", "m + m"), ("(n, m, 1)", "(m, n, 1)")]
EDGE_PARENTS = [("1", "n", "m"), ("2", "n", "m"), ("n", "n", "m"), ("2", "n + 1", "m + 1"), ("(2, 2)", "m", "n")]


def dims(grid: str, env: dict[str, int]) -> tuple[int, ...]:
    value = eval(grid, {}, env)
    return value if isinstance(value, tuple) else (value,)


@pytest.mark.parametrize("target", TARGETS)
def test_one_to_one_grids_are_checked_at_every_launch(target: str) -> None:
    """docs/language.md: a one-to-one edge needs identical grids, checked at launch when they are
    not constants; relaunches (replayed, rebound) with other sizes are checked again. The check
    holds even where a parent runs no instance (every target alike)."""
    rng = random.Random(7)
    for ga, gb in EDGE_GRIDS:
        gp, na, nb = rng.choice(EDGE_PARENTS)
        module = load(EDGE_SOURCE.format(GA=ga, GB=gb, GP=gp, NA=na, NB=nb))
        with hpvm.runtime(target):
            for _ in range(6):
                n, m = rng.choice([(1, 1), (2, 2), (3, 3), (2, 3), (3, 2), (0, 0), (0, 1), (1, 0)])
                inner = {"n": eval(na, {}, {"n": n, "m": m}), "m": eval(nb, {}, {"n": n, "m": m})}
                a, b = dims(ga, inner), dims(gb, inner)
                parents = int(np.prod(dims(gp, {"n": n, "m": m})))
                c = np.zeros(2, np.int64)
                if a != b:
                    with pytest.raises(HPVMError, match="grids must be identical") as info:
                        hpvm.wait(hpvm.launch(module.root, c, c.nbytes, n, m))
                    assert info.value.rule == "one-to-one-grids" and info.value.loc.line == EDGE_LINE
                    continue
                hpvm.wait(hpvm.launch(module.root, c, c.nbytes, n, m))
                count = int(np.prod(a))
                # instance (x, y, z) of dst receives instance (x, y, z) of src: x + 1 each
                flat = [x + 1 for x in range(a[0]) for _ in range(count // a[0] if a[0] else 0)]
                assert c.tolist() == [parents * count, parents * sum(flat)], (target, ga, gb, gp, n, m)


# -- instance counts: negative or past 2**63 - 1 ---------------------------------------------------

COUNT_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def leaf(c: InOut[Ptr[i64]], c_bytes: i64):
    hpvm.atomic_add(c, 0, 1)


@hpvm.graph
def inner(c: InOut[Ptr[i64]], c_bytes: i64, a: i64, b: i64, d: i64):
    hpvm.node(leaf, grid={GI}, c=c, c_bytes=c_bytes)


@hpvm.graph
def root(c: InOut[Ptr[i64]], c_bytes: i64, a: i64, b: i64, d: i64):
    hpvm.node(inner, grid={GO}, c=c, c_bytes=c_bytes, a=a, b=b, d=d)
'''
COUNT_GRIDS = [("(a, b)", "d"), ("a", "(b, d)"), ("(a, b, d)", "1"), ("a * b", "d"), ("a", "b * d"), ("(a, b)", "(d, 1)")]
COUNT_VALUES = [0, 1, 2, 3, -1, -3, I64_MIN, 2 ** 31, 2 ** 32, 2 ** 32 + 1, 2 ** 62, I64_MAX, 3037000499, 3037000500]


def launch_verdict(levels: list[tuple[int, ...]]) -> int | str | None:
    """The instances a launch runs, 'negative' or 'overflow' (docs/language.md: a negative count
    fails the launch, and so does a grid of more than 2**63 - 1 instances counting every enclosing
    node's); None for a launch too large to run in a test."""
    if any(x < 0 for level in levels for x in level):
        return "negative"
    total = 1
    for level in levels:  # outermost first: a node whose own instances overflow fails, inner or not
        total *= int(np.prod([x for x in level], dtype=object))
        if total == 0:
            return 0
        if total > I64_MAX:
            return "overflow"
    return total if total <= 5000 else None


@pytest.mark.parametrize("target", TARGETS)
def test_instance_counts_negative_or_past_the_limit_fail_the_launch(target: str) -> None:
    rng = random.Random(11)
    for inner_grid, outer_grid in COUNT_GRIDS:
        module = load(COUNT_SOURCE.format(GI=inner_grid, GO=outer_grid))
        tried = 0
        while tried < 8:
            a, b, d = (rng.choice(COUNT_VALUES) if rng.random() < 0.6 else rng.randint(0, 4) for _ in range(3))
            env = {"a": a, "b": b, "d": d}
            verdict = launch_verdict([dims(outer_grid, env), dims(inner_grid, env)])
            if verdict is None:
                continue
            tried += 1
            c = np.zeros(1, np.int64)
            with hpvm.runtime(target):
                if isinstance(verdict, int):
                    hpvm.wait(hpvm.launch(module.root, c, c.nbytes, a, b, d))
                    assert int(c[0]) == verdict, (target, inner_grid, outer_grid, a, b, d)
                    continue
                with pytest.raises(HPVMError) as info:
                    hpvm.wait(hpvm.launch(module.root, c, c.nbytes, a, b, d))
            assert info.value.rule == "instance-counts", (inner_grid, outer_grid, a, b, d, str(info.value))
            if verdict == "overflow":
                assert isinstance(info.value, LaunchError), str(info.value)
            assert int(c[0]) == 0, "a node ran before the launch failed"


# -- streams: a non-streaming bind keeps the first push's value -------------------------------------

STREAM_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def first(a: In[Ptr[f32]], a_bytes: i64, w: In[Ptr[f32]], w_bytes: i64, k: f32, m: i64,
          t: Out[Ptr[f32]], t_bytes: i64, n: i64) -> i64:
    i = hpvm.instance_id(0)
    if i < n:
        t[i] = a[i] * k + w[i % m]
    return i


@hpvm.leaf
def second(t: In[Ptr[f32]], t_bytes: i64, o: Out[Ptr[f32]], o_bytes: i64, c: i32, n: i64, tok: i64):
    i = hpvm.instance_id(0)
    if i < n:
        o[i] = t[i] + f32(c)


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, w: In[Ptr[f32]], w_bytes: i64, k: f32, m: i64,
         t: InOut[Ptr[f32]], t_bytes: i64, o: Out[Ptr[f32]], o_bytes: i64, c: i32, n: i64):
    s = hpvm.streaming
    f = hpvm.node(first, grid=n, a=s(a), a_bytes=s(a_bytes), w={W}, w_bytes={WB}, k={K}, m={M},
                  t=s(t), t_bytes=s(t_bytes), n=s(n))
    hpvm.node(second, grid=n, t=s(t), t_bytes=s(t_bytes), o=s(o), o_bytes=s(o_bytes), c={C},
              n=s(n), tok=s(f.out[0]))
'''


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("seed", range(4))
def test_non_streaming_binds_keep_the_first_pushs_values(target: str, seed: int) -> None:
    """docs/streaming.md: a non-streaming bind carries the value of the first push for every
    later item (later pushes pass other scalars and buffers of other sizes, ignored); streaming
    binds carry each push's. Random mixes of the two over 2-6 items, popped as they go or after."""
    rng = random.Random(seed)
    data = np.random.default_rng(seed)
    for _ in range(3):
        streamed = {x: rng.random() < 0.5 for x in "WKMC"}
        form = {x: f"s({name})" if streamed[x] else name for x, name in zip("WKMC", ("w", "k", "m", "c"))}
        module = load(STREAM_SOURCE.format(W=form["W"], WB="s(w_bytes)" if streamed["W"] else "w_bytes",
                                           K=form["K"], M=form["M"], C=form["C"]))
        items = []
        for _ in range(rng.randint(2, 6)):
            w = data.random(rng.randint(1, 6)).astype(np.float32)
            items.append({"a": data.random(rng.randint(0, 20)).astype(np.float32), "w": w,
                          "k": rng.choice([0.5, 2.0, -3.0, 1e30]), "m": rng.randint(1, len(w)),
                          "c": rng.randint(-5, 5)})
        # a streamed size may not exceed the kept buffer (or the reverse): keep every item in bounds
        for item in items:
            used_w = (item if streamed["W"] else items[0])["w"]
            if streamed["M"]:
                item["m"] = min(item["m"], len(used_w))
            elif items[0]["m"] > len(used_w):
                item["w"] = np.concatenate([item["w"], np.ones(items[0]["m"], np.float32)])
        outs = []
        with hpvm.runtime(target):
            h = hpvm.launch(module.root, stream=True)
            for item in items:
                n = len(item["a"])
                t, o = np.zeros(n, np.float32), np.zeros(n, np.float32)
                outs.append(o)
                hpvm.push(h, item["a"], item["a"].nbytes, item["w"], item["w"].nbytes, item["k"], item["m"],
                          t, t.nbytes, o, o.nbytes, item["c"], n)
                if rng.random() < 0.5:
                    hpvm.pop(h)
            hpvm.wait(h)
            list(h.results())
        for number, (item, o) in enumerate(zip(items, outs)):
            use = {x: item if streamed[x] else items[0] for x in "WKMC"}
            index = np.arange(len(item["a"])) % use["M"]["m"]
            want = item["a"] * np.float32(use["K"]["k"]) + use["W"]["w"][index] + np.float32(use["C"]["c"])
            np.testing.assert_array_equal(o, want.astype(np.float32), err_msg=f"{target} item {number} {streamed}")
