"""HPVM's own benchmark suite (examples/hpvm_suite/): every port matches NumPy on cpu and python,
and the suite's input readers refuse bad files with an error that names the file."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hpvm_suite import BENCHMARKS, cava, lbm, spmv
from hpvm_suite._common import SuiteInputError

ROOT = Path(__file__).resolve().parent.parent


def test_suite_small_runs_and_checks_on_cpu_and_python() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hpvm_suite.py"), "--size", "small",
                             "--targets", "cpu,python"], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    for name in BENCHMARKS:
        for target in ("cpu", "python"):
            assert any(ln.startswith(f"{name} {target} ok ") for ln in lines), result.stdout
    assert any(ln.startswith("benchmark | cpu | python |") for ln in lines), result.stdout
    for target in ("cpu", "python"):  # the pipeline's frames-in-flight driver, checked too
        assert any(ln.startswith(f"pipeline {target} in-flight ok") for ln in lines), result.stdout


def test_suite_rejects_an_unknown_benchmark() -> None:
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "hpvm_suite.py"), "--only", "nbody"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "unknown benchmark" in result.stderr


def test_jds_holds_the_matrix() -> None:
    rng = np.random.default_rng(1)
    rows, cols, vals = spmv.generate_coo(300, 40, rng)
    jds = spmv.coo_to_jds(300, rows, cols, vals, mirrored=True)
    dense = np.zeros((300, 300), np.float32)
    dense[jds["rows"], jds["cols"]] = jds["vals"]
    assert np.array_equal(dense, dense.T)
    rebuilt = np.zeros_like(dense)
    for r in range(300):
        for d in range(jds["nzcnt"][r >> 5]):
            j = jds["jds_ptr"][d] + r
            rebuilt[jds["perm"][r], jds["index"][j]] += jds["data"][j]
    assert np.array_equal(rebuilt, dense)


def test_obstacle_file_round_trip_and_bad_sizes(tmp_path: Path) -> None:
    nx, ny, nz = 5, 4, 3
    solid = np.zeros((nz, ny, nx), bool)
    solid[1, 2, 3] = True
    text = "\n".join("\n".join("".join("#" if solid[z, y, x] else "." for x in range(nx))
                               for y in range(ny)) + "\n" for z in range(nz)) + "\n"
    good = tmp_path / "box.of"
    good.write_text(text)
    assert np.array_equal(lbm.read_obstacle_file(good, nx, ny, nz), solid)
    short = tmp_path / "short.of"
    short.write_text(text[:-7])
    with pytest.raises(SuiteInputError, match=r"short\.of: truncated: expected a 5 x 4 x 3 obstacle file"):
        lbm.read_obstacle_file(short, nx, ny, nz)
    shifted = tmp_path / "shifted.of"
    shifted.write_text("." + text[:-1])
    with pytest.raises(SuiteInputError, match=r"shifted\.of: .*not a 5 x 4 x 3 obstacle file"):
        lbm.read_obstacle_file(shifted, nx, ny, nz)
    with pytest.raises(SuiteInputError, match=r"missing\.of: cannot read"):
        lbm.read_obstacle_file(tmp_path / "missing.of", nx, ny, nz)


def test_matrix_market_reader(tmp_path: Path) -> None:
    good = tmp_path / "tiny.mtx"
    good.write_text("%%MatrixMarket matrix coordinate real symmetric\n% comment\n3 3 4\n"
                    "1 1 2.0\n2 1 -1.0\n2 2 2.0\n3 3 1.5\n")
    inputs = spmv.make_inputs(0, 0, iterations=1, matrix=str(good))
    assert inputs["dim"] == 3 and len(inputs["rows"]) == 5
    truncated = tmp_path / "cut.mtx"
    truncated.write_text("%%MatrixMarket matrix coordinate real general\n3 3 4\n1 1 2.0\n")
    with pytest.raises(SuiteInputError, match=r"cut\.mtx: truncated: the size line promises 4 entries"):
        spmv.read_matrix_market(truncated)
    dense = tmp_path / "dense.mtx"
    dense.write_text("%%MatrixMarket matrix array real general\n2 2\n1\n2\n3\n4\n")
    with pytest.raises(SuiteInputError, match=r"dense\.mtx: not a Matrix Market coordinate matrix"):
        spmv.read_matrix_market(dense)
    outside = tmp_path / "outside.mtx"
    outside.write_text("%%MatrixMarket matrix coordinate real general\n2 2 1\n3 1 1.0\n")
    with pytest.raises(SuiteInputError, match=r"outside\.mtx: an entry lies outside"):
        spmv.read_matrix_market(outside)


def test_raw_image_and_camera_model_readers(tmp_path: Path) -> None:
    image = np.arange(2 * 4 * 3, dtype=np.uint8).reshape(2, 4, 3)
    good = tmp_path / "raw.bin"
    good.write_bytes(np.array([2, 4, 3], np.int32).tobytes() + image.tobytes())
    assert np.array_equal(cava.read_raw_image(good), image)
    cut = tmp_path / "cut.bin"
    cut.write_bytes(good.read_bytes()[:-5])
    with pytest.raises(SuiteInputError, match=r"cut\.bin: expected 2 x 4 x 3 = 24 bytes of pixels"):
        cava.read_raw_image(cut)
    grey = tmp_path / "grey.bin"
    grey.write_bytes(np.array([2, 4, 1], np.int32).tobytes() + bytes(8))
    with pytest.raises(SuiteInputError, match=r"grey\.bin: expected a header of rows, cols and 3 channels"):
        cava.read_raw_image(grey)
    model = tmp_path / "model"
    model.mkdir()
    (model / "raw2jpg_transform.txt").write_text("1\n" * 10)
    with pytest.raises(SuiteInputError, match=r"raw2jpg_transform\.txt: truncated: expected white balance 6"):
        cava.read_camera_model(model)


@pytest.mark.parametrize("name", BENCHMARKS)
def test_suite_module_passes_hpvmc_check(name: str) -> None:
    result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "check",
                             str(ROOT / "examples" / "hpvm_suite" / f"{name}.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr


def test_timed_passes_follow_the_warm_up_passes() -> None:
    """Passes(n): WARMUP untimed passes (compiling, recording, capturing the replay's CUDA graph),
    then n timed ones, each synchronised before its clock stops."""
    from hpvm_suite._common import WARMUP, Passes

    synced = []
    passes = Passes(4, lambda: synced.append(len(passes.seconds)))
    indices = list(passes)
    assert indices == list(range(WARMUP + 4)) and WARMUP >= 2
    assert len(passes.seconds) == 4 and all(s >= 0 for s in passes.seconds)
    assert synced == [0, 0, 1, 2, 3]  # after the warm-up, then at the end of every timed pass


def test_in_flight_rounds_alternate_with_the_peer() -> None:
    """Each round times every target's frames-in-flight driver, then the peer, so that both
    see the host at the same speed; a round keeps the best target's median."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_runner", ROOT / "benchmarks" / "hpvm_suite.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    order: list[str] = []
    medians: dict[str, list[float]] = {"slow": [], "fast": []}

    class StandIn:
        @staticmethod
        def run_in_flight(inputs: dict, target: str, passes) -> None:  # noqa: ANN001
            for _ in passes:
                order.append(target)
            medians[target].append(passes.median())

    turns = runner.in_flight_rounds(StandIn, {}, ["slow", "fast"], 2, 3, lambda: order.append("peer"),
                                    lambda: None)
    from hpvm_suite._common import WARMUP

    one_round = ["slow"] * (WARMUP + 2) + ["fast"] * (WARMUP + 2) + ["peer"] * 2
    assert order == one_round * 3
    assert len(turns) == 3
    for k, (best, peer) in enumerate(turns):
        assert best == min(medians["slow"][k], medians["fast"][k]) and peer >= 0
