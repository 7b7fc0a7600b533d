"""Where errors point in programs written in unusual but legal ways: the caret of str(exc) sits
under the character the error is about, whatever comes before it on the line (non-ASCII names,
wide characters, tabs), for each way a location is made (a leaf's AST, a graph body's call into
hpvm-py, a frame of a graph body that raised, a launch)."""
from __future__ import annotations

import importlib.util
import itertools
import linecache
import os
import unicodedata
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.errors import HPVMError, InternalError

_counter = itertools.count()

HEADER = "import hpvm_py as hpvm\nfrom hpvm_py import InOut, Ptr, f32, i64\n\n\n"

INC = """\
@hpvm.leaf
def inc(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = a[0] + 1.0


"""


def load(folder: Path, source: str):
    """Write source (exactly as given) to a fresh file in folder and import it: (path, module)."""
    path = folder / f"errorloc_{next(_counter)}.py"
    path.write_bytes(source.encode("utf-8"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(path), module


def cells(text: str) -> int:
    """The terminal column text ends at (tab stops every 8 cells, wide characters take two)."""
    col = 0
    for char in text:
        if char == "\t":
            col = col // 8 * 8 + 8
        elif not unicodedata.combining(char):
            col += 2 if unicodedata.east_asian_width(char) in "WF" else 1
    return col


def check_points_at(exc: BaseException, path: str, token: str) -> None:
    """exc is located at the first line of path holding token, and its caret is under token."""
    assert isinstance(exc, HPVMError) and not isinstance(exc, InternalError), repr(exc)
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(lines, 1) if token in text)
    assert exc.loc is not None and os.path.abspath(exc.loc.file) == path, exc
    assert exc.loc.line == line, exc
    column = lines[line - 1].index(token)
    text = str(exc).splitlines()
    assert text[0].startswith(f"{path}:{line}:{column + 1}: error: "), text[0]
    shown, caret = text[-2], text[-1]
    assert caret.strip() == "^", text
    assert cells(caret[:caret.index("^")]) == cells(shown[:shown.index(token)]), "\n".join(text)


# what stands before the error on its line: each must leave the caret under the error
PREFIXES = ["", "é = 1; ", "ééé = 1; ", "変数 = 1; ", "x = 1;\t", "a\u0301 = 1; ", "𝑥 = 1; "]


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_leaf_error_is_under_its_name(tmp_path: Path, prefix: str) -> None:
    path, module = load(tmp_path, HEADER + f"""\
@hpvm.leaf
def bad(a: InOut[Ptr[f32]], a_bytes: i64):
    {prefix}a[0] = f32(undefined_thing)


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(bad, grid=1, a=a, a_bytes=a_bytes)
""")
    with pytest.raises(HPVMError) as info:
        hpvm.compile(module.root, target="python")
    check_points_at(info.value, path, "undefined_thing")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_wiring_error_is_under_its_call(tmp_path: Path, prefix: str) -> None:
    path, module = load(tmp_path, HEADER + INC + f"""\
@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    {prefix}hpvm.node(inc, grid=1, a=a, a_bytes=a_bytes, zzz=a_bytes)
""")
    with pytest.raises(HPVMError) as info:
        hpvm.compile(module.root, target="python")
    assert info.value.rule == "ports-exist"
    check_points_at(info.value, path, "hpvm.node")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_graph_body_that_raises_is_located_at_its_frame(tmp_path: Path, prefix: str) -> None:
    path, module = load(tmp_path, HEADER + INC + f"""\
@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    {prefix}k = {{}}["key"]
    hpvm.node(inc, grid=1, a=a, a_bytes=a_bytes)
""")
    with pytest.raises(HPVMError) as info:
        hpvm.compile(module.root, target="python")
    check_points_at(info.value, path, '{}["key"]')


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_launch_error_is_under_the_launch(tmp_path: Path, prefix: str) -> None:
    path, module = load(tmp_path, HEADER + INC + f"""\
@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(inc, grid=1, a=a, a_bytes=a_bytes)


def go(x):
    {prefix}return hpvm.wait(hpvm.launch(root, x, "four"))
""")
    with hpvm.runtime("python"), pytest.raises(HPVMError) as info:
        module.go(np.zeros(4, np.float32))
    check_points_at(info.value, path, "hpvm.launch")


# -- an indented `def` with a line further left than itself ------------------------------------

# lines of a method's body, one starting left of the `def`, each legal Python
LEFT_LINES = [
    "# a comment at column 0\n",
    '        """a string whose next line\nstarts at column 0"""\n',
    "        k = 2.0 + \\\n0.0\n",
]


@pytest.mark.parametrize("left", LEFT_LINES)
def test_a_method_with_a_line_left_of_it_compiles(tmp_path: Path, left: str) -> None:
    _, module = load(tmp_path, HEADER + f"""\
class Kernels:
    @staticmethod
    @hpvm.leaf
    def scale(a: InOut[Ptr[f32]], a_bytes: i64):
        k = 2.0
{left}        i = hpvm.instance_id(0)
        a[i] = a[i] * k


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(Kernels.scale, grid=n, a=a, a_bytes=a_bytes)
""")
    x = np.random.default_rng().random(17, dtype=np.float32)
    for target in ("python", "cpu"):
        y = x.copy()
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, y, y.nbytes, y.size))
            hpvm.request_memory(y)
        np.testing.assert_array_equal(y, x * np.float32(2.0), err_msg=target)


@pytest.mark.parametrize("left", LEFT_LINES)
def test_an_error_in_such_a_method_is_under_its_name(tmp_path: Path, left: str) -> None:
    path, module = load(tmp_path, HEADER + f"""\
def make():
    @hpvm.leaf
    def bad(a: InOut[Ptr[f32]], a_bytes: i64):
{left}        é = 1; a[0] = f32(undefined_thing)
    return bad


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(make(), grid=1, a=a, a_bytes=a_bytes)
""")
    with pytest.raises(HPVMError) as info:
        hpvm.compile(module.root, target="cpu")
    check_points_at(info.value, path, "undefined_thing")


# -- a user's folder whose name starts with the package's -------------------------------------

SIBLING = HEADER + INC + """\
@hpvm.graph
def wired(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(inc, grid=1, a=a, a_bytes=a_bytes, zzz=a_bytes)


@hpvm.graph
def raising(a: InOut[Ptr[f32]], a_bytes: i64):
    k = {}["key"]


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(inc, grid=1, a=a, a_bytes=a_bytes)


def go(x):
    return hpvm.wait(hpvm.launch(root, x, "four"))
"""


def test_a_program_in_a_folder_named_like_the_package_is_the_users() -> None:
    """hpvm_py/../hpvm_py_examples/prog.py is the user's code, not the library's: its frames are
    where errors point (the file needs no disk: linecache holds its text, as for an exec'd one)."""
    path = os.path.dirname(os.path.abspath(hpvm.__file__)) + f"_examples_{next(_counter)}/prog.py"
    linecache.cache[path] = (len(SIBLING), None, SIBLING.splitlines(True), path)
    namespace: dict = {}
    try:
        exec(compile(SIBLING, path, "exec"), namespace)  # noqa: S102 - the program under test
        for graph, token in (("wired", "hpvm.node"), ("raising", '{}["key"]')):
            with pytest.raises(HPVMError) as info:
                hpvm.compile(namespace[graph], target="python")
            assert info.value.loc.file == path, info.value
            assert token in info.value.loc.source_line(), info.value
        with hpvm.runtime("python"), pytest.raises(HPVMError) as info:
            namespace["go"](np.zeros(4, np.float32))
        assert info.value.loc.file == path, info.value
        assert "hpvm.launch" in info.value.loc.source_line(), info.value
    finally:
        del linecache.cache[path]


# -- hpvmc on programs Python itself rejects or that raise -------------------------------------

def hpvmc(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


# (ASCII before the error: CPython counts a SyntaxError's offset in bytes when it compiles a file)
@pytest.mark.parametrize("line,token", [
    ("def f(:", ":"),
    ("x = (1,\n  2 + )", ")"),
    ("x = 1;\ty = 2 + )", ")"),
    ("  y = 1", "y"),
])
def test_a_syntax_error_is_shown_with_a_caret(tmp_path: Path, capsys, line: str, token: str) -> None:
    path = tmp_path / "broken.py"
    path.write_text(f"import hpvm_py as hpvm\n{line}\n", encoding="utf-8")
    code, text = hpvmc(capsys, "check", str(path))
    assert code == 1 and "Traceback" not in text, text
    shown, caret = text.rstrip("\n").splitlines()[-2:]
    assert caret.strip() == "^", text
    assert cells(caret[:caret.index("^")]) == cells(shown[:shown.rindex(token)]), text


@pytest.mark.parametrize("command", ["check", "run"])
def test_a_program_that_raises_shows_only_its_own_frames(tmp_path: Path, capsys, command: str) -> None:
    path = tmp_path / "raises.py"
    path.write_text("import hpvm_py as hpvm\n\n\ndef f():\n    return {}['key']\n\n\nf()\n")
    code, text = hpvmc(capsys, command, str(path))
    assert code == 1 and "the program raised KeyError" in text, text
    frames = [line for line in text.splitlines() if line.startswith("  File ")]
    assert [line.split('"')[1] for line in frames] == [str(path)] * 2, text
