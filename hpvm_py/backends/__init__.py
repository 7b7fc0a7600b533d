"""Backends: cpu (LLVM through llvmlite), gpu (Triton), python (the reference target)."""
