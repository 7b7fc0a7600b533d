"""CUDA graphs of replayed launches: a graph's kernels captured once and launched as one.

A replayed launch (rt/replay.py) whose kernels need nothing from the host between them, and whose
scalars are the same as the last replay's, is captured into a CUDA graph (torch.cuda.CUDAGraph)
the second time it repeats; from then on, while its buffers and scalars stay the same, one graph
launch replaces its kernel launches. Any other launch takes the prepared launches again.
"""
from __future__ import annotations

from typing import Any, Callable

from . import faults
from .libcuda import error_text, graph_launch


class CapturedGraph:
    """A captured CUDA graph, launched on the stream that was current when it was captured (with
    libcuda's cuGraphLaunch where torch exposes the executable graph, else torch's replay())."""

    def __init__(self, graph: Any, stream: int):
        self.graph = graph  # keeps the executable graph alive
        self.stream = stream  # where replay() launches it by default
        self._launch, self._exec = graph_launch(), None
        try:
            self._exec = graph.raw_cuda_graph_exec()  # torch >= 2.7 (not every version has it)
        except (AttributeError, RuntimeError):
            self._launch = None

    def replay(self, stream: int | None = None) -> None:
        """Launch it (on `stream`, a CUDA stream handle, when given)."""
        try:
            if self._launch is None:
                self.graph.replay()
                return
            err = self._launch(self._exec, self.stream if stream is None else stream)
        except Exception as exc:  # noqa: BLE001 - a kernel fault shows at the next launch
            raise faults.reported(exc) from None
        if err:
            raise faults.reported(RuntimeError(f"launching a captured CUDA graph failed: "
                                               f"{error_text(err)}"))


def capture(launch: Callable[[Any], None], device: str) -> Any:
    """A CUDA graph of what launch(capture stream's handle) queues, or None when the device has no
    CUDA graphs (the fake device) or the capture fails."""
    if not device.startswith("cuda"):
        return None
    import torch  # noqa: PLC0415 - the device layer's CUDA runtime

    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream(device)
    current = torch.cuda.current_stream(device).cuda_stream
    try:
        # thread_local: another thread's CUDA work during the capture does not break it
        with torch.cuda.graph(graph, stream=stream, capture_error_mode="thread_local"):
            launch(stream.cuda_stream)
    except Exception as exc:  # noqa: BLE001 - no graph: the prepared launches run instead
        if faults.is_fault(exc):
            raise faults.fault_error(exc) from None
        return None
    return CapturedGraph(graph, current)
