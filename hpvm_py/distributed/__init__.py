"""Ranks for communication nodes: `hpvm.distributed.init()` under mpiexec or torchrun (or alone, a
world of one rank), `rank()`, `world_size()`, `local_rank()`, `finalize()`. See docs/distributed.md.

The implementation lives in the submodules: ranks (launchers, init), transport (MPI / gloo),
heap (the symmetric heap), sync (heap barriers), call (arguments and agreement), chooser,
local (heap algorithms), remote (engine algorithms), nodes (library nodes and their kernels),
allocator (what the CPU and GPU heaps share), gpu (GPU ranks: device heap and Triton kernels).
"""
from __future__ import annotations

from ..errors import DistributedError, HPVMError
from ..frontend.callsite import caller_loc
from ..rt.boundary import api_boundary
from . import ranks as _ranks


@api_boundary
def init(timeout: float | None = None, device: str | None = None) -> None:
    """Join the world of ranks and map the symmetric heap (a second call does nothing).

    The ranks come from the launcher: `mpiexec` (mpi4py) or `torchrun` (its environment).

    Args:
        timeout: seconds any cross-rank wait may take (default `$HPVM_COMM_TIMEOUT`, else 60).
        device: where the heap lives, "cpu" (shared host memory) or "cuda" (one GPU per local
            rank); default `$HPVM_DIST_DEVICE`, else "cuda" when torch sees a GPU, else "cpu".

    Raises:
        DistributedError: no launcher environment, a rank that does not join in time, or a
            heap that cannot be mapped (the message says which).
    """
    try:
        _ranks.init(timeout, device)
    except HPVMError as exc:
        if exc.loc is None:  # setup errors are about this call
            exc.loc = caller_loc()
        raise


@api_boundary
def finalize() -> None:
    """Leave the world of ranks (also done at exit). Tensors on the heap stay readable."""
    _ranks.finalize()


def is_initialized() -> bool:
    """Whether this process has joined the ranks (`init` was called, `finalize` not)."""
    return _ranks.current() is not None


def _world() -> _ranks.World:
    world = _ranks.current()
    if world is None:
        raise DistributedError("hpvm.distributed.init() has not been called", caller_loc(),
                               rule="distributed-init")
    return world


@api_boundary
def rank() -> int:
    """This process's rank.

    Returns:
        0 .. world_size() - 1.

    Raises:
        DistributedError: `hpvm.distributed.init()` has not been called.
    """
    return _world().rank


@api_boundary
def world_size() -> int:
    """The number of ranks.

    Returns:
        The count, 1 or more.

    Raises:
        DistributedError: `hpvm.distributed.init()` has not been called.
    """
    return _world().size


@api_boundary
def local_rank() -> int:
    """This rank's index among the ranks on its host (one GPU per local rank on GPU machines).

    Returns:
        0 .. the number of ranks on this host - 1.

    Raises:
        DistributedError: `hpvm.distributed.init()` has not been called.
    """
    return _world().local_rank
