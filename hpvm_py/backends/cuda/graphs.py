"""CUDA graphs of replayed launches: a graph's kernels captured once and launched as one.

A replayed launch (rt/replay.py) whose kernels need nothing from the host between them, and whose
scalars are the same as the last replay's, is captured into a CUDA graph (torch.cuda.CUDAGraph)
the second time it repeats; from then on, while its buffers and scalars stay the same, one graph
launch replaces its kernel launches. Any other launch takes the prepared launches again.
"""
from __future__ import annotations

from typing import Any, Callable

from . import faults


def capture(launch: Callable[[Any], None], device: str) -> Any:
    """A CUDA graph of what launch(capture stream's handle) queues, or None when the device has no
    CUDA graphs (the fake device) or the capture fails."""
    if not device.startswith("cuda"):
        return None
    import torch  # noqa: PLC0415 - the device layer's CUDA runtime

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(device)
    try:
        # thread_local: another thread's CUDA work during the capture does not break it
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            launch(stream.cuda_stream)
    except Exception as exc:  # noqa: BLE001 - no graph: the prepared launches run instead
        if faults.is_fault(exc):
            raise faults.fault_error(exc) from None
        return None
    return graph
