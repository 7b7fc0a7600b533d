"""Run the benchmarks that can run on this machine (`make bench`) and print a table.

Each benchmark runs in a process of its own (thread pools and caches do not carry over), in a
quick mode by default: smaller sizes and fewer repetitions, so the figures are rough (use --full
for the scripts' own sizes). A benchmark that needs what this machine lacks (a CUDA GPU, numba,
MPI) is skipped with the reason; one that fails makes the exit status 1.

    python benchmarks/run_all.py [--full] [--only NAME] [--timeout SECONDS]

Scripts added to benchmarks/ (or a run_all.py in a sub-folder) are picked up too: run without
arguments, after the ones listed below.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _children import child_env  # noqa: E402


@dataclass
class Bench:
    script: str  # relative to benchmarks/
    quick: list[str] = field(default_factory=list)  # arguments of the quick mode
    quick_env: dict[str, str] = field(default_factory=dict)
    needs: tuple[str, ...] = ()  # "gpu", "numba", "mpi"


KNOWN = [
    Bench("launch_overhead.py"),
    Bench("launch_ab.py", ["--rounds", "2"]),
    Bench("streaming.py", ["--items", "8", "--work", "50000", "--edge-reps", "3"]),
    Bench("frontend_speed.py"),
    Bench("text_ir_speed.py"),
    Bench("peak_memory.py", ["--gib", "0.25"]),
    Bench("cpu/run_all.py", quick_env={"BENCH_REPS": "3"}, needs=("numba",)),
    Bench("collectives.py", ["--ranks", "2", "--max-mib", "1"], needs=("mpi",)),
]
_GPU_WORDS = ("gpu", "cuda", "triton", "nvptx")
_SHOWN_LINES = 3  # of a benchmark's output, in the table


def discover() -> list[Bench]:
    """The known benchmarks that exist here, then any other script."""
    known = {b.script for b in KNOWN}
    found = [b for b in KNOWN if (HERE / b.script).is_file()]
    candidates = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")
    candidates += sorted(HERE.glob("*/run_all.py"))
    for folder in sorted(p for p in HERE.iterdir() if p.is_dir() and not (p / "run_all.py").exists()):
        candidates += sorted(p for p in folder.glob("bench_*.py"))
    for path in candidates:
        script = path.relative_to(HERE).as_posix()
        if script not in known:
            gpu = any(word in script.lower() for word in _GPU_WORDS)
            found.append(Bench(script, needs=("gpu",) if gpu else ()))
    return found


def missing(needs: tuple[str, ...]) -> str | None:
    """Why this machine cannot run a benchmark with these needs (None when it can)."""
    for need in needs:
        if need == "numba" and importlib.util.find_spec("numba") is None:
            return "needs numba (pip install -e '.[bench]')"
        if need == "mpi" and (importlib.util.find_spec("mpi4py") is None or not _mpiexec()):
            return "needs mpi4py and mpiexec (pip install -e '.[dist]')"
        if need == "gpu" and not _cuda_gpu():
            return "needs a CUDA GPU (none here)"
    return None


def _mpiexec() -> bool:
    return (Path(sys.executable).parent / "mpiexec").exists() or shutil.which("mpiexec") is not None


def _cuda_gpu() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


@dataclass
class Result:
    name: str
    status: str  # "ok" | "FAILED" | "skipped"
    seconds: float
    note: str  # the benchmark's last lines of output, or why it was skipped or failed


def run(bench: Bench, full: bool, timeout: float) -> Result:
    why = missing(bench.needs)
    if why is not None:
        return Result(bench.script, "skipped", 0.0, why)
    command = [sys.executable, str(HERE / bench.script)] + ([] if full else bench.quick)
    env = child_env(str(ROOT), **({} if full else bench.quick_env))
    print(f"=== {bench.script} {' '.join(command[2:])}", flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return Result(bench.script, "FAILED", time.perf_counter() - start,
                      f"did not finish within {timeout:.0f} s")
    seconds = time.perf_counter() - start
    print(done.stdout, end="", flush=True)
    lines = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    if done.returncode != 0:
        print(done.stderr, end="", file=sys.stderr, flush=True)
        errors = [line.strip() for line in done.stderr.splitlines() if line.strip()]
        return Result(bench.script, "FAILED", seconds,
                      f"exit status {done.returncode}: {errors[-1] if errors else 'no message'}")
    return Result(bench.script, "ok", seconds, "\n".join(lines[-_SHOWN_LINES:]))


def table(results: list[Result]) -> str:
    width = max(len("benchmark"), *(len(r.name) for r in results))
    rows = [f"{'benchmark':<{width}}  {'status':<7}  {'time':>6}  result"]
    for r in results:
        first, *more = r.note.splitlines() or [""]
        rows.append(f"{r.name:<{width}}  {r.status:<7}  {r.seconds:>5.1f}s  {first}")
        rows += [f"{'':<{width + 19}}{line}" for line in more]
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="the scripts' own sizes (slow)")
    parser.add_argument("--only", metavar="NAME", help="run the benchmarks whose path contains NAME")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per benchmark")
    args = parser.parse_args()
    benches = [b for b in discover() if args.only is None or args.only in b.script]
    if not benches:
        print(f"no benchmark matches {args.only!r}", file=sys.stderr)
        return 2
    mode = "full" if args.full else "quick (rough figures; --full for the real sizes)"
    print(f"hpvm-py benchmarks, {mode}; {os.cpu_count()} cores", flush=True)
    results = [run(b, args.full, args.timeout) for b in benches]
    print()
    print(table(results))
    return 1 if any(r.status == "FAILED" for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
