"""Ranks: which launcher started this process, the world it belongs to, init and finalize.

`init()` finds the launcher (mpiexec/mpirun through mpi4py, torchrun through torch.distributed's
gloo, or none: a world of one rank), agrees on a job token, a heap size and the device kind with
the other ranks, creates this rank's heap segment and maps the segments of the ranks on the same
host. On GPU ranks (device "cuda") that host segment is only the control block of the host-side
agreement; the data heap is the device heap of gpu/heap.py, one GPU per local rank.
"""
from __future__ import annotations

import atexit
import math
import numbers
import os
import socket
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ..errors import DistributedError
from ..device.devices import cuda_available
from ..ir.targets import TARGETS
from ..support import settings
from ..support.world import publish
from . import heap as H
from .gpu.setup import join_gpu
from .handshake import FORCED_HOST, check_all, exchange
from .transport import MPITransport, SingleTransport, TorchTransport, Transport
from .waiting import timeout_from_env

_MPI_VARS = ("PMI_RANK", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "MPI_LOCALRANKID")


DEVICES = ("cpu", "cuda")
_CONTROL_BYTES = 64 << 10  # the host segment of GPU ranks: control block and descriptors only


@dataclass
class World:
    rank: int
    size: int
    hosts: list[str]  # by rank; HPVM_COMM_FORCE_REMOTE gives every rank a host of its own
    transport: Transport
    heap: Any  # H.SymmetricHeap on CPU ranks, gpu.heap.GpuHeap on GPU ranks
    timeout: float
    job: str  # names the heap segments of this run
    control: H.SymmetricHeap | None = None  # host segment for descriptors and barriers
    engine: Transport | None = None  # the collectives across hosts (NCCL on GPU ranks)
    comm: Any = field(default=None)  # sync.Communicator, made on first use

    def __post_init__(self) -> None:
        if self.control is None:
            self.control = self.heap
        if self.engine is None:
            self.engine = self.transport

    @property
    def device(self) -> str:
        """Where the heap lives: "host", or this rank's GPU ("cuda:N")."""
        return self.heap.device

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
    forced = settings.DIST_LAUNCHER.text()
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
    return settings.COMM_FORCE_REMOTE.on()


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


def device_kind(device: str | None) -> str:
    """"cpu" or "cuda": the argument, else $HPVM_DIST_DEVICE, else "cuda" when torch sees a GPU. A
    target name stands for where its nodes run: "gpu"/"nvptx" on the GPU if there is one."""
    chosen = device or settings.DIST_DEVICE.get()
    # the GPU targets run on the host without CUDA (Triton's interpreter); a list is no key of
    # the table (unhashable: an internal error), refused below
    if isinstance(chosen, str) and chosen in TARGETS:
        return "cuda" if TARGETS[chosen].gpu and cuda_available() else "cpu"
    if not chosen:
        return "cuda" if cuda_available() else "cpu"
    # what the user wrote: the argument, else the variable (which no init() call names)
    given = f"device={chosen!r}" if device else f"{settings.DIST_DEVICE.name}={chosen!r}"
    if chosen not in DEVICES:
        raise DistributedError(f"hpvm.distributed.init(): {given} is not one of "
                               f"{', '.join(DEVICES)}, nor a target ({', '.join(TARGETS)})")
    if chosen == "cuda":
        if not cuda_available():
            raise DistributedError(f"hpvm.distributed.init(): {given}, but torch sees no CUDA GPU")
    return chosen


def _seconds(timeout: Any) -> float:
    """A timeout argument as seconds; NaN (refused by valid_seconds) for what is no number of
    them: float() took "5" as 5 s, and failed on [5] or 10**400 as an internal error."""
    if not isinstance(timeout, numbers.Real):
        return math.nan
    try:
        return float(timeout)
    except OverflowError:
        return math.inf


def init(timeout: float | None = None, device: str | None = None) -> World:
    """Join the world (idempotent). timeout: seconds for every cross-rank wait, default
    $HPVM_COMM_TIMEOUT, else 60. device: where heaps live, "cpu" or "cuda", or the target whose nodes use them
    (device_kind)."""
    global _world
    with _lock:
        if _world is not None:
            return _world
        wait = _seconds(timeout) if timeout is not None else timeout_from_env()
        if not settings.valid_seconds(wait):
            raise DistributedError(f"hpvm.distributed.init(): timeout={timeout!r} must be positive "
                                   f"seconds, at most {settings.MAX_SECONDS:g}")
        kind = device_kind(device)
        transport = _transport(launcher(), wait)
        try:
            _world = _join(transport, wait, kind)
            publish(_world)
        except BaseException:
            transport.close()
            raise
        atexit.register(finalize)
        return _world


def _join(transport: Transport, timeout: float, kind: str) -> World:
    rank, size = transport.rank, transport.size
    host = socket.gethostname() + (f"{FORCED_HOST}{rank}" if force_remote() else "")
    mine = {"host": host, "heap": H.heap_bytes_from_env(), "token": uuid.uuid4().hex[:16],
            "device": kind}
    everyone = exchange(transport, mine, timeout, "the handshake")
    for key, what in (("heap", "HPVM_HEAP_BYTES"), ("device", "the device kind (init(device=...), "
                                                                "HPVM_DIST_DEVICE)")):
        if len({info[key] for info in everyone}) != 1:
            detail = ", ".join(f"rank {q}: {info[key]}" for q, info in enumerate(everyone))
            raise DistributedError(f"ranks disagree on {what} ({detail}); set it the same "
                                   "everywhere", rule="rank-agreement")
    job, heap_bytes = everyone[0]["token"], mine["heap"]
    size_bytes = heap_bytes if kind == "cpu" else _CONTROL_BYTES
    hosts = [info["host"] for info in everyone]
    own_path = H.segment_path(job, rank)
    maps: dict[int, Any] = {}
    error = None
    try:
        maps[rank] = H.create_segment(own_path, size_bytes)
    except DistributedError as exc:
        error = exc.message
    check_all(exchange(transport, error, timeout, "heap creation"), "create its heap")
    try:
        for q in range(size):
            if q != rank and hosts[q] == host:
                maps[q] = H.map_segment(H.segment_path(job, q), size_bytes)
    except DistributedError as exc:
        error = exc.message
    try:
        check_all(exchange(transport, error, timeout, "heap mapping"), "map its peers' heaps")
    finally:
        if rank in maps:  # every peer has it mapped (or gave up): the name is no longer needed
            os.unlink(own_path)
    control = H.SymmetricHeap(rank, size_bytes, maps, size, staging=kind == "cpu")
    if kind == "cpu":
        return World(rank=rank, size=size, hosts=hosts, transport=transport, heap=control,
                     timeout=timeout, job=job)
    heap, engine = join_gpu(transport, timeout, hosts, heap_bytes, size)
    return World(rank=rank, size=size, hosts=hosts, transport=transport, heap=heap, timeout=timeout,
                 job=job, control=control, engine=engine)


def finalize() -> None:
    """Leave the world: the engine is shut down. Heap tensors stay readable (the mappings live as
    long as tensors use them); collectives need a new init()."""
    global _world
    with _lock:
        world, _world = _world, None
        publish(None)
    if world is not None:
        if world.engine is not world.transport:
            world.engine.close()
        world.transport.close()


def current() -> World | None:
    return _world
