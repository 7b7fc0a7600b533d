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
