"""Math functions for kernels run by Triton's interpreter (TRITON_INTERPRET=1).

libdevice functions have no interpreter implementation; the generated helpers call `call()`
instead when interpreting. It applies the NumPy function the python target uses to the values the
interpreter holds (NumPy arrays inside its tensors). Never used by compiled GPU code.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..python.ops import _MATH


def call(name: str, *args: Any) -> Any:
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    data = [np.asarray(a.handle.data) for a in args]
    with np.errstate(all="ignore"):
        result = np.asarray(_MATH[name](*data)).astype(data[0].dtype)
    widest = max(args, key=lambda a: np.ndim(a.handle.data))
    return tl.tensor(TensorHandle(result, widest.dtype.scalar), widest.type)
