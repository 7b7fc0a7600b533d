"""benchmarks/run_all.py (`make bench`): finds every benchmark, skips with a reason what this
machine cannot run, runs the rest in processes of their own and reports failures."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _runner():
    spec = importlib.util.spec_from_file_location("bench_run_all", BENCHMARKS / "run_all.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_run_all"] = module
    spec.loader.exec_module(module)
    return module


def test_every_benchmark_script_is_found() -> None:
    runner = _runner()
    found = {b.script for b in runner.discover()}
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")} - {"run_all.py"}
    assert scripts <= found
    assert "cpu/run_all.py" in found and "cpu/bench_vadd.py" not in found  # the folder's own runner


def test_gpu_benchmarks_are_skipped_with_a_reason_without_a_gpu(tmp_path: Path, monkeypatch) -> None:
    runner = _runner()
    monkeypatch.setattr(runner, "_cuda_gpu", lambda: False)
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "bench_kernels.py").write_text("raise SystemExit('must not run')\n")
    monkeypatch.setattr(runner, "HERE", tmp_path)
    (bench,) = runner.discover()
    assert bench.script == "gpu/bench_kernels.py" and bench.needs == ("gpu",)
    result = runner.run(bench, full=False, timeout=60)
    assert result.status == "skipped" and "CUDA GPU" in result.note


def test_a_failing_benchmark_is_reported(tmp_path: Path, monkeypatch) -> None:
    runner = _runner()
    (tmp_path / "broken.py").write_text("print('partial figure')\nraise RuntimeError('kernel mismatch')\n")
    (tmp_path / "fine.py").write_text("print('first line')\nprint('vadd: 1.5x')\n")
    monkeypatch.setattr(runner, "HERE", tmp_path)
    results = {b.script: runner.run(b, full=False, timeout=60) for b in runner.discover()}
    assert results["broken.py"].status == "FAILED" and "kernel mismatch" in results["broken.py"].note
    assert results["fine.py"].status == "ok" and results["fine.py"].note.endswith("vadd: 1.5x")
    table = runner.table(list(results.values()))
    assert "FAILED" in table and "vadd: 1.5x" in table


def test_cpu_benchmark_rounds_run_every_candidate_in_turn(tmp_path: Path) -> None:
    """BENCH_ROUNDS=3: each candidate is timed in three processes of its own, and the report
    gives the median round and the ratio of every round."""
    import os
    import subprocess

    script = tmp_path / "bench_rounds.py"
    script.write_text(
        "import sys, time\n"
        f"sys.path.insert(0, {str(BENCHMARKS / 'cpu')!r})\n"
        "from common import measure, report\n"
        "results = measure({'hpvm-cpu': lambda: time.sleep(0.001), "
        "'peer': lambda: time.sleep(0.02)}, reps=3)\n"
        "report('sleeps', results, 'peer')\n")
    env = {**os.environ, "BENCH_ROUNDS": "3"}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env,
                         timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "median of 3 rounds" in out.stdout
    line = next(x for x in out.stdout.splitlines() if "ratio per round" in x)
    ratios = [float(r.rstrip("x")) for r in line.split(":")[1].split(";")[0].split(", ")]
    # (which way each round leans, with a 20x margin: a loaded machine stretches the short
    # sleeps, so no finer figure is asserted)
    assert len(ratios) == 3 and all(r > 1.0 for r in ratios), line
