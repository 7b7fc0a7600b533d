"""HPVM's own benchmark suite on hpvm-py's targets, checked against NumPy, timed against peers.

    python benchmarks/hpvm_suite.py [--targets cpu,gpu,nvptx,python] [--size small|standard]
                                    [--only NAME[,NAME]] [--peers auto|all|none] [--repeat N]

The benchmarks are the ports in examples/hpvm_suite/ (sgemm, stencil, spmv, lbm, cava,
pipeline; docs/suite.md). For each benchmark and target the script runs the original's launch
sequence once to compile and check it against the NumPy reference (the original's tolerances),
then times it again (the median of --repeat runs; the python target is timed on its checked run),
and prints

    NAME TARGET ok|FAIL SECONDS

then a table of the times (ms) per target next to the peers measured in the same run:
torch.compile (Inductor) of the same computation in torch on the CPU, and on CUDA when torch sees
a GPU, and Numba parallel versions shaped as Parboil's OpenMP ones (outer loop in parallel) for
sgemm, stencil, spmv and lbm (numba-cuda versions on a GPU). A peer that cannot run here (numba
not installed, no GPU) prints n/a. --peers auto (the default) measures peers at --size standard
only: torch.compile alone takes minutes to compile the six programs on 2 cores.

The exit status is 1 when any hpvm-py result is wrong (or a run fails), else 0. Peers' results
are not checked. An hpvm-py time covers the whole launch sequence of the original's host code
(every iteration, time step or frame, and the copies it implies on a GPU); a peer's time covers
the same computation with its inputs already on its device.
"""
from __future__ import annotations

import argparse
import importlib
import os
import statistics
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from hpvm_suite import BENCHMARKS  # noqa: E402
from hpvm_suite._common import optional_numba, optional_numba_cuda  # noqa: E402

PEERS = ("inductor-cpu", "inductor-cuda", "numba-cpu", "numba-cuda")


def target_available(target: str) -> bool:
    try:
        from hpvm_py.backends.registry import available
        return bool(available(target))
    except Exception:  # noqa: BLE001 - an older or restructured registry: ask torch
        if target in ("cpu", "python"):
            return True
        try:
            import torch
            return torch.cuda.is_available()
        except Exception:  # noqa: BLE001
            return False


def cuda_available() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001
        return False


def timed(fn, repeat: int, sync=None) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_target(mod, inputs: dict, expected: dict, target: str, repeat: int) -> tuple[bool, float | None, str]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HPVMWarning: Out buffers copied in (cava's edges)
            start = time.perf_counter()
            outputs = mod.run(inputs, target)
            first = time.perf_counter() - start
            problem = mod.check(outputs, expected)
            if problem is not None:
                return False, first, problem
            if target == "python":
                return True, first, ""
            return True, timed(lambda: mod.run(inputs, target), repeat), ""
    except Exception as exc:  # noqa: BLE001 - a failing run is a FAIL line, not a crash
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return False, None, detail


def run_peer(mod, inputs: dict, peer: str, repeat: int) -> tuple[float | None, str]:
    try:
        if peer.startswith("inductor"):
            import torch
            device = "cuda" if peer.endswith("cuda") else "cpu"
            if device == "cuda" and not torch.cuda.is_available():
                return None, "no CUDA device"
            kernel, driver = mod.torch_program(inputs, device)
            compiled = torch.compile(kernel)
            sync = torch.cuda.synchronize if device == "cuda" else None
            with torch.no_grad():
                driver(compiled)  # compiles
                return timed(lambda: driver(compiled), repeat, sync), ""
        cuda = peer.endswith("cuda")
        if optional_numba() is None:
            return None, "numba not installed"
        if cuda and optional_numba_cuda() is None:
            return None, "no CUDA device for numba"
        fn = mod.numba_program(inputs, cuda=cuda)
        if fn is None:
            return None, "no Parboil OpenMP/CUDA version"
        fn()  # compiles
        return timed(fn, repeat), ""
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:120]


def fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=None,
                        help="comma-separated hpvm-py targets (default: cpu,python at small, cpu "
                             "at standard, plus gpu,nvptx where a GPU is usable)")
    parser.add_argument("--size", choices=("small", "standard"), default="small")
    parser.add_argument("--only", default=None, help="comma-separated benchmarks (default: all)")
    parser.add_argument("--peers", choices=("auto", "all", "none"), default="auto")
    parser.add_argument("--repeat", type=int, default=None,
                        help="timed runs per target and peer (default 1 small, 3 standard)")
    args = parser.parse_args(argv)

    names = BENCHMARKS if args.only is None else tuple(args.only.split(","))
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {', '.join(unknown)}; known: {', '.join(BENCHMARKS)}")
    gpu_here = cuda_available() or target_available("gpu")
    if args.targets is None:
        targets = ["cpu", "python"] if args.size == "small" else ["cpu"]
        targets += ["gpu", "nvptx"] if gpu_here else []
    else:
        targets = args.targets.split(",")
    repeat = args.repeat or (1 if args.size == "small" else 3)
    peers = [] if args.peers == "none" or (args.peers == "auto" and args.size == "small") else list(PEERS)

    print(f"# hpvm_suite --size {args.size} targets {','.join(targets)}; {os.cpu_count()} CPU cores"
          f"{'; CUDA ' + __import__('torch').cuda.get_device_name() if cuda_available() else ''}",
          flush=True)
    failures = 0
    table: dict[str, dict[str, float | None]] = {}
    notes: list[str] = []
    for name in names:
        mod = importlib.import_module(f"hpvm_suite.{name}")
        inputs = mod.make_inputs(**mod.SIZES[args.size])
        expected = mod.reference(inputs)
        row = table.setdefault(name, {})
        for target in targets:
            if not target_available(target):
                print(f"{name} {target} skip (not available here)", flush=True)
                row[target] = None
                continue
            ok, seconds, detail = run_target(mod, inputs, expected, target, repeat)
            failures += not ok
            print(f"{name} {target} {'ok' if ok else 'FAIL'} "
                  f"{'-' if seconds is None else f'{seconds:.3f}s'}", flush=True)
            if detail:
                print(f"    {detail}", flush=True)
            row[target] = seconds if ok else None
        for peer in peers:
            seconds, why = run_peer(mod, inputs, peer, repeat)
            row[peer] = seconds
            if why:
                notes.append(f"{name} {peer}: {why}")
            print(f"{name} {peer} {'n/a' if seconds is None else f'{seconds:.3f}s'}", flush=True)

    columns = targets + list(PEERS)
    print()
    print(f"times in ms (--size {args.size}); peer/hpvm > 1 means hpvm-py is faster")
    header = ["benchmark"] + columns + ["cpu vs inductor", "cpu vs numba", "gpu best vs inductor"]
    print(" | ".join(header))
    for name, row in table.items():
        def ratio(peer: str, mine: list[str]) -> str:
            best = min((row[t] for t in mine if row.get(t)), default=None)
            other = row.get(peer)
            return "n/a" if best is None or other is None else f"{other / best:.2f}x"
        cells = [name] + [fmt(row.get(c)) for c in columns]
        cells += [ratio("inductor-cpu", ["cpu"]), ratio("numba-cpu", ["cpu"]),
                  ratio("inductor-cuda", ["gpu", "nvptx"])]
        print(" | ".join(cells))
    for note in notes:
        print(f"  n/a: {note}")
    if failures:
        print(f"{failures} wrong or failed result(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
