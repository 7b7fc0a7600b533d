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

from ..support.loc import Loc
from . import faults
from .libcuda import error_text, read_back
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


class DeviceLaunch:
    """What the prepared launches of the GPU targets share (triton/prepared.py, nvptx/launch.py):
    issue(stream) queues the kernel without waiting for anything, check() reports the
    out-of-bounds accesses a checked kernel recorded (it waits for the kernel), start(stream) does
    both and run() also fills the host outputs. The launch can be replayed once no per-instance
    input was copied from the host for it alone (`stale`); a `repointable` one can also be pointed
    at other buffers of the same sizes (set_buffer, set_outputs: a stream's next item)."""

    outputs: DeviceOutputs
    stale: set[int]
    error: Any = None  # a checked kernel's error word (a device tensor), else None
    error_clear = True  # the error word is known to hold zero: read so since the last launch
    _error_host: Any = None  # the error word's pinned host twin, made at the first read
    # (the word, the twin's and the word's addresses, its bytes, a NumPy view of the twin)
    _error_copy: tuple[Any, int, int, int, np.ndarray] | None = None

    def read_error_word(self, stream: int | None) -> list[int]:
        """The error word's values once the kernels `stream` holds (a CUDA stream handle; None:
        torch's current stream of the word's device) have run: copied behind them into pinned
        memory, then read once that stream is done (8 us a check less than a blocking copy to
        new host memory on an H100). Raises the copy's or the kernel's failure as a
        RuntimeError."""
        import torch  # noqa: PLC0415 - the device layer's pinned memory and streams

        error = self.error
        copy = self._error_copy
        if copy is None or copy[0] is not error:  # (a launch copied for other buffers has its own)
            if error.device.type != "cuda":  # Triton's interpreter: the word is in host memory
                return error.tolist()
            host = self._error_host
            if host is None:
                host = self._error_host = torch.empty_like(error, device="cpu").pin_memory()
            # the addresses and a NumPy view of the pinned twin, worked out once (a loop of
            # checked launches reads the word every time)
            copy = self._error_copy = (error, host.data_ptr(), error.data_ptr(),
                                       error.numel() * error.element_size(), host.numpy())
        if stream is None:
            stream = torch.cuda.current_stream(error.device).cuda_stream
        code = read_back(copy[1], copy[2], copy[3], stream)
        if code == -1:  # no libcuda: torch's blocking copy
            return error.cpu().tolist()
        if code:
            raise RuntimeError(f"reading the error word back failed: {error_text(code)}")
        return copy[4].tolist()

    def clear_error_word(self) -> None:
        """Before a launch of a checked kernel: zero its error word (on torch's current stream),
        so that a replay reports only its own first fault, unless check() read it clean since
        the last launch (an item after item of a stream, a relaunch: no zeroing kernel)."""
        if not self.error_clear:
            self.error.zero_()
        self.error_clear = False

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

    def check(self) -> None:
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
        cannot be launched that way (a checked kernel, scratch to zero, Triton's dispatch)."""
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
