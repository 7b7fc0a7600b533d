"""Scalar outputs of a GPU kernel launch: written on the device, copied to the host on demand.

A prepared GPU launch (`gpu` and `nvptx`) keeps one device array per used output next to the
host array the executor reads. The normal launch path fetches them right after the kernel; a
replayed launch (rt/replay.py) fetches only the outputs the host reads (a uniform value for a later
node, a root output) and lets a later kernel of the same device read the others where they are.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...ir.loc import Loc
from . import faults


class DeviceOutputs:
    def __init__(self, pairs: list[tuple[np.ndarray, Any]], leaf: str, loc: Loc | None):
        self.pairs = pairs  # (host array, device tensor), one per used output
        self.leaf = leaf  # the kernel that writes them, named if it faults
        self.loc = loc

    def fetch(self) -> None:
        """Copy every output to its host array (waits for the kernel that writes it)."""
        import torch  # noqa: PLC0415 - the device layer's tensors

        for host, dev in self.pairs:
            try:
                data = dev.reshape(-1).view(torch.uint8).cpu().numpy()
            except Exception as exc:  # noqa: BLE001 - a fault of the kernel shows at the copy
                raise faults.reported(exc, self.leaf, self.loc) from None
            host.reshape(-1).view(np.uint8)[:data.size] = data

    def device_twin(self, host: np.ndarray) -> Any:
        """The device array whose values `host` receives on fetch(), or None."""
        for array, dev in self.pairs:
            if array is host:
                return dev
        return None


class DeviceLaunch:
    """What the prepared launches of the GPU targets share (triton/prepared.py, nvptx/launch.py):
    start(stream) queues the kernel, run() also fills the host outputs, and the launch can be
    replayed once no per-instance input was copied from the host for it alone (`stale`)."""

    outputs: DeviceOutputs
    stale: set[int]

    @property
    def reusable(self) -> bool:
        return not self.stale

    def run(self) -> None:
        self.start()
        self.outputs.fetch()

    def start(self, stream: Any = None) -> None:
        raise NotImplementedError
