"""The launch-time bounds proof never lets compiled code touch memory outside a buffer.

One regression test per hole the proof once had: indices computed by an earlier node and replayed
launches, loops left by break/continue/return, chains of loop-carried variables, relations proven
on wrapping arithmetic, malloc sizes that overflow, grids whose instance count overflows. Then
generated programs (tests/differential/bounds_generator.py) launched twice on cpu and python, and
an audit of the analysis construct by construct. Every buffer sits between guard zones
(tests/differential/guard.py); the python target, which checks every access itself, is the
reference for results and for the line an error names. HPVM_BOUNDS_EXAMPLES sets the number of
generated programs.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import hpvm_py as hpvm
from hpvm_py.backends.base import BufferArg, NodeContext
from hpvm_py.errors import ExecutionError, LaunchError
from hpvm_py.passes.bounds import BoundsProof
from conftest import TARGETS
from differential import bounds_generator as gen
from differential.data import load
from differential.guard import Guarded
from programs import bounds_audit as audit
from programs import bounds_holes as holes

CHECKED_TARGETS = [t for t in ("python", "cpu") if t in TARGETS]
# the python target is the reference of every comparison, run whether or not it is selected
COMPARED = ["python"] + [t for t in CHECKED_TARGETS if t != "python"]
compares_checked_targets = pytest.mark.skipif(not CHECKED_TARGETS, reason="neither python nor cpu is "
                                              "among HPVM_TEST_TARGETS")


def marked_line(name: str) -> int:
    lines = Path(holes.__file__).read_text().splitlines()
    return next(no for no, text in enumerate(lines, 1) if f"# oob:{name}" in text)


def launch(root, *args) -> None:
    hpvm.wait(hpvm.launch(root, *args))


def replays() -> int:
    return hpvm.stats()["replayed_launches"]


@pytest.fixture(params=CHECKED_TARGETS)
def checked_target(request: pytest.FixtureRequest) -> str:
    return request.param


# -- values from earlier nodes, and replays --------------------------------------------------------

def test_an_index_over_an_edge_is_decided_again_when_a_replay_changes_it(checked_target: str) -> None:
    src = Guarded(np.array([3], np.int64))
    out = Guarded(np.zeros(8, np.float32))
    args = (src.view, src.view.nbytes, out.view, out.view.nbytes)
    with hpvm.runtime(checked_target):
        launch(holes.edge_index, *args)  # proven in bounds
        assert out.view.tolist() == [0, 0, 0, 1, 0, 0, 0, 0]
        before = replays()
        src.view[0] = 1000  # same buffers and scalars: a replay, with an index far out of range
        with pytest.raises(ExecutionError, match="out-of-bounds") as info:
            launch(holes.edge_index, *args)
        assert info.value.loc.line == marked_line("put")
        src.view[0] = 5  # in range again: the unchecked code may run again
        launch(holes.edge_index, *args)
        if checked_target == "cpu":
            assert replays() - before == 1  # a replay (the failed one is not counted)
    assert out.view.tolist() == [0, 0, 0, 1, 0, 1, 0, 0]
    assert src.intact() and out.intact()


def test_per_instance_indices_over_an_edge_are_decided_again(checked_target: str) -> None:
    src = Guarded(np.arange(6, dtype=np.int64))
    out = Guarded(np.zeros(6, np.float32))
    args = (src.view, src.view.nbytes, out.view, out.view.nbytes, 6)
    with hpvm.runtime(checked_target):
        launch(holes.edge_index_each, *args)
        src.view[4] = -3
        with pytest.raises(ExecutionError, match="out-of-bounds") as info:
            launch(holes.edge_index_each, *args)
        assert info.value.loc.line == marked_line("put_each")
        src.view[4] = 4
        out.view[:] = 0
        launch(holes.edge_index_each, *args)
    assert out.view.tolist() == [2.0] * 6
    assert src.intact() and out.intact()


# -- loops ---------------------------------------------------------------------------------------

LOOP_CASES = {
    # graph, marker of the bad access (None: never out of range), data that goes out of range
    "while_break": (holes.run_while_break, "while_break", [5, 5, 5, 0, 5, 5, 5, 5]),
    "for_break": (holes.run_for_break, "for_break", [5, 5, 0, 5, 5, 5, 5, 5]),
    "while_continue": (holes.run_while_continue, "while_continue", [5, 5, 5, 5, 5, 5, 5, 0]),
    "for_return": (holes.run_for_return, None, [5, 5, 5, 0, 5, 5, 5, 5]),
}


def run_loop_case(target: str, graph, data: list[int]) -> tuple[list[float], Exception | None]:
    d = Guarded(np.array(data, np.int64))
    out = Guarded(np.zeros(8, np.float32))
    error = None
    with hpvm.runtime(target):
        try:
            launch(graph, d.view, d.view.nbytes, out.view, out.view.nbytes)
        except ExecutionError as exc:
            error = exc
    assert d.intact() and out.intact(), "a write outside the buffer"
    return out.view.tolist(), error


@compares_checked_targets
@pytest.mark.parametrize("case", sorted(LOOP_CASES))
def test_loops_left_early_are_joined_into_the_exit_and_head(case: str) -> None:
    graph, marker, bad = LOOP_CASES[case]
    for data in ([5] * 8, bad):
        results = {t: run_loop_case(t, graph, data) for t in COMPARED}
        for target, (values, error) in results.items():
            if marker is not None and data is bad:
                assert error is not None and error.loc.line == marked_line(marker), (target, error)
            else:
                assert error is None, (target, error)
                assert values == results["python"][0], target


def test_a_chain_of_loop_carried_variables_reaches_the_fixpoint(checked_target: str) -> None:
    out = Guarded(np.zeros(8, np.float32))
    with hpvm.runtime(checked_target):
        launch(holes.run_carried_chain, out.view, out.view.nbytes, 5)  # e is still 0 at each write
        assert out.view.tolist() == [1.0] + [0.0] * 7
        with pytest.raises(ExecutionError, match="out-of-bounds") as info:
            launch(holes.run_carried_chain, out.view, out.view.nbytes, 6)  # the sixth writes out[1000]
    assert info.value.loc.line == marked_line("carried_chain")
    assert out.intact()


# -- wrapping arithmetic ---------------------------------------------------------------------------

def test_relations_on_wrapping_arithmetic_do_not_bound_the_exact_sum(checked_target: str) -> None:
    out = Guarded(np.zeros(8, np.float32))
    with hpvm.runtime(checked_target):
        for data in ([3, 2], [-128, -128]):  # the i8 sum of the second pair wraps to 0
            d = Guarded(np.array(data, np.int8))
            args = (d.view, d.view.nbytes, out.view, out.view.nbytes)
            if data[0] > 0:
                launch(holes.run_wrapped_relation, *args)
                continue
            with pytest.raises(ExecutionError, match="out-of-bounds") as info:
                launch(holes.run_wrapped_relation, *args)
            assert info.value.loc.line == marked_line("wrapped_relation")
    assert out.view.tolist() == [0, 0, 0, 0, 0, 1, 0, 0]
    assert out.intact()


# -- sizes that overflow 64 bits ---------------------------------------------------------------------

def test_malloc_sizes_whose_sum_overflows_are_an_error(checked_target: str) -> None:
    out = Guarded(np.zeros(4, np.float32))
    with hpvm.runtime(checked_target):
        launch(holes.run_huge_scratch, 64, out.view, out.view.nbytes, 4)
        assert out.view.tolist() == [10.0] * 4
        with pytest.raises(ExecutionError, match="allocate") as info:
            launch(holes.run_huge_scratch, 2**62, out.view, out.view.nbytes, 4)  # 4 * 2**62 wraps to 0
        if checked_target == "cpu":  # the python target fails at the first malloc numpy cannot make
            assert "add up" in info.value.message
            assert info.value.loc.line == marked_line("huge_scratch")
        with pytest.raises(ExecutionError, match="negative") as info:
            launch(holes.run_huge_scratch, -4, out.view, out.view.nbytes, 4)
        assert info.value.loc.line == marked_line("huge_scratch") - 1  # the first malloc of n bytes
    assert out.intact()


def test_a_grid_whose_instance_count_overflows_is_a_launch_error(checked_target: str) -> None:
    out = Guarded(np.zeros(4, np.float32))
    with hpvm.runtime(checked_target):
        with pytest.raises(LaunchError, match="overflows") as info:
            launch(holes.huge_grid, out.view, out.view.nbytes, 2**32, 2**32)
        launch(holes.huge_grid, out.view, out.view.nbytes, 2, 3)
    assert info.value.loc.line == marked_line("huge_grid")
    assert out.view[0] == 1.0 and out.intact()


@pytest.mark.skipif("cpu" not in TARGETS, reason="a cpu kernel launched directly")
def test_the_cpu_kernel_refuses_overflowing_extents_itself() -> None:
    from backends.cpu_harness import run

    out = np.zeros(4, np.float32)
    with pytest.raises(LaunchError, match="overflows"):
        run(holes.mark, [(2**40, 2**40)], out, None)
    run(holes.mark, [(2, 2)], out, None)
    assert out[0] == 1.0


# -- generated programs: indices from data, run on cpu and python, launched twice -----------------


GENERATED = int(os.environ.get("HPVM_BOUNDS_EXAMPLES", "100"))
DATA_SETS = 3  # launch pairs per program: compiled code is reused


def generated_inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    data = rng.integers(-3, 21, gen.DATA)
    wild = rng.random(gen.DATA) < 0.1  # now and then a value far outside every buffer
    data[wild] = rng.choice([-2**63, 2**63 - 1, -2**31, 2**40, 1000, -1000], int(wild.sum()))
    return {"src": rng.integers(-6, 25, gen.SRC), "data": data}


def outcome(module, target: str, buffers: dict[str, Guarded], m: int) -> tuple:
    """One launch: ("ok", out, res) or ("error", line); the guard zones must hold either way."""
    buffers["out"].view[:] = 0
    buffers["res"].view[:] = 0
    views = [buffers[k].view for k in ("src", "data", "out", "res")]
    args = [x for v in views for x in (v, v.nbytes)] + [1, m]
    try:
        launch(module.root, *args)
        result: tuple = ("ok", buffers["out"].view.tolist(), buffers["res"].view.tolist())
    except ExecutionError as exc:
        result = ("error", exc.loc.line if exc.loc else None)
    broken = [k for k, b in buffers.items() if not b.intact()]
    assert not broken, f"[{target}] wrote outside {broken}"
    return result


@compares_checked_targets
@settings(max_examples=GENERATED, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(program=gen.bounds_programs(), seed=st.integers(0, 2**32 - 1),
       m=st.sampled_from([gen.SCRATCH * 8] * 3 + [4 * 8, 0]))
def test_generated_programs_agree_and_stay_in_bounds(program: gen.BoundsProgram, seed: int, m: int) -> None:
    module = load(program.source)
    rng = np.random.default_rng(seed)
    pairs = [(generated_inputs(rng), generated_inputs(rng)) for _ in range(DATA_SETS)]
    results: dict[str, list[tuple]] = {}
    for target in COMPARED:
        results[target] = []
        with hpvm.runtime(target):
            for first_inputs, second_inputs in pairs:
                buffers = {k: Guarded(v) for k, v in first_inputs.items()}
                buffers["out"] = Guarded(np.zeros(gen.OUT, np.int64))
                buffers["res"] = Guarded(np.zeros(1, np.int64))
                results[target].append(outcome(module, target, buffers, m))
                for k, v in second_inputs.items():  # same buffers and scalars: a replay on cpu
                    buffers[k].view[:] = v
                results[target].append(outcome(module, target, buffers, m))
    reference = results["python"]
    for target, got in results.items():
        for k, (expected, actual) in enumerate(zip(reference, got)):
            assert actual == expected, (f"[{target}] launch {k} differs from the python target\n"
                                        f"{program.source}\ninputs: {pairs[k // 2]}\nm = {m}")


# -- the analysis, construct by construct ------------------------------------------------------------


def proven(leaf, k_values: list[int]) -> bool:
    """Whether the proof lets `leaf` run unchecked with out of 8 i64, data of 4 u8, and `k` one
    value per instance (an int64 array, converted to the parameter's type as the kernel does)."""
    ctx = NodeContext(level_dims=(1,), input_modes=("buffer", "uniform", "buffer", "uniform", "per_instance"),
                      output_modes=())
    args = [BufferArg(None, 0, 64, None), np.int64(64), BufferArg(None, 0, 4, None), np.int64(4),
            np.array(k_values, np.int64)]
    return BoundsProof(leaf.ir, ctx).holds(args, [(len(k_values),)])


AUDIT = [  # leaf, k's values, proven
    (audit.floordiv, [1, 4], True), (audit.floordiv, [0, 4], False), (audit.floordiv, [-1, 4], False),
    (audit.modulo, [1, 8], True), (audit.modulo, [-3, 8], False),
    (audit.shift_right, [4, 19], True), (audit.shift_right, [0, 8], False),
    (audit.shift_left, [0, 2], False),
    (audit.float_cast, [0, 7], False),
    (audit.unsigned_wrap, [1, 8], True), (audit.unsigned_wrap, [0, 8], False),
    (audit.loaded_guard, [0, 8], True), (audit.loaded_guard, [0, 9], False),
    (audit.select, [0, 7], True), (audit.select, [0, 8], False),
    (audit.atomic_old, [0, 1], False),
    (audit.clamp, [-100, 100], True),
    (audit.min_only, [0, 100], True), (audit.min_only, [-5, 100], False),
    (audit.narrow_guard, [0, 7], True), (audit.narrow_guard, [0, 1000], False),
    (audit.abs_index, [-7, 7], True), (audit.abs_index, [-8, 3], False),
    (audit.relation_in_loop, [0, 4], False),
    (audit.relation_kept, [0, 4], True),
    (audit.loop_var_assigned, [1, 8], True), (audit.loop_var_assigned, [0, 8], False),
    (audit.zero_trip, [0, 8], False),
    (audit.while_true, [1, 8], True), (audit.while_true, [0, 8], False),
    (audit.many_loops, [0, 5], True),
    (audit.narrow_param, [3, 7], True), (audit.narrow_param, [3, 200], False),
    (audit.clamped_grid, [0, 20], True), (audit.clamped_grid, [-4, 20], True),
    (audit.clamped_one_short, [0, 30], False), (audit.clamped_one_short, [2, 30], True),
    (audit.form_after_change, [0, 7], False),
    (audit.form_in_loop, [0, 3], False),
    (audit.forms_of_many_paths, [0, 3], False),
    (audit.parity_neighbour, [0, 7], True), (audit.parity_neighbour, [0, 8], False),
    (audit.parity_neighbour, [-1, 7], False),
    (audit.parity_by_elimination, [0, 7], True), (audit.parity_by_elimination, [-1, 7], False),
    (audit.parity_by_elimination, [0, 8], False),
    (audit.parity_after_change, [0, 6], False), (audit.parity_after_change, [0, 5], True),
    (audit.parity_of_negatives, [-3, 4], True), (audit.parity_of_negatives, [-4, 5], False),
]


@pytest.mark.parametrize("leaf, k_values, expected", AUDIT,
                         ids=[f"{leaf.ir.name}{values}" for leaf, values, _ in AUDIT])
def test_the_analysis_is_sound_construct_by_construct(leaf, k_values: list[int], expected: bool) -> None:
    assert proven(leaf, k_values) is expected


def test_a_launch_of_no_instance_is_proven() -> None:
    """An empty grid runs no instance, so no access: proven whatever the indices would be (the
    halo example's first launch, over 0 cells, ran the checked code and said so)."""
    assert proven(audit.narrow_param, [])
    assert not proven(audit.narrow_param, [3, 200])


def test_past_its_budget_of_paths_the_analysis_joins_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Paths kept apart cost analysis time; past PATH_STEPS they are joined as before forms were
    kept: the proof is weaker (the clamped grid is no longer proven), never wrong."""
    from hpvm_py.passes import bounds_analysis

    assert proven(audit.clamped_grid, [0, 20])
    monkeypatch.setattr(bounds_analysis, "PATH_STEPS", 0)
    assert not proven(audit.clamped_grid, [0, 20])
    assert not proven(audit.clamped_one_short, [0, 30])


def test_a_failed_proof_says_which_access_and_why(caplog: pytest.LogCaptureFixture) -> None:
    """HPVM_LOG=info shows why a launch runs the checked code: the first access the proof could
    not bound, at its line, with the index's range and the buffer's size."""
    import logging

    line = next(no for no, text in enumerate(Path(audit.__file__).read_text().splitlines(), 1)
                if "-1 is let through" in text) + 4
    with caplog.at_level(logging.INFO, logger="hpvm_py.bounds"):
        assert not proven(audit.clamped_one_short, [0, 30])
        assert not proven(audit.atomic_old, [0, 1])
        assert proven(audit.clamped_one_short, [2, 30])
    first, second = caplog.records
    assert first.getMessage().startswith(f"{audit.clamped_one_short.ir.name} runs its bounds-checked code")
    assert f"bounds_audit.py:{line}:" in first.getMessage()
    assert "an index into out may be -1 to 7, and out holds 8 elements" in first.getMessage()
    assert "may be any i64 value" in second.getMessage()
