"""The cpu target: leaves compiled to native code with LLVM (llvmlite), run on the worker pool.
(docs/architecture.md, "Module notes": backends/cpu/__init__.py)"""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
