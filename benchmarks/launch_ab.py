"""Host cost of a launch + wait on buffers never seen, against another checkout, in one process.

A shared or virtual machine's speed drifts between runs by more than a change to the launch path
gains, so the two versions are measured alternately in one process: the other checkout's package
is imported under another name (`hpvm_base`, a copy made in a temporary folder), and each row is
taken from both, round after round; the table shows each row's best round.

Rows, for a one-leaf graph (y[0] += k) on torch tensors of 1,024 floats (CUDA tensors when a GPU is
there, else CPU tensors):
  - same buffer: a replay (on the GPU targets, one captured CUDA graph);
  - kept: a tensor never seen before each launch, all of them kept alive (a list of outputs);
  - dropped: a fresh `torch.empty` each launch, the last one dropped (a loop's fresh output).
Each version's result is checked at the end of each round.

    python benchmarks/launch_ab.py [--base ../old-checkout] [--targets gpu,nvptx] [--rounds 5]

Without --base the checkout is measured against itself: the ratios then show the noise floor.
"""
from __future__ import annotations

import argparse
import importlib
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable

import torch

ROOT = Path(__file__).resolve().parents[1]


def load_versions(base: Path, folder: Path) -> dict[str, tuple[ModuleType, ModuleType]]:
    """{"base": (package, leaf module), "this": (...)}: the base checkout's package copied to
    `folder` as hpvm_base (its backends are found by absolute module names: renamed too)."""
    shutil.copytree(base / "hpvm_py", folder / "hpvm_base",
                    ignore=shutil.ignore_patterns("__pycache__"))
    targets = folder / "hpvm_base" / "ir" / "targets.py"
    targets.write_text(targets.read_text().replace('"hpvm_py.', '"hpvm_base.'))
    program = (Path(__file__).parent / "_one_leaf.py").read_text()
    for name, package in (("leaf_base", "hpvm_base"), ("leaf_this", "hpvm_py")):
        # (leaves are compiled from their source: a file per package)
        (folder / f"{name}.py").write_text(program.replace("hpvm_py", package))
    sys.path[:0] = [str(ROOT), str(folder)]
    return {version: (importlib.import_module(package), importlib.import_module(leaf))
            for version, package, leaf in (("base", "hpvm_base", "leaf_base"),
                                           ("this", "hpvm_py", "leaf_this"))}


def per_call_us(fn: Callable[[], object], sync: Callable[[], object], calls: int = 400,
                repeat: int = 5) -> float:
    fn()
    batches = []
    for _ in range(repeat):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        batches.append((time.perf_counter() - start) / calls)
    sync()
    return statistics.median(batches) * 1e6


def rows(hpvm: ModuleType, leaf: ModuleType, target: str, device: str) -> dict[str, float]:
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    measured = {}
    with hpvm.runtime(target):
        compiled = hpvm.compile(leaf.one_leaf)

        def launch(x: torch.Tensor, k: float = 1.0) -> None:
            hpvm.wait(hpvm.launch(compiled, x, 4096, k))

        same = torch.zeros(1024, device=device)
        measured["same buffer"] = per_call_us(lambda: launch(same), sync)
        kept = iter([torch.zeros(1024, device=device) for _ in range(6 * 300 + 1)])
        measured["kept"] = per_call_us(lambda: launch(next(kept)), sync, calls=300)
        measured["dropped"] = per_call_us(lambda: launch(torch.empty(1024, device=device)), sync)
        check = torch.zeros(1024, device=device)
        launch(check, 2.0)
        launch(check, 0.5)
        sync()
        assert check[0].item() == 2.5 and not check[1:].any(), "wrong result"
    return measured


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--base", type=Path, default=ROOT,
                        help="another checkout of hpvm-py (default: this one, the noise floor)")
    parser.add_argument("--targets", default=None, help="default: gpu,nvptx with CUDA, else cpu")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    targets = (args.targets or ("gpu,nvptx" if device == "cuda" else "cpu")).split(",")
    with tempfile.TemporaryDirectory() as folder:
        versions = load_versions(args.base.resolve(), Path(folder))
        print(torch.cuda.get_device_name() if device == "cuda" else "CPU", "torch", torch.__version__)
        print(f"host microseconds per launch + wait, best of {args.rounds} alternated rounds:")
        for target in targets:
            best: dict[tuple[str, str], float] = {}
            for _ in range(args.rounds):
                for version, (hpvm, leaf) in versions.items():
                    for row, us in rows(hpvm, leaf, target, device).items():
                        best[version, row] = min(best.get((version, row), float("inf")), us)
            for row in ("same buffer", "kept", "dropped"):
                base, this = best["base", row], best["this", row]
                print(f"  {target:6s} {row:12s} base {base:7.1f}  this {this:7.1f}  ({base / this:.2f}x)")


if __name__ == "__main__":
    main()
