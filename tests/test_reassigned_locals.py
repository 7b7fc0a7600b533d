"""Locals assigned once by a statement and again as a loop's variable.

Several passes look through a local "assigned once" to the value it was given (the gpu target's
grid tiles read `parent_id * count + leaf_id` through locals; the cpu target's clipped ranges,
non-temporal stores and loop plans; the lanes pass; the bounds analysis). A `for v in range(...)`
assigns `v` too: a pass that counts only assignment statements reads the value `v` had before
the loop where the loop's last value is meant. Generated leaves reassign such a local by a loop
(at the top, under a data-dependent `if`, nested, left by `break`) before reading it, and every
target must give the python target's answer.
"""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from differential.data import load
from hpvm_py.ir import kernel as K
from hpvm_py.types import i64

W, BLOCKS = 4, 8  # leaf instances under each of the parent's
N = W * BLOCKS

# a local's first value: an instance id or count, or arithmetic of them
FIRST = ["hpvm.get_node_instance_id_x(me)", "hpvm.get_node_instance_id_x(parent)",
         "hpvm.get_num_node_instances_x(me)", "lane + 1", "block * 4"]
# how a loop reassigns the local v
LOOPS = ["for v in range({r}):\n    acc += v",
         "for v in range({r}):\n    acc += v\n    if inp[block * 4 + lane] > {cut}:\n        break",
         "if inp[block * 4 + lane] > {cut}:\n    for v in range({r}):\n        acc += 1",
         "for t in range(2):\n    for v in range(t, {r}):\n        acc += t"]
# what the store reads after the loop
USES = ["block * 4 + v", "v * 4 + lane", "block * v + lane", "v", "(v + acc) * 3 - block",
        "inp[(block * 4 + v) % 32]"]
# the store itself: {value} what it writes
STORES = ["out[block * 4 + lane] = {value}",
          "if v < 3:\n    out[block * 4 + lane] = {value}",
          "if block * 4 + v < 20:\n    out[block * 4 + lane] = {value}"]


def _program(rng: random.Random) -> str:
    loop = rng.choice(LOOPS).format(r=rng.randint(1, 5), cut=rng.randint(-3, 3))
    return _leaf_program(rng.choice(FIRST), loop, rng.choice(STORES).format(value=rng.choice(USES)))


def _leaf_program(first: str, loop: str, store: str) -> str:
    """The leaf assigns `v = first`, runs `loop` (which reuses v's name), then `store`; under a
    parent of BLOCKS instances, W instances each."""
    body = "\n".join("    " + line for line in (loop + "\n" + store).splitlines())
    return f'''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, i64


@hpvm.leaf
def leaf(inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64):
    me = hpvm.get_node()
    parent = hpvm.get_parent_node(me)
    lane = hpvm.get_node_instance_id_x(me)
    block = hpvm.get_node_instance_id_x(parent)
    acc = 0
    v = {first}
{body}


@hpvm.graph
def inner(inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64):
    hpvm.node(leaf, grid=({W},), inp=inp, inp_bytes=inp_bytes, out=out, out_bytes=out_bytes)


@hpvm.graph
def root(inp: In[Ptr[i64]], inp_bytes: i64, out: Out[Ptr[i64]], out_bytes: i64):
    hpvm.node(inner, grid=({BLOCKS},), inp=inp, inp_bytes=inp_bytes, out=out, out_bytes=out_bytes)
'''


def _run(module, target: str, inp: np.ndarray) -> np.ndarray:
    out = np.full(N, -7, np.int64)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, inp, inp.nbytes, out, out.nbytes))
        hpvm.request_memory(out)
    return out


# (a store under an `if` leaves part of `out` unwritten: the leaf is warned about, as it should be)
@pytest.mark.filterwarnings("ignore::hpvm_py.errors.HPVMWarning")
@pytest.mark.parametrize("seed", range(4))
def test_a_local_reassigned_by_a_loop_is_read_as_the_loop_left_it(seed: int) -> None:
    rng = random.Random(5300 + seed)
    data = np.random.default_rng(seed)
    for _ in range(6):
        source = _program(rng)
        module = load(source)
        inp = data.integers(-4, 5, N).astype(np.int64)
        expected = _run(module, "python", inp)
        for target in TARGETS:
            got = _run(module, target, inp)
            assert np.array_equal(got, expected), f"{target}:\n{source}\n{got}\n{expected}"


def test_the_grid_tiles_coordinate_is_not_taken_from_a_reassigned_id() -> None:
    """The case that was wrong on the gpu target: `v` holds the leaf's id, then a loop leaves it
    at 1; `block * 4 + v` is not the grid's coordinate (gridtiles.py, combined_coordinate)."""
    module = load(_leaf_program("hpvm.get_node_instance_id_x(me)", "for v in range(2):\n    acc += v",
                                "out[block * 4 + lane] = block * 4 + v"))
    inp = np.zeros(N, np.int64)
    expected = np.repeat(np.arange(BLOCKS) * 4 + 1, W)
    for target in TARGETS:
        assert np.array_equal(_run(module, target, inp), expected), target


def test_assignments_count_loop_variables() -> None:
    def const(value: int) -> K.Const:
        return K.Const(type=i64, value=value)

    body = [K.Assign(target="v", value=const(0)),
            K.For(var="v", start=const(0), stop=const(3), step=const(1), body=[]),
            K.If(cond=const(1), then=[K.Assign(target="w", value=const(1))], orelse=[])]
    assert K.assignments(body) == {"v": 2, "w": 1}
