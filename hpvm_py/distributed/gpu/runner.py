"""Communication nodes on GPU ranks (the heap on the rank's GPU), whatever the graph's target
(the executor hands a collective its buffers where the heap lives).

- GPU ranks on several hosts: NCCL through torch.distributed (the world's engine).
- GPU ranks on one host: the ranks agree on the call through the host control block (the same
  descriptors as on CPU ranks, so every rank raises the same error), then this rank launches the
  chosen kernel on its stream and returns; the kernels synchronise among themselves on the device.
"""
from __future__ import annotations

import threading

from ...support import stats
from .. import chooser, ranks
from ..agreement import agree_on_heap, run_remote
from ..call import Call, check_arguments
from . import launch

_lock = threading.Lock()  # one collective at a time per rank: ranks must agree on the order


def run_on_gpu(world: ranks.World, call: Call) -> None:
    with _lock:
        _run(world, call)


def _run(world: ranks.World, call: Call) -> None:
    heap = world.heap
    launch.raise_if_failed(world, heap, call.what(), call.loc)  # an earlier kernel gave up
    mine = check_arguments(call, world.size)
    if not world.single_host:
        stats.bump("collectives_remote")
        run_remote(world, call, mine)
        return
    stats.bump(f"collectives_{chooser.choose_gpu(call.kind, call.buffers[0].size, world.size)}")
    agree_on_heap(world, call, mine)
    sized = [b.tensor[:b.size // call.dtype.nbytes] for b in call.buffers]
    if call.kind == "all_reduce":
        launch.all_reduce(sized[0], call.op)
    elif call.kind == "all_gather":
        launch.all_gather(sized[0], sized[1])
    elif call.kind == "reduce_scatter":
        launch.reduce_scatter(sized[0], sized[1], call.op)
    elif call.kind == "broadcast":
        launch.broadcast(sized[0], call.root)
    else:
        launch.all_reduce_rmsnorm(sized[0], sized[1], sized[2], call.hidden, call.eps)
