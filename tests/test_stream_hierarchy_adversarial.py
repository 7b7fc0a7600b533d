"""Streams of hierarchical graphs, hunted: stages that are replicated internal nodes holding graphs
nested three levels deep (tests/differential/stream_hierarchy.py over hierarchy.py's programs),
kept binds and edges among streaming ones, items of other sizes and scalars, empty grids in some
items, an item whose index runs out of bounds; scalar outputs of every type through one, two and
three levels of binds and over edges, plain and streaming, bit for bit on every target; and the
reference spellings (create_node_2d/3d, bind_input, bind_output, edge) against the keyword ones.

Every pop must equal what the documented semantics give for the item run alone (and no finished
item may be lost or reordered); every buffer too.

Then the bugs found, on the GPU targets' whole items (rt/stream/items.py):
- a stage that is a chain down to a leaf (wrapper, grid of blocks, leaf) feeding a one-to-one edge
  failed every item with "one-to-one edge ... joins grids [(), ()] and [()]": the check compared
  the extents of all the chain's levels with the consumer's grid, not the stage node's own grid;
- a bf16 output that forwards its input (known on the host) popped the float's value converted to
  uint16 (1.5 popped as 1, -2.0 as 65534), not its bf16 bits.
"""
from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import types as T
from hpvm_py.errors import ExecutionError
from conftest import TARGETS
from differential import hierarchy as H
from differential import stream_hierarchy as SH
from differential.choices import RandomChoices
from differential.data import load, values

TIMEOUT = 60.0  # a hang is a failure
HOST_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
ITEM_TARGETS = [t for t in ("gpu", "nvptx") if t in TARGETS]  # whole items (fake device on CI)


def pattern(n: int) -> np.ndarray:
    return -np.arange(max(n, 1), dtype=np.int64) - 7


# -- generated streams over three-level hierarchies ---------------------------------------------

def stream_problems(seed: int, target: str, items: int, fail_at: int | None
                    ) -> tuple[list[str], int | None]:
    """Runs one generated stream; fail_at: the item whose `a` is one element short (the leaf that
    reads it goes out of bounds, when it reads that far: then that item fails, else it runs)."""
    c = RandomChoices(seed)
    shape = SH.generate(c)
    h = shape.h
    module = load(shape.source, f"stream_hierarchy_{seed}_{target}")
    rng = np.random.default_rng(seed)
    pushed: list[tuple[np.ndarray, int, dict[str, int], dict[str, np.ndarray], np.ndarray]] = []
    may_fail = None
    for k in range(items):
        params, s = H.launch_values(c)
        sizes = H.simulate(h, [0] * 4096, s, params).sizes
        n = max(sizes["out_a"], sizes["out_a2"], 1)
        a = rng.integers(-1000, 1000, n).astype(np.int64)
        if k == fail_at and n > 1:
            a, may_fail = a[:n - 1].copy(), k  # (reading a[n - 1] is out of bounds)
        pushed.append((a, s, params, {name: pattern(sizes[name]) for name in H.OUTS},
                       np.zeros(H.HIST, np.int64)))
    want = SH.expected(shape, [(a.tolist() + [0] * 4096, s, p) for a, s, p, _, _ in pushed])
    popped: list[tuple[int, ...]] = []
    failed = None
    with warnings.catch_warnings(), hpvm.runtime(target):
        warnings.simplefilter("ignore")  # partial Out buffers warn: expected here
        handle = hpvm.launch(module.sroot, stream=True, depth=int(rng.integers(1, 4)))
        for a, s, params, outs, hist in pushed:
            buffers = {"a": a, **outs, "hist": hist}
            sizes_ = {f"{name}_bytes": b.nbytes for name, b in buffers.items()}
            try:
                hpvm.push(handle, s=s, **buffers, **sizes_, **params, timeout=TIMEOUT)
            except ExecutionError:
                break  # the failure is known: this push and the later ones push nothing
        for k in range(items):
            try:
                popped.append(tuple(int(v) for v in hpvm.pop(handle, timeout=TIMEOUT)))
            except ExecutionError:
                failed = k
                break
        try:
            hpvm.wait(handle, timeout=TIMEOUT)
        except ExecutionError:
            assert failed is not None, "wait() failed, no pop did"
    found = []
    if failed is not None and failed != may_fail:
        found.append(f"item {failed} failed; only item {may_fail} may")
    for k, got in enumerate(popped):
        expect = want[k]
        if got != expect.outputs:
            found.append(f"item {k} popped {got}, expected {expect.outputs}")
        for name, buf in pushed[k][3].items():
            ref = pattern(len(buf))
            for index, value in expect.buffers[name].items():
                ref[index] = value
            if not np.array_equal(buf, ref):
                found.append(f"item {k}: {name} = {buf[:6].tolist()}, expected {ref[:6].tolist()}")
        if not shape.kept_hist and pushed[k][4].tolist() != expect.hist:
            found.append(f"item {k}: hist {pushed[k][4].tolist()}, expected {expect.hist}")
    if shape.kept_hist and failed is None and pushed[0][4].tolist() != want[-1].hist:
        found.append(f"the first push's hist {pushed[0][4].tolist()}, expected {want[-1].hist}")
    return found, failed


@pytest.mark.skipif(not HOST_TARGETS, reason="neither python nor cpu is among the targets")
@pytest.mark.parametrize("target", HOST_TARGETS)
def test_generated_streams_of_hierarchies(target: str) -> None:
    failures = 0
    for seed in range(8):
        for fail_at in (None, 2):
            found, failed = stream_problems(seed, target, 5, fail_at)
            assert not found, f"seed {seed}, fail_at {fail_at} on {target}:\n" + "\n".join(found)
            failures += failed is not None
    assert failures >= 2  # the short buffer is read, out of bounds, in some streams


def gpu_seeds(count: int) -> list[int]:
    """Seeds whose leaf_c sizes its scratch without a parent's id (the gpu target refuses that:
    tests/test_hierarchy_adversarial.py)."""
    seeds = []
    for seed in range(64):
        h = SH.generate(RandomChoices(seed)).h
        if not (h.c_grows and h.mid2 and h.mid2_grid is not None):
            seeds.append(seed)
    return seeds[:count]


@pytest.mark.skipif("gpu" not in TARGETS, reason="the gpu target cannot run here")
def test_generated_streams_of_hierarchies_on_gpu() -> None:
    for seed in gpu_seeds(2):
        for fail_at in (None, 1):
            found, _ = stream_problems(seed, "gpu", 3, fail_at)
            assert not found, f"seed {seed}, fail_at {fail_at} on gpu:\n" + "\n".join(found)


def test_the_stream_generator_mixes_kept_and_streaming() -> None:
    shapes = [SH.generate(RandomChoices(seed)) for seed in range(12)]
    assert {(s.kept_hist, s.kept_edge) for s in shapes} == {(a, b) for a in (0, 1) for b in (0, 1)}
    # some item of some stream fails on purpose, some runs an empty grid somewhere
    empty = 0
    for seed in range(12):
        c = RandomChoices(seed)
        shape = SH.generate(c)
        for _ in range(5):
            params, s = H.launch_values(c)
            empty += min(H.simulate(shape.h, [0] * 4096, s, params).sizes.values()) == 0
    assert empty > 0


# -- scalar outputs of every type through binds and edges --------------------------------------

SCALARS = '''
import hpvm_py as hpvm
from typing import NamedTuple
from hpvm_py import Out, Ptr, i64, {T}


class Pair(NamedTuple):
    same: {T}
    other: {T}


@hpvm.leaf
def source(x: {T}, y: {T}) -> Pair:
    return Pair(x, y)


@hpvm.leaf
def sink(v: {T}, w: {T}, out: Out[Ptr[{T}]], out_bytes: i64) -> {T}:
    out[0] = v
    out[1] = w
    return w


@hpvm.graph
def one(x: {T}, y: {T}) -> Pair:
    s = hpvm.node(source, x=x, y=y)
    return s.out.same, s.out.other


@hpvm.graph
def two(x: {T}, y: {T}) -> Pair:
    s = hpvm.node(one, x=y, y=x)  # swapped twice: (x, y) again
    return s.out.other, s.out.same


@hpvm.graph
def three(x: {T}, y: {T}) -> {T}:
    return hpvm.node(two, x=x, y=y).out[1]


@hpvm.graph
def plain(x: {T}, y: {T}, out: Out[Ptr[{T}]], out_bytes: i64) -> tuple[{T}, {T}, {T}, {T}]:
    a = hpvm.node(three, x=x, y=y)
    b = hpvm.node(two, x=x, y=y)
    k = hpvm.node(sink, v=a.out[0], w=b.out.same, out=out, out_bytes=out_bytes)
    return a.out[0], b.out.same, k.out[0], hpvm.node(one, x=y, y=x).out.other


@hpvm.graph
def streamed(x: {T}, y: {T}, out: Out[Ptr[{T}]], out_bytes: i64) -> tuple[{T}, {T}, {T}, {T}]:
    st = hpvm.streaming
    a = hpvm.node(three, x=st(x), y=st(y))
    b = hpvm.node(two, x=st(x), y=st(y))
    k = hpvm.node(sink, v=st(a.out[0]), w=st(b.out.same), out=st(out), out_bytes=out_bytes)
    return a.out[0], b.out.same, k.out[0], hpvm.node(one, x=st(y), y=st(x)).out.other
'''
TYPES = ["i1", "i8", "u8", "i16", "u16", "i32", "u32", "i64", "u64", "f16", "bf16", "f32", "f64"]


def host_bits(value: Any, t: str) -> int:
    """What an output of type t holding `value` (a launch argument) must pop as: its bits (bf16:
    the bits of the rounded value, as bf16 buffers and outputs hold them), every NaN alike (NaN
    payloads are not compared: docs/debugging.md)."""
    st = T.SCALAR_TYPES[t]
    if st.is_float and math.isnan(float(value)):
        return -1
    if t == "bf16":
        return int(T.bf16_to_bits(T.cast(np.float64(value), T.f64, st)))
    if t == "i1":
        return int(bool(value))
    return int(np.asarray(st.numpy_dtype.type(value)).reshape(1).view(f"u{st.numpy_dtype.itemsize}")[0])


def popped_bits(value: Any, t: str) -> int:
    st = T.SCALAR_TYPES[t]
    array = np.asarray(value).reshape(1)
    if st.is_float and t != "bf16" and math.isnan(float(array[0])):
        return -1
    if t == "bf16":
        return -1 if math.isnan(float(T.bf16_from_bits(array[0]))) else int(array[0])
    assert array.dtype == st.numpy_dtype, (array.dtype, t)
    return int(array.view(f"u{array.dtype.itemsize}")[0]) if t != "i1" else int(array[0])


def arguments(t: str, n: int, rng: np.random.Generator) -> list[Any]:
    """n launch arguments of type t, edge cases among them (inf, -0.0, NaN, min, max)."""
    if t == "i1":
        return [bool(v) for v in rng.integers(0, 2, n)]
    raw = values(t, n, rng)
    if t == "bf16":
        raw = T.bf16_from_bits(raw)  # an argument is the value; outputs hold bits
    return [v.item() for v in raw]


def scalar_run(module: Any, t: str, xs: list[Any], ys: list[Any], stream: bool) -> list[list[int]]:
    dtype = T.SCALAR_TYPES[t].numpy_dtype
    outs = [np.zeros(2, dtype) for _ in xs]
    if stream:
        handle = hpvm.launch(module.streamed, stream=True, depth=2)
        for x, y, out in zip(xs, ys, outs):
            hpvm.push(handle, x, y, out, out.nbytes, timeout=TIMEOUT)
        pops = [hpvm.pop(handle, timeout=TIMEOUT) for _ in xs]
        hpvm.wait(handle, timeout=TIMEOUT)
    else:
        pops = [hpvm.wait(hpvm.launch(module.plain, x, y, out, out.nbytes), timeout=TIMEOUT)
                for x, y, out in zip(xs, ys, outs)]
    return [[popped_bits(v, t) for v in (*popped, *out)] for popped, out in zip(pops, outs)]


@pytest.mark.parametrize("t", TYPES)
def test_scalar_outputs_through_binds_and_edges(t: str) -> None:
    """x and y go down one to three levels, swapped at two, and come back up through output binds
    and across edges into a leaf that stores them: every pop and store is the argument's bits,
    on python and cpu for every type and on gpu for the narrow and odd ones, plain and streaming
    (bf16 leaves the host as a value and comes back as bits)."""
    module = load(SCALARS.replace("{T}", t), f"stream_scalars_{t}")
    rng = np.random.default_rng(TYPES.index(t))
    xs, ys = arguments(t, 5, rng), arguments(t, 5, rng)
    want = [[host_bits(v, t) for v in (y, x, x, x, y, x)] for x, y in zip(xs, ys)]
    targets = HOST_TARGETS + (["gpu"] if "gpu" in TARGETS and t in ("i1", "u8", "f16", "bf16", "u64") else [])
    for target in targets:
        with hpvm.runtime(target):
            for stream in (False, True):
                got = scalar_run(module, t, xs, ys, stream)
                assert got == want, (t, target, stream, xs, ys)


# -- the bugs -----------------------------------------------------------------------------------

CHAIN = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, bf16


@hpvm.leaf
def ident(x: i64) -> i64:
    return x


@hpvm.leaf
def sink(v: i64, out: Out[Ptr[i64]], out_bytes: i64) -> i64:
    out[0] = v * 10
    return v + 1


@hpvm.graph
def blocks(x: i64, m: i64) -> i64:
    return hpvm.node(ident, grid=m, x=x).out[0]


@hpvm.graph
def chain(x: i64, m: i64, out: Out[Ptr[i64]], out_bytes: i64) -> i64:
    st = hpvm.streaming
    a = hpvm.node(blocks, x=st(x), m=st(m))  # one-to-one, the default: both nodes unreplicated
    return hpvm.node(sink, v=st(a.out[0]), out=st(out), out_bytes=out_bytes).out[0]


@hpvm.leaf
def half(x: bf16) -> bf16:
    return x


@hpvm.leaf
def store(v: bf16, out: Out[Ptr[bf16]], out_bytes: i64) -> bf16:
    out[0] = v
    return v


@hpvm.graph
def halves(x: bf16, out: Out[Ptr[bf16]], out_bytes: i64) -> tuple[bf16, bf16]:
    st = hpvm.streaming
    a = hpvm.node(half, x=st(x))
    return a.out[0], hpvm.node(store, v=st(a.out[0]), out=st(out), out_bytes=out_bytes).out[0]
'''


@pytest.fixture(scope="module")
def bugs() -> Any:
    return load(CHAIN, "stream_hierarchy_bugs")


@pytest.mark.skipif(not ITEM_TARGETS, reason="no target here runs whole items")
@pytest.mark.parametrize("target", ITEM_TARGETS)
def test_chain_stage_into_a_one_to_one_edge(target: str, bugs: Any) -> None:
    """A stage that is a wrapper over a grid of leaves feeds a leaf stage one-to-one: whole items
    compared all the chain's levels' extents ([(m,), ()]) with the consumer's grid ([()]) and
    failed every item. Pops and buffers equal plain launches (an empty grid in one item)."""
    items = [(3, 4), (-1, 1), (7, 0), (5, 2)]
    with hpvm.runtime(target), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        alone = []
        for x, m in items:
            out = np.full(1, -1, np.int64)
            alone.append((int(hpvm.wait(hpvm.launch(bugs.chain, x, m, out, out.nbytes),
                                        timeout=TIMEOUT)), out.tolist()))
        before = hpvm.stats().get("stream_whole_items", 0)
        handle = hpvm.launch(bugs.chain, stream=True, depth=2)
        outs = [np.full(1, -1, np.int64) for _ in items]
        for (x, m), out in zip(items, outs):
            hpvm.push(handle, x, m, out, out.nbytes, timeout=TIMEOUT)
        popped = [int(hpvm.pop(handle, timeout=TIMEOUT)[0]) for _ in items]
        hpvm.wait(handle, timeout=TIMEOUT)
        whole = hpvm.stats().get("stream_whole_items", 0) - before
    assert list(zip(popped, [o.tolist() for o in outs])) == alone
    assert alone == [(4, [30]), (0, [-10]), (1, [0]), (6, [50])]  # m = 0: the bind gives 0
    assert whole == 3  # all but the empty item ran whole


@pytest.mark.skipif(not ITEM_TARGETS, reason="no target here runs whole items")
@pytest.mark.parametrize("target", ITEM_TARGETS)
def test_forwarded_bf16_outputs_pop_as_bits(target: str, bugs: Any) -> None:
    """Outputs that forward a bf16 input are known on the host in whole items; they popped the
    float's value cast to uint16 (1.5 as 1), not its bits as every launch returns them."""
    xs = [1.5, -2.0, float("inf"), -0.0, 3.0e38, 1.0e-40]
    with hpvm.runtime(target):
        alone = []
        for x in xs:
            out = np.zeros(1, np.uint16)
            popped = hpvm.wait(hpvm.launch(bugs.halves, x, out, out.nbytes), timeout=TIMEOUT)
            alone.append([int(v) for v in popped] + out.tolist())
        before = hpvm.stats().get("stream_whole_items", 0)
        handle = hpvm.launch(bugs.halves, stream=True)
        outs = [np.zeros(1, np.uint16) for _ in xs]
        for x, out in zip(xs, outs):
            hpvm.push(handle, x, out, out.nbytes, timeout=TIMEOUT)
        got = [[int(v) for v in hpvm.pop(handle, timeout=TIMEOUT)] + out.tolist()
               for out in outs]
        hpvm.wait(handle, timeout=TIMEOUT)
        assert hpvm.stats().get("stream_whole_items", 0) - before == len(xs)
    want = [[host_bits(x, "bf16")] * 3 for x in xs]
    assert alone == want
    assert got == want
