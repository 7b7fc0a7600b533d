"""Run as N >= 2 ranks whose HPVM_HEAP_BYTES differ at one rank, the middle one (the last of two):
`mpiexec -n 1 -env HPVM_HEAP_BYTES 8M prog : -n 1 -env HPVM_HEAP_BYTES 4M prog : ...`. Every rank
must refuse init(); then the faulty rank stays away (alive: MPICH's launcher may end the job when a
rank exits) and every other rank's second init() must time out naming it."""
import os
import time

import hpvm_py as hpvm
from dist_report import report
from hpvm_py.errors import DistributedError, HPVMTimeoutError
from mpi4py import MPI

RANK, WORLD = MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_size()
FAULTY = WORLD // 2
TIMEOUT = 2
sizes = ", ".join(f"rank {q}: {(4 if q == FAULTY else 8) << 20}" for q in range(WORLD))
assert os.environ["HPVM_HEAP_BYTES"] == ("4M" if RANK == FAULTY else "8M")
try:
    hpvm.distributed.init(timeout=10)
except DistributedError as exc:
    assert f"ranks disagree on HPVM_HEAP_BYTES ({sizes})" in str(exc), str(exc)
    report(RANK, "INIT heap-size ok")
if RANK == FAULTY:
    time.sleep(TIMEOUT + 2)
else:
    start = time.monotonic()
    try:
        hpvm.distributed.init(timeout=TIMEOUT)
    except HPVMTimeoutError as exc:
        assert f"rank(s) [{FAULTY}] did not reach the handshake within {TIMEOUT} s" in str(exc), str(exc)
        assert time.monotonic() - start < TIMEOUT + 5, time.monotonic() - start
        report(RANK, "INIT missing ok")
