"""The textual IR's format version: the printer writes `version N` before `module`, the parser
refuses text of a version it does not know. A change that older parsers would read wrongly, or
that the parser could not read from older text, takes the next number. Text without the line is
version 1 (written before the line was)."""
from __future__ import annotations

IR_VERSION = 1


def version_problem(version: int) -> str | None:
    """Why text of this version cannot be read here, or None."""
    if version > IR_VERSION:
        return (f"this text is textual IR version {version}, written by a newer hpvm-py; this one "
                f"reads versions 1 to {IR_VERSION}: upgrade hpvm-py, or compile the program again "
                "with this one")
    if version < 1:
        return f"unknown textual IR version {version} (versions start at 1)"
    return None
