"""What the ranks exchange while they join the world: every rank's part of a step, and the
machine a rank runs on."""
from __future__ import annotations

from typing import Any

from ..errors import DistributedError, HPVMTimeoutError
from .transport import Transport
from .waiting import RanksMissing

FORCED_HOST = "#rank"  # HPVM_COMM_FORCE_REMOTE: "<machine>#rank<r>", a host per rank


def machine(host: str) -> str:
    """The machine a rank runs on, whatever host HPVM_COMM_FORCE_REMOTE made it report."""
    return host.split(FORCED_HOST)[0]


def exchange(transport: Transport, obj: Any, timeout: float, step: str) -> list[Any]:
    try:
        return transport.exchange(obj, timeout)
    except RanksMissing as exc:
        raise HPVMTimeoutError(f"hpvm.distributed.init(): rank(s) {exc.ranks} did not reach {step} "
                               f"within {timeout:g} s (HPVM_COMM_TIMEOUT)", rule="rank-arrival") from None


def check_all(errors: list[str | None], what: str) -> None:
    failed = [(q, e) for q, e in enumerate(errors) if e]
    if failed:
        detail = "; ".join(f"rank {q}: {e}" for q, e in failed)
        raise DistributedError(f"hpvm.distributed.init(): rank(s) {[q for q, _ in failed]} could not "
                               f"{what}: {detail}", rule="rank-setup")
