"""Source locations carried by every IR node."""
from __future__ import annotations

import linecache
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: file, 1-based line, 0-based column (as Python's ast)."""

    file: str
    line: int
    col: int = 0

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col + 1}"

    def source_line(self) -> str | None:
        text = linecache.getline(self.file, self.line)
        return text.rstrip("\n") if text else None

    def snippet(self) -> str:
        """The source line with a caret under the column, or '' when the source is not available."""
        text = self.source_line()
        if text is None:
            return ""
        stripped = text.lstrip()
        indent = len(text) - len(stripped)
        caret_col = max(0, self.col - indent)
        return f"    {stripped}\n    {' ' * caret_col}^"


UNKNOWN = Loc("<unknown>", 0, 0)


@dataclass(frozen=True)
class TextLoc(Loc):
    """Where an item written without `@F:L:C` is in a .hpvm text. Errors about the item point
    there, but it is not a source location of the program, so the printer leaves it out: the
    item prints back unlocated, as it was written (print -> parse -> print stays a fixed point).
    Being another class, it never equals a Loc of the same place."""


def register_source(name: str, text: str) -> None:
    """Make text that has no file (a string given to from_text) printable in error snippets."""
    lines = text.splitlines(keepends=True)
    linecache.cache[name] = (len(text), None, lines, name)
