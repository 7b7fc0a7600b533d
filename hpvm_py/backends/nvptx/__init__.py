"""The nvptx target: leaves compiled to SIMT GPU code, one thread per dynamic instance.
(docs/architecture.md, "Module notes": backends/nvptx/__init__.py)"""
from .backend import NvptxBackend

__all__ = ["NvptxBackend"]
