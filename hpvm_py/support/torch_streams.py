"""A CUDA stream handle as the torch stream that queues on it, for the places that hand torch a
handle (events, synchronisation, Triton's dispatch under torch.cuda.stream).

Handle 0 is the legacy default stream, where the GPU targets launch when the user's current
stream is torch's default one. torch.cuda.ExternalStream(0) is not that stream: torch 2.11 gave
another stream for it (cuda_stream 0x988d5c0 on an H200), so a replay's events were recorded and
waited for there while its kernels ran on the default stream, and a kernel on a side stream was
now and then not waited for (docs/device-tests.md, 2026-11-30).
"""
from __future__ import annotations

from typing import Any


def torch_stream(handle: int | None, device: Any = None) -> Any:
    """The torch stream of a CUDA stream handle on `device` (None: torch's current stream)."""
    import torch  # noqa: PLC0415 - CUDA only where a GPU target runs

    if handle is None:
        return torch.cuda.current_stream(device)
    if handle == 0:
        return torch.cuda.default_stream(device)
    return torch.cuda.ExternalStream(handle, device=device)
