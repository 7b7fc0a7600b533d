"""Ranks: which launcher started this process, the world it belongs to, init and finalize.

`init()` finds the launcher (mpiexec/mpirun through mpi4py, torchrun through torch.distributed's
gloo, or none: a world of one rank), agrees on a job token and a heap size with the other ranks,
creates this rank's heap segment and maps the segments of the ranks on the same host.
"""
from __future__ import annotations

import atexit
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import DistributedError, HPVMTimeoutError
from . import heap as H
from .transport import MPITransport, SingleTransport, TorchTransport, Transport
from .waiting import RanksMissing, timeout_from_env

_MPI_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALRANKID")


@dataclass
class World:
    rank: int
    size: int
    hosts: list[str]  # by rank; HPVM_COMM_FORCE_REMOTE gives every rank a host of its own
    transport: Transport
    heap: H.SymmetricHeap
    timeout: float
    job: str  # names the heap segments of this run
    comm: Any = field(default=None)  # sync.Communicator, made on first use

    @property
    def local_ranks(self) -> list[int]:
        return [q for q in range(self.size) if self.hosts[q] == self.hosts[self.rank]]

    @property
    def local_rank(self) -> int:
        return self.local_ranks.index(self.rank)

    @property
    def single_host(self) -> bool:
        return len(set(self.hosts)) == 1


_world: World | None = None
_lock = threading.Lock()


def launcher() -> str:
    """"mpi", "torch" or "single"; HPVM_DIST_LAUNCHER overrides the detection."""
    forced = os.environ.get("HPVM_DIST_LAUNCHER")
    if forced:
        if forced not in ("mpi", "torch", "single"):
            raise DistributedError(f"HPVM_DIST_LAUNCHER={forced!r} is not one of mpi, torch, single")
        return forced
    if any(v in os.environ for v in _MPI_VARS):
        return "mpi"
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return "torch"
    return "single"


def force_remote() -> bool:
    return os.environ.get("HPVM_COMM_FORCE_REMOTE", "") not in ("", "0")


def _transport(kind: str, timeout: float) -> Transport:
    if kind == "mpi":
        try:
            return MPITransport()
        except ImportError:
            raise DistributedError("this process was started by an MPI launcher but mpi4py is not "
                                   "installed: pip install 'hpvm-py[dist]'") from None
    if kind == "torch":
        try:
            rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        except (KeyError, ValueError):
            raise DistributedError("torchrun launch: RANK and WORLD_SIZE must be set to integers") from None
        return TorchTransport(rank, size, timeout)
    return SingleTransport()


def init(timeout: float | None = None) -> World:
    """Join the world (idempotent). timeout: seconds for every cross-rank wait, default
    $HPVM_COMM_TIMEOUT, else 60."""
    global _world
    with _lock:
        if _world is not None:
            return _world
        wait = float(timeout) if timeout is not None else timeout_from_env()
        if not wait > 0:
            raise DistributedError(f"hpvm.distributed.init(): timeout={timeout!r} must be positive")
        transport = _transport(launcher(), wait)
        try:
            _world = _join(transport, wait)
        except BaseException:
            transport.close()
            raise
        atexit.register(finalize)
        return _world


def _exchange(transport: Transport, obj: Any, timeout: float, step: str) -> list[Any]:
    try:
        return transport.exchange(obj, timeout)
    except RanksMissing as exc:
        raise HPVMTimeoutError(f"hpvm.distributed.init(): rank(s) {exc.ranks} did not reach {step} "
                               f"within {timeout:g} s (HPVM_COMM_TIMEOUT)", rule="rank-arrival") from None


def _join(transport: Transport, timeout: float) -> World:
    rank, size = transport.rank, transport.size
    host = socket.gethostname() + (f"#rank{rank}" if force_remote() else "")
    mine = {"host": host, "heap": H.heap_bytes_from_env(), "token": uuid.uuid4().hex[:16]}
    everyone = _exchange(transport, mine, timeout, "the handshake")
    sizes = {info["heap"] for info in everyone}
    if len(sizes) != 1:
        detail = ", ".join(f"rank {q}: {info['heap']}" for q, info in enumerate(everyone))
        raise DistributedError(f"ranks disagree on HPVM_HEAP_BYTES ({detail}); set it the same "
                               "everywhere", rule="rank-agreement")
    job, size_bytes = everyone[0]["token"], mine["heap"]
    hosts = [info["host"] for info in everyone]
    own_path = H.segment_path(job, rank)
    maps: dict[int, Any] = {}
    error = None
    try:
        maps[rank] = H.create_segment(own_path, size_bytes)
    except DistributedError as exc:
        error = exc.message
    _check_all(_exchange(transport, error, timeout, "heap creation"), "create its heap")
    try:
        for q in range(size):
            if q != rank and hosts[q] == host:
                maps[q] = H.map_segment(H.segment_path(job, q), size_bytes)
    except DistributedError as exc:
        error = exc.message
    try:
        _check_all(_exchange(transport, error, timeout, "heap mapping"), "map its peers' heaps")
    finally:
        if rank in maps:  # every peer has it mapped (or gave up): the name is no longer needed
            os.unlink(own_path)
    return World(rank=rank, size=size, hosts=hosts, transport=transport,
                 heap=H.SymmetricHeap(rank, size_bytes, maps, size), timeout=timeout, job=job)


def _check_all(errors: list[str | None], what: str) -> None:
    failed = [(q, e) for q, e in enumerate(errors) if e]
    if failed:
        detail = "; ".join(f"rank {q}: {e}" for q, e in failed)
        raise DistributedError(f"hpvm.distributed.init(): rank(s) {[q for q, _ in failed]} could not "
                               f"{what}: {detail}", rule="rank-setup")


def finalize() -> None:
    """Leave the world: the engine is shut down. Heap tensors stay readable (the mappings live as
    long as tensors use them); collectives need a new init()."""
    global _world
    with _lock:
        world, _world = _world, None
    if world is not None:
        world.transport.close()


def current() -> World | None:
    return _world
