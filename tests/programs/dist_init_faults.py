"""Run as two ranks with different HPVM_HEAP_BYTES (mpiexec -n 1 -env ... : -n 1 -env ...): both
ranks must refuse init(); then rank 1 stays away (alive: MPICH's launcher may end the job when a
rank exits) and rank 0's second init() must time out naming it."""
import time

import hpvm_py as hpvm
from dist_report import report
from hpvm_py.errors import DistributedError, HPVMTimeoutError
from mpi4py import MPI

RANK = MPI.COMM_WORLD.Get_rank()
try:
    hpvm.distributed.init(timeout=10)
except DistributedError as exc:
    assert "ranks disagree on HPVM_HEAP_BYTES (rank 0: 4194304, rank 1: 8388608)" in str(exc), str(exc)
    report(RANK, "INIT heap-size ok")
if RANK == 1:
    time.sleep(4)
else:
    try:
        hpvm.distributed.init(timeout=2)
    except HPVMTimeoutError as exc:
        assert "rank(s) [1] did not reach the handshake within 2 s" in str(exc), str(exc)
        report(RANK, "INIT missing ok")
