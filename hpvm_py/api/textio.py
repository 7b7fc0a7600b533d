"""Textual IR at the API: to_text, from_text, load (the output of `hpvmc compile -o DIR`)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import LaunchError
from ..frontend.callsite import caller_loc
from ..ir.parser import parse_module
from ..ir.printer import print_module
from ..rt.compiler import LoadedGraph, module_of
from ..rt.boundary import api_boundary


@api_boundary
def to_text(root: Any) -> str:
    """The textual IR of a graph and everything it uses (what `hpvmc compile --emit ir` writes).

    Args:
        root: an `@hpvm.graph`, or a graph from `from_text`/`load`.

    Returns:
        The text; `from_text` parses it back, and print → parse → print gives the same text.

    Raises:
        FrontendError: a leaf or helper that cannot be lowered.
        VerificationError: a rule that building the graph checks (the graph's other rules are
            checked when it is compiled or launched: the text of a graph that breaks one is
            written, and refused there).
    """
    return print_module(module_of(root))


@api_boundary
def from_text(text: str, source_name: str = "<hpvm-text>") -> LoadedGraph:
    """A graph from textual IR; it compiles and launches like the Python-defined one.

    The text is parsed and its bodies type checked, never executed as Python (docs/security.md);
    the graph's rules are verified when it is compiled or launched, as a Python graph's are.

    Args:
        text: the IR, as `to_text` or `hpvmc compile --emit ir` wrote it.
        source_name: the file name that error messages give.

    Returns:
        The graph, for `launch`, `compile` and `to_text`; its outputs come back from `wait` as a
        `NamedTuple` when the root names them.

    Raises:
        ParseError: text that does not parse (at its line and column).
        VerificationError: a body whose types do not check.
        LaunchError: text that is no str (bytes: decode them first).
    """
    if not isinstance(text, str):  # (None or bytes failed inside the lexer: an internal error)
        decode = " (decode the bytes first)" if isinstance(text, (bytes, bytearray)) else ""
        raise LaunchError(f"hpvm.from_text() takes the IR as a str, not "
                          f"{type(text).__name__}{decode}", caller_loc())
    return LoadedGraph(parse_module(text, source_name), source_name)


@api_boundary
def load(directory: str | Path, graph: str | None = None) -> LoadedGraph:
    """A graph written by `hpvmc compile -o DIR`, runnable without the leaves' Python source.

    Args:
        directory: the folder holding `<graph>.hpvm`.
        graph: the graph's name, when the folder holds several.

    Returns:
        The graph, as `from_text` returns it.

    Raises:
        LaunchError: a folder that is no str or path; no `.hpvm` file there (or none of that
            name), or several and no `graph`; a file given instead of its folder; a file that
            cannot be read or is not UTF-8 text.
        ParseError: a file that does not parse.
    """
    try:
        folder = Path(directory)
    except TypeError:  # (None, a number, bytes: pathlib's own TypeError was an internal error)
        raise LaunchError(f"hpvm.load(): the folder must be a str or os.PathLike, not "
                          f"{type(directory).__name__}", caller_loc()) from None
    if folder.is_file():  # (the .hpvm file itself: from_text reads one, load takes its folder)
        raise LaunchError(f"{folder} is a file: hpvm.load takes the folder `hpvmc compile -o` "
                          f"wrote ({folder.parent}), or read the file with "
                          "hpvm.from_text(Path(file).read_text())", caller_loc())
    # a folder named *.hpvm is no graph: left out, as the other entries that are not files
    files = sorted(f for f in folder.glob("*.hpvm") if f.is_file()) if folder.is_dir() else []
    if graph is not None:
        files = [f for f in files if f.stem == graph]
    if not files:
        what = f"graph {graph!r}" if graph else ".hpvm file"
        raise LaunchError(f"{folder} has no {what} (write one with `hpvmc compile FILE -o {folder}`)",
                          caller_loc())
    if len(files) > 1:
        names = ", ".join(f.stem for f in files)
        raise LaunchError(f"{folder} holds several graphs ({names}); name one: hpvm.load(dir, graph=...)",
                          caller_loc())
    path = files[0]
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:  # unreadable: named, not an internal error
        raise LaunchError(f"cannot read {path} ({exc.strerror or exc})", caller_loc()) from None
    except UnicodeDecodeError as exc:  # a damaged or foreign file: where, not a codec traceback
        raise LaunchError(f"{path} is not a textual .hpvm file (byte {exc.start} is not UTF-8)",
                          caller_loc()) from None
    return LoadedGraph(parse_module(text, str(path)), str(path))
