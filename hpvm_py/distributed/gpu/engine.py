"""The collectives of GPU ranks on different hosts: NCCL through torch.distributed, never a
home-made transport. Descriptor exchanges stay on the launcher's host transport.

Under torchrun the default process group is the host transport's gloo group, and NCCL gets a group
of its own; under mpiexec there is no torch process group yet, so one is made for NCCL, its TCP
store served by rank 0 at an address exchanged over MPI.
"""
from __future__ import annotations

import datetime
import os
import socket
from typing import Any

from ..transport import Transport, run_torch_work


class NcclEngine(Transport):
    name = "nccl"

    def __init__(self, host: Transport, timeout: float, device: str) -> None:
        import torch
        import torch.distributed as dist

        self._host, self._dist = host, dist
        self.rank, self.size = host.rank, host.size
        delta = datetime.timedelta(seconds=timeout)
        if dist.is_initialized():
            self._group = dist.new_group(backend="nccl", timeout=delta)
        else:
            address = None
            if self.rank == 0:  # MASTER_ADDR names this host where its name does not resolve
                with socket.socket() as s:
                    s.bind(("", 0))
                    address = (os.environ.get("MASTER_ADDR") or socket.gethostname(), s.getsockname()[1])
            address = host.exchange(address, timeout)[0]
            store = dist.TCPStore(address[0], address[1], self.size, is_master=self.rank == 0,
                                  timeout=delta, wait_for_workers=False)
            dist.init_process_group("nccl", store=dist.PrefixStore("hpvm-nccl", store), rank=self.rank,
                                    world_size=self.size, timeout=delta,
                                    device_id=torch.device(device))
            self._group = None  # the default group
        self._ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}

    def exchange(self, obj: Any, timeout: float) -> list[Any]:
        return self._host.exchange(obj, timeout)

    def all_reduce(self, buf: Any, op: str, timeout: float) -> None:
        group = self._group
        run_torch_work(lambda: self._dist.all_reduce(buf, self._ops[op], group=group, async_op=True),
                       timeout)

    def all_gather(self, src: Any, dst: Any, timeout: float) -> None:
        group = self._group
        run_torch_work(lambda: self._dist.all_gather_into_tensor(dst, src, group=group, async_op=True),
                       timeout)

    def reduce_scatter(self, src: Any, dst: Any, op: str, timeout: float) -> None:
        group = self._group
        run_torch_work(lambda: self._dist.reduce_scatter_tensor(dst, src, self._ops[op], group=group,
                                                                async_op=True), timeout)

    def broadcast(self, buf: Any, root: int, timeout: float) -> None:
        run_torch_work(lambda: self._dist.broadcast(buf, root, group=self._group, async_op=True),
                       timeout)

    def close(self) -> None:
        if self._group is None and self._dist.is_initialized():
            self._dist.destroy_process_group()
