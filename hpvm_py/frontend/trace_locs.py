"""Where a traced graph body's result and failures are reported: its last `return value`, and
the user's frame of an exception its body raised (graph.py's tracing uses both)."""
from __future__ import annotations

import ast
import linecache
import os
import traceback
from typing import Any

from ..support.loc import Loc, char_column

# (with its separator: a user's folder named hpvm_py_x/ beside it is not the library)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def return_loc(src: Any) -> Loc | None:
    """The last `return value` of the graph function itself (not of a function nested in it)."""
    returns: list[ast.Return] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
                continue
            if isinstance(child, ast.Return) and child.value is not None:
                returns.append(child)
            visit(child)

    visit(src.tree)
    return src.loc(max(returns, key=lambda r: (r.lineno, r.col_offset))) if returns else None


def user_frame_loc(exc: BaseException, default: Loc) -> Loc:
    """The innermost frame in the graph's own file (a library's frame, json's or numpy's, is not
    where the user wrote the mistake), else the innermost frame outside hpvm_py."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_PACKAGE_DIR)]
    for frame in reversed(frames):
        if frame.filename == default.file:
            return _frame_loc(frame)
    if frames:
        return _frame_loc(frames[-1])
    return default


def _frame_loc(frame: traceback.FrameSummary) -> Loc:
    line = frame.lineno or 0
    return Loc(frame.filename, line, char_column(linecache.getline(frame.filename, line), frame.colno or 0))
