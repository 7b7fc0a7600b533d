"""Reduction loops of one-instance leaves spread over a program's lanes (backends/triton/spread.py):
results bit for bit those of the sequential loop (the cpu target, a NumPy fold), the first
out-of-bounds access reported as on the cpu target, and near misses left literal.

Runs through Triton's interpreter without a GPU, in programs of kernel.INTERPRETER_SPREAD's 64
lanes: a few hundred iterations make several chunks and a partial last one. The `split` fixture runs
a test with the loop of each parent instance on one program or split over 3 (chunks 0, 3, ... on
the first; programs without any chunk when the loop is short).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.backends import registry
from hpvm_py.backends.triton import kernel as triton_kernel
from hpvm_py.backends.triton.codegen import TritonSource, generate
from hpvm_py.errors import ExecutionError
from hpvm_py.ir import semantics as S
from programs import lane_reductions as R

ROOT = Path(__file__).resolve().parents[2]
MARKER = "spread over the lanes"
pytestmark = pytest.mark.skipif(not registry.available("gpu"), reason="no triton")


def sources(graph, checked: bool = False) -> dict[str, TritonSource]:
    """The gpu kernels of a graph's leaves, by leaf name."""
    compiled = hpvm.compile(graph, target="gpu")
    return {leaf.name: generate(leaf, ctx, checked, interpreted=True)
            for leaf, ctx, _ in compiled.leaf_kernels()}


def run(target: str, graph, *args) -> list:
    with hpvm.runtime(target):
        result = hpvm.wait(hpvm.launch(graph, *args))
    return list(result) if isinstance(result, tuple) else [result]


def bits(values: list) -> list[int]:
    """Values as their bit patterns: NaN payloads and the sign of zero count."""
    return [int(np.asarray(v).view(f"u{np.asarray(v).dtype.itemsize}")) for v in values]


@dataclass
class Splits:
    programs: int  # what the spread config aims at: a launch of P parent instances splits in programs // P
    chosen: list  # the SPLIT of each spread launch laid out (None: its kernel cannot split)


def record_splits(monkeypatch, programs: int) -> Splits:
    for config in ("INTERPRETER_SPREAD", "GPU_SPREAD"):  # the interpreter's, or a real GPU's
        monkeypatch.setattr(triton_kernel, config,
                            replace(getattr(triton_kernel, config), programs=programs))
    splits = Splits(programs, [])
    layout = triton_kernel.TritonKernel._layout

    def recorded(kernel, source, *args, **kwargs):
        found = layout(kernel, source, *args, **kwargs)
        if source.spread:
            splits.chosen.append(found.options.get("SPLIT"))
        return found

    monkeypatch.setattr(triton_kernel.TritonKernel, "_layout", recorded)
    return splits


@pytest.fixture(params=[1, 3], ids=["unsplit", "split3"])
def split(request, monkeypatch) -> Splits:
    """Leaves at the root (one parent instance) run their loop on this many programs."""
    return record_splits(monkeypatch, request.param)


def fold(op, start, elements) -> object:
    return functools.reduce(op, elements, start)


def nans(k: int, rng) -> np.ndarray:
    """k quiet NaNs with distinct payloads (which NaN a fold keeps shows in the result)."""
    payloads = rng.choice(np.arange(1, 1 << 20, dtype=np.uint32), k, replace=False)
    return (np.uint32(0x7FC00000) | payloads).view(np.float32)


def float_case(name: str, n: int, rng) -> np.ndarray:
    if name == "nans":
        x = rng.standard_normal(n).astype(np.float32)
        x[rng.choice(n, 6, replace=False)] = nans(6, rng)
    elif name == "zeros":  # only ties: +0.0 and -0.0 compare equal
        x = np.where(rng.random(n) < 0.5, np.float32(0.0), np.float32(-0.0)).astype(np.float32)
    elif name == "infinities":
        x = rng.choice(np.array([-np.inf, np.inf, -1.0, 0.0, -0.0], np.float32), n)
    elif name in ("positive", "negative"):  # lanes past the range's end must not fold a 0.0 in
        x = ((np.abs(rng.standard_normal(n)) + 1) * (1 if name == "positive" else -1)).astype(np.float32)
    else:
        x = rng.standard_normal(n).astype(np.float32)
    return x


EXTREMES_CASES = [  # data, start value, range(start, stop, step) over n = 300 elements
    ("random", -np.inf, 0, 300, 1),
    ("positive", np.inf, 0, 300, 1),
    ("negative", -np.inf, 0, 299, 1),
    ("nans", 0.0, 0, 300, 1),
    ("nans", np.nan, 5, 290, 3),  # a NaN start value (index -1 in the fold)
    ("zeros", 0.0, 0, 300, 1),
    ("zeros", -0.0, 299, -1, -1),
    ("zeros", -0.0, 7, 250, 2),
    ("zeros", -1.0, 0, 300, 1),  # maxima tie: the later zero (max(acc, e)) or the earlier
    ("zeros", 1.0, 299, -1, -2),  # minima tie
    ("zeros", -np.inf, 7, 250, 2),
    ("infinities", -np.inf, 0, 300, 1),
    ("infinities", np.inf, 298, 3, -7),
    ("random", 1.5, 200, 100, 1),  # empty: stop <= start
    ("random", -0.0, 10, 10, 1),
    ("random", 2.0, 0, 300, -1),  # empty: a negative step upwards
    ("random", 0.25, 1, 299, 64),  # one iteration per chunk
]


@pytest.mark.parametrize("case", EXTREMES_CASES, ids=lambda c: "-".join(map(str, c)))
def test_float_max_and_min_are_bitwise_the_sequential_fold(case, rng, split: Splits) -> None:
    data, init, start, stop, step = case
    x = float_case(data, 300, rng)
    init = np.float32(init)
    args = (x, x.nbytes, init, start, stop, step)
    gpu = run("gpu", R.extremes_root, *args)
    assert bits(gpu) == bits(run("cpu", R.extremes_root, *args))
    elements = [x[i] for i in range(start, stop, step)]
    expected = [fold(lambda a, e: S.maximum(a, e), init, elements),
                fold(lambda a, e: S.maximum(e, a), init, elements),
                fold(lambda a, e: S.minimum(a, e), init, elements),
                fold(lambda a, e: S.minimum(e, a), init, elements)]
    assert bits(gpu) == bits([np.float32(v) for v in expected])
    assert split.chosen == [split.programs]


def test_the_four_folds_differ_where_the_operand_order_shows(rng) -> None:
    """NaNs and zeros that tell `max(acc, e)` from `max(e, acc)`: the test above can fail."""
    x = np.array([1.0, -0.0, 0.0, -3.0] * 40, np.float32)
    x[[30, 100]] = nans(2, rng)
    first, second, _, _ = run("gpu", R.extremes_root, x, x.nbytes, np.float32(-np.inf), 0, 160, 1)
    assert bits([first]) == bits([x[30]]) and bits([second]) == bits([x[100]])
    y = np.array([-1.0, 0.0, -0.0, -2.0] * 40, np.float32)  # the last maximum is -0.0
    a, b, _, _ = run("gpu", R.extremes_root, y, y.nbytes, np.float32(-5.0), 0, 160, 1)
    assert np.signbit(a) and not np.signbit(b)


def test_float64_with_a_temporary_in_the_body(rng, split: Splits) -> None:
    n = 333
    x = rng.standard_normal(n)
    x[[17, 200]] = 0.0
    x[[18, 201]] = -0.0
    for init in (np.float64(0.0), np.float64(-0.0), np.float64(np.nan)):
        args = (x, x.nbytes, init, n)
        gpu = run("gpu", R.extremes64_root, *args)
        assert bits(gpu) == bits(run("cpu", R.extremes64_root, *args))
        hi = fold(lambda a, e: S.maximum(a, e), init, x * 2.0)
        lo = fold(lambda a, e: S.minimum(e, a), init, x * 2.0)
        assert bits(gpu) == bits([hi, lo, hi - lo])
    assert split.chosen and set(split.chosen) == {split.programs}


def integer_inputs(n: int, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = rng.integers(2**30, 2**31, n, dtype=np.int32)  # sums wrap around (i32 and i8)
    x[::3] *= -1
    y = rng.integers(-2**62, 2**62, n, dtype=np.int64)  # y * 3 wraps, and so does the sum
    z = rng.integers(0, 2**64, n, dtype=np.uint64, endpoint=False)
    return x, y, z


@pytest.mark.parametrize("n", [0, 1, 200, 129])
def test_integer_sums_and_bitwise_folds_wrap_like_the_sequential_loop(n: int, rng, split: Splits) -> None:
    x, y, z = integer_inputs(max(n, 1), rng)
    start = np.int32(rng.integers(-2**31, 2**31))
    args = (x, x.nbytes, y, y.nbytes, z, z.nbytes, n, start)
    gpu = run("gpu", R.integer_root, *args)
    assert [int(v) for v in gpu] == [int(v) for v in run("cpu", R.integer_root, *args)]
    x, y, z = x[:n], y[:n], z[:n]
    shifts = np.arange(n, dtype=np.uint64) % np.uint64(7)
    expected = [
        np.add.reduce(np.append(x, start), dtype=np.int32),
        np.add.reduce(y * np.int64(3), dtype=np.int64),
        np.bitwise_and.reduce(x, initial=np.int32(-1)),
        np.bitwise_or.reduce(x, initial=np.int32(0)),
        np.bitwise_xor.reduce(x, initial=np.int32(0)),
        max(-5, int(y.max(initial=-5))), min(5, int(y.min(initial=5))),
        np.add.reduce(x.astype(np.int8), dtype=np.int8),
        np.bitwise_xor.reduce(z >> shifts, initial=np.uint64(0)),
    ]
    assert [int(v) for v in gpu] == [int(v) for v in expected]
    # n = 0: i = n - 1 is not proven in bounds, so the checked kernel runs, which never splits
    assert split.chosen == [split.programs if n else None]


def test_sixty_four_lanes_were_not_all_the_gpu_gets(monkeypatch, rng) -> None:
    """The GPU's 1024-lane programs, through the interpreter: chunks that are partly filled
    (split over 2 programs: the interpreter combines the 1024 lanes of each one at a time)."""
    monkeypatch.setattr(triton_kernel, "INTERPRETER_SPREAD", replace(triton_kernel.GPU_SPREAD, programs=2))
    x = float_case("nans", 2500, rng)
    x[[5, 1500]] = 0.0
    args = (x, x.nbytes, np.float32(-0.0), 3, 2500, 1)
    assert bits(run("gpu", R.extremes_root, *args)) == bits(run("cpu", R.extremes_root, *args))


def out_of_bounds(target: str, g: np.ndarray, idx: np.ndarray, n: int) -> ExecutionError:
    with pytest.raises(ExecutionError) as info:
        run(target, R.gather_root, g, g.nbytes, idx, idx.nbytes, n)
    return info.value


@pytest.mark.parametrize("case", ["gathered", "index", "both-in-one-chunk"])
def test_the_first_out_of_bounds_access_in_loop_order_is_reported(case: str, rng) -> None:
    """g[idx[i]]: two accesses per iteration. In one chunk of 64 iterations, a later lane that
    fails the first access must not hide an earlier lane that fails the second."""
    n, size = 300, 100
    g = rng.standard_normal(size).astype(np.float32)
    idx = rng.integers(0, size, n, dtype=np.int64)
    if case == "gathered":
        idx[[140, 250]] = [size + 7, -3]
    elif case == "index":
        idx = idx[:150]
    else:  # iteration 200 reads g[105]; idx[230] is past idx's end: both in chunk 192..255
        idx[200] = size + 5
        idx = idx[:230]
    gpu, cpu = out_of_bounds("gpu", g, idx, n), out_of_bounds("cpu", g, idx, n)
    assert gpu.message == cpu.message and gpu.loc == cpu.loc and gpu.rule == "memory-in-bounds"
    expected = {"gathered": f"load from g[{size + 7}]", "index": "load from idx[150]",
                "both-in-one-chunk": f"load from g[{size + 5}]"}[case]
    assert expected in gpu.message
    idx = idx[:150] % size  # in bounds again: the runtime stays usable
    assert bits(run("gpu", R.gather_root, g, g.nbytes, idx, idx.nbytes, 150)) == \
        bits([np.float32(fold(S.maximum, np.float32(0.0), g[idx]))])


def test_the_spread_form_is_chosen_in_both_variants(tmp_path: Path) -> None:
    for graph in (R.extremes_root, R.extremes64_root, R.integer_root, R.gather_root):
        for checked in (False, True):
            for name, source in sources(graph, checked).items():
                assert source.spread and MARKER in source.text, (name, checked)
                # the checked variant reports in loop order: one program per parent instance
                assert bool(source.split_words) == ("SPLIT_AREA" in source.text) == (not checked)
    status = cli.main(["compile", str(ROOT / "examples" / "edge_detection.py"), "--target", "gpu",
                       "--emit", "triton", "-o", str(tmp_path)])
    assert status == 0
    # (max_gradient_2 when another test of this process loaded the example first: leaf names
    # are made unique per process)
    text = next(tmp_path.glob("max_gradient*.triton.py")).read_text()
    assert MARKER in text and "tl.reduce((" in text and "_max_ties_later" in text
    assert 'tl.atomic_add(record, 1, sem="acq_rel")' in text and "volatile=True" in text


def test_loops_that_cannot_be_spread_keep_the_literal_form_and_agree(rng) -> None:
    """A float sum, a temporary or the loop variable read after the loop, a store in the body,
    a break."""
    for name, source in sources(R.literal_root).items():
        assert not source.spread and MARKER not in source.text, name
    n = 150
    x = rng.standard_normal(n).astype(np.float32)
    x[120] = -1.0  # where the loop with a break stops
    results = {}
    for target in ("gpu", "cpu"):
        out = np.zeros(n, np.float32)
        results[target] = bits(run(target, R.literal_root, x, x.nbytes, out, out.nbytes, n)), out
    assert results["gpu"][0] == results["cpu"][0]
    np.testing.assert_array_equal(results["gpu"][1], x * 2)
    total = fold(lambda a, e: np.float32(a + e), np.float32(0.0), x)
    assert results["gpu"][0][0] == bits([total])[0]


@pytest.mark.parametrize("rows,w", [(3, 200), (40, 5)])
def test_a_leaf_under_many_parent_instances_spreads_its_loop_in_fewer_lanes(rows: int, w: int,
                                                                           rng, monkeypatch) -> None:
    """One row maximum per parent instance: the optimised kernel runs grid tiles, the checked
    one (taken here by refusing every bounds proof) spreads the loop; both equal the cpu target
    and NumPy. On a GPU, a spread launch of many parent instances gives each program fewer lanes
    (a short loop leaves no lanes idle), one of few parent instances all of GPU_SPREAD's."""
    from hpvm_py.passes.bounds import BoundsProof

    x = rng.standard_normal(rows * w).astype(np.float32)
    got = {}
    for target, proofs in (("cpu", True), ("gpu", True), ("gpu checked", False)):
        out = np.zeros(rows, np.float32)
        with monkeypatch.context() as patch:
            if not proofs:
                patch.setattr(BoundsProof, "holds", lambda *args, **kwargs: False)
            run(target.split()[0], R.rows_root, x, x.nbytes, out, out.nbytes, rows, w)
        got[target] = out
    for target in ("gpu", "gpu checked"):
        np.testing.assert_array_equal(got[target], x.reshape(rows, w).max(axis=1))
        np.testing.assert_array_equal(got[target], got["cpu"])
    leaf, ctx, kernel = hpvm.compile(R.rows_root, target="gpu").leaf_kernels()[0]
    source = generate(leaf, ctx, checked=True, interpreted=False)
    assert MARKER in source.text and source.spread
    monkeypatch.setattr(triton_kernel, "interpreting", lambda: False)
    lanes = {P: kernel._layout(source, [(), (P,)], P, 1, {}).options["BLOCK"]
             for P in (1, 256, 1024, 1 << 16)}
    assert lanes == {1: 1024, 256: 1024, 1024: 256, 1 << 16: triton_kernel.MIN_BLOCK}


# -- the split over several programs per parent instance ---------------------------------------


def split_area(launch) -> np.ndarray:
    """A prepared launch's ticket counters and partial rows (kernel._split_area)."""
    return launch.call[list(launch.source.arguments).index("SPLIT_AREA")].cpu().numpy()


def test_a_relaunch_finds_the_tickets_at_zero(rng, split: Splits, monkeypatch) -> None:
    """The same prepared launch runs again (replays of a graph on a tracked buffer, with new start
    values): the last program of each run put the counter back to zero, or no program of the next
    run would draw the last ticket and the results would not be written."""
    launches = []
    prepare = triton_kernel.TritonKernel.prepare
    monkeypatch.setattr(triton_kernel.TritonKernel, "prepare",
                        lambda *args: launches.append(prepare(*args)) or launches[-1])
    x = float_case("random", 300, rng)
    with hpvm.runtime("gpu"):
        hpvm.track_memory(x)
        replays = hpvm.stats()["replayed_launches"]
        for init in (-np.inf, 10.0, np.nan, -np.inf):
            got = hpvm.wait(hpvm.launch(R.extremes_root, x, x.nbytes, np.float32(init), 0, 300, 1))
            assert bits(list(got)) == bits([fold(op, np.float32(init), x) for op in (
                S.maximum, lambda a, e: S.maximum(e, a), S.minimum, lambda a, e: S.minimum(e, a))])
            assert split_area(launches[0])[0] == 0  # the counter of the one parent instance
        replays = hpvm.stats()["replayed_launches"] - replays
    assert len(launches) == 1 and replays == 3 and split.chosen == [split.programs]
    assert split.programs == 1 or split_area(launches[0])[1:].any()  # the rows were written


def test_a_leaf_with_an_effect_before_its_loop_or_two_loops_is_not_split(rng, split: Splits) -> None:
    """An atomic before the loop would count once per program; of two spread loops, the second
    would need the first one's combined result in every program."""
    for name, source in sources(R.unsplit_root).items():
        assert source.spread and not source.split_words and "SPLIT" not in source.text, name
    n = 200
    x = rng.standard_normal(n).astype(np.float32)
    results = {}
    for target in ("gpu", "cpu"):
        count = np.zeros(1, np.int32)
        results[target] = bits(run(target, R.unsplit_root, x, x.nbytes, count, count.nbytes, n)), int(count[0])
    assert results["gpu"] == results["cpu"]
    assert results["gpu"] == (bits([x.max(), x.max(), x.min()]), n)
    assert split.chosen == [None, None]


@pytest.mark.parametrize("rows,w", [(2, 200), (3, 40), (2, 0)])
def test_few_parent_instances_split_their_loops_too(rows: int, w: int, rng, monkeypatch) -> None:
    """One row maximum per parent instance, stored after the loop, in the literal kernel (the
    optimised one takes grid tiles) split over 6 // rows programs per row: 200 iterations in 4
    chunks over 3 programs; 40 in one chunk, the other program none; no iteration at all."""
    monkeypatch.setattr(triton_kernel, "_tiles_fit", lambda *args: False)
    split = record_splits(monkeypatch, 6)
    x = rng.standard_normal(max(1, rows * w)).astype(np.float32)
    out = np.full(rows, 7.0, np.float32)
    run("gpu", R.rows_root, x, x.nbytes, out, out.nbytes, rows, w)
    expected = x[:rows * w].reshape(rows, w).max(axis=1, initial=np.float32(-1e30))
    np.testing.assert_array_equal(out, expected)
    assert split.chosen == [6 // rows]


def test_a_launch_of_few_parent_instances_aims_at_two_programs_per_multiprocessor(monkeypatch) -> None:
    leaf, ctx, kernel = hpvm.compile(R.rows_root, target="gpu").leaf_kernels()[0]
    literal = generate(leaf, ctx, checked=False, interpreted=False, optimised=False)
    checked = generate(leaf, ctx, checked=True, interpreted=False)
    assert literal.spread and literal.split_words == 2 and checked.spread and not checked.split_words
    monkeypatch.setattr(triton_kernel, "interpreting", lambda: False)
    splits = {}
    for P in (1, 2, 132, 133, 1 << 16):
        layout = kernel._layout(literal, [(), (P,)], P, 1, {})
        splits[P] = layout.options["SPLIT"]
        assert layout.grid == (P * splits[P], 1, 1)
        assert "SPLIT" not in kernel._layout(checked, [(), (P,)], P, 1, {}).options
    assert splits == {1: 264, 2: 132, 132: 2, 133: 1, 1 << 16: 1}
