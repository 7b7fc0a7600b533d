"""Shared assertions: an error is the expected HPVMError subclass, names the expected rule, and
points at the line of a test program marked with `# ERR:<tag>`, with the source line and a caret."""
from __future__ import annotations

import os

import hpvm_py
from hpvm_py.errors import HPVMError, InternalError

TESTS = os.path.dirname(os.path.abspath(__file__))

# the package under test is this checkout's, not another one installed in the environment
assert os.path.dirname(os.path.dirname(os.path.abspath(hpvm_py.__file__))) == os.path.dirname(TESTS), \
    hpvm_py.__file__


def program_path(module) -> str:
    return os.path.abspath(module.__file__)


def marked_line(path: str, tag: str) -> int:
    """The 1-based line carrying `# ERR:<tag>` (exactly one must)."""
    found = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if "# ERR:" in line and line.split("# ERR:", 1)[1].split()[0] == tag:
                found.append(number)
    assert len(found) == 1, f"{path}: tag {tag!r} marks lines {found}"
    return found[0]


def check_error(exc: BaseException, cls: type, path: str, tag: str, rule: str | None) -> None:
    assert isinstance(exc, cls), f"expected {cls.__name__}, got {type(exc).__name__}: {exc}"
    assert isinstance(exc, HPVMError) and not isinstance(exc, InternalError), repr(exc)
    assert exc.rule == rule, f"rule {exc.rule!r}, expected {rule!r}: {exc}"
    line = marked_line(path, tag)
    assert exc.loc is not None, exc
    assert os.path.abspath(exc.loc.file) == os.path.abspath(path), f"{exc.loc} is not in {path}"
    assert exc.loc.line == line, f"error at line {exc.loc.line}, expected {line}: {exc}"
    check_caret(exc)


def check_caret(exc: HPVMError) -> None:
    """str(exc) is `file:line:col: error: message [rule: r]`, the source line, and a caret under col."""
    text = str(exc).splitlines()
    assert text[0].startswith(f"{exc.loc.file}:{exc.loc.line}:{exc.loc.col + 1}: error: "), text[0]
    if exc.rule:
        assert text[0].endswith(f"[rule: {exc.rule}]"), text[0]
    with open(exc.loc.file, encoding="utf-8") as f:
        source = f.read().splitlines()[exc.loc.line - 1]
    assert text[-2].strip() == source.strip(), text
    caret = text[-1]
    assert caret.strip() == "^", text
    indent = len(source) - len(source.lstrip())
    assert caret.index("^") - 4 == exc.loc.col - indent, (caret, exc.loc)
    assert exc.loc.col < len(source), exc.loc
