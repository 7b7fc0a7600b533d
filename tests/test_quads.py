"""Quads (backends/triton/quads.py): in the gpu target's rows variant, a guard's loads of a row's
neighbours at constant offsets come from one 16-byte load of four lanes' centres, split in
registers, plus loads of the elements past each quad's ends. Every launch must give NumPy's
answer; quads run only where the x extents make them whole (a mutant that skips that check
gives wrong answers here), and only in launches whose row masks are proven."""
from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
import stencil
from hpvm_suite import stencil as suite_stencil
from hpvm_py.backends.triton import kernel as triton_kernel
from hpvm_py.backends.triton.codegen import generate
from hpvm_py.backends.triton.quads import centre_and_offset, quad_loads, quads_fit, x_stride
from hpvm_py.backends.triton.rowguard import find_row_guard
from hpvm_py.ir import kernel as K
from hpvm_py.rt.compiler import compile_graph
from hpvm_py.support import stats as stats_module
from hpvm_py.types import PtrType, i32, i64
from programs import quads as Q

ROOT = Path(__file__).resolve().parent.parent
N, M = 40, 9
WEIGHTS = (0.0, 1.0, -1.0, 2.0, 0.5, -2.0)  # products and sums of small integers stay exact

needs_gpu_target = pytest.mark.skipif("gpu" not in __import__("conftest").TARGETS,
                                      reason="the gpu target is not usable here")


def _leaf(root):
    (leaf, ctx, kernel), = compile_graph(root, "gpu").leaf_kernels()
    return kernel.leaf, ctx


def _offsets(root) -> list[set[int]]:
    leaf, ctx = _leaf(root)
    found = quad_loads(leaf, find_row_guard(leaf, ctx.input_modes), ctx.level_dims, ctx.input_modes)
    groups: list[set[int]] = [set() for _ in found.groups] if found else []
    for group, offset in (found.members.values() if found else ()):
        groups[group].add(offset)
    return groups


def test_which_loads_form_groups() -> None:
    assert _offsets(stencil.root) == [{-1, 0, 1}]  # at +- nx, at +- nx * ny: not one step a lane
    assert _offsets(Q.window_root) == [{-3, -2, -1, 0, 1, 2, 3}]
    # a and b each; not the loads of the conditional expression, nor those after the first store
    leaf, ctx = _leaf(Q.after_store_root)
    found = quad_loads(leaf, find_row_guard(leaf, ctx.input_modes), ctx.level_dims, ctx.input_modes)
    assert [buffer.name for buffer, _ in found.groups] == ["a", "b"]
    assert sorted(found.members.values()) == [(0, -1), (0, 1), (1, -1), (1, 1)]
    # Parboil's `i = block * count + id + 1`: every load is one past an aligned index (its x
    # neighbours one before, at and two past it); y and z neighbours are groups of their own
    assert sorted(_offsets(suite_stencil.root), key=len) == [{1}, {1}, {1}, {1}, {0, 1, 2}]
    assert _offsets(Q.ahead_root) == [{1, 2}]
    # the examples' stencil's centre is a quad-mate's load (the row proof covers it); the suite's
    # y and z centres are not, so its quads variant has a proof of its own
    for root, own_proof in ((stencil.root, False), (suite_stencil.root, True), (Q.ahead_root, True)):
        leaf, ctx = _leaf(root)
        source = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True, quads=True)
        assert (source.quad_proof is not None) is own_proof, root


def test_centres_strip_constants_through_locals_still_holding_them() -> None:
    t = i64
    n, x = K.Var(name="n", type=t), K.Var(name="x", type=t)
    one, two = K.Const(value=1, type=t), K.Const(value=2, type=t)
    i_value = K.BinOp(op="add", lhs=x, rhs=one, type=t)  # i = x + 1
    defs = {"i": (i_value, {"x": 0})}
    at = K.BinOp(op="sub", lhs=K.BinOp(op="add", lhs=K.Var(name="i", type=t), rhs=n, type=t),
                 rhs=two, type=t)  # i + n - 2
    centre, offset = centre_and_offset(at, defs, {"x": 0, "i": 1})
    assert offset == -1 and centre == K.BinOp(op="add", lhs=x, rhs=n, type=t)
    # x assigned again since i was: i is no longer x + 1
    assert centre_and_offset(at, defs, {"x": 1, "i": 1}) == (K.BinOp(
        op="add", lhs=K.Var(name="i", type=t), rhs=n, type=t), -2)
    # a local holding a load is not looked into
    load = K.Load(ptr=K.Var(name="p", type=PtrType(elem=t)), index=x, type=t)
    loaded = {"i": (K.BinOp(op="add", lhs=load, rhs=one, type=t), {"x": 0})}
    assert centre_and_offset(at, loaded, {"x": 0, "i": 1})[1] == -2
    # a widening cast keeps its constant inside (its wrapping is not the sum's)
    widened = K.BinOp(op="add", lhs=K.Cast(value=K.BinOp(op="add", lhs=K.Var(name="y", type=i32),
                                                        rhs=K.Const(value=1, type=i32), type=i32),
                                           type=t), rhs=one, type=t)
    assert centre_and_offset(widened, {}, {})[1] == 1
    assert centre_and_offset(K.BinOp(op="sub", lhs=one, rhs=x, type=t), {}, {}) == (
        K.UnaryOp(op="neg", operand=x, type=t), 1)


def test_x_stride_follows_wrapping_arithmetic() -> None:
    leaf_x = K.InstanceId(dim=0, level=0, type=i64)
    parent_x = K.InstanceId(dim=0, level=1, type=i64)
    n = K.Var(name="n", type=i64)
    dims = (2, 2)
    at = K.BinOp(op="add", lhs=K.BinOp(op="mul", lhs=parent_x, rhs=n, type=i64), rhs=leaf_x, type=i64)
    assert x_stride(at, {"n": 0}, dims) == 1
    assert x_stride(K.BinOp(op="mul", lhs=at, rhs=K.Const(value=2, type=i64), type=i64), {"n": 0}, dims) == 2
    assert x_stride(K.BinOp(op="mul", lhs=at, rhs=n, type=i64), {"n": 0}, dims) is None
    assert x_stride(K.BinOp(op="mul", lhs=leaf_x, rhs=leaf_x, type=i64), {}, dims) is None
    narrowed = K.Cast(value=at, type=i32)
    assert x_stride(narrowed, {"n": 0}, dims) == 1  # a truncation keeps a wrapping difference
    assert x_stride(K.Cast(value=narrowed, type=i64), {"n": 0}, dims) is None  # a widening does not
    assert x_stride(parent_x, {}, (0, 2)) == 1 and x_stride(parent_x, {}, dims) == 0
    assert x_stride(K.InstanceId(dim=1, level=0, type=i64), {}, dims) == 0


def test_quads_fit_only_whole_quads() -> None:
    assert quads_fit([(16, 8), (32, 64, 256)], (2, 3))
    assert not quads_fit([(6, 4), (7, 3)], (2, 2))  # a leaf 6 wide: ids do not step inside a quad
    assert quads_fit([(8,), (5, 9)], (1, 2)) and not quads_fit([(1,), (6,)], (0, 1))


def test_the_quads_variant_loads_each_centre_once() -> None:
    leaf, ctx = _leaf(stencil.root)
    rows = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True)
    quads = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True, quads=True)
    assert rows.quad_groups == 1 and not rows.quads and quads.quads
    assert rows.text.count("tl.load(v_a0 + ") == 7
    # the centre, per x neighbour a load of the element past the quad's end, and y and z's four
    assert quads.text.count("tl.load(v_a0 + ") == 7 and "_quads(_qc" in quads.text
    assert quads.text.count("_unquads(") == 1 + 2  # the helper, and the two x neighbours
    plain = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, quads=True)
    assert not plain.quads and "_quads(" not in plain.text  # quads only with row masks
    # a[at - 3] .. a[at + 3]: the centre and the three elements past each of the quad's ends,
    # each loaded once however many members read it (twelve loads of them before)
    leaf, ctx = _leaf(Q.window_root)
    window = generate(leaf, ctx, False, interpreted=False, fixed_grid=True, rows=True, quads=True)
    assert window.text.count("tl.load(v_a + ") == 7


def _reference(a: np.ndarray, lo: int, nlim: int, jlo: int, mlim: int, w: tuple, n: int = N) -> np.ndarray:
    out = np.zeros(n * M, np.float32)
    for j in range(jlo, mlim):
        for i in range(lo, nlim):
            at = j * n + i
            out[at] = sum(np.float32(w[c + 3]) * a[at + c] for c in range(-3, 4))
    return out


def _window(a: np.ndarray, lo: int, nlim: int, jlo: int, mlim: int, w: tuple, tx: int,
            n: int = N) -> tuple[np.ndarray, dict]:
    out = np.zeros(n * M, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(Q.window_root, a, a.nbytes, out, out.nbytes, n, M, lo, nlim, jlo, mlim,
                              *w, tx))
        hpvm.request_memory(out)
        stats = hpvm.stats()
    return out, stats


def _draw(rng: random.Random) -> tuple[int, int, int, int, tuple]:
    """Bounds that keep every load of the leaf as written in the buffer."""
    lo, nlim = rng.randrange(0, 6), N - rng.randrange(0, 6)
    jlo = rng.randrange(1 if lo < 3 else 0, 3)
    mlim = M - rng.randrange(1 if nlim > N - 3 else 0, 3)
    return lo, nlim, jlo, mlim, tuple(rng.choice(WEIGHTS) for _ in range(7))


@needs_gpu_target
def test_random_windows_give_numpys_answer() -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    a = np.random.default_rng(seed).integers(0, 16, N * M).astype(np.float32)
    for tx in rng.sample([4, 8, 12, 16, 6, 10], 6) + [rng.choice([4, 8, 16]) for _ in range(4)]:
        lo, nlim, jlo, mlim, w = _draw(rng)
        out, stats = _window(a, lo, nlim, jlo, mlim, w, tx)
        where = f"seed {seed}: lo={lo} nlim={nlim} jlo={jlo} mlim={mlim} w={w} tx={tx}"
        np.testing.assert_array_equal(out, _reference(a, lo, nlim, jlo, mlim, w), err_msg=where)
        quads = bool(stats.get("quad_launches"))
        assert not quads or tx % 4 == 0, f"{where}: quads in a launch where they are not whole"
        if quads:  # row masks too: the loads of x in [0, tiles' width) on rows jlo .. mlim - 1
            width = -(-N // tx) * tx
            assert jlo * N - 3 >= 0 and (mlim - 1) * N + width - 1 + 3 < N * M, where


@needs_gpu_target
def test_whole_quads_run_and_a_mutant_without_the_fit_check_fails(monkeypatch) -> None:
    """Rows 42 wide: in blocks 6 wide the grid ends in the middle of a quad, whose last two lanes
    are off; lanes 40 and 41 need their elements."""
    n = 42
    a = np.random.default_rng().integers(0, 16, n * M).astype(np.float32)
    w = (1.0, -2.0, 0.5, 2.0, -1.0, 1.0, 2.0)
    bounds = (3, n, 1, M - 1)
    expected = _reference(a, *bounds, w, n)
    out, stats = _window(a, *bounds, w, 8, n)
    np.testing.assert_array_equal(out, expected)
    assert stats.get("quad_launches") == 1
    out, stats = _window(a, *bounds, w, 6, n)
    np.testing.assert_array_equal(out, expected)
    assert not stats.get("quad_launches") and stats.get("row_guard_launches") == 1
    monkeypatch.setattr(triton_kernel, "quads_fit", lambda extents, dims: True)
    out, stats = _window(a, *bounds, w, 6, n)
    assert stats.get("quad_launches") == 1
    assert not np.array_equal(out, expected)  # the off lanes' centres read as zeros


@needs_gpu_target
def test_groups_beside_conditional_loads_and_stores() -> None:
    n, m = 24, 5
    rng = np.random.default_rng()
    # a row more than the grid: row masks let x run past n - 1 on the last row
    a, b = (rng.integers(-8, 8, n * (m + 1)).astype(np.float32) for _ in range(2))
    out = np.zeros(n * m, np.float32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(Q.after_store_root, a, a.nbytes, out, out.nbytes, n, m, b, b.nbytes))
        hpvm.request_memory(out)
        assert hpvm.stats().get("quad_launches") == 1
    expected = np.zeros(n * m, np.float32)
    for j in range(1, m):
        for i in range(1, n - 1):
            at = j * n + i
            u = a[at - 1] + a[at + 1] + b[at + 1] + b[at - 1]
            v = a[at + 2] if u > 0 else a[at - 2]
            expected[at] = u + v + a[at + 1] + a[at - 1]
    np.testing.assert_array_equal(out, expected)


@needs_gpu_target
def test_a_centre_before_the_buffer_is_proven_first(monkeypatch) -> None:
    """`ahead_leaf` reads a[at] and a[at + 1], quads load a[at - 1 + off]: at off = 1 the first
    lane's centre is a[-1], which no lane reads, so the launch runs row masks without quads (the
    quads variant's own proof, quads.py's with_centres); at off = 0 it runs quads. A mutant that
    skips that proof runs quads at off = 1."""
    n, m = 32, 5
    a = np.random.default_rng().integers(-8, 8, n * (m + 1)).astype(np.float32)  # (a row more)

    def launch(off: int) -> tuple[np.ndarray, dict]:
        out = np.zeros(n * (m + 1), np.float32)
        with hpvm.runtime("gpu"):
            hpvm.wait(hpvm.launch(Q.ahead_root, a, a.nbytes, out, out.nbytes, n, m, off, n - 1, m))
            hpvm.request_memory(out)
            stats = hpvm.stats()
        expected = np.zeros(n * (m + 1), np.float32)
        for j in range(m):
            for x in range(n):
                i = x + 1 - off
                if 0 <= i < n - 1:
                    expected[j * n + i] = a[j * n + i] + a[j * n + i + 1] * np.float32(2)
        np.testing.assert_array_equal(out, expected)
        return out, stats

    for off, quads in ((1, False), (0, True)):
        _, stats = launch(off)
        assert stats.get("row_guard_launches") == 1 and bool(stats.get("quad_launches")) is quads, off
    (_, _, kernel), = compile_graph(Q.ahead_root, "gpu").leaf_kernels()  # (the one launches use)
    monkeypatch.setattr(kernel._quad_proof, "holds", lambda args, extents, world_size=1: True)
    assert launch(1)[1].get("quad_launches") == 1


@needs_gpu_target
def test_the_suites_stencil_runs_quads_and_gives_numpys_answer() -> None:
    """HPVM's Parboil port (examples/hpvm_suite/stencil.py) with rows a multiple of four wide past
    its 256-lane blocks: row masks and quads, the answer within Parboil's tolerance."""
    inputs = suite_stencil.make_inputs(260, 6, 4, 2)
    stats_module.reset()  # (a runtime leaves its counters behind: read after it ends)
    outputs = suite_stencil.run(inputs, "gpu")
    assert suite_stencil.check(outputs, suite_stencil.reference(inputs)) is None
    assert stats_module.snapshot().get("quad_launches", 0) > 0


def test_the_stencils_quads_compile_to_16_byte_loads_for_an_h100() -> None:
    """What quads are for, in the PTX of sm_90 (Triton's compiler runs on the CPU): the rows
    variant's x neighbours are 4-byte loads of every lane; with quads the stencil's loads are
    five 16-byte ones and two of one element a quad, and the parts never go through shared memory.
    Also over tiles of 128 x 4 lanes, where the leaf's x is the grid's own coordinate in the
    generated code (gridtiles.py, combined_coordinate): through `g0 % E0_0` every load was scalar.
    And the suite's Parboil stencil, whose x is one past its lane's: 16-byte loads one element
    before each of its loads."""
    pytest.importorskip("triton.backends.nvidia")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (ROOT, ROOT / "examples", ROOT / "tests"))
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "backends" / "quads_ptx_check.py")],
                          capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    for width in (512, 128):
        rows, quads = (dict(eval(counts[f"{k} {width}"])) for k in ("rows", "quads"))  # noqa: S307
        assert quads["ld.global.v4"] == 5 and quads["ld.global"] == 7 and quads[".shared"] == 0
        assert rows["ld.global.v4"] == 5 and rows["ld.global"] > quads["ld.global"]
        # the suite's stencil: every centre aligned (one before x), a quad's element past its end
        # loaded alone for each of the y and z neighbours, two for the x group's (its members +1
        # and +2 share the next quad's first element); no quads: 28 4-byte loads
        suite = dict(eval(counts[f"suite {width}"]))  # noqa: S307
        assert suite["ld.global.v4"] == 5 and suite["ld.global"] == 11, suite


@needs_gpu_target
def test_relaunches_with_other_bounds_and_widths_keep_numpys_answer() -> None:
    """One runtime, one graph relaunched (replays, rebinds, prepared launches with new scalars):
    each launch's guard bounds and block width decide anew whether row masks and quads are safe,
    among them bounds that let the rows variant read before the buffer's start, after launches
    that ran it."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    a = np.random.default_rng(seed).integers(0, 16, N * M).astype(np.float32)
    w = tuple(rng.choice(WEIGHTS) for _ in range(7))
    cases = [(3, N - 3, 1, M - 1, 8), (3, N - 3, 0, M - 1, 8), (3, N - 3, 1, M - 1, 6),
             (0, N, 1, M - 1, 16), (3, N, 0, M - 1, 4), (3, N - 3, 1, M - 1, 8)]
    cases += [(*_draw(rng)[:4], rng.choice([4, 6, 8, 12, 16])) for _ in range(6)]
    outs = [np.zeros(N * M, np.float32) for _ in range(3)]
    with hpvm.runtime("gpu"):
        for n, (lo, nlim, jlo, mlim, tx) in enumerate(cases):
            out = outs[n % len(outs)]  # a few buffers again and again: rebound launches
            out[:] = 0
            before = hpvm.stats().get("quad_launches", 0)
            hpvm.wait(hpvm.launch(Q.window_root, a, a.nbytes, out, out.nbytes, N, M, lo, nlim, jlo,
                                  mlim, *w, tx))
            hpvm.request_memory(out)
            where = f"seed {seed}, launch {n}: lo={lo} nlim={nlim} jlo={jlo} mlim={mlim} tx={tx}"
            np.testing.assert_array_equal(out, _reference(a, lo, nlim, jlo, mlim, w), err_msg=where)
            if hpvm.stats().get("quad_launches", 0) > before:
                width = -(-N // tx) * tx
                assert tx % 4 == 0 and jlo * N - 3 >= 0 and (mlim - 1) * N + width + 2 < N * M, where


@needs_gpu_target
@pytest.mark.parametrize("whole", ["1", "0"], ids=["whole-items", "stage-by-stage"])
@pytest.mark.parametrize("rows", [[(1, M - 1), (1, M), (0, M - 1)] * 4,
                                  [(1, M), (1, M - 1), (1, M - 1), (0, M - 1), (1, M - 1)] * 3],
                         ids=["proven-first", "unproven-first"])
def test_stream_items_with_other_bounds_run_row_masks_only_where_proven(monkeypatch, rows, whole) -> None:
    """A stream's items share prepared launches and patch their scalars (a slot's launches for
    whole items, a stage's kept launches stage by stage). Row masks and quads were decided when
    a launch was prepared: an item whose guard bounds do not prove them (jlo = 0: the x lanes of
    row 0 would load before the buffer's start; mlim = M: those of the last row past its end)
    must not run a launch prepared with them for another item (before LeafKernel.variant, the
    unproven-first case did). mlim = M - 1 and M are integers Triton specialises alike. Every
    kernel issued is recorded with its variant and its bounds."""
    from hpvm_py.backends.triton.prepared import TritonLaunch

    monkeypatch.setenv("HPVM_STREAM_ITEMS", whole)
    monkeypatch.setenv("HPVM_STREAM_GRAPHS", "0")  # on a GPU, each kernel through issue() too

    issued: list[tuple[bool, int, int]] = []
    original = TritonLaunch.issue

    def recording_issue(self, *args, **kwargs):
        leaf = self.kernel.leaf
        if self.source is not None and leaf.name == "window_leaf":
            jlo, mlim = (next(i for i, p in enumerate(leaf.params) if p.name == name) for name in ("jlo", "mlim"))
            issued.append((self.source.rows, int(self.call[self.uniforms[jlo]]),
                           int(self.call[self.uniforms[mlim]])))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(TritonLaunch, "issue", recording_issue)
    a = np.random.default_rng().integers(0, 16, N * M).astype(np.float32)
    w = (1.0, -2.0, 0.5, 2.0, -1.0, 1.0, 2.0)
    out = np.zeros(N * M, np.float32)  # every item's: the slots keep their launches, scalars patched
    with hpvm.runtime("gpu"):
        handle = hpvm.launch(Q.window_stream_root, stream=True, depth=2)
        for jlo, mlim in rows:
            hpvm.push(handle, a, a.nbytes, out, out.nbytes, N, M, 3, N - 3, jlo, mlim, *w, 8, timeout=60)
        for _ in rows:
            hpvm.pop(handle, timeout=300)
        hpvm.wait(handle, timeout=60)
        hpvm.request_memory(out)
    expected = np.zeros(N * M, np.float32)
    for jlo, mlim in rows:  # in push order: each item writes its rows
        written = _reference(a, 3, N - 3, jlo, mlim, w)
        expected[jlo * N:mlim * N] = written[jlo * N:mlim * N]
    np.testing.assert_array_equal(out, expected)
    assert sorted(bounds for _, *bounds in issued) == sorted(list(r) for r in rows)
    assert all(jlo >= 1 and mlim < M for masked, jlo, mlim in issued if masked), issued
    assert any(masked for masked, *_ in issued), issued


def _wrap(value: int, bits: int) -> int:
    return (value + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1))


def _evaluate(e: K.Expr, env: dict[str, int], defs: dict) -> int:
    """An integer index expression's value in its type's wrapping arithmetic (locals from defs)."""
    bits = e.type.bits
    if isinstance(e, K.Const):
        return _wrap(int(e.value), bits)
    if isinstance(e, K.Var):
        return env[e.name] if e.name in env else _evaluate(defs[e.name][0], env, defs)
    if isinstance(e, K.UnaryOp):
        return _wrap(-_evaluate(e.operand, env, defs), bits)
    if isinstance(e, K.Cast):
        return _wrap(_evaluate(e.value, env, defs), bits)
    lhs, rhs = _evaluate(e.lhs, env, defs), _evaluate(e.rhs, env, defs)
    return _wrap({"add": lhs + rhs, "sub": lhs - rhs, "mul": lhs * rhs}[e.op], bits)


def _random_index(rng: random.Random, t, depth: int, names: list[str]) -> K.Expr:
    if depth == 0 or rng.random() < 0.25:
        if rng.random() < 0.4:
            return K.Const(value=rng.choice([0, 1, 2, 3, -1, -4, 7, (1 << (t.bits - 1)) - 1]), type=t)
        return K.Var(name=rng.choice(names) + str(t.bits), type=t)
    kind = rng.choice(["add", "add", "sub", "sub", "mul", "neg", "cast"])
    if kind == "neg":
        return K.UnaryOp(op="neg", operand=_random_index(rng, t, depth - 1, names), type=t)
    if kind == "cast":
        other = i32 if t.bits == 64 else i64
        return K.Cast(value=_random_index(rng, other, depth - 1, names), type=t)
    return K.BinOp(op=kind, lhs=_random_index(rng, t, depth - 1, names),
                   rhs=_random_index(rng, t, depth - 1, names), type=t)


def test_centres_and_offsets_are_exact_in_wrapping_arithmetic() -> None:
    """index == centre + offset, bit for bit in the index's type, over random sums, differences,
    products, negations and casts of variables, constants and locals (whose definitions hold or
    were overwritten since), at random values including the types' extremes."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for case in range(300):
        t = rng.choice([i32, i64])
        defs = {f"l{k}{b.bits}": (_random_index(rng, b, 3, ["x", "y"]), {})
                for k in range(2) for b in (i32, i64)}
        versions = {name: 1 for name in defs}
        if rng.random() < 0.3:  # a variable a local read was assigned again: not looked into
            name = rng.choice(sorted(defs))
            defs[name] = (defs[name][0], {"x32": 0})
            versions["x32"] = 1
        index = _random_index(rng, t, 4, ["x", "y", "l0", "l1"])
        centre, offset = centre_and_offset(index, defs, versions)
        for _ in range(20):
            env = {f"{v}{b}": rng.choice([rng.randrange(-(1 << (b - 1)), 1 << (b - 1)),
                                          rng.randrange(-100, 100), (1 << (b - 1)) - 1,
                                          -(1 << (b - 1))])
                   for v in "xy" for b in (32, 64)}
            expected = _evaluate(index, env, defs)
            got = _wrap((0 if centre is None else _evaluate(centre, env, defs)) + offset, t.bits)
            assert got == expected, f"seed {seed}, case {case}: {index} -> ({centre}, {offset})"
