"""Shared pieces of the cpu benchmarks: launching a leaf directly and timing against peers."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout

from hpvm_py.backends.base import BufferArg, NodeContext  # noqa: E402
from hpvm_py.backends.cpu import CpuBackend  # noqa: E402
from hpvm_py.support.cores import default_threads  # noqa: E402
from hpvm_py.types import PtrType  # noqa: E402

REPS = int(os.environ.get("BENCH_REPS", "11"))
# rounds of the candidates' processes, in turn (every other round in reverse order): on a shared
# VM a round's ratio is steadier than any one time, since its candidates ran minutes apart at most
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1"))
_calls: dict[str, int] = {}  # benchmark script -> measure() calls it made so far
_rounds: list[dict[str, float]] = []  # the last measure()'s times, per round


def buffer(array: np.ndarray) -> BufferArg:
    return BufferArg(obj=array, address=array.ctypes.data, nbytes=array.nbytes,
                     array=array.reshape(-1))


def launcher(leaf: Any, extents: list[tuple[int, ...]], *args: Any) -> Callable[[], None]:
    """A no-argument function that launches the compiled leaf once (uniform scalars, buffers)."""
    ir = leaf.ir
    modes = tuple("buffer" if isinstance(p.type, PtrType) else "uniform" for p in ir.params)
    ctx = NodeContext(level_dims=tuple(len(e) for e in extents), input_modes=modes,
                      output_modes=())
    kernel = CpuBackend().compile_leaf(ir, ctx)
    values = [buffer(a) if isinstance(p.type, PtrType) else p.type(a) for p, a in zip(ir.params, args)]
    return lambda: kernel.launch(values, [], extents)


def measure(candidates: dict[str, Callable[[], None]], reps: int = REPS) -> dict[str, float]:
    """Median milliseconds of each candidate, each timed in a process of its own.

    Runtimes with thread pools keep their threads spinning for a while after a parallel region
    (OpenMP under Numba does, and so does hpvm-py's native pool), which steals cores from whatever
    runs next in the same process. So the calling script runs again once per candidate with
    BENCH_ONLY naming it and BENCH_CALL numbering the measure() call of the script (one script may
    time several benchmarks with the same candidate names), and each child times just that one
    (after a warm-up call). BENCH_SHARED_PROCESS=1 times them all in this process instead.
    BENCH_ROUNDS=N runs the children N times in turn and returns each candidate's median round;
    report() then prints every round's ratio too.
    """
    script = _calling_script()
    call = _calls[script] = _calls.get(script, 0) + 1
    only = os.environ.get("BENCH_ONLY")
    if only is not None:
        if int(os.environ["BENCH_CALL"]) != call:
            return dict.fromkeys(candidates, 1.0)  # an earlier benchmark: another child times it
        fn = candidates[only]
        time.sleep(1.0)  # the script's checks ran every candidate: let their idle threads settle
        fn()
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        print(f"BENCH_RESULT {sorted(times)[len(times) // 2] * 1e3!r}", flush=True)
        os._exit(0)  # the child's job is done: skip the rest of the script
    _rounds.clear()
    if os.environ.get("BENCH_SHARED_PROCESS"):
        return _measure_shared(candidates, reps)
    names = list(candidates)
    for r in range(max(1, ROUNDS)):
        times = {name: _child(script, call, name, reps) for name in (names[::-1] if r % 2 else names)}
        _rounds.append({name: times[name] for name in names})
    return {name: _median([times[name] for times in _rounds]) for name in names}


def _child(script: str, call: int, name: str, reps: int) -> float:
    """The median milliseconds of one candidate, timed in a process of its own."""
    env = {**os.environ, "BENCH_ONLY": name, "BENCH_REPS": str(reps), "BENCH_CALL": str(call)}
    out = subprocess.run([sys.executable, script], capture_output=True, text=True, env=env,
                         timeout=600, cwd=os.path.dirname(script))
    lines = [line for line in out.stdout.splitlines() if line.startswith("BENCH_RESULT ")]
    if out.returncode != 0 or not lines:
        raise RuntimeError(f"timing {name} failed:\n{out.stderr[-2000:]}")
    return float(lines[-1].split()[1])


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def _calling_script() -> str:
    """The benchmark file whose main() called measure(): children run it again."""
    import inspect

    for frame in inspect.stack()[2:]:
        if Path(frame.filename).name.startswith("bench_"):
            return str(Path(frame.filename).resolve())
    raise RuntimeError("measure() is called from a bench_*.py module")


def _measure_shared(candidates: dict[str, Callable[[], None]], reps: int) -> dict[str, float]:
    """All candidates in this process: blocks of consecutive calls, in one order and then the
    reverse, so that drifting machine load affects every candidate alike."""
    times: dict[str, list[float]] = {name: [] for name in candidates}
    order = list(candidates)
    for sweep in (order, order[::-1]):
        for name in sweep:
            fn = candidates[name]
            fn()
            for _ in range((reps + 1) // 2):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return {name: _median(ts) * 1e3 for name, ts in times.items()}


def report(title: str, results: dict[str, float], peer: str, ours: str = "hpvm-cpu",
           reps: int = REPS) -> float:
    """Print one table row per candidate and the ratio peer/ours (> 1: hpvm-py is faster)."""
    ratio = results[peer] / results[ours]
    rounds = f", median of {len(_rounds)} rounds" if len(_rounds) > 1 else ""
    print(f"{title}  (threads: {default_threads()}, median of {reps}{rounds})")
    for name, ms in results.items():
        print(f"  {name:<22} {ms:9.3f} ms")
    print(f"  ratio {peer} / {ours}: {ratio:.2f}x")
    if len(_rounds) > 1:
        each = [times[peer] / times[ours] for times in _rounds]
        print(f"  ratio per round: {', '.join(f'{r:.2f}x' for r in each)}; median "
              f"{_median(each):.2f}x")
    return ratio
