"""Source locations carried by every IR node."""
from __future__ import annotations

import linecache
import unicodedata
from dataclasses import dataclass


@dataclass(frozen=True)
class Loc:
    """A position in the user's source: file, 1-based line, 0-based column in characters (Python's
    ast and code positions count UTF-8 bytes: char_column converts them)."""

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
        # as wide as what it stands under: a tab stays a tab, a wide character (CJK) takes two cells
        pad = "".join(c if c == "\t" else " " * _cells(c) for c in text[indent:max(indent, self.col)])
        return f"    {stripped}\n    {pad}^"


def _cells(char: str) -> int:
    """The terminal cells a character takes: 2 when East Asian wide, 0 when combining, else 1."""
    if unicodedata.combining(char):
        return 0
    return 2 if unicodedata.east_asian_width(char) in "WF" else 1


def char_column(line: str, byte_col: int) -> int:
    """The character column of a UTF-8 byte offset into line (after `é = 1; `, Python's ast puts
    the next name at byte 8, which is character 7)."""
    if line.isascii():
        return byte_col
    return len(line.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


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
