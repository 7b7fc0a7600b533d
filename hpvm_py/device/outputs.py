"""Scalar outputs of a GPU kernel launch: written on the device, copied to the host on demand;
and what the prepared launches of the GPU targets share (DeviceLaunch).

A prepared GPU launch (`gpu` and `nvptx`) keeps one device array per used output next to the
host array the executor reads. The normal launch path fetches them right after the kernel; a
replayed launch (rt/replay.py) fetches only the outputs the host reads (a uniform value for a later
node, a root output) and lets a later kernel of the same device read the others where they are; a
streaming stage (rt/stream/stage_launch.py) fetches them once its item's event has passed.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import LaunchError
from ..support.loc import Loc
from ..support.torch_streams import torch_stream
from . import faults
from .libcuda import device_address, error_text, stream_synchronize
from .staging import staged


class DeviceOutputs:
    def __init__(self, pairs: list[tuple[np.ndarray, Any]], leaf: str, loc: Loc | None):
        self.pairs = pairs  # (host array, device tensor), one per used output
        self.leaf = leaf  # the kernel that writes them, named if it faults
        self.loc = loc
        self._device_bytes: list[Any] | None = None  # the device tensors as flat bytes, once made

    def fetch(self) -> None:
        """Copy every output to its host array (waits for the kernel that writes it; with staged
        copies active, queues the copies instead: staging.py)."""
        import torch  # noqa: PLC0415 - the device layer's tensors

        copies = staged()
        if copies is not None:  # a stream's item: the same device tensors item after item
            if self._device_bytes is None:
                self._device_bytes = [dev.reshape(-1).view(torch.uint8) for _, dev in self.pairs]
            for (host, _), data in zip(self.pairs, self._device_bytes):
                copies.to_host(data, host.reshape(-1).view(np.uint8)[:data.numel()])
            return
        for host, dev in self.pairs:
            try:
                data = dev.reshape(-1).view(torch.uint8).cpu().numpy()
            except Exception as exc:  # noqa: BLE001 - a fault of the kernel shows at the copy
                raise faults.reported(exc, self.leaf, self.loc) from None
            host.reshape(-1).view(np.uint8)[:data.size] = data

    def rebind(self, outputs: list[np.ndarray | None]) -> None:
        """Fill other host arrays (a stream's next item): the used outputs, None for unused ones,
        each of the dtype and size of the array it replaces."""
        hosts = [out for out in outputs if out is not None]
        assert len(hosts) == len(self.pairs)
        self.pairs = [(host, dev) for host, (_, dev) in zip(hosts, self.pairs)]

    def device_twin(self, host: np.ndarray) -> Any:
        """The device array whose values `host` receives on fetch(), or None."""
        for array, dev in self.pairs:
            if array is host:
                return dev
        return None


def error_word(words: int, device: Any) -> Any:
    """A checked kernel's error word (`words` int64: the first fault's site + 1, index, limit) for
    a launch on `device`. On a GPU it is pinned host memory, which the kernel writes through
    (unified addressing maps it at its host address): a kernel writes it only when it faults, and
    the host reads it once the kernel's stream is done, with no copy queued behind the kernel
    (6.5 us a check on an H200). In Triton's interpreter, host memory."""
    import torch  # noqa: PLC0415 - the device layer's pinned memory

    if device.type != "cuda":
        return torch.zeros(words, dtype=torch.int64, device=device)
    word = torch.zeros(words, dtype=torch.int64, pin_memory=True)
    if device_address(word.data_ptr()) not in (word.data_ptr(), None):
        raise LaunchError("pinned host memory is not mapped at its host address on this GPU "
                          "(torch registers its pinned memory here?): bounds-checked kernels "
                          "need it for their error word")
    return word


class DeviceLaunch:
    """What the prepared launches of the GPU targets share (triton/prepared.py, nvptx/launch.py):
    issue(stream) queues the kernel without waiting for anything, check() reports the
    out-of-bounds accesses a checked kernel recorded (it waits for the kernel), start(stream) does
    both and run() also fills the host outputs. The launch can be replayed once no per-instance
    input was copied from the host for it alone (`stale`); a `repointable` one can also be pointed
    at other buffers of the same sizes (set_buffer, set_outputs: a stream's next item)."""

    outputs: DeviceOutputs
    stale: set[int]
    error: Any = None  # a checked kernel's error word (error_word()), else None
    error_clear = True  # the error word is known to hold zero: read so since the last launch
    _issued_on: int | None = None  # the stream of the last issue() (None: torch's current)
    # (the error word, a NumPy view of it where it is mapped host memory, else None)
    _error_view: tuple[Any, np.ndarray | None] | None = None

    def read_error_word(self, stream: int | None, ran: bool = False) -> list[int]:
        """The error word's values once the kernels `stream` holds (a CUDA stream handle; None:
        torch's current stream) have run; `ran`: they are known to have (an event recorded after
        them has passed), so nothing is waited for. Raises the stream's failure (a fault of its
        kernels) as a RuntimeError."""
        view = self._mapped_view()
        if view is None:  # Triton's interpreter: the kernel ran as it was issued
            return self.error.tolist()
        if not ran:
            _synchronize(stream)
        return view.tolist()

    def clear_error_word(self) -> None:
        """Before a launch of a checked kernel: zero its error word, unless check() read it clean
        since the last launch (item after item of a stream, a relaunch: nothing to do). A kernel
        issued since may still be running: its stream is waited for first."""
        if not self.error_clear:
            if self._mapped_view() is not None:
                _synchronize(self._issued_on)
            self.error.zero_()
        self.error_clear = False

    def before_graph(self, stream: int) -> None:
        """Before a CUDA graph that holds this launch's kernel runs on `stream`: its error word as
        for issue(stream), so that check() reads it behind the graph."""
        if self.error is not None:
            self.clear_error_word()
        self._issued_on = stream

    def capture_into(self, stream: int) -> None:
        """Queue the kernel on `stream`, which a CUDA graph is capturing: nothing runs, so the
        error word's state stays as it was (before_graph() sets it for each run of the graph)."""
        clear, issued_on = self.error_clear, self._issued_on
        self.issue(stream)
        self.error_clear, self._issued_on = clear, issued_on

    def _mapped_view(self) -> np.ndarray | None:
        error = self.error
        seen = self._error_view
        if seen is None or seen[0] is not error:  # (worked out once: a loop reads it every time)
            mapped = error.device.type == "cpu" and error.is_pinned()
            seen = self._error_view = (error, error.numpy() if mapped else None)
        return seen[1]

    @property
    def on_any_stream(self) -> bool:
        """start(stream) queues all its device work on that stream (nothing on the current one)."""
        return True

    @property
    def reusable(self) -> bool:
        return not self.stale

    @property
    def movable_buffers(self) -> bool:
        """set_buffer() is sound on this launch: nothing packed depends on a buffer parameter but
        its address and size (a stream slot points its launches at an item's buffers while they
        keep their per-instance inputs, the slot's own producers' arrays)."""
        raise NotImplementedError

    @property
    def repointable(self) -> bool:
        raise NotImplementedError

    @property
    def patchable(self) -> bool:
        """set_uniform() may give a scalar any value: no malloc scratch is sized by scalars."""
        raise NotImplementedError

    def run(self) -> None:
        self.start()
        self.outputs.fetch()

    def start(self, stream: Any = None) -> None:
        self.issue(stream)
        self.check()

    def issue(self, stream: Any = None) -> None:
        raise NotImplementedError

    def check(self, ran: bool = False) -> None:
        """Raise a checked kernel's first out-of-bounds access (at its line); `ran`: the kernel is
        known to have finished (read_error_word)."""
        raise NotImplementedError

    def set_uniform(self, i: int, value: Any) -> None:
        raise NotImplementedError

    def set_buffer(self, i: int, arg: Any) -> None:
        """Point buffer parameter i at another device buffer (a BufferArg) of the same size."""
        raise NotImplementedError

    def set_outputs(self, outputs: list[np.ndarray | None]) -> None:
        self.outputs.rebind(outputs)

    def each_kernel(self, visit: Any) -> bool:
        """For a CUDA graph of it (device/kernel_graph.py): visit(function, grid, block, shared
        bytes, kernelParams address) for each kernel issue() would launch now; False when it
        cannot be launched that way (scratch to zero, Triton's dispatch). A checked kernel can:
        before_graph() readies its error word for each launch of the graph."""
        return False

    @property
    def copyable(self) -> bool:
        """copy() may be called: nothing packed depends on a buffer but its size, and nothing was
        copied from the host for this launch alone."""
        return False

    def copy(self) -> "DeviceLaunch":
        """The same launch on its own packed parameters, so that set_buffer() and set_uniform() on
        either leave the other as it is (rt/recording.py: a recording's launches for other buffers).
        Its per-instance inputs (producers' device arrays) and its outputs' device arrays are
        shared: the replays of one graph's recordings run in order on one stream."""
        raise NotImplementedError


def _synchronize(stream: int | None) -> None:
    """Wait for a CUDA stream (a handle; None: torch's current one)."""
    import torch  # noqa: PLC0415 - the device layer's streams

    handle = torch.cuda.current_stream().cuda_stream if stream is None else stream
    code = stream_synchronize(handle)
    if code == -1:  # no libcuda: torch waits
        torch_stream(handle).synchronize()
    elif code:
        raise RuntimeError(f"waiting for the kernel failed: {error_text(code)}")
