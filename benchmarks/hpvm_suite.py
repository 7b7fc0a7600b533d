"""HPVM's own benchmark suite on hpvm-py's targets, checked against NumPy, timed against peers.

    python benchmarks/hpvm_suite.py [--targets cpu,gpu,nvptx,python] [--size small|standard]
                                    [--only NAME[,NAME]] [--peers auto|all|none] [--repeat N]

The benchmarks are the ports in examples/hpvm_suite/ (sgemm, stencil, spmv, lbm, cava,
pipeline; docs/suite.md). For each benchmark and target the script runs the original's launch
sequence once to compile and check it against the NumPy reference (the original's tolerances),
then times it again (the median of --repeat runs; the python target is timed on its checked run),
and prints

    NAME TARGET ok|FAIL SECONDS [resident SECONDS]

then a table of the times (ms) per target next to the peers measured in the same run, and the
geometric mean of each ratio column. The peers: torch.compile (Inductor) of the same computation in torch on the CPU, and on CUDA when torch sees
a GPU, and Numba parallel versions shaped as Parboil's OpenMP ones (outer loop in parallel) for
sgemm, stencil, spmv and lbm (numba-cuda versions on a GPU). A peer that cannot run here (numba
not installed, no GPU) prints n/a. --peers auto (the default) measures peers at --size standard
only: torch.compile alone takes minutes to compile the six programs on 2 cores.

The exit status is 1 when any hpvm-py result is wrong (or a run fails), else 0. Peers' results
are not checked. Two hpvm-py times: the program (SECONDS: the whole host code of the original, a
runtime started, the inputs copied to a GPU and the results back) and `resident`: the launch
sequence again inside the same runtime once its tracked buffers are on the device, timed after
three untimed passes have compiled, recorded and captured it (`Passes` in
examples/hpvm_suite/_common.py), which is what a peer's time covers (its inputs already on its
device, after its own warm-up). Both end with `torch.cuda.synchronize()` on a GPU target:
`hpvm.wait` returns while kernels that write only tracked buffers may still run. The ratios
against peers use the resident times. A module with PEER_WITH_COPIES (the pipeline) also has its
Inductor program timed moving its data to and from the host as the original's host loop does,
printed on a line of its own. A module with `run_in_flight` (the pipeline again: its frames
already on the device, several pushed before the oldest is popped) has that driver checked and
timed too (`NAME TARGET in-flight ok|FAIL resident SECONDS`), then timed against Inductor's
resident program in alternate turns (--rounds, `in_flight_rounds`), the ratios among the notes;
the table keeps the original's loop. --breakdown profiles one resident pass per target
(`hpvm.profile`) and prints its GPU kernel, copy and host-launch seconds and its slowest kernels.
"""
from __future__ import annotations

import argparse
import contextlib
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
from hpvm_suite._common import Passes, optional_numba, optional_numba_cuda  # noqa: E402

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


def device_sync(target: str):
    """What waits for a GPU target's queued kernels (hpvm.wait returns once they are queued)."""
    if target in ("gpu", "nvptx") and cuda_available():
        import torch
        return torch.cuda.synchronize
    return None


def timed(fn, repeat: int, sync=None) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        if sync is not None:
            sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


class ProfiledPass(Passes):
    """One timed pass of the launch sequence inside `hpvm.profile`: where its time goes."""

    def __init__(self, sync=None) -> None:
        super().__init__(1, sync)
        self.times: dict[str, float] = {}
        self.kernels: dict[str, float] = {}

    @contextlib.contextmanager
    def around(self):
        import hpvm_py as hpvm
        with hpvm.profile(None) as prof:
            yield
        for event in prof.events:
            if event.get("cat") == "gpu_kernel":
                self.kernels[event["name"]] = self.kernels.get(event["name"], 0.0) + event["dur"] / 1e6
        self.times = dict(prof.times)


def run_target(mod, inputs: dict, expected: dict, target: str,
               repeat: int) -> tuple[bool, float | None, float | None, str]:
    """(ok, program seconds, resident seconds, what went wrong)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # HPVMWarning: Out buffers copied in (cava's edges)
            start = time.perf_counter()
            outputs = mod.run(inputs, target)
            first = time.perf_counter() - start
            problem = mod.check(outputs, expected)
            if problem is not None:
                return False, first, None, problem
            if target == "python":
                return True, first, None, ""
            program = timed(lambda: mod.run(inputs, target), repeat, device_sync(target))
            passes = Passes(repeat, device_sync(target))
            mod.run(inputs, target, passes)
            return True, program, passes.median(), ""
    except Exception as exc:  # noqa: BLE001 - a failing run is a FAIL line, not a crash
        detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        return False, None, None, detail


def run_in_flight(mod, inputs: dict, expected: dict, target: str,
                  repeat: int) -> tuple[bool, float | None, str]:
    """A module with run_in_flight (the pipeline): that driver checked, then its resident time
    (the median of `repeat` passes after the warm-up ones)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            problem = mod.check(mod.run_in_flight(inputs, target), expected)
            if problem is not None:
                return False, None, problem
            if target == "python":  # (checked only, as its plain run)
                return True, None, ""
            passes = Passes(repeat, device_sync(target))
            mod.run_in_flight(inputs, target, passes)
            return True, passes.median(), ""
    except Exception as exc:  # noqa: BLE001 - a failing run is a FAIL line, not a crash
        return False, None, "".join(traceback.format_exception_only(type(exc), exc)).strip()


def breakdown(mod, inputs: dict, target: str) -> str:
    """Where one resident pass's time goes: GPU kernels, copies, host launch; the top kernels."""
    profiled = ProfiledPass(device_sync(target))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mod.run(inputs, target, profiled)
    t = profiled.times
    top = sorted(profiled.kernels.items(), key=lambda kv: -kv[1])[:4]
    kernels = ", ".join(f"{name} {sec * 1e3:.2f}" for name, sec in top)
    return (f"pass {profiled.median() * 1e3:.1f} ms: gpu kernels {t.get('gpu_kernel', 0) * 1e3:.1f}, "
            f"gpu copies {t.get('gpu_copy', 0) * 1e3:.1f}, host copies {t.get('copy', 0) * 1e3:.1f}, "
            f"launch {t.get('launch', 0) * 1e3:.1f}; kernels (ms): {kernels}")


def inductor_program(mod, inputs: dict, device: str, copies: bool = False):
    """The torch program of a module compiled by torch.compile and run once (which compiles it):
    a function running it once more, and the sync that ends its GPU work (None on the CPU)."""
    import torch
    kernel, driver = mod.torch_program(inputs, device, copies=True) if copies else \
        mod.torch_program(inputs, device)
    compiled = torch.compile(kernel)

    def run() -> None:
        with torch.no_grad():
            driver(compiled)

    run()  # compiles
    return run, torch.cuda.synchronize if device == "cuda" else None


def run_peer(mod, inputs: dict, peer: str, repeat: int,
             copies: bool = False) -> tuple[float | None, str, tuple | None]:
    """Seconds of one peer's run (None and why when it cannot run), and for Inductor its
    compiled program (inductor_program's run and sync, for the frames-in-flight rounds);
    `copies`: the Inductor program moving its data to and from the host as the original's host
    loop does (modules with PEER_WITH_COPIES)."""
    try:
        if peer.startswith("inductor"):
            import torch
            device = "cuda" if peer.endswith("cuda") else "cpu"
            if device == "cuda" and not torch.cuda.is_available():
                return None, "no CUDA device", None
            program = inductor_program(mod, inputs, device, copies)
            return timed(program[0], repeat, program[1]), "", program
        cuda = peer.endswith("cuda")
        if optional_numba() is None:
            return None, "numba not installed", None
        if cuda and optional_numba_cuda() is None:
            return None, "no CUDA device for numba", None
        fn = mod.numba_program(inputs, cuda=cuda)
        if fn is None:
            return None, "no Parboil OpenMP/CUDA version", None
        fn()  # compiles
        return timed(fn, repeat), "", None
    except Exception as exc:  # noqa: BLE001
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:120], None


def in_flight_rounds(mod, inputs: dict, targets: list[str], repeat: int, rounds: int,
                     peer, sync=None) -> list[tuple[float, float]]:
    """The frames-in-flight driver against a peer's program (`peer`: one run of it; `sync`: what
    ends its GPU work and each timed pass's), in alternate turns: per round, the best target's time
    (each target's median of `repeat` passes) and the peer's (the median of `repeat` runs). The
    host's speed drifts between processes and within one by more than the two differ
    (docs/suite.md), so each ratio compares turns a few hundred milliseconds apart; the drivers
    were checked before."""
    result = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(rounds):
            best = None
            for target in targets:
                passes = Passes(repeat, sync)
                mod.run_in_flight(inputs, target, passes)
                best = passes.median() if best is None else min(best, passes.median())
            result.append((best, timed(peer, repeat, sync)))
    return result


def fmt(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1e3:.1f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--targets", default=None,
                        help="comma-separated hpvm-py targets (default: cpu,python at small, cpu "
                             "at standard, plus gpu,nvptx where a GPU is usable)")
    parser.add_argument("--size", choices=("small", "standard"), default="small")
    parser.add_argument("--only", default=None, help="comma-separated benchmarks (default: all)")
    parser.add_argument("--peers", default="auto",
                        help=f"auto, all, none or a comma-separated list of {', '.join(PEERS)}")
    parser.add_argument("--breakdown", action="store_true",
                        help="profile one resident pass per target: GPU kernels, copies, launches")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternate rounds of the frames-in-flight driver against Inductor")
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
    if args.peers in ("auto", "all", "none"):
        peers = [] if args.peers == "none" or (args.peers == "auto" and args.size == "small") \
            else list(PEERS)
    else:
        peers = args.peers.split(",")
        if any(p not in PEERS for p in peers):
            parser.error(f"unknown peer(s) in {args.peers}; known: {', '.join(PEERS)}")

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
            ok, seconds, resident, detail = run_target(mod, inputs, expected, target, repeat)
            failures += not ok
            print(f"{name} {target} {'ok' if ok else 'FAIL'} "
                  f"{'-' if seconds is None else f'{seconds:.3f}s'}"
                  f"{'' if resident is None else f' resident {resident:.4f}s'}", flush=True)
            if detail:
                print(f"    {detail}", flush=True)
            row[target] = seconds if ok else None
            row[f"{target} resident"] = resident if ok else None
            if ok and args.breakdown and target != "python":
                print(f"    {breakdown(mod, inputs, target)}", flush=True)
            if hasattr(mod, "run_in_flight"):
                ok, flight, detail = run_in_flight(mod, inputs, expected, target, repeat)
                failures += not ok
                print(f"{name} {target} in-flight {'ok' if ok else 'FAIL'}"
                      f"{'' if flight is None else f' resident {flight:.4f}s'}", flush=True)
                if detail:
                    print(f"    {detail}", flush=True)
                row[f"{target} in flight"] = flight
        for peer in peers:
            seconds, why, program = run_peer(mod, inputs, peer, repeat)
            row[peer] = seconds
            if why:
                notes.append(f"n/a: {name} {peer}: {why}")
            print(f"{name} {peer} {'n/a' if seconds is None else f'{seconds:.3f}s'}", flush=True)
            flying = [t for t in targets if row.get(f"{t} in flight")]
            if peer == "inductor-cuda" and program is not None and flying:
                turns = in_flight_rounds(mod, inputs, flying, repeat, args.rounds, *program)
                ratios_of = sorted(other / mine for mine, other in turns)
                notes.append(f"{name} with frames in flight (run_in_flight) against {peer}, "
                             f"{len(turns)} alternate rounds (ms, best GPU target / peer): " +
                             ", ".join(f"{mine * 1e3:.1f} / {other * 1e3:.1f}" for mine, other in turns) +
                             f"; ratio {statistics.median(ratios_of):.2f}x (median; "
                             f"{ratios_of[0]:.2f}-{ratios_of[-1]:.2f}x)")
            if peer == "inductor-cuda" and seconds is not None and getattr(mod, "PEER_WITH_COPIES", False):
                moved, _, _ = run_peer(mod, inputs, peer, repeat, copies=True)
                if moved is not None:
                    notes.append(f"{name} {peer} with the original's host transfers: {moved * 1e3:.1f} ms")
                    print(f"{name} {peer} with the original's host transfers {moved:.3f}s", flush=True)

    columns = targets + [f"{t} resident" for t in targets if t != "python"] + list(PEERS)
    print()
    print(f"times in ms (--size {args.size}); peer/hpvm > 1 means hpvm-py is faster; the ratios "
          f"use the resident times")
    header = ["benchmark"] + columns + ["cpu vs inductor", "cpu vs numba", "gpu best vs inductor"]
    print(" | ".join(header))
    ratios: dict[str, list[float]] = {}  # per ratio column: the benchmarks' ratios
    for name, row in table.items():
        def ratio(peer: str, mine: list[str]) -> str:
            best = min((row[f"{t} resident"] for t in mine if row.get(f"{t} resident")),
                       default=None)
            other = row.get(peer)
            if best is None or other is None:
                return "n/a"
            ratios.setdefault(peer, []).append(other / best)
            return f"{other / best:.2f}x"
        cells = [name] + [fmt(row.get(c)) for c in columns]
        cells += [ratio("inductor-cpu", ["cpu"]), ratio("numba-cpu", ["cpu"]),
                  ratio("inductor-cuda", ["gpu", "nvptx"])]
        print(" | ".join(cells))
    for peer, values in ratios.items():  # a suite-wide target is stated as this mean
        mean = statistics.geometric_mean(values)
        print(f"geometric mean against {peer} over {len(values)} benchmark(s): {mean:.2f}x")
    for note in notes:
        print(f"  {note}")
    if failures:
        print(f"{failures} wrong or failed result(s)", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
