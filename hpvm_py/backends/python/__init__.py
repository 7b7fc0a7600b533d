"""The python reference target: leaves run as Python generated from their IR, on NumPy values."""
from .kernel import PythonBackend, PythonLeafKernel

__all__ = ["PythonBackend", "PythonLeafKernel"]
