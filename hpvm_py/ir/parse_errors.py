"""The located errors of the textual IR's parser: a token the grammar accepted but the meaning
refused, and text that lark could not parse (with what it expected there)."""
from __future__ import annotations

from lark import Lark, Token
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from ..errors import ParseError
from ..support.loc import Loc


def token_error(message: str, token: Token, source: str) -> ParseError:
    return ParseError(message, Loc(source, token.line or 1, (token.column or 1) - 1))


_TOKEN_NAMES = {
    "VAR": "a %name", "FUNC": "an @name", "LOC": "a location @F:LINE:COL", "STRING": "a string",
    "WORD": "a word", "NUMBER": "a number", "NAN_BITS": "a NaN by its bits nan(0x...)",
    "$END": "the end of the text",  # lark's end marker, which is no terminal of the grammar
}


def syntax_error(exc: UnexpectedInput, text: str, source: str, parser: Lark) -> ParseError:
    """A located ParseError for what lark could not parse, naming what it expected."""
    line, column = exc.line, exc.column
    if isinstance(exc, UnexpectedCharacters):
        return ParseError(f"unexpected character {text[exc.pos_in_stream]!r}",
                          Loc(source, line, column - 1))
    found = "end of the text"
    if isinstance(exc, UnexpectedToken) and exc.token.type != "$END":
        found = repr(str(exc.token))
    else:  # lark places the end on the last token; point just past the text instead
        line = text.count("\n") + 1
        column = len(text) - (text.rfind("\n") + 1) + 1
    message = f"unexpected {found}"
    if isinstance(exc, UnexpectedToken):
        expected = sorted(_describe_terminal(name, parser) for name in exc.expected)
        message += f"; expected {_one_of(expected)}"
    return ParseError(message, Loc(source, line, column - 1))


def _describe_terminal(name: str, parser: Lark) -> str:
    if name in _TOKEN_NAMES:
        return _TOKEN_NAMES[name]
    pattern = parser.get_terminal(name).pattern
    return repr(pattern.value) if pattern.type == "str" else name.lower()


def _one_of(items: list[str]) -> str:
    return items[0] if len(items) == 1 else "one of " + ", ".join(items)
