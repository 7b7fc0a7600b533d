"""What a rank of a multi-rank test program reports: lines appended to $HPVM_TEST_OUT/rank<R>.txt
(mpiexec interleaves the ranks' stdout, even within lines), or printed when that is not set."""
import os
import re
from typing import Callable

from hpvm_py.errors import DistributedError


def report(rank: int, line: str) -> None:
    folder = os.environ.get("HPVM_TEST_OUT")
    if not folder:
        print(line, flush=True)
        return
    with open(os.path.join(folder, f"rank{rank}.txt"), "a") as out:
        out.write(line + "\n")


def report_disagreement(rank: int, faulty: int, line: str, mine: Callable[[], object],
                        theirs: Callable[[], object], pattern: str) -> None:
    """Rank `faulty` runs `mine`, the others `theirs`: every rank must raise a DistributedError
    that matches `pattern` and names the faulty rank; then `line` is reported."""
    try:
        (mine if rank == faulty else theirs)()
    except DistributedError as exc:
        assert re.search(pattern, str(exc)), (line, str(exc))
        assert f"rank {faulty}" in str(exc), (line, str(exc))
        report(rank, line)
        return
    raise AssertionError(f"{line}: no error on rank {rank}")
