"""Differential runner: random programs on compiled targets against the python target.

    python tests/differential/runner.py --graphs 500 --targets gpu,nvptx --seed 1 --save-dir DIR

Graph k of a run is built from its own seed (drawn from --seed) by tests/differential/generator.py,
driven by `random.Random` (no hypothesis needed, so it runs with a GPU machine's system Python).
Categories take turns:

- plain:    tests/test_differential.py's programs (every scalar type, f16/bf16/i8, wrap-around,
            casts, atomics, one or two leaves, flat or hierarchical);
- partial:  the same, with the store to `out` under a guard and `out` declared `Out`: the
            elements it skips must keep the buffer's known non-zero contents on every target;
- pingpong: a stencil step launched 2-4 times, `src` and `dst` swapped between launches;
- stream:   a two-stage stream of 1-12 items, one of which may index out of range in either
            stage: earlier items pop as on python, its pop raises ExecutionError, so does wait;
- mixed:    two-leaf programs whose nodes are hinted to different targets (docs/placement.md);
- tiles:    a 1-3-D leaf under a grid of blocks reading through views, row pointers, walked
            pointers and indices from data, and sharing a scratch tile across barriers;
- neighbours: a 1-3-D stencil-like leaf under a grid of blocks ending in a guard, its loads at
            constant offsets along x, y and z (tests/differential/neighbours.py): the gpu
            target's row masks and quads, proven for some launches and not others.

Outputs agree bit for bit, as in tests/test_differential.py: integers always, floats too, since
the generator uses no transcendental function; any NaN equals any NaN. Each mismatching graph is
saved as DIR/<category>-<seed>.json, which tests/test_reproducers.py replays on every target.
`--watchdog S`: a run still going after S seconds prints every thread's stack and exits with 1.
Exit status: 0 no mismatch, 1 mismatches (or the watchdog), 2 usage error.
"""
from __future__ import annotations

import argparse
import faulthandler
import json
import os
import random
import sys
import time
import traceback
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterator

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS.parent), str(TESTS)]
# Without an NVIDIA GPU, the gpu target runs through Triton's interpreter (as in tests/conftest.py).
if "TRITON_INTERPRET" not in os.environ and not Path("/dev/nvidia0").exists():
    os.environ["TRITON_INTERPRET"] = "1"
# each GPU target runs its own lowering: a graph checks Triton's code on `gpu` and NVPTX's on
# `nvptx` (the runtime's choice between them would mix the two: HPVM_GPU_LOWERING, docs/runtime.md)
os.environ.setdefault("HPVM_GPU_LOWERING", "off")

import numpy as np  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
from hpvm_py.errors import ExecutionError, HPVMError  # noqa: E402
from differential import generator as gen  # noqa: E402
from differential.choices import RandomChoices  # noqa: E402
from differential.data import load, pattern, same, scalar, values  # noqa: E402
from differential.neighbours import neighbours_program  # noqa: E402


CATEGORIES = ("plain", "partial", "pingpong", "stream", "mixed", "tiles", "neighbours")
TIMEOUT = 30.0  # seconds for any wait, push or pop: a hang is a mismatch, not a stuck run
WHY = "error message"  # an outcome's entry that is shown, never compared (messages differ by target)
# an outcome maps a name to (array, scalar type) or to an event's text ("ok", an error's class)
Outcome = dict[str, Any]


@dataclass
class Case:
    """Everything a run needs: the source and the sizes; inputs come from `seed`."""
    category: str
    seed: int
    source: str
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.category}-{self.seed}"


# -- building cases ------------------------------------------------------------------------------

def make_case(category: str, seed: int, targets: list[str]) -> Case:
    c = RandomChoices(seed)
    if category == "pingpong":
        program = gen.pingpong_program(c)
        params = {"n": c.integer(2, 16), "launches": c.integer(2, 4)}
    elif category == "stream":
        program = gen.stream_program(c)
        params = stream_params(c)
    elif category in ("tiles", "neighbours"):
        program = gen.tiles_program(c) if category == "tiles" else neighbours_program(c)
        counts = [c.integer(1, 3) for _ in program.block]  # blocks along x, y, z
        extents = [k * size for k, size in zip(counts, program.block)] + [1, 1]
        params = {"cols": extents[0], "rows": extents[1], "depth": extents[2]}
    else:
        hints: dict[str, str] = {}
        if category == "mixed":
            # the run's targets and cpu, so that a mix runs wherever the run's targets do
            places = sorted(set(targets) | {"cpu"})
            hints = {node: c.pick(places) for node in ("body", "sink", "group") if c.flag() or node != "group"}
        program = gen.generate(c, partial=category == "partial", hints=hints,
                               chained=True if category == "mixed" else None)
        p, l = c.integer(1, 3), c.integer(1, 6)
        params = {"p": p, "l": l} if program.hierarchical else {"p": 1, "l": p * l}
        params["needs"] = sorted(set(hints.values()))
    params.update(types=list(program.in_types), out_type=program.out_type)
    return Case(category, seed, program.source, params)


def stream_params(c: RandomChoices) -> dict[str, Any]:
    n, count = c.integer(1, 12), c.integer(1, 12)
    failing = c.integer(0, count)  # == count: no item fails
    stage = c.pick(["body", "tail"])
    items = []
    for j in range(count):
        k, m = 0, n - 1
        if j == failing:
            if stage == "body":
                k = c.pick([-1, 1, n])  # the first, the last or every instance out of range
            else:
                m = c.pick([-1, n])
        items.append({"k": k, "m": m})
    return {"n": n, "depth": c.integer(1, 4), "items": items, "failing": failing if failing < count else None}


# -- running a case ------------------------------------------------------------------------------

def run_case(case: Case, target: str) -> Outcome:
    """The case's observable results on one target; an unexpected error is a result too."""
    module = load(case.source)
    rng = np.random.default_rng(case.seed)
    run = {"pingpong": run_pingpong, "stream": run_stream, "tiles": run_tiles,
           "neighbours": run_neighbours}.get(case.category, run_single)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. the HPVMWarning of a partial Out: noise here
        try:
            return run(module, case, target, rng)
        except Exception as exc:  # noqa: BLE001 - any failure is an outcome to compare
            return {"error": failure(exc), WHY: str(exc).strip().splitlines()[:1] or [""]}


def failure(exc: BaseException) -> str:
    if isinstance(exc, HPVMError):
        return type(exc).__name__
    return f"{type(exc).__name__} (not an HPVMError): {''.join(traceback.format_exception_only(exc)).strip()}"


def run_single(module: Any, case: Case, target: str, rng: np.random.Generator) -> Outcome:
    p, l = case.params["p"], case.params["l"]
    n = p * l
    a_t, b_t, s_t = case.params["types"]
    out_t = case.params["out_type"]
    a, b = values(a_t, n, rng), values(b_t, n, rng)
    out, out2 = pattern(out_t, n), pattern("i64", n)
    hist = rng.integers(-5, 5, 16, dtype=np.int32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, out, out.nbytes, hist, hist.nbytes,
                              out2, out2.nbytes, scalar(s_t, rng), n, p, l), timeout=TIMEOUT)
    return {"out": (out, out_t), "hist": (hist, "i32"), "out2": (out2, "i64")}


def run_pingpong(module: Any, case: Case, target: str, rng: np.random.Generator) -> Outcome:
    n, t = case.params["n"], case.params["out_type"]
    s_t = case.params["types"][2]
    src, dst = values(t, n, rng), pattern(t, n)
    hist = rng.integers(-5, 5, 16, dtype=np.int32)
    s = scalar(s_t, rng)
    buffers = [src, dst]
    with hpvm.runtime(target):
        for step in range(case.params["launches"]):
            x, y = buffers[step % 2], buffers[(step + 1) % 2]
            hpvm.wait(hpvm.launch(module.root, x, x.nbytes, y, y.nbytes, hist, hist.nbytes, s, n), timeout=TIMEOUT)
    return {"buffer0": (src, t), "buffer1": (dst, t), "hist": (hist, "i32")}


def run_tiles(module: Any, case: Case, target: str, rng: np.random.Generator) -> Outcome:
    depth, rows, cols = case.params["depth"], case.params["rows"], case.params["cols"]
    n = depth * rows * cols
    a_t, b_t, s_t = case.params["types"]
    out_t = case.params["out_type"]
    a, b, out = values(a_t, n, rng), values(b_t, n, rng), pattern(out_t, n)
    hist = rng.integers(-5, 5, 16, dtype=np.int32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, out, out.nbytes, hist, hist.nbytes,
                              scalar(s_t, rng), depth, rows, cols), timeout=TIMEOUT)
    return {"out": (out, out_t), "hist": (hist, "i32")}


def run_neighbours(module: Any, case: Case, target: str, rng: np.random.Generator) -> Outcome:
    depth, rows, cols = case.params["depth"], case.params["rows"], case.params["cols"]
    n = depth * rows * cols
    a_t, _, s_t = case.params["types"]
    out_t = case.params["out_type"]
    a, out = values(a_t, n, rng), pattern(out_t, n)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, out, out.nbytes, scalar(s_t, rng), depth,
                              rows, cols), timeout=TIMEOUT)
    return {"out": (out, out_t)}


def run_stream(module: Any, case: Case, target: str, rng: np.random.Generator) -> Outcome:
    """Pushes every item (a push after a failure may raise: that ends the pushes), then pops in
    order up to the first error, keeping each popped item's value and buffers, then waits."""
    n = case.params["n"]
    a_t, b_t, s_t = case.params["types"]
    out_t = case.params["out_type"]
    items = []
    for spec in case.params["items"]:
        a, b, out = values(a_t, n, rng), values(b_t, n, rng), pattern(out_t, n)
        hist = rng.integers(-5, 5, 16, dtype=np.int32)
        items.append((a, b, out, hist, scalar(s_t, rng), spec["k"], spec["m"]))
    outcome: Outcome = {}
    with hpvm.runtime(target):
        handle = hpvm.launch(module.root, stream=True, depth=case.params["depth"])
        pushed = 0
        for a, b, out, hist, s, k, m in items:
            try:
                hpvm.push(handle, a, a.nbytes, b, b.nbytes, out, out.nbytes, hist, hist.nbytes, s, k, m, n,
                          timeout=TIMEOUT)
            except HPVMError:
                break
            pushed += 1
        for j, (_, _, out, hist, *_) in enumerate(items[:pushed]):
            try:
                (value,) = hpvm.pop(handle, timeout=TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - compared with the reference's
                outcome[f"item{j}"] = failure(exc)
                break
            outcome[f"item{j}"] = "ok"
            outcome[f"item{j}.value"] = (np.array([value], np.int64), "i64")
            outcome[f"item{j}.out"] = (out.copy(), out_t)
            outcome[f"item{j}.hist"] = (hist.copy(), "i32")
        try:
            hpvm.wait(handle, timeout=TIMEOUT)
            outcome["wait"] = "ok"
        except Exception as exc:  # noqa: BLE001
            outcome["wait"] = failure(exc)
    return outcome


# -- comparing -----------------------------------------------------------------------------------

def differences(expected: Outcome, got: Outcome, common_only: bool) -> list[str]:
    """`common_only`: what only one side has is left to stream_rule (a stream's reference may
    itself lose items, and then the target's extra items are right, not a mismatch)."""
    problems = []
    names = set(expected) & set(got) if common_only else set(expected) | set(got)
    for name in sorted(names - {WHY}):
        if name not in got or name not in expected:
            problems.append(f"{name}: {'missing' if name not in got else 'unexpected'} "
                            f"(reference {expected.get(name, '-')!r}, got {brief(got.get(name, '-'))})")
            continue
        x, y = expected[name], got[name]
        if isinstance(x, tuple) and isinstance(y, tuple):
            if not same(x[0], y[0], x[1]):
                problems.append(f"{name} [{x[1]}]: reference {show(x)}, got {show(y)}")
        elif x != y:
            problems.append(f"{name}: reference {brief(x)}, got {brief(y)}")
    return problems


def stream_rule(case: Case, outcome: Outcome) -> list[str]:
    """What the language promises whatever the reference does: items before the failing one pop,
    the failing one's pop raises ExecutionError, and so does wait."""
    failing = case.params.get("failing")
    if case.category != "stream":
        return []
    if "error" in outcome:
        return [f"the stream failed outside push, pop and wait: {outcome['error']}"]
    problems = [f"item{j} did not pop: {outcome.get(f'item{j}', 'not reached')}"
                for j in range(len(case.params["items"]) if failing is None else failing)
                if outcome.get(f"item{j}") != "ok"]
    if failing is not None:
        for event in (f"item{failing}", "wait"):
            if outcome.get(event) != ExecutionError.__name__:
                problems.append(f"{event} should raise ExecutionError, got {outcome.get(event, 'nothing')}")
    elif outcome.get("wait") != "ok":
        problems.append(f"wait: {outcome.get('wait')}")
    return problems


def show(value: tuple[np.ndarray, str]) -> str:
    array, t = value
    if t == "bf16":
        from hpvm_py.ir import semantics as S

        array = S.bf16_from_bits(array)
    return str(array.tolist())


def brief(value: Any) -> str:
    return show(value) if isinstance(value, tuple) else repr(value)


def check(case: Case, targets: list[str]) -> tuple[dict[str, list[str]], str | None]:
    """Mismatches per target (the reference's own rule breaks under "python"), and the error with
    which the reference rejected the program, if it did (a generator bug, counted apart)."""
    reference = run_case(case, "python")
    found: dict[str, list[str]] = {}
    if broken := stream_rule(case, reference):
        found["python"] = broken
    for target in targets:
        got = run_case(case, target)
        problems = differences(reference, got, case.category == "stream") + stream_rule(case, got)
        if problems:
            found[target] = problems
    return found, f"{reference['error']}: {reference[WHY][0]}" if "error" in reference else None


# -- the run -------------------------------------------------------------------------------------

def graph_seeds(seed: int, count: int) -> list[int]:
    r = random.Random(seed)
    return [r.getrandbits(32) for _ in range(count)]


def save(case: Case, found: dict[str, list[str]], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{case.name}.json"
    record = asdict(case) | {"mismatches": found}
    path.write_text(json.dumps(record, indent=1) + "\n")
    return path


def work(job: tuple[int, str, int, list[str]]) -> tuple[int, Case, dict[str, list[str]], str | None]:
    index, category, seed, targets = job
    case = make_case(category, seed, targets)
    found, rejected = check(case, targets)
    return index, case, found, rejected


def results(jobs: list[tuple[int, str, int, list[str]]], workers: int) -> Iterator[tuple]:
    if workers <= 1:
        yield from map(work, jobs)
        return
    import multiprocessing

    # spawn: a forked child would share the parent's CUDA and runtime state
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield from pool.imap_unordered(work, jobs)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--graphs", type=int, default=100, help="random graphs to run (default 100)")
    parser.add_argument("--targets", default=None,
                        help="comma-separated targets to compare with python (default: every one available)")
    parser.add_argument("--seed", type=int, default=None, help="the run's seed (default: random, printed)")
    parser.add_argument("--save-dir", type=Path, default=TESTS / "differential" / "reproducers",
                        help="where mismatching graphs are saved (default tests/differential/reproducers)")
    parser.add_argument("--categories", default=",".join(CATEGORIES), help="comma-separated subset of "
                        + ", ".join(CATEGORIES))
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (default 1)")
    parser.add_argument("--watchdog", type=float, default=None, help="seconds after which a run "
                        "still going prints every thread's stack and exits with 1 (a hang found "
                        "shows where it waits)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from hpvm_py.backends import registry

    available = [t for t in ("cpu", "gpu", "nvptx") if registry.available(t)]
    targets = args.targets.split(",") if args.targets else available
    categories = args.categories.split(",")
    unknown = [t for t in targets if t not in available] + [c for c in categories if c not in CATEGORIES]
    if unknown or not targets or args.graphs < 1:
        print(f"differential: unavailable target or unknown category {unknown} (targets here: {available})",
              file=sys.stderr)
        return 2
    os.environ.setdefault("HPVM_CACHE_DIR", str(Path(os.environ.get("TMPDIR", "/tmp")) / f"hpvm-diff-{os.getpid()}"))
    if args.watchdog is not None:
        faulthandler.dump_traceback_later(args.watchdog, exit=True)
    seed = random.SystemRandom().getrandbits(31) if args.seed is None else args.seed
    print(f"differential: seed {seed}, {args.graphs} graphs, targets {','.join(targets)}, "
          f"categories {','.join(categories)}", flush=True)
    jobs = [(k, categories[k % len(categories)], s, targets) for k, s in enumerate(graph_seeds(seed, args.graphs))]
    start = time.monotonic()
    mismatches = rejected = done = 0
    per_category: dict[str, int] = {}
    for index, case, found, rejection in results(jobs, args.jobs):
        done += 1
        if rejection:
            rejected += 1
            path = save(case, {"python": [rejection]}, args.save_dir)
            print(f"REJECTED graph {index} ({case.name}) by the python target: {rejection} -> {path}", flush=True)
        mismatches += len(found)
        if found:
            per_category[case.category] = per_category.get(case.category, 0) + len(found)
            path = save(case, found, args.save_dir)
            for target, problems in found.items():
                print(f"MISMATCH graph {index} ({case.name}) on {target}: {problems[0]}"
                      + (f" (+{len(problems) - 1} more)" if len(problems) > 1 else "") + f" -> {path}", flush=True)
        if done % max(1, args.graphs // 20) == 0 or done == args.graphs:
            print(f"  {done}/{args.graphs} graphs, {mismatches} mismatches, {time.monotonic() - start:.0f} s",
                  flush=True)
    if rejected:
        print(f"differential: the python target raised on {rejected} generated programs "
              "(an InternalError is a bug of hpvm-py, anything else one of the generator)")
    if per_category:
        print("differential: mismatches per category: "
              + ", ".join(f"{k} {v}" for k, v in sorted(per_category.items())))
    print(f"differential: {args.graphs} graphs, targets {','.join(targets)}: {mismatches} mismatches "
          f"({args.graphs * len(targets)} comparisons) in {time.monotonic() - start:.0f} s")
    return 1 if mismatches or rejected else 0


if __name__ == "__main__":
    sys.exit(main())
