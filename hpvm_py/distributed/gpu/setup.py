"""Joining the world on GPU ranks: one GPU per local rank, the device heap mapped by every local
rank, and NCCL (through torch.distributed) for the collectives when the ranks span several hosts."""
from __future__ import annotations

from typing import Any

from ...errors import DistributedError
from ...support import settings
from ..handshake import check_all, exchange, machine
from ..transport import Transport
from . import heap as G
from .engine import NcclEngine


def join_gpu(transport: Transport, timeout: float, hosts: list[str], heap_bytes: int,
             size: int) -> tuple[G.GpuHeap, Transport | None]:
    import torch

    rank = transport.rank
    local = [q for q in range(size) if hosts[q] == hosts[rank]]
    # the GPU goes by the machine, not by the host a rank reports: HPVM_COMM_FORCE_REMOTE gives
    # ranks of one machine hosts of their own, and they still need GPUs of their own
    same_machine = [q for q in range(size) if machine(hosts[q]) == machine(hosts[rank])]
    index = same_machine.index(rank)
    gpus = torch.cuda.device_count()
    share = settings.DIST_SHARE_GPUS.on()
    device = f"cuda:{index % gpus if share else index}"
    error = None
    if index >= gpus and not share:
        error = (f"{len(same_machine)} ranks on host {machine(hosts[rank])} need a GPU each, but "
                 f"torch sees {gpus} (HPVM_DIST_SHARE_GPUS=1 lets ranks share them: correct, not fast)")
    elif len(local) > G.MAX_WORLD:
        error = f"the GPU heap joins at most {G.MAX_WORLD} ranks on a host, not {len(local)}"
    elif heap_bytes <= G.header_bytes(size):
        error = (f"HPVM_HEAP_BYTES={heap_bytes} leaves no room after the GPU heap's header of "
                 f"{G.header_bytes(size)} bytes (its control block and one-shot rows for {size} ranks)")
    check_all(exchange(transport, error, timeout, "GPU selection"), "use a GPU of its own")
    torch.cuda.set_device(device)
    own, handle = None, None
    try:
        own, handle = G.create(rank, heap_bytes, device)
    except DistributedError as exc:
        error = exc.message
    handles = exchange(transport, (error, handle), timeout, "GPU heap creation")
    check_all([e for e, _ in handles], "create its GPU heap")
    peers: dict[int, Any] = {}
    try:
        for q in local:
            if q != rank:
                peers[q] = G.open_peer(handles[q][1], device)
    except RuntimeError as exc:  # torch's message for a failed cudaIpcOpenMemHandle
        error = f"cannot map a peer's GPU heap: {exc}"
    check_all(exchange(transport, error, timeout, "GPU heap mapping"), "map its peers' GPU heaps")
    heap = G.GpuHeap(rank, heap_bytes, device, own, peers, size)
    engine = None
    if len(local) < size:
        engine = NcclEngine(transport, timeout, device)
    return heap, engine
