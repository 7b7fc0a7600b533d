"""Communication nodes on GPU ranks (the heap on the rank's GPU), whatever the graph's target
(the executor hands a collective its buffers where the heap lives).

- GPU ranks on several hosts: NCCL through torch.distributed (the world's engine).
- GPU ranks on one host: the ranks agree on the call through the host control block (the same
  descriptors as on CPU ranks, so every rank raises the same error; made once per call shape and
  then checked by its fingerprint, agreement.py), then this rank launches the chosen kernel on its
  stream and returns (a call seen before replays its one-kernel CUDA graph, launch.py); the kernels
  synchronise among themselves on the device.
"""
from __future__ import annotations

import threading

from ...support import stats
from .. import chooser, ranks
from ..agreement import Agreed, agreed_on_heap, run_remote
from ..call import Call, check_arguments
from . import launch, moe_launch

_lock = threading.Lock()  # one collective at a time per rank: ranks must agree on the order


def run_on_gpu(world: ranks.World, call: Call, agreed: Agreed | None = None) -> Agreed | None:
    with _lock:
        return _run(world, call, agreed)


def _run(world: ranks.World, call: Call, agreed: Agreed | None) -> Agreed | None:
    heap = world.heap
    launch.raise_if_failed(world, heap, call.what(), call.loc)  # an earlier kernel gave up
    if not world.single_host:
        stats.bump("collectives_remote")
        run_remote(world, call, check_arguments(call, world.size))
        return None
    path = chooser.choose_gpu(call.kind, call.buffers[0].size, world.size)
    stats.bump(f"collectives_{path}")
    agreed = agreed_on_heap(world, call, path, entry=agreed)
    sized = agreed.state.get("sized")
    if sized is None:  # the views of this shape's buffers (the heap's memory is never freed)
        sized = agreed.state["sized"] = [b.tensor[:call.count(i)] for i, b in enumerate(call.buffers)]
    if call.kind == "all_reduce":
        launch.all_reduce(sized[0], call.op, path)
    elif call.kind == "all_gather":
        launch.all_gather(sized[0], sized[1])
    elif call.kind == "reduce_scatter":
        launch.reduce_scatter(sized[0], sized[1], call.op)
    elif call.kind == "broadcast":
        launch.broadcast(sized[0], call.root)
    elif call.kind == "moe_dispatch":
        moe_launch.moe_dispatch(*sized, call.hidden, call.experts, call.capacity)
    elif call.kind == "moe_combine":
        gate = sized[2] if call.buffers[2].size else None
        moe_launch.moe_combine(sized[0], sized[1], gate, sized[3], call.hidden, call.experts, call.capacity)
    else:
        launch.all_reduce_rmsnorm(sized[0], sized[1], sized[2], call.hidden, call.eps)
    return agreed
