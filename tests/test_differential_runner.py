"""tests/differential/runner.py, the differential runner the GPU machines run with 500 graphs
(tests/run_device_tests.sh), runs here on the targets there are, with a few graphs."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import TARGETS
from differential import runner

RUNNER = Path(runner.__file__)
COMPILED = [t for t in TARGETS if t != "python"]


@pytest.mark.skipif(not COMPILED, reason="no compiled target here")
def test_runner_finds_no_mismatch(tmp_path: Path) -> None:
    """28 graphs: every category (plain, partial Out, ping-pong, failing streams, mixed targets,
    tiles, neighbours) four times, on cpu and on gpu (Triton's interpreter on CI). The run takes
    about 10 s; once (2026-11-29, a CI run on a 2-core VM) it had not ended after 540: its
    watchdog now prints every thread's stack before the timeout, so a hang shows where it waits."""
    done = subprocess.run([sys.executable, str(RUNNER), "--graphs", "28", "--targets", ",".join(COMPILED),
                           "--seed", "20", "--save-dir", str(tmp_path), "--watchdog", "480"],
                          capture_output=True, text=True, timeout=540)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    assert summary.startswith(f"differential: 28 graphs, targets {','.join(COMPILED)}: "), done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(tmp_path.iterdir())


def test_a_difference_is_a_mismatch() -> None:
    nan_a = np.array([np.nan, 1.0], np.float32)
    nan_b = nan_a.copy()
    nan_b.view(np.uint32)[0] |= 1  # another NaN payload: still equal
    assert runner.differences({"x": (nan_a, "f32")}, {"x": (nan_b, "f32")}, False) == []
    zero = np.array([0.0], np.float32)
    assert runner.differences({"x": (zero, "f32")}, {"x": (-zero, "f32")}, False)  # -0.0 is not 0.0
    assert runner.differences({"x": (zero, "f32")}, {"error": "LaunchError"}, False)


def test_a_lost_stream_item_breaks_the_rule() -> None:
    case = runner.Case("stream", 0, "", {"items": [{}, {}, {}], "failing": 2})
    right = {"item0": "ok", "item1": "ok", "item2": "ExecutionError", "wait": "ExecutionError"}
    assert runner.stream_rule(case, right) == []
    lost = {"item0": "ExecutionError", "wait": "ExecutionError"}  # items 0 and 1 were good
    assert len(runner.stream_rule(case, lost)) == 3


def _stage_shapes(source: str) -> tuple[str, str, bool]:
    body = "blocks" if "def blocks(" in source else "wrapper" if "def body_wrapper(" in source else "leaf"
    return body, "wrapper" if "def tail_wrapper(" in source else "leaf", "    return k\n" in source


@pytest.mark.skipif(not COMPILED, reason="no compiled target here")
def test_streams_of_chain_stages_match_python(tmp_path: Path) -> None:
    """12 stream graphs whose stages are leaves, wrappers around them, or wrappers around grids
    of blocks (launched as the leaf: rt/stream/stage_launch.py), some items failing; the body
    returns its instance's id + 1, so a chain that bound up another instance's value than the
    first's would differ from python, or its input k, which a gpu stream then runs whole."""
    seed, graphs = 31, 12
    shapes = {_stage_shapes(runner.make_case("stream", s, COMPILED).source)
              for s in runner.graph_seeds(seed, graphs)}
    assert {body for body, _, _ in shapes} == {"leaf", "wrapper", "blocks"}
    assert {tail for _, tail, _ in shapes} == {"leaf", "wrapper"}
    assert {forwards for body, _, forwards in shapes if body != "leaf"} == {True, False}
    done = subprocess.run([sys.executable, str(RUNNER), "--graphs", str(graphs), "--categories", "stream",
                           "--targets", ",".join(COMPILED), "--seed", str(seed), "--save-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0 and " 0 mismatches" in done.stdout, done.stdout + done.stderr
    assert not list(tmp_path.iterdir())


def _tile_shapes(source: str) -> tuple[int, str, str]:
    dims = 3 if "instance_id(2)" in source else 2 if "instance_id(1)" in source else 1
    walk = "down" if "p -= " in source else "break" if "break\n        p += " in source else "loop"
    exchange = "reduce" if "while stride" in source else "rounds" if "for r in range" in source else \
        "global" if "(O[" in source else "neighbour"
    return dims, walk, exchange


@pytest.mark.skipif(not COMPILED, reason="no compiled target here")
def test_tiles_match_python(tmp_path: Path) -> None:
    """16 tile graphs: 1-, 2- and 3-D blocks, pointers walked by loops, left by break or counted
    down, and the scratch tile read at a neighbour, reduced, passed around between barriers or
    exchanged through the output."""
    seed, graphs = 5, 16
    sources = [runner.make_case("tiles", s, COMPILED).source for s in runner.graph_seeds(seed, graphs)]
    shapes = [_tile_shapes(source) for source in sources]
    assert any("frow = flat + " in source for source in sources)  # a pointer into flat scratch
    assert {dims for dims, _, _ in shapes} == {1, 2, 3}
    assert {walk for _, walk, _ in shapes} == {"loop", "break", "down"}
    assert {exchange for _, _, exchange in shapes} == {"neighbour", "reduce", "rounds", "global"}
    done = subprocess.run([sys.executable, str(RUNNER), "--graphs", str(graphs), "--categories", "tiles",
                           "--targets", ",".join(COMPILED), "--seed", str(seed), "--save-dir", str(tmp_path)],
                          capture_output=True, text=True, timeout=540)
    assert done.returncode == 0 and " 0 mismatches" in done.stdout, done.stdout + done.stderr
    assert not list(tmp_path.iterdir())
