"""The gpu target (Triton): exact transfer counts, errors that say what to do, generated code.

Without a GPU these run on the fake device (host arrays standing in for device memory, copies
counted the same way) through Triton's interpreter; on a GPU machine, on cuda:0.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.backends import registry
from hpvm_py.backends.triton.codegen import generate
from hpvm_py.backends.triton.kernel import GPU_SPREAD
from hpvm_py import InOut, Ptr, cli, i8, i32, i64
from hpvm_py import types as T
from hpvm_py.errors import CompileError, ExecutionError, HPVMError
from programs import semantic_kernels as semantic
from programs import skinny_scratch as skinny
from programs import tiled_cholesky as chol

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.skipif(not registry.available("gpu"),
                                reason="the gpu target is unavailable (conftest sets TRITON_INTERPRET=1 "
                                       "without a GPU, so this only happens without triton)")


def copies(before: dict, after: dict) -> tuple[int, int, int]:
    return tuple(after[f"{d}_copies"] - before[f"{d}_copies"] for d in ("h2d", "d2h", "d2d"))


def test_vadd_copies_each_input_in_once_and_the_result_back_once(rng) -> None:
    import vadd

    n = 3000
    a, b = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    c = np.zeros(n, np.float32)
    with hpvm.runtime("gpu"):
        for buf in (a, b, c):
            hpvm.track_memory(buf)
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        assert not np.any(c)  # tracked: the result stays on the device until requested
        hpvm.request_memory(c)
        hpvm.request_memory(c)  # already valid on the host: no second copy
        after = hpvm.stats()
    assert np.array_equal(c, a + b)
    assert copies(before, after) == (2, 1, 0)
    assert after["h2d_bytes"] - before["h2d_bytes"] == 2 * a.nbytes
    assert after["d2h_bytes"] - before["d2h_bytes"] == c.nbytes


def test_stencil_100_launches_with_swapped_buffers_copy_twice_in_and_once_out(rng) -> None:
    import stencil

    nx, ny, nz = 16, 8, 3  # three programs of 128 lanes: the interpreter is slow
    a = rng.random((nz, ny, nx), dtype=np.float32)
    b = a.copy()
    expected = a.copy()
    for _ in range(100):
        expected = stencil.reference(expected, 0.5, 0.25)
    with hpvm.runtime("gpu"):
        hpvm.track_memory(a)
        hpvm.track_memory(b)
        before = hpvm.stats()
        src, dst = a, b
        for _ in range(100):
            hpvm.wait(hpvm.launch(stencil.root, src, src.nbytes, dst, dst.nbytes, nx, ny, nz, 0.5, 0.25))
            src, dst = dst, src
        hpvm.request_memory(src)  # the last result
        after = hpvm.stats()
        assert copies(before, after) == (2, 1, 0)
        np.testing.assert_allclose(src, expected, rtol=1e-5, atol=1e-6)


def test_tiled_cholesky_dag_copies_each_tile_in_once_and_out_once(rng) -> None:
    k = 4
    a, tiles = chol.spd_tiles(k, rng)
    args: list = []
    for ij in chol.LOWER:
        args += [tiles[ij], tiles[ij].nbytes]
    with hpvm.runtime("gpu"):
        for ij in chol.LOWER:
            hpvm.track_memory(tiles[ij])
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(chol.cholesky3, *args, k))
        for ij in chol.LOWER:
            hpvm.request_memory(tiles[ij])
        after = hpvm.stats()
    assert copies(before, after) == (len(chol.LOWER), len(chol.LOWER), 0)
    lower = np.zeros_like(a)
    for (i, j), tile in tiles.items():
        lower[i * k:(i + 1) * k, j * k:(j + 1) * k] = tile
    np.testing.assert_allclose(lower, np.linalg.cholesky(a), rtol=1e-10, atol=1e-10)


def test_an_untracked_buffer_changed_between_launches_is_copied_again(rng) -> None:
    import vadd

    n = 100
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        a[:] = rng.random(n, dtype=np.float32)  # the user may change it: it is not tracked
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        assert np.array_equal(c, a + 1)  # back on the host once the launch is over


def test_out_of_bounds_access_is_reported_at_its_line_and_the_runtime_stays_usable() -> None:
    import vadd

    a = np.ones(100, np.float32)
    short = np.zeros(90, np.float32)
    full = np.zeros(100, np.float32)
    with hpvm.runtime("gpu"):
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, a, a.nbytes, short, short.nbytes, 100))
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, a, a.nbytes, full, full.nbytes, 100))
    error = info.value
    assert error.rule == "memory-in-bounds"
    assert "store to c[90]" in error.message and "0 to 89" in error.message
    assert error.loc.file.endswith("vadd.py") and "c[i] = a[i] + b[i]" in error.loc.snippet()
    assert np.array_equal(short, np.full(90, 2, np.float32))  # the in-bounds instances ran
    assert np.array_equal(full, a + a)


def test_masked_off_lanes_never_touch_memory(rng) -> None:
    """`i < n and a[i] > 0.5` on a grid larger than `a`: the checked kernel runs (an index read
    from memory defeats the bounds proof) and would report any access a masked-off lane made."""
    from programs import masked_access as m

    n, grid = 40, 64
    a = rng.random(n, dtype=np.float32)
    idx = np.array([0, 1, 2, 3], np.int64)
    out = np.zeros(n, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(m.root, a, a.nbytes, idx, idx.nbytes, out, out.nbytes, n, grid))
        expected = np.where(a > 0.5, a[idx[np.arange(n) % 4]], -1.0).astype(np.float32)
        assert np.array_equal(out, expected)
        bad = np.array([0, 1, 2, n], np.int64)  # now a lane that passes the guard reads a[40]
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(m.root, a, a.nbytes, bad, bad.nbytes, out, out.nbytes, n, grid))
    assert f"load from a[{n}]" in info.value.message
    assert "out[i] = a[j]" in info.value.loc.snippet()


UNSUPPORTED = '''
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, i8, i64


@hpvm.leaf
def count(x: In[Ptr[i64]], x_bytes: i64, bins: InOut[Ptr[i8]], bins_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    hpvm.atomic_add(bins, x[i] % 4, hpvm.i8(1))


@hpvm.graph
def root(x: In[Ptr[i64]], x_bytes: i64, bins: InOut[Ptr[i8]], bins_bytes: i64, n: i64):
    hpvm.node(count, grid=n, x=x, x_bytes=x_bytes, bins=bins, bins_bytes=bins_bytes)
'''


def test_a_construct_triton_cannot_express_is_a_located_compile_error(tmp_path: Path) -> None:
    path = tmp_path / "bytes_atomics.py"
    path.write_text(UNSUPPORTED)
    sys.path.insert(0, str(tmp_path))
    try:
        import bytes_atomics
    finally:
        sys.path.remove(str(tmp_path))
    x = np.arange(8, dtype=np.int64)
    bins = np.zeros(4, np.int8)
    with hpvm.runtime("gpu"):
        if registry.available("nvptx"):  # the placement policy moves the leaf to nvptx
            hpvm.wait(hpvm.launch(bytes_atomics.root, x, x.nbytes, bins, bins.nbytes, 8))
            assert bins.tolist() == [2, 2, 2, 2]
            return
        with pytest.raises(CompileError) as info:
            hpvm.wait(hpvm.launch(bytes_atomics.root, x, x.nbytes, bins, bins.nbytes, 8))
    error = info.value
    assert "atomic_add on a i8 buffer" in error.message and 'target="nvptx"' in error.message
    assert error.loc.file == str(path) and error.loc.line == 9
    with hpvm.runtime("cpu"):  # what the message suggests works
        hpvm.wait(hpvm.launch(bytes_atomics.root, x, x.nbytes, bins, bins.nbytes, 8))
    assert bins.tolist() == [2, 2, 2, 2]


def test_gpu_without_cuda_or_interpreter_says_what_to_do(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(EXAMPLES)!r})
        import numpy as np
        import hpvm_py as hpvm
        import vadd
        a = np.ones(4, np.float32)
        try:
            with hpvm.runtime("gpu"):
                hpvm.wait(hpvm.launch(vadd.root, a, 16, a, 16, a, 16, 4))
        except hpvm.errors.HPVMError as e:
            print("ERROR", type(e).__name__, e)
    """))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(ROOT))
    result = subprocess.run([sys.executable, str(program)], capture_output=True, text=True,
                            timeout=300, env=env)
    # the runtime refuses to start on a target it cannot run, at the user's `with` line
    assert "ERROR LaunchError" in result.stdout, result.stdout + result.stderr
    assert f"{program}:9:" in result.stdout and "[rule: target-available]" in result.stdout
    assert "TRITON_INTERPRET=1" in result.stdout and "target='cpu'" in result.stdout


def test_emit_triton_writes_readable_kernels(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "compile", str(EXAMPLES / "stencil.py"),
                             "--emit", "triton", "-o", str(tmp_path)], capture_output=True, text=True,
                            timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "stencil_block.triton.py").read_text()
    assert "@triton.jit" in text and "def k_stencil_block(" in text
    assert "tl.load(v_a0 + " in text and "mask=" in text  # masked block accesses
    assert "v_k = id1_2" in text  # the z id of the parent: a uniform scalar


def test_generated_kernels_compile_for_an_h100() -> None:
    """Triton's compiler and ptxas run on any x86-64 machine: what the interpreter accepts must
    also compile for sm_90 (no interpreter in this process)."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, EXAMPLES, ROOT / "tests"))
    result = subprocess.run([sys.executable, str(Path(__file__).parent / "triton_compile_check.py"),
                             "vadd:root", "stencil:root", "sgemm:root", "reduction:root",
                             "histogram:root", "programs.tiled_cholesky:cholesky3",
                             "programs.lane_reductions:extremes_root",
                             "programs.lane_reductions:integer_root",
                             "programs.lane_reductions:rows_root", "programs.unicode_names:raíz", "semantics"],
                            capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("compiled") >= 30
    # split spread loops: root leaves, and the rows' literal kernel (one row per parent instance)
    for leaf in ("extremes", "integer_folds", "row_max"):
        assert f"compiled {leaf} checked=False spread SPLIT={GPU_SPREAD.programs}" in result.stdout



def test_skinny_scratch_leaves_compile_for_an_h100_as_launched() -> None:
    """Issue 20: malloc scratch and barrier() in a (1, 1, L) or (L, 1, 1) grid. Extents of 1 are
    constants of the launched kernel, so `while h > 0` over nx // 2 never runs; Triton 3.6 (the
    lent GPUs') then failed in TritonGPUCoalesce. Compiled here with each launch's own variant and
    Triton's specialisation of its arguments."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, EXAMPLES, ROOT / "tests"))
    result = subprocess.run([sys.executable, str(Path(__file__).parent / "triton_compile_check.py"),
                             "launches:programs.skinny_scratch"],
                            capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("compiled row_and_column_sums") == 2 * len(skinny.GRIDS)


def test_random_graphs_compile_for_an_h100() -> None:
    """The differential runner's random graphs, every kernel compiled for sm_90 with this Triton
    (triton_compile_fuzz.py; with Triton 3.6 first on the path it found the two failures of
    tests/differential/reproducers/ that the GPU machines' Triton met)."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, ROOT / "tests"))
    result = subprocess.run([sys.executable, str(Path(__file__).parent / "triton_compile_fuzz.py"),
                             "20261127", "30"], capture_output=True, text=True, timeout=900, env=env)
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert "30 graphs (seed 20261127), 0 failed to compile" in result.stdout


def test_a_uniform_while_loop_is_never_a_constant_false_loop_to_triton() -> None:
    """What keeps Triton 3.6 compiling the loops above (3.9 compiles them either way)."""
    leaf, ctx, _ = hpvm.compile(skinny.root, target="cpu").leaf_kernels()[0]
    text = generate(leaf, ctx, False, interpreted=False, fixed_grid=True).text
    assert "| (tl.program_id(0) < 0):" in text


@hpvm.leaf
def guarded(hist: InOut[Ptr[i32]], hist_bytes: i64, s: i32) -> i32:
    i = hpvm.instance_id(0)
    t = s
    if hpvm.u8(s) != hpvm.u8(s):
        hpvm.atomic_xor(hist, i % 16, 1)
    if s > 3:
        t = s * 2
    return t


@hpvm.graph
def guarded_root(hist: InOut[Ptr[i32]], hist_bytes: i64, s: i32, n: i64) -> i32:
    return hpvm.node(guarded, grid=n, hist=hist, hist_bytes=hist_bytes, s=s).out[0]


def test_a_uniform_if_around_memory_accesses_is_never_a_constant_false_if_to_triton() -> None:
    """Triton 3.6 folds `u8(s) != u8(s)` to false late, and its TritonGPUCoalesce then failed on
    the atomic inside (tests/differential/reproducers/stream-1909986070.json); an if around
    arithmetic alone keeps its plain condition."""
    leaf, ctx, _ = hpvm.compile(guarded_root, target="cpu").leaf_kernels()[0]
    text = generate(leaf, ctx, False, interpreted=False).text
    ifs = [line.strip() for line in text.splitlines() if line.strip().startswith("if ") and "v_s" in line]
    assert len(ifs) == 2
    assert ifs[0].endswith("| (tl.program_id(0) < 0):") and "program_id" not in ifs[1]


@pytest.mark.parametrize("t", [i8, i32, i64])
def test_integer_negations_reach_the_gpu_through_ineg(t) -> None:
    """`-x`, `x * -1` and `0 - abs(x)` negate through _ineg, which hides `~x` from LLVM up to 32
    bits: ptxas folded LLVM's `neg` into a three-way min and dropped its sign
    (tests/differential/reproducers/plain-1820096542.json)."""
    leaf, ctx, _ = hpvm.compile(semantic.make_negations_in_min_max(t), target="cpu").leaf_kernels()[0]
    text = generate(leaf, ctx, False, interpreted=False).text
    body = text[text.rindex("@triton.jit"):]
    assert "_ineg(v_x)" in body
    assert "_ineg(_narrow_abs(v_x))" in body or "_ineg(_iabs(v_x))" in body
    assert "* -1" not in body and "0 - " not in body and "(-v_x)" not in body
    helper = text[text.index("def _ineg("):].split("\n\n\n")[0]
    assert "_move32((~x)" in helper


@pytest.mark.parametrize("t", [i8, i32, i64])
def test_signed_shifts_reach_the_gpu_behind_a_move(t) -> None:
    """A signed `>>` goes through _ashr, whose result the GPU prelude hides from LLVM: LLVM made
    -((ty - 1) >> 1) into ((-ty) >> 1) + 1, which ptxas 12.8 assembled wrongly
    (tests/differential/reproducers/tiles-3646318069.json). The interpreter's _ashr is plain."""
    leaf, ctx, _ = hpvm.compile(semantic.make_negated_shifts(t), target="cpu").leaf_kernels()[0]
    gpu = generate(leaf, ctx, False, interpreted=False).text
    body = gpu[gpu.rindex("@triton.jit"):]
    assert body.count("_ashr(") == 2 and " >> " not in body
    helper = gpu[gpu.index("def _ashr("):].split("\n\n\n")[0]
    assert ("_move64(shifted" if t.bits == 64 else "_move32(shifted") in helper
    interpreted = generate(leaf, ctx, False, interpreted=True).text
    assert "_move" not in interpreted[interpreted.index("def _ashr("):].split("\n\n\n")[0]


def test_float_selects_reach_the_gpu_through_their_bits() -> None:
    """A select of floats (a conditional expression, a masked assignment, fmin's and fmax's
    choices) goes through _select_bits, whose GPU version selects the operands' bits behind PTX
    moves: ptxas 12.8 made a float select of 1.0 and -0.0 an FSET.BF, whose false result is +0.0
    (tests/differential/reproducers/plain-1637228348.json). An integer select stays tl.where."""
    leaf, ctx, _ = hpvm.compile(semantic.make_signed_zero_selects(T.f32), target="cpu").leaf_kernels()[0]
    gpu = generate(leaf, ctx, False, interpreted=False).text
    body = gpu[gpu.rindex("@triton.jit"):]
    assert body.count("_select_bits(") == 4 and "tl.where(" not in body
    for helper in ("_minnum", "_maxnum"):
        code = gpu[gpu.index(f"def {helper}("):].split("\n\n\n")[0]
        assert code.count("_select_bits(") == 3 and "tl.where(" not in code
    selects = gpu[gpu.index("def _select_bits("):].split("\n\n\n")[0]
    assert "_move32(" in selects and "_move64(" in selects
    leaf, ctx, _ = hpvm.compile(semantic.make_narrow_guards(T.i32), target="cpu").leaf_kernels()[0]
    ints = generate(leaf, ctx, False, interpreted=False).text
    assert "_select_bits(" not in ints[ints.rindex("@triton.jit"):]


@pytest.mark.parametrize("target", ["gpu", "python"])
@pytest.mark.parametrize("grid", skinny.GRIDS)
def test_skinny_scratch_leaves_run_like_numpy(target: str, grid: tuple[int, int, int]) -> None:
    a = np.arange(int(np.prod(grid)), dtype=np.float32) % 7
    out = np.full_like(a, np.nan)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(skinny.root, a, a.nbytes, out, out.nbytes, *grid))
    assert np.array_equal(out, skinny.reference(a, grid))

BIG_GROUP = '''
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64


@hpvm.leaf
def shift(x: InOut[Ptr[f32]], x_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    v = x[i]
    hpvm.barrier()
    x[i] = v + 1.0


@hpvm.graph
def root(x: InOut[Ptr[f32]], x_bytes: i64, n: i64):
    hpvm.node(shift, grid=n, x=x, x_bytes=x_bytes)
'''


def test_a_barrier_group_larger_than_one_program_is_refused_with_what_to_do(tmp_path: Path) -> None:
    """Instances that share barriers run as lanes of one program: a group too large for one is
    refused before anything runs, naming the leaf and the targets that can run it."""
    (tmp_path / "big_group.py").write_text(BIG_GROUP)
    sys.path.insert(0, str(tmp_path))
    try:
        import big_group
    finally:
        sys.path.remove(str(tmp_path))
    x = np.zeros(8192, np.float32)
    with hpvm.runtime("gpu"):
        with pytest.raises(HPVMError) as info:
            hpvm.wait(hpvm.launch(big_group.root, x, x.nbytes, 8192))
        small = np.zeros(64, np.float32)
        hpvm.wait(hpvm.launch(big_group.root, small, small.nbytes, 64))
    assert "barrier()" in info.value.message and "nvptx" in info.value.message
    assert info.value.loc.file == str(tmp_path / "big_group.py")
    assert np.array_equal(small, np.ones(64, np.float32))


@pytest.mark.parametrize("bx, by", [(5, 3), (16, 8), (600, 1)])
def test_grid_tiles_keep_per_parent_and_per_instance_values_apart(bx: int, by: int, tmp_path: Path) -> None:
    """Small parent instances run as tiles of the combined grid (gridtiles.py), one program
    spanning several parents: a value per parent instance and one per instance must still reach
    the right lanes (600 x 1 instances per parent: the per-parent mapping, no tiles)."""
    from programs import tile_leaves as T

    nx, ny, nz = 37, 11, 3
    x = np.arange(7, dtype=np.float32) * 0.5
    px, py = -(-nx // bx), -(-ny // by)
    results = {}
    for target in ("python", "gpu"):
        y = np.full(nx * ny * nz, -1.0, np.float32)
        z = np.full(px * py * nz, -1.0, np.float32)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(T.root, x, x.nbytes, y, y.nbytes, z, z.nbytes, nx, ny, nz, bx, by))
            hpvm.request_memory(y)
            hpvm.request_memory(z)
        results[target] = (y, z)
    (y, z), (y_ref, z_ref) = results["gpu"], results["python"]
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(z, z_ref)
    k, j, i = np.meshgrid(np.arange(nz), np.arange(ny), np.arange(nx), indexing="ij")
    p = (k * py + j // by) * px + i // bx
    w = x[p % 7] + p
    expected = w * 10 + (i % bx) * 3 + j % by + k
    np.testing.assert_array_equal(y.reshape(nz, ny, nx), expected.astype(np.float32))
    parents = np.arange(px * py * nz)
    np.testing.assert_array_equal(z, (x[parents % 7] + parents + 1).astype(np.float32))
    assert cli.main(["compile", str(ROOT / "tests" / "programs" / "tile_leaves.py"), "--target",
                     "gpu", "--emit", "triton", "-o", str(tmp_path)]) == 0
    (combine,) = tmp_path.glob("combine*.triton.py")
    assert "g0 = tl.program_id(0).to(tl.int64) * TX" in combine.read_text()  # the tiled kernel
