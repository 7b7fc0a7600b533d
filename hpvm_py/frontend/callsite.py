"""Find the user's source position of a call into hpvm-py (for builder locations and errors)."""
from __future__ import annotations

import contextlib
import linecache
import os
import sys
from types import CodeType

from ..support.loc import UNKNOWN, Loc, char_column

# (with its separator: a user's folder named hpvm_py_x/ beside it is not the library)
_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
# Code objects compare equal when their bytecode, names, constants and line numbers do, whatever
# their file (co_filename is not compared): two files with the same function at the same lines
# (a copied program, generated test programs) share one key unless the file is part of it.
_positions: dict[CodeType, list] = {}
_locs: dict[tuple[str, CodeType, int], Loc] = {}  # a call site in a loop repeats: one Loc for it


_inside: dict[str, bool] = {}  # file name -> whether it is hpvm_py's own


def _inside_package(code: CodeType) -> bool:
    inside = _inside.get(code.co_filename)
    if inside is None:
        # contextlib's frames stand between `with hpvm.runtime(...)` and init(): skip them too
        inside = _inside[code.co_filename] = code.co_filename.startswith(_PACKAGE_DIR) or \
            code.co_filename == contextlib.__file__
    return inside


def caller_loc() -> Loc:
    """The location of the innermost frame outside the hpvm_py package (file, line, column)."""
    frame = sys._getframe(1)
    while frame is not None and _inside_package(frame.f_code):
        frame = frame.f_back
    if frame is None:
        return UNKNOWN
    code = frame.f_code
    key = (code.co_filename, code, frame.f_lasti)
    loc = _locs.get(key)
    if loc is not None:
        return loc
    positions = _positions.get(code)
    if positions is None:
        positions = list(code.co_positions())
        _positions[code] = positions
    index = frame.f_lasti // 2
    col = 0
    if 0 <= index < len(positions) and positions[index][2] is not None:
        col = positions[index][2]
    col = char_column(linecache.getline(code.co_filename, frame.f_lineno), col)
    loc = _locs[key] = Loc(code.co_filename, frame.f_lineno, col)
    return loc
