"""PyTorch integration: `hpvm.torch.op(graph, ...)` makes a graph a `torch.library` custom op
(docs/torch.md). Loaded on first use of `hpvm.torch`, so that `import hpvm_py` never imports torch.

(This package is `hpvm_py.torch`; inside it, `import torch` is the real torch: imports are
absolute.)"""
from __future__ import annotations

from .op import TorchOp, op, torch_dtype

__all__ = ["TorchOp", "op", "torch_dtype"]
