"""Compile the differential runner's random graphs for an H100 (sm_90) without a GPU: every leaf,
checked and unchecked, each block shape of its kernel (triton_compile_check.py's rules), with
whatever Triton is first on the path. Triton's own compiler fails on some of what we generate,
differently from version to version (two Triton 3.6 failures of 2026-11-27 are in
tests/differential/reproducers/); the GPU machines have 3.6 and CI has a later one, so this runs
on the CPU with either:

    python tests/backends/triton_compile_fuzz.py SEED COUNT [SAVE_DIR]
    PYTHONPATH=/path/to/triton-3.6/site-packages python tests/backends/triton_compile_fuzz.py ...

Prints a line per failure and a summary; a graph that fails is saved as a reproducer (the
differential runner's format) in SAVE_DIR; exits 1 on any failure.
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"  # compiled, never interpreted (the runner would set it)

TESTS = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(TESTS), str(TESTS / "backends")]

import triton  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

import hpvm_py as hpvm  # noqa: E402
import triton_compile_check as check  # noqa: E402
from hpvm_py.errors import HPVMError  # noqa: E402
from differential import runner  # noqa: E402
from differential.data import load  # noqa: E402
from hpvm_py.backends.triton.codegen import generate  # noqa: E402


def compile_case(case: runner.Case, index: int) -> str | None:
    """None when every kernel of the case's graph compiles (or the front end refuses the graph,
    as the differential runner's python reference would); else what failed."""
    try:
        module = load(case.source, f"fuzz_{index}")
        compiled = hpvm.compile(module.root, target="cpu")  # node contexts do not depend on it
    except HPVMError:
        return None
    for leaf, ctx, _ in compiled.leaf_kernels():
        for checked in (False, True):
            sources = [generate(leaf, ctx, checked, interpreted=False)]
            if sources[0].dot or sources[0].private or sources[0].tiles:  # and the fallback
                sources.append(generate(leaf, ctx, checked, interpreted=False, optimised=False))
            if sources[0].row_guard is not None:  # row masks, and quads (the neighbours category)
                sources.append(generate(leaf, ctx, checked, interpreted=False, rows=True))
                if sources[0].quad_groups:
                    sources.append(generate(leaf, ctx, checked, interpreted=False, rows=True, quads=True))
            for source in sources:
                for constexprs in check.constants(source):
                    fn = getattr(load(source.text, f"fuzz_{index}_{leaf.name}"), source.kernel)
                    # (a quads launch keeps four lanes a thread: kernel.py caps its warps)
                    warps = max(1, min(4, constexprs["BLOCK"] // 128)) if source.quads else 4
                    try:
                        triton.compile(ASTSource(fn=fn, signature=dict(source.arguments),
                                                 constexprs=constexprs), target=check.SM90,
                                       options={"enable_fp_fusion": source.dot is not None,
                                                "num_warps": warps})
                    except Exception as exc:  # noqa: BLE001 - Triton's failures are what we look for
                        lines = str(exc).strip().splitlines() or [type(exc).__name__]
                        return f"leaf {leaf.name} checked={checked} {constexprs}: {lines[-1][:200]}"
    return None


def main(seed: int, count: int, save_dir: Path) -> int:
    failures = 0
    categories = runner.CATEGORIES
    for index, graph_seed in enumerate(runner.graph_seeds(seed, count)):
        case = runner.make_case(categories[index % len(categories)], graph_seed, ["gpu"])
        failed = compile_case(case, index)
        if failed is not None:
            failures += 1
            print(f"FAIL {case.name}: {failed}", flush=True)
            save_dir.mkdir(parents=True, exist_ok=True)
            record = {"category": case.category, "seed": case.seed, "source": case.source,
                      "params": case.params, "mismatches": {"gpu": [failed]}}
            (save_dir / f"{case.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"triton {triton.__version__}: {count} graphs (seed {seed}), {failures} failed to compile")
    return 1 if failures else 0


if __name__ == "__main__":
    save = Path(sys.argv[3]) if len(sys.argv) > 3 else Path(tempfile.gettempdir()) / "triton-fuzz"
    sys.exit(main(int(sys.argv[1]), int(sys.argv[2]), save))
