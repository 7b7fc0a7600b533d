"""Kernel faults on a GPU: which leaf, and whether the device can still be used.

A kernel that faults (an illegal address, a trap) does not fail its launch call: CUDA reports the
fault at the next operation that waits for the device, possibly after other kernels were queued,
and from then on every CUDA call of the process fails with the same error (the context is lost).
So the report names the leaves launched last on the device (one of them faulted; the last to
report is usually the one), the runtime refuses further GPU work with a message that says why,
and the user is told how to get the exact line: bounds-checked code (HPVM_GPU_CHECK=1).
"""
from __future__ import annotations

import collections
import threading
from typing import Any

from ..errors import ExecutionError, HPVMError, LaunchError
from ..support.loc import Loc
from .libcuda import error_text

_RECENT = 4  # leaves named in a fault report
_recent: "collections.deque[tuple[str, Loc | None]]" = collections.deque(maxlen=_RECENT)
_lock = threading.Lock()
_lost: str | None = None  # set once a fault has made the device unusable

# how CUDA (through torch, Triton or cuda-bindings) words the errors that lose the context. (Not
# "device-side assert" alone: torch ends the message of every CUDA error, a capture invalidated by
# another thread's work included, with advice on "device-side assertions", and reading that as a
# fault marked the GPU lost for good)
_FAULTS = ("illegal memory access", "illegal address", "misaligned address", "unspecified launch failure",
           "device-side assert triggered", "illegal instruction", "an illegal", "CUDA_ERROR_ILLEGAL",
           "CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_MISALIGNED", "CUDA_ERROR_ASSERT", "hardware stack error")


def launched(leaf: str, loc: Loc | None) -> None:
    """Note a kernel launch (the candidates of a later fault report)."""
    _recent.append((leaf, loc))


def is_fault(exc: BaseException) -> bool:
    text = str(exc)
    return any(marker in text for marker in _FAULTS)


def fault_error(exc: BaseException, leaf: str | None = None, loc: Loc | None = None) -> ExecutionError:
    """The report of a fault seen while waiting for `leaf` (or for a copy, when None); marks the
    device lost."""
    global _lost
    text = (exc.message if isinstance(exc, HPVMError) else str(exc)).strip()
    detail = text.splitlines()[0] if text else type(exc).__name__
    with _lock:
        recent = list(_recent)
        _recent.clear()
    names = [f"{name} ({where})" if where is not None else name for name, where in reversed(recent)]
    if leaf is not None and recent:
        loc = loc if loc is not None else recent[-1][1]
    elif recent:
        loc = recent[-1][1]
    suspects = f"the kernel of leaf {names[0]}" if len(names) == 1 else \
        f"one of the kernels launched last, newest first: {', '.join(names)}" if names else "a kernel"
    message = (f"{suspects} faulted on the GPU ({detail}). CUDA keeps this error for the rest of the "
               "process: the runtime cannot use the GPU again; restart the process. To find the "
               "access, run the graph on target 'nvptx' with HPVM_GPU_CHECK=1 (bounds-checked code "
               "names the line) or on target 'cpu'")
    _lost = message
    return ExecutionError(message, loc, rule="gpu-fault")


def check_usable() -> None:
    """Refuse GPU work once a fault has lost the device's context."""
    if _lost is not None:
        raise LaunchError(f"the GPU is unusable after an earlier kernel fault: {_lost}",
                          rule="gpu-fault")


def reported(exc: BaseException, leaf: str | None = None, loc: Loc | None = None) -> Any:
    """`exc` as the error to raise: a fault report when it is one, else itself."""
    return fault_error(exc, leaf, loc) if is_fault(exc) else exc


def raise_for(code: int, what: str) -> None:
    """A libcuda call's CUresult other than success as the error to raise (a kernel fault's
    report when it is one): "<what> failed: <the driver's name of the code>"."""
    if code:
        raise reported(RuntimeError(f"{what} failed: {error_text(code)}"))
