"""What ranks send each other over a launcher's key-value store, decoded without running code.

Anything that reaches the store's port can write a key, so a plain `pickle.loads` of what the
store holds would run whatever that writer chose on every rank. The exchanges carry plain data
(numbers, strings, lists, tuples, dicts) and, for a GPU heap, torch's CUDA-sharing arguments:
pickle, decoded by an unpickler that resolves only those names (docs/security.md).
"""
from __future__ import annotations

import io
import pickle
from typing import Any

from ..errors import DistributedError

# module -> the names an exchange may name there: torch's CUDA IPC rebuild and what its arguments
# hold (the tensor and storage classes, dtypes, devices)
_ALLOWED = {
    "torch.multiprocessing.reductions": {"rebuild_cuda_tensor"},
    "torch": {"Tensor", "device", "Size", "uint8", "int8", "int16", "int32", "int64", "float16",
              "bfloat16", "float32", "float64", "bool"},
    "torch.storage": {"UntypedStorage", "TypedStorage"},
    "torch._utils": {"_rebuild_device_tensor_from_numpy"},
}


class _DataOnly(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if name in _ALLOWED.get(module, ()):
            return super().find_class(module, name)
        raise DistributedError(f"a message in the launcher's key-value store names {module}.{name}, "
                               "which no rank of hpvm-py sends: refused (is something else writing "
                               "to the store's port?)", rule="rank-agreement")


def encode(obj: Any) -> bytes:
    return pickle.dumps(obj)


def decode(data: bytes) -> Any:
    return _DataOnly(io.BytesIO(data)).load()
