"""Generated matrix-product leaves against the gpu target's tl.dot kernels (backends/triton/
dotmatch.py): random k-loops whose counter is i32 or i64 and whose operands reach A's column and
B's row through random integer functions of the counter and of parameters: products that pass
2**31 in i32 and wrap, shifts that show the wrapped high bits, masks, remainders. The matcher
must take every one of them (any function of (row, k) and (k, column) is a product), and the
gpu target must then compute what the cpu target's literal loop computes, within the bound of a
reordered fp32 sum: a kernel that evaluated an i32 product in i64 would read other columns.
Runs through Triton's interpreter without a GPU."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.backends import registry
from hpvm_py.backends.triton.dotmatch import find_dot_loop
from hpvm_py.types import PtrType

pytestmark = pytest.mark.skipif(not registry.available("gpu") or not registry.available("cpu"),
                                reason="the gpu and cpu targets")

WIDTH = 32  # A is m x WIDTH, B is WIDTH x n: indices are masked into [0, WIDTH)
M, N = 24, 40
CASES = 24

LEAF = """import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64


@hpvm.leaf
def mm(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
       c_bytes: i64, m: i64, n: i64, k: KT, w: i32, v: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * WIDTH + ((FA) & (WIDTH - 1))] * b[((FB) & (WIDTH - 1)) * n + j]
    c[i * n + j] = acc


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
         c_bytes: i64, m: i64, n: i64, k: KT, w: i32, v: i64):
    hpvm.node(mm, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes,
              m=m, n=n, k=k, w=w, v=v)
"""


def index_function(rng: np.random.Generator, depth: int = 2) -> str:
    """An integer expression of t (the counter), w (i32) and v (i64)."""
    if depth == 0:
        return str(rng.choice(["t", "t", "w", "w", "v", str(int(rng.integers(0, 9)))]))
    kind = rng.choice(["mul", "mul", "add", "sub", "leaf"])
    x, y = index_function(rng, depth - 1), index_function(rng, depth - 1)
    if kind == "mul":
        return f"({x} * {y})"
    if kind == "add":
        return f"({x} + {y})"
    if kind == "sub":
        return f"({x} - {y})"
    return x


def operand_index(rng: np.random.Generator) -> str:
    """What selects A's column or B's row: the high bits or a remainder of a product of the
    counter (the wrapped bits of an i32 product show there; under the final mask, a multiple of
    2**32 would not), plus a term of the counter."""
    product = f"(t * w * {int(rng.integers(1, 4))} + {index_function(rng)})"
    top = str(rng.choice(["shift", "shift", "rem", "plain"]))
    if top == "shift":
        selected = f"({product} >> {int(rng.integers(26, 31))})"
    elif top == "rem":
        selected = f"({product} % {int(rng.integers(3, 40))})"
    else:
        selected = product
    return f"{selected} + t * {int(rng.integers(0, 3))}"


def program(rng: np.random.Generator) -> str:
    fa, fb = operand_index(rng), operand_index(rng)
    counter = str(rng.choice(["i32", "i32", "i64"]))
    return LEAF.replace("WIDTH", str(WIDTH)).replace("KT", counter).replace("FA", fa).replace("FB", fb)


def run(target: str, root, a: np.ndarray, b: np.ndarray, k: int, w: int, v: int) -> np.ndarray:
    c = np.zeros((M, N), np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, b, b.nbytes, c, c.nbytes, M, N, k, w, v))
        hpvm.request_memory(c)
    return c


def test_generated_products_match_the_literal_loop() -> None:
    rng = np.random.default_rng(20261127)
    matched = 0
    for case in range(CASES):
        text = program(rng)
        module = load(text)
        leaf = module.mm.ir
        modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
        assert find_dot_loop(leaf, modes, (2,)) is not None, text
        matched += 1
        a = rng.standard_normal((M, WIDTH)).astype(np.float32)
        b = rng.standard_normal((WIDTH, N)).astype(np.float32)
        k = int(rng.integers(1, 48))
        w = int(rng.choice([(1 << 27) + int(rng.integers(1, 99)), (1 << 30) - 3, int(rng.integers(-9, 9))]))
        v = int(rng.integers(-(1 << 40), 1 << 40))
        gpu, cpu = run("gpu", module.root, a, b, k, w, v), run("cpu", module.root, a, b, k, w, v)
        # both sum the same k products of |a| <= max|a|, |b| <= max|b|, in another order
        bound = 2 * k * 2.0 ** -23 * float(np.abs(a).max() * np.abs(b).max()) * k + 1e-6
        assert np.all(np.abs(gpu - cpu) <= bound), (text, k, w, v, np.abs(gpu - cpu).max(), bound)
    assert matched == CASES


def guard(rng: np.random.Generator, x: str) -> str:
    """A condition on the row (or column) x that a block may meet in part: a bound, a remainder
    (true on lanes that are not neighbours), an i32 product that wraps, one from data-free
    scalars; or on the counter t, which keeps the masked loop."""
    return str(rng.choice([f"{x} < 13", f"{x} % 3 != 1", f"hpvm.i32({x}) * w >= 0", f"{x} != (v & 15)",
                           f"{x} >= 0", "t != 3"]))


def test_generated_guarded_products_match_the_literal_loop() -> None:
    """Factors under guards (`a[..] if g else 0.0`): the tl.dot kernel runs its unmasked loop on
    whole blocks only where every guard holds on the block (dottiles.py); k is often a multiple
    of the interpreter's BK of 16, so that whole blocks occur beside partial ones."""
    rng = np.random.default_rng(20261129)
    matched = 0
    for case in range(16):
        text = program(rng)
        body = text.replace(f"acc += a[i * {WIDTH}", f"acc += (a[i * {WIDTH}", 1)
        body = body.replace("] * b[", f"] if {guard(rng, 'i')} else 0.0) * (b[", 1)
        body = body.replace(" * n + j]\n", f" * n + j] if {guard(rng, 'j')} else 0.0)\n", 1)
        assert body.count(" else 0.0)") == 2, body
        module = load(body)
        leaf = module.mm.ir
        modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in leaf.params)
        matched += find_dot_loop(leaf, modes, (2,)) is not None
        a = rng.standard_normal((M, WIDTH)).astype(np.float32)
        b = rng.standard_normal((WIDTH, N)).astype(np.float32)
        k = int(rng.choice([16, 32, int(rng.integers(1, 48))]))
        w = int(rng.choice([(1 << 27) + int(rng.integers(1, 99)), (1 << 30) - 3, int(rng.integers(-9, 9))]))
        v = int(rng.integers(-(1 << 40), 1 << 40))
        gpu, cpu = run("gpu", module.root, a, b, k, w, v), run("cpu", module.root, a, b, k, w, v)
        bound = 2 * k * 2.0 ** -23 * float(np.abs(a).max() * np.abs(b).max()) * k + 1e-6
        assert np.all(np.abs(gpu - cpu) <= bound), (body, k, w, v, np.abs(gpu - cpu).max(), bound)
    assert matched == 16  # (a guarded factor is a product's factor still)
