"""Communication nodes on CPU ranks, adversarially: a seeded random sequence of collectives with odd
sizes, every element type and reduction, relaunches, and one rank disagreeing in about a third of
the steps (tests/programs/dist_adversarial.py checks every result against NumPy and every
disagreement on every rank); NaNs in max/min; overlapping buffers; a quantized call the ranks
disagree on.

Ranks are started as in tests/test_distributed.py: the venv's `mpiexec` next to sys.executable.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "dist_adversarial.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}: "
                                   "install the dist extra (make test does)")


def _launch(n: int, seed: int, steps: int, remote: bool, out: Path) -> str:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1",
                       OMP_NUM_THREADS="1", HPVM_TEST_OUT=str(out))
    if remote:
        environment["HPVM_COMM_FORCE_REMOTE"] = "1"
    command = [str(MPIEXEC), "-n", str(n), sys.executable, str(PROGRAM), str(seed), str(steps)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=240, env=environment)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    return output


@needs_mpiexec
@pytest.mark.parametrize("ranks, remote, seed, steps", [(2, False, 11, 60), (3, False, 12, 40),
                                                         (2, True, 13, 40), (3, True, 14, 25)],
                         ids=["2-heap", "3-heap", "2-engine", "3-engine"])
def test_random_collectives_and_disagreements(ranks: int, remote: bool, seed: int, steps: int,
                                              tmp_path: Path) -> None:
    """Every result bit for bit NumPy's, every disagreement a DistributedError on every rank naming
    the faulty one with the ranks in step afterwards, NaN kept by max/min with the same bits on
    every rank (the engine path dropped it on some ranks), overlapping buffers of one call refused on
    every rank (the heap path gave every rank rank 0's block), and (heap path) a quantized call the
    ranks disagree on leaves every heap with the same free bytes (each rank reserved the workspace
    of its own call before the agreement)."""
    output = _launch(ranks, seed, steps, remote, tmp_path)
    expected = ["ADV random ok", "ADV nan ok", "ADV overlap ok"] + ([] if remote else ["ADV workspace ok"])
    for r in range(ranks):
        path = tmp_path / f"rank{r}.txt"
        lines = path.read_text().splitlines() if path.exists() else []
        assert lines[:-1] == expected, (r, lines, output)
        assert lines[-1].startswith("ADV done "), (r, lines, output)
