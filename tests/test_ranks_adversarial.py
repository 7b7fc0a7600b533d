"""Communication nodes on CPU ranks, adversarially (tests/programs/dist_ranks_adversarial.py):

- a seeded sequence of fused all-reduce + RMSNorm nodes, checked against NumPy (and the fp8 copy
  bit for bit against torch's e4m3fn), with one rank launching a node of its own every other step
  (its own quantize=, eps, hidden or element type): every rank raises DistributedError naming the
  difference and the faulty rank, and the ranks stay in step. A quantize= of one rank's own (the
  node then has two more buffers) was an internal IndexError on the engine path and blamed
  "experts" or a buffer size on the heap path, another field on each rank;
- the engine path's very first collective with a rank that stops after the descriptor exchange:
  its peers raise HPVMTimeoutError naming it (they hung in a blocking MPI_Comm_dup);
- a broadcast root too large for a descriptor word: FrontendError at the factory (it was an
  internal OverflowError at launch).

Ranks are started as in tests/test_distributed.py (the venv's `mpiexec` next to sys.executable),
in a session of their own, so that a hang is killed whole and reported instead of blocking.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import hpvm_py as hpvm
from hpvm_py import f32
from hpvm_py.errors import FrontendError

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = ROOT / "tests" / "programs" / "dist_ranks_adversarial.py"
MPIEXEC = Path(sys.executable).parent / "mpiexec"
needs_mpiexec = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec next to {sys.executable}: "
                                   "install the dist extra (make test does)")
LIMIT_S = 90  # a run that hangs is killed after this long


def _launch(n: int, args: list[str], remote: bool, out: Path) -> str:
    """Run the program on n ranks; a hang or a failing rank fails the test with the output."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HPVM_COMM_")}
    environment.update(PYTHONPATH=str(ROOT), HPVM_HEAP_BYTES="8M", HPVM_NUM_THREADS="1",
                       OMP_NUM_THREADS="1", HPVM_TEST_OUT=str(out))
    if remote:
        environment["HPVM_COMM_FORCE_REMOTE"] = "1"
    command = [str(MPIEXEC), "-n", str(n), sys.executable, str(PROGRAM), *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=environment, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec and every rank it started
        output, _ = proc.communicate()
        raise AssertionError(f"the ranks hung (killed after {LIMIT_S} s):\n{output}") from None
    assert proc.returncode == 0, output
    return output


def _reports(out: Path, n: int) -> list[list[str]]:
    return [(out / f"rank{r}.txt").read_text().splitlines() if (out / f"rank{r}.txt").exists() else []
            for r in range(n)]


@needs_mpiexec
@pytest.mark.parametrize("ranks, remote, seed", [(2, False, 21), (3, False, 22), (3, True, 23)],
                         ids=["2-heap", "3-heap", "3-engine"])
def test_rmsnorm_sequence_with_disagreements(ranks: int, remote: bool, seed: int, tmp_path: Path) -> None:
    output = _launch(ranks, ["rmsnorm", str(seed), "16"], remote, tmp_path)
    assert _reports(tmp_path, ranks) == [["RANKS rmsnorm ok"]] * ranks, output


@needs_mpiexec
def test_first_engine_collective_with_a_stopped_rank(tmp_path: Path) -> None:
    ranks = 3
    output = _launch(ranks, ["first-death"], True, tmp_path)
    faulty = ranks - 1
    assert _reports(tmp_path, ranks) == [["RANKS first-death ok"]] * faulty + [["RANKS first-death here"]], \
        output


@pytest.mark.parametrize("root", [1 << 31, 1 << 63, 1 << 70])
def test_broadcast_root_beyond_the_rank_numbers_is_a_frontend_error(root: int) -> None:
    with pytest.raises(FrontendError, match=r"root=\d+ must be a rank number") as info:
        hpvm.comm.broadcast(f32, root=root)
    assert info.value.rule == "collective-options"
