"""The gpu target's tl.dot kernels (backends/triton/dotmatch.py, dottiles.py): which k-loops become
tl.dot, and that every leaf, matched or not, computes what its literal translation computes.

Matched leaves are compared with a float64 NumPy product within the bound of a reordered fp32 sum
(docs/backends.md): |c - exact| <= k * 2**-23 * (|A| @ |B|), scaled by the epilogue's factors.
Near misses keep the literal translation and must agree with the cpu target. Runs through Triton's
interpreter without a GPU (small sizes: the interpreter costs milliseconds per program).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.backends import registry
from hpvm_py.backends.triton import dottiles, kernel
from programs import dot_leaves as D

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not registry.available("gpu"), reason="no triton")

M, N, K = 40, 24, 35  # not multiples of any block side: every edge mask is exercised


def emitted(tmp_path: Path, program: Path, graph: str) -> str:
    """The one kernel file `hpvmc compile --emit triton` writes for a graph with one leaf."""
    out = tmp_path / graph
    status = cli.main(["compile", str(program), "--graph", graph, "--target", "gpu",
                       "--emit", "triton", "-o", str(out)])
    assert status == 0
    (path,) = out.glob("*.triton.py")
    return path.read_text()


def run(target: str, graph, a: np.ndarray, b: np.ndarray, c: np.ndarray, *extra) -> np.ndarray:
    c = c.copy()
    m, k = a.shape
    n = b.shape[1]
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k, *extra))
        hpvm.request_memory(c)
    return c


def reordered_sum_bound(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a.shape[1] * 2.0 ** -23 * (np.abs(a).astype(np.float64) @ np.abs(b))


def operands(rng, m: int = M, n: int = N, k: int = K):
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = rng.standard_normal((m, n)).astype(np.float32)
    return a, b, c


@pytest.mark.parametrize("name", sorted(D.MATCHED))
def test_per_element_k_loops_become_tl_dot_and_match_numpy(name: str, tmp_path: Path, rng) -> None:
    text = emitted(tmp_path, ROOT / "tests" / "programs" / "dot_leaves.py", f"{name}_root")
    assert "tl.dot(" in text and 'input_precision="ieee"' in text
    a, b, c = operands(rng)
    got = run("gpu", D.MATCHED[name], a, b, c)
    exact = a.astype(np.float64) @ b + (c if name == "naive_rows_on_x" else 0)
    assert np.all(np.abs(got - exact) <= reordered_sum_bound(a, b) + 2.0 ** -23 * np.abs(exact))


@pytest.mark.parametrize("name", sorted(D.MATCHED_OTHER))
def test_other_element_functions_become_tl_dot_and_match_the_literal_kernel(
        name: str, tmp_path: Path, rng) -> None:
    """Operands that are any function of (row, k) and (k, column): an i32 loop counter, an i32
    product that wraps (`wrapping_k` reads other columns if the kernel computes it in i64), a
    remainder. The cpu target's literal loop and the tl.dot kernel both sum the same products,
    each within the reordered-sum bound of the exact sum."""
    graph, extra = D.MATCHED_OTHER[name]
    text = emitted(tmp_path, ROOT / "tests" / "programs" / "dot_leaves.py", f"{name}_root")
    assert "tl.dot(" in text
    a, b, c = operands(rng)
    got, literal = (run(target, graph, a, b, c, *extra) for target in ("gpu", "cpu"))
    bound = 2 * reordered_sum_bound(a, b) + 2.0 ** -22 * np.abs(literal)
    assert np.all(np.abs(got - literal) <= bound)
    if name == "wrapping_k":  # the columns read are the wrapped ones: not those of an i64 product
        t = np.arange(K, dtype=np.int64)
        wide = ((t * extra[0]) >> 28) & 31
        wrapped = ((t * extra[0] + 2**31) % 2**32 - 2**31) >> 28 & 31
        assert not np.array_equal(wide, wrapped)
        exact = a[:, wrapped].astype(np.float64) @ b
        assert np.all(np.abs(got - exact) <= reordered_sum_bound(a, b) + 2.0 ** -23 * np.abs(exact))


@pytest.mark.parametrize("name", sorted(D.NEAR_MISSES))
def test_near_misses_keep_the_literal_translation(name: str, tmp_path: Path, rng) -> None:
    text = emitted(tmp_path, ROOT / "tests" / "programs" / "dot_leaves.py", f"{name}_root")
    assert "tl.dot(" not in text
    a, b, c = operands(rng)
    np.testing.assert_allclose(run("gpu", D.NEAR_MISSES[name], a, b, c),
                               run("cpu", D.NEAR_MISSES[name], a, b, c), rtol=1e-6, atol=1e-6)


def test_parboil_sgemm_leaf_becomes_tl_dot_without_scratch_or_barriers(tmp_path: Path, rng) -> None:
    text = emitted(tmp_path, ROOT / "examples" / "sgemm.py", "root")
    assert "tl.dot(" in text
    assert "tl.debug_barrier()" not in text and "__base" not in text  # no scratch tiles left
    assert "    if whole:" in text and "mask=True" in text  # an unmasked loop for whole blocks
    a, b, c = operands(rng)
    alpha, beta = 1.5, -0.5
    got = run("gpu", __import__("sgemm").root, a, b, c, alpha, beta)
    exact = alpha * (a.astype(np.float64) @ b) + beta * c.astype(np.float64)
    bound = alpha * reordered_sum_bound(a, b) + 2.0 ** -22 * (np.abs(exact) + abs(beta * c))
    assert np.all(np.abs(got - exact) <= bound)


def test_parboil_leaf_on_another_leaf_grid_falls_back_to_the_literal_kernel(rng) -> None:
    """The scratch-tile proof holds for a 16 x 16 leaf grid only: on 8 x 8 the tiles are read where
    no instance stored (zeroed scratch, then earlier rounds' values), and the literal kernel must
    compute exactly that, as the cpu target does."""
    a, b, c = operands(rng, 24, 24, 20)
    dotted = run("gpu", D.sized_root, a, b, c, 1.0, 0.0, D.TILE)
    exact = a.astype(np.float64) @ b
    assert np.all(np.abs(dotted - exact) <= reordered_sum_bound(a, b) + 2.0 ** -23 * np.abs(exact))
    literal = run("gpu", D.sized_root, a, b, c, 1.0, 0.0, 8)
    np.testing.assert_allclose(literal, run("cpu", D.sized_root, a, b, c, 1.0, 0.0, 8),
                               rtol=1e-6, atol=1e-6)
    assert not np.allclose(literal, exact, atol=1e-3)  # a different function indeed


def test_small_dot_outputs_take_smaller_blocks_that_fill_the_gpu() -> None:
    """A tl.dot kernel's blocks: the default 128 x 128 where they cover the multiprocessors, else
    the largest smaller shape that does (the tensor-parallel MLP's 256 x 2048 output on 132 SMs),
    else the smallest; the blocks of the choice never leave more than a tenth of the SMs idle."""
    from hpvm_py.backends.triton.kernel import GPU_DOT, SMALLER_DOTS, dot_config

    assert dot_config(4096, 4096, 132) == GPU_DOT
    chosen = dot_config(256, 2048, 132)
    assert (chosen.bm, chosen.bn) == (64, 64)
    assert dot_config(256, 1024, 132) == SMALLER_DOTS[-1]
    assert dot_config(16, 16, 132) == SMALLER_DOTS[-1]
    for rows, cols in ((1024, 1024), (512, 4096), (2048, 256), (1000, 1000)):
        config = dot_config(rows, cols, 132)
        blocks = -(-rows // config.bm) * -(-cols // config.bn)
        assert blocks * 10 >= 132 * 9, (rows, cols, config)
        bigger = [c for c in (GPU_DOT,) + SMALLER_DOTS if c.bm * c.bn > config.bm * config.bn]
        assert all(-(-rows // c.bm) * -(-cols // c.bn) * 10 < 132 * 9 for c in bigger), (rows, cols)


def test_tf32x3_is_opt_in_and_named_in_the_kernel(tmp_path: Path, monkeypatch) -> None:
    program = ROOT / "tests" / "programs" / "dot_leaves.py"
    assert 'input_precision="ieee"' in emitted(tmp_path / "default", program, "naive_root")
    monkeypatch.setenv("HPVM_DOT_PRECISION", "tf32x3")
    text = emitted(tmp_path / "opted", program, "naive_root")
    assert 'input_precision="tf32x3"' in text and '"ieee"' not in text


def test_an_unknown_dot_precision_is_refused_naming_the_setting(monkeypatch) -> None:
    from hpvm_py.backends.triton.codegen import dot_precision
    from hpvm_py.errors import CompileError

    monkeypatch.setenv("HPVM_DOT_PRECISION", "tf32")  # one TF32 product: far from f32's accuracy
    with pytest.raises(CompileError, match="HPVM_DOT_PRECISION='tf32': expected one of ieee, tf32x3"):
        dot_precision()


TF32X3_CHECK = """
import sys
import numpy as np
import hpvm_py as hpvm
sys.path[:0] = ["tests", "examples"]
from programs import dot_leaves as D
rng = np.random.default_rng(int(sys.argv[1]))
m, n, k = 40, 24, 35
a = rng.standard_normal((m, k)).astype(np.float32)
b = rng.standard_normal((k, n)).astype(np.float32)
c = np.zeros((m, n), np.float32)
with hpvm.runtime("gpu"):
    hpvm.wait(hpvm.launch(D.naive_root, a, a.nbytes, b, b.nbytes, c, c.nbytes, m, n, k))
    hpvm.request_memory(c)
exact = a.astype(np.float64) @ b
# three TF32 products drop lo(a) * lo(b) (2**-22 of a product) and round each split to TF32
bound = k * 2.0 ** -20 * (np.abs(a).astype(np.float64) @ np.abs(b)) + 2.0 ** -22 * np.abs(exact)
print(float(np.max(np.abs(c - exact) / bound)))
"""


def test_tf32x3_products_stay_within_a_bound_of_f32s(rng) -> None:
    """A process of its own (the setting is read when a graph is first compiled for gpu): on a
    GPU, three TF32 tensor-core products per pair; through the interpreter, its own arithmetic."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, HPVM_DOT_PRECISION="tf32x3")
    out = subprocess.run([sys.executable, "-c", TF32X3_CHECK, str(int(rng.integers(1 << 30)))],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert float(out.stdout.split()[-1]) <= 1.0


@pytest.mark.parametrize("m, n, k, m2, n2", [(48, 48, 32, 40, 24), (48, 32, 48, 48, 32), (40, 48, 32, 13, 48),
                                             (48, 48, 35, 40, 24)])
def test_whole_blocks_load_unmasked_only_where_every_guard_holds(m, n, k, m2, n2, rng) -> None:
    """The tl.dot loop runs unmasked over blocks inside the grid, over a k range of whole steps,
    whose every guard holds (dottiles.py, `whole`); the rows past m2 and columns past n2 of
    `guarded_rows` contribute 0 inside blocks that are otherwise whole. A mutant that does not
    check the guards on the block computes those products, and the test catches it."""
    a, b, c = operands(rng, m, n, k)
    expected = a.astype(np.float64)[:, :] @ b
    expected[m2:, :] = 0
    expected[:, n2:] = 0

    def check(got: np.ndarray) -> bool:
        return bool(np.all(np.abs(got - expected) <= reordered_sum_bound(a, b) + 1e-6))

    assert check(run("gpu", D.guarded_rows_root, a, b, c, m2, n2))
    block = kernel.INTERPRETER_DOT  # (on a GPU the blocks are tuned: the mutant is the interpreter's)
    if kernel.on_gpu() or (m2, n2) == (m, n) or k % block.bk:
        return  # every guard holds, or no k range is whole: the mutant computes the same
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(dottiles.DotTiles, "_on_block", lambda self, *args: "True")
        patch.setattr(D.guarded_rows_root, "compiled_for", {})  # compiled afresh
        assert not check(run("gpu", D.guarded_rows_root, a, b, c, m2, n2))


@pytest.mark.parametrize("k", [0, 5, kernel.INTERPRETER_DOT.bk, kernel.INTERPRETER_DOT.bk + 3])
def test_negative_zero_start_and_products_keep_their_sign(k: int, tmp_path: Path, rng) -> None:
    """The leaf's loop adds -0.0 products to a -0.0 start: -0.0 on python and cpu. The dot kernel
    starts its sum at -0.0 and pads the last k step with -0.0 products (dottiles.py): +0.0 in
    either place gave +0.0. Triton's interpreter sums a tl.dot with np.matmul, which starts
    at +0.0 whatever the kernel says: there the kernel's text is checked and the values only
    where no product is summed (k = 0); on a GPU every value."""
    a = np.zeros((M, k), np.float32)
    b = -(rng.random((k, N)) + 0.5).astype(np.float32)
    c = np.full((M, N), -0.0, np.float32)
    for target in ("python", "cpu"):
        assert np.signbit(run(target, D.naive_rows_on_x_root, a, b, c)).all(), target
    text = emitted(tmp_path, ROOT / "tests" / "programs" / "dot_leaves.py", "naive_rows_on_x_root")
    # (-0.0 by its bits: triton 3.6's front end made a -0.0 literal +0.0)
    assert text.count(f"acc_t = {dottiles.NEGATIVE_ZERO_BLOCK}") == 2  # whole blocks and others
    assert "tl.where(kk_b < k_stop, " in text and "-0.0)" not in text
    if kernel.on_gpu() or k == 0:
        assert np.signbit(run("gpu", D.naive_rows_on_x_root, a, b, c)).all()
