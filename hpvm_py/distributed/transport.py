"""The host engines between ranks: MPI (mpi4py, under mpiexec) or torch.distributed's gloo (under
torchrun). They carry the heap handshake at init and, for ranks on different hosts, the
collectives themselves. Every operation here is non-blocking underneath and polled with a deadline.

Tensors passed to the collectives are contiguous CPU torch tensors of a type the engine reduces
natively (f32, f64, integers); engine_collectives.py widens f16 and bf16 first.
"""
from __future__ import annotations

import atexit
import datetime
import os
import time
from typing import Any, Callable

from . import wire
from .waiting import RanksMissing, wait_until


class Transport:
    name = ""
    rank = 0
    size = 1

    def exchange(self, obj: Any, timeout: float) -> list[Any]:
        """Every rank's `obj`, by rank (an all-gather of small Python objects)."""
        raise NotImplementedError

    def all_reduce(self, buf: Any, op: str, timeout: float) -> None:
        raise NotImplementedError

    def all_gather(self, src: Any, dst: Any, timeout: float) -> None:
        raise NotImplementedError

    def reduce_scatter(self, src: Any, dst: Any, op: str, timeout: float) -> None:
        raise NotImplementedError

    def broadcast(self, buf: Any, root: int, timeout: float) -> None:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SingleTransport(Transport):
    """A process started without a launcher: a world of one rank."""

    name = "single"

    def exchange(self, obj: Any, timeout: float) -> list[Any]:
        return [obj]

    def all_reduce(self, buf: Any, op: str, timeout: float) -> None:
        pass

    def all_gather(self, src: Any, dst: Any, timeout: float) -> None:
        dst.copy_(src)

    def reduce_scatter(self, src: Any, dst: Any, op: str, timeout: float) -> None:
        dst.copy_(src)

    def broadcast(self, buf: Any, root: int, timeout: float) -> None:
        pass


class MPITransport(Transport):
    """mpi4py. Exchanges are point-to-point messages on COMM_WORLD with a tag of our own (polled, so
    a missing rank is named); the collectives run on a duplicate of COMM_WORLD made at the first
    one, after an exchange with every rank (duplicating is collective, so it is the nonblocking
    MPI_Comm_idup, polled with the deadline: a rank that stops between that exchange and the
    duplicate would block MPI_Comm_dup forever)."""

    name = "mpi"
    _TAG = 0x4850  # exchange messages

    def __init__(self) -> None:
        from mpi4py import MPI

        self._mpi = MPI
        self._world = MPI.COMM_WORLD
        self._private: Any = None
        self._duplicating: tuple[Any, Any] | None = None  # (communicator, request) of an Idup in flight
        self.rank = self._world.Get_rank()
        self.size = self._world.Get_size()
        self._ops = {"sum": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}
        _drain_at_exit(MPI, self._world, self._TAG)

    def _comm(self, timeout: float) -> Any:
        """The collectives' communicator; called only after an exchange with every rank (the
        collectives follow one). A duplicate that timed out is waited for again by the next call."""
        if self._private is None:
            if self._duplicating is None:
                self._duplicating = self._world.Idup()
            comm, request = self._duplicating
            self._complete([request], timeout)
            self._private, self._duplicating = comm, None
        return self._private

    def exchange(self, obj: Any, timeout: float) -> list[Any]:
        comm = self._world
        sends = [comm.isend(obj, dest=q, tag=self._TAG) for q in range(self.size) if q != self.rank]
        got: dict[int, Any] = {self.rank: obj}

        def missing() -> list[int]:
            for q in range(self.size):
                if q not in got and comm.iprobe(source=q, tag=self._TAG):
                    got[q] = comm.recv(source=q, tag=self._TAG)
            return [q for q in range(self.size) if q not in got]

        wait_until(missing, timeout)
        self._complete(sends, timeout)
        return [got[q] for q in range(self.size)]

    def _complete(self, requests: list[Any], timeout: float) -> None:
        """Poll requests to completion; MPI does not say which rank a collective waits for."""
        pending = list(requests)

        def missing() -> list[int]:
            pending[:] = [r for r in pending if not r.Test()]
            return [-1] if pending else []

        try:
            wait_until(missing, timeout)
        except RanksMissing as exc:
            raise RanksMissing([], exc.waited) from None

    def all_reduce(self, buf: Any, op: str, timeout: float) -> None:
        self._complete([self._comm(timeout).Iallreduce(self._mpi.IN_PLACE, buf.numpy(), self._ops[op])],
                       timeout)

    def all_gather(self, src: Any, dst: Any, timeout: float) -> None:
        self._complete([self._comm(timeout).Iallgather(src.numpy(), dst.numpy())], timeout)

    def reduce_scatter(self, src: Any, dst: Any, op: str, timeout: float) -> None:
        self._complete([self._comm(timeout).Ireduce_scatter_block(src.numpy(), dst.numpy(), self._ops[op])],
                       timeout)

    def broadcast(self, buf: Any, root: int, timeout: float) -> None:
        self._complete([self._comm(timeout).Ibcast(buf.numpy(), root=root)], timeout)

    def close(self) -> None:
        if self._private is not None:
            self._private.Free()


_draining: set[int] = set()  # tags drained at exit
_DRAIN_QUIET_S = 0.05


def _drain_at_exit(mpi: Any, comm: Any, tag: int) -> None:
    """At exit (before mpi4py's MPI_Finalize, which runs after every atexit handler), receive the
    exchange messages this rank never read: those its peers sent while it was missing, stalled or
    had given up. MPI_Finalize fails on unmatched messages ("Communicator being freed has N
    unmatched message(s)"), mpi4py then exits without finalizing, and MPICH's launcher kills every
    other rank: a job whose ranks all handled a fault would still fail."""
    if tag in _draining:
        return
    _draining.add(tag)

    def drain() -> None:
        if mpi.Is_finalized():
            return
        # a probe moves MPICH's progress engine only a little: a message sent long ago may only
        # show at a later probe, so keep probing until a quiet spell
        quiet_until = time.monotonic() + _DRAIN_QUIET_S
        while time.monotonic() < quiet_until:
            if comm.iprobe(source=mpi.ANY_SOURCE, tag=tag):
                comm.recv(source=mpi.ANY_SOURCE, tag=tag)
                quiet_until = time.monotonic() + _DRAIN_QUIET_S

    atexit.register(drain)


class TorchTransport(Transport):
    """torch.distributed with gloo, rendezvous through a TCP store that we poll by key (so a rank
    that never arrives is named)."""

    name = "torch"

    def __init__(self, rank: int, size: int, timeout: float) -> None:
        import torch.distributed as dist

        self._dist = dist
        self.rank, self.size = rank, size
        host = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "29500"))
        # under torchrun the agent already serves the store on MASTER_PORT
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        self._store = dist.TCPStore(host, port, size, is_master=(rank == 0 and not agent),
                                    timeout=datetime.timedelta(seconds=timeout),
                                    wait_for_workers=False)
        self._prefix = "hpvm"
        dist.init_process_group("gloo", store=dist.PrefixStore("hpvm-pg", self._store), rank=rank,
                                world_size=size, timeout=datetime.timedelta(seconds=timeout))
        self._ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
        self._seq = 0

    def exchange(self, obj: Any, timeout: float) -> list[Any]:
        self._seq += 1
        keys = [f"{self._prefix}/x{self._seq}/{q}" for q in range(self.size)]
        self._store.set(keys[self.rank], wire.encode(obj))
        wait_until(lambda: [q for q in range(self.size) if not self._store.check([keys[q]])], timeout)
        got = [wire.decode(self._store.get(k)) for k in keys]
        if self._seq > 2:  # everyone has read the exchange before the previous one
            self._store.delete_key(f"{self._prefix}/x{self._seq - 2}/{self.rank}")
        return got

    def all_reduce(self, buf: Any, op: str, timeout: float) -> None:
        run_torch_work(lambda: self._dist.all_reduce(buf, self._ops[op], async_op=True), timeout)

    def all_gather(self, src: Any, dst: Any, timeout: float) -> None:
        # all_gather_single is the newer name (torch 2.13 deprecates the older one)
        gather = getattr(self._dist, "all_gather_single", None) or self._dist.all_gather_into_tensor
        run_torch_work(lambda: gather(dst, src, async_op=True), timeout)

    def reduce_scatter(self, src: Any, dst: Any, op: str, timeout: float) -> None:
        # gloo has no reduce_scatter: reduce everything, keep this rank's block
        whole = src.clone()
        self.all_reduce(whole, op, timeout)
        n = dst.numel()
        dst.copy_(whole[self.rank * n:(self.rank + 1) * n])

    def broadcast(self, buf: Any, root: int, timeout: float) -> None:
        run_torch_work(lambda: self._dist.broadcast(buf, root, async_op=True), timeout)

    def close(self) -> None:
        if self._dist.is_initialized():
            self._dist.destroy_process_group()


def run_torch_work(start: Callable[[], Any], timeout: float) -> None:
    """Start an asynchronous torch.distributed collective and wait for it at most `timeout` s."""
    work = start()
    try:
        work.wait(datetime.timedelta(seconds=timeout))
    except RuntimeError as exc:
        raise RanksMissing([], timeout) from exc
