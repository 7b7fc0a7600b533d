"""The cpu target: leaves compiled to native code with LLVM (llvmlite), run on the worker pool."""
from .backend import CpuBackend

__all__ = ["CpuBackend"]
