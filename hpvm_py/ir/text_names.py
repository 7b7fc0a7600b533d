"""What the quoted names, strings and file paths of the textual IR may hold (parser.py reads
them, and refuses at their position what a later stage could not take).

- No string holds half of a UTF-16 surrogate pair (`"\\ud800"` is valid JSON): no later stage can
  encode it as UTF-8 (the code generators' source, the text printed back).
- No name or file path holds NUL: LLVM value names and the operating system's file paths travel
  as C strings, which it ends.
- No @name holds a control character: a function's name becomes a symbol and a module id of
  the generated code, where a newline ends the line LLVM reads it on. A %name may (the printer
  quotes it), as only NUL breaks an LLVM value name.
"""
from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc


def string_problem(value: str) -> str | None:
    """Why a decoded string cannot be kept, or None."""
    surrogate = _SURROGATE.search(value)
    if surrogate is None:
        return None
    return (f"lone surrogate U+{ord(surrogate.group()):04X} (a character outside the BMP is "
            "written as a pair of them)")


def name_problem(value: str, function: bool) -> str | None:
    """Why a decoded %name (function: an @name) cannot be kept, or None."""
    control = _CONTROL.search(value) if function else re.search("\x00", value)
    if control is None:
        return None
    what = "an @name" if function else "a %name"
    return f"{what} may not contain the control character U+{ord(control.group()):04X}"


def path_problem(value: str) -> str | None:
    """Why a decoded file path cannot be kept, or None."""
    return "a file path may not contain the character U+0000 (NUL)" if "\x00" in value else None
