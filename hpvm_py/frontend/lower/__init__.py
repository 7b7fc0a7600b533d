"""Lowering of leaf and helper bodies (and of graph signatures) from the Python AST to kernel IR.

The parts build on each other in one direction: values -> base -> conversions -> exprs -> calls ->
stmts -> lowerer.
"""
from .lowerer import Lowerer

__all__ = ["Lowerer"]
