"""What a rank of a multi-rank test program reports: lines appended to $HPVM_TEST_OUT/rank<R>.txt
(mpiexec interleaves the ranks' stdout, even within lines), or printed when that is not set."""
import os


def report(rank: int, line: str) -> None:
    folder = os.environ.get("HPVM_TEST_OUT")
    if not folder:
        print(line, flush=True)
        return
    with open(os.path.join(folder, f"rank{rank}.txt"), "a") as out:
        out.write(line + "\n")
