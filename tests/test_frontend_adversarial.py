"""Adversarial inputs to the front end and hpvmc: each answer is an HPVMError at the user's own
file:line (or a usage error), never an internal error, a hang or a location in someone else's file;
and valid programs that Python accepts compile and agree on the python and cpu targets."""
from __future__ import annotations

import importlib.util
import itertools
import json
import signal
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.errors import FrontendError, HPVMError, InternalError, VerificationError

from errcheck import check_caret

_counter = itertools.count()


def load(folder: Path, source: str, name: str | None = None):
    """Write `source` to a fresh file in folder and import it: (path, module)."""
    path = folder / f"{name or 'adv'}_{next(_counter)}.py"
    path.write_text(textwrap.dedent(source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(path), module


def line_of(path: str, text: str) -> int:
    lines = Path(path).read_text().splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def run_both(root, *args):
    """The root's outputs on the python and the cpu targets."""
    results = []
    for target in ("python", "cpu"):
        with hpvm.runtime(target):
            results.append(hpvm.wait(hpvm.launch(root, *args)))
    return results


# -- locations: two files holding the same graph function ----------------------------------------

SAME = """\
import hpvm_py as hpvm
from hpvm_py import i64


@hpvm.leaf
def inc(x: i64) -> i64:
    return x + 1


@hpvm.graph
def root(x: i64):
    hpvm.node(inc, grid=-1, x=x)
"""


def test_identical_graphs_in_two_files_report_their_own_file(tmp_path: Path) -> None:
    """Code objects of equal bytecode at equal lines compare equal whatever their file: the call-site
    cache must not hand the second file the first one's location."""
    for _ in range(2):
        path, module = load(tmp_path, SAME, "same")
        with pytest.raises(VerificationError) as info:
            hpvm.compile(module.root, target="python")
        assert info.value.rule == "instance-counts"
        assert info.value.loc.file == path, info.value
        assert info.value.loc.line == line_of(path, "grid=-1")
        check_caret(info.value)


# -- dead code after a statement that always returns ---------------------------------------------

@pytest.mark.parametrize("body", [
    "if x > 0:\n    return 1\nelse:\n    return 2\nx = 5",
    "if x > 0:\n    return 1\nreturn 2\nx = 5",
    "while True:\n    if x > 0:\n        return 1\n    return 2\nx = 5",
])
def test_code_after_a_return_on_every_path_is_dead_not_a_missing_return(tmp_path: Path,
                                                                           body: str) -> None:
    source = ("import hpvm_py as hpvm\nfrom hpvm_py import i64\n\n\n@hpvm.leaf\n"
              "def pick(x: i64) -> i64:\n" + textwrap.indent(body, "    ") + "\n\n\n@hpvm.graph\n"
              "def root(x: i64) -> i64:\n    return hpvm.node(pick, x=x).out[0]\n")
    _, module = load(tmp_path, source)
    assert run_both(module.root, 3) == [1, 1]
    assert run_both(module.root, -3) == [2, 2]


def test_a_leaf_that_may_fall_off_its_end_is_still_rejected(tmp_path: Path) -> None:
    path, module = load(tmp_path, """\
        import hpvm_py as hpvm
        from hpvm_py import i64

        @hpvm.leaf
        def pick(x: i64) -> i64:
            if x > 0:
                return 1
            x = 5

        @hpvm.graph
        def root(x: i64) -> i64:
            return hpvm.node(pick, x=x).out[0]
    """)
    with pytest.raises(FrontendError) as info:
        hpvm.compile(module.root, target="python")
    assert info.value.rule == "leaf-returns-outputs" and info.value.loc.file == path


# -- deeply nested expressions -------------------------------------------------------------------

DEEP = """\
import hpvm_py as hpvm
from hpvm_py import i64


@hpvm.leaf
def deep(x: i64) -> i64:
    return {expr}


@hpvm.graph
def root(x: i64) -> i64:
    return hpvm.node(deep, x=x).out[0]
"""


def test_an_expression_at_the_nesting_limit_runs_alike_on_both_targets(tmp_path: Path) -> None:
    _, module = load(tmp_path, DEEP.format(expr=" + ".join(["x"] * 128)))
    assert run_both(module.root, 3) == [3 * 128] * 2


@pytest.mark.parametrize("expr", [
    " + ".join(["x"] * 201),  # the python target's generated code: too many nested parentheses
    " + ".join(["x"] * 400),  # the cpu target's passes: RecursionError
    " + ".join(["x"] * 2000),  # the front end itself: RecursionError while the graph was traced
    "i64(" + " and ".join(["x > 0"] * 300) + ")",  # one BoolOp, lowered as a chain
    "i64(" + " < ".join(["x"] * 300) + ")",
    "max(" + ", ".join(["x"] * 300) + ")",
])
def test_a_too_deep_expression_is_a_located_error(tmp_path: Path, expr: str) -> None:
    path, module = load(tmp_path, DEEP.format(expr=expr))
    for target in ("python", "cpu"):
        with pytest.raises(HPVMError) as info:
            hpvm.compile(module.root, target=target)
        exc = info.value
        assert isinstance(exc, FrontendError) and not isinstance(exc, InternalError), exc
        assert exc.rule == "supported-python" and "128" in exc.message
        assert exc.loc.file == path and exc.loc.line == line_of(path, "return ") and exc.loc.col == 11
        check_caret(exc)


# -- deeply nested loops: the launch-time bounds proof gives up instead of running for hours ------

def test_deeply_nested_loops_launch_promptly(tmp_path: Path) -> None:
    depth = 14  # each level tripled the proof's work: this launch took hours on cpu
    loops = "".join("    " * (i + 1) + f"for k{i} in range(1):\n" for i in range(depth))
    _, module = load(tmp_path, f"""\
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i64


@hpvm.leaf
def nest(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
{loops}{"    " * (depth + 1)}a[i] = a[i] + 1.0


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(nest, grid=4, a=a, a_bytes=a_bytes)
""")

    def too_slow(*_):
        raise TimeoutError("the launch is still proving its bounds after 60 s")

    previous = signal.signal(signal.SIGALRM, too_slow)
    signal.alarm(60)
    try:
        for target in ("python", "cpu"):
            a = np.zeros(4, dtype=np.float32)
            with hpvm.runtime(target):
                hpvm.wait(hpvm.launch(module.root, a))
                hpvm.request_memory(a)
            assert a.tolist() == [1.0] * 4, (target, a)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


# -- hpvmc: files and folders that are not what it expects ---------------------------------------

VADD = """\
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[i] = a[i] + 1.0


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)
"""


def hpvmc(capsys, *args: str) -> tuple[int, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture()
def program(tmp_path: Path) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(VADD)
    return path


@pytest.mark.parametrize("make,expected", [
    (lambda d: (d / "dir.hpvm").mkdir() or d / "dir.hpvm", "a folder"),
    (lambda d: (d / "dir.py").mkdir() or d / "dir.py", "a folder"),
    (lambda d: (d / "bin.hpvm").write_bytes(b"\xff\xfe\x00module") and d / "bin.hpvm", "not UTF-8"),
])
def test_check_of_an_unreadable_program_is_a_usage_error(tmp_path: Path, capsys, make, expected) -> None:
    code, text = hpvmc(capsys, "check", str(make(tmp_path)))
    assert code == 2 and expected in text and "internal error" not in text, text


def test_an_output_folder_that_is_a_file_is_a_usage_error(tmp_path: Path, capsys, program: Path) -> None:
    blocker = tmp_path / "taken"
    blocker.write_text("")
    for args in (["compile", str(program), "-o", str(blocker)],
                 ["compile", str(program), "-o", str(blocker / "sub")],
                 ["run", str(program), "--graph", "root", "--target", "python", "--set", "a=4",
                  "--set", "c=4", "--set", "n=4", "-o", str(blocker)]):
        code, text = hpvmc(capsys, *args)
        assert code == 2 and "cannot create the folder" in text and "internal error" not in text, text
        assert "c: 4 x f32" not in text  # refused before the launch


def test_viz_makes_a_missing_folder_and_refuses_one_that_is_a_file(tmp_path: Path, capsys,
                                                                    program: Path) -> None:
    """As compile -o and run --trace do (docs/cli.md)."""
    out = tmp_path / "nowhere" / "g.dot"
    code, text = hpvmc(capsys, "viz", str(program), "-o", str(out))
    assert code == 0 and out.read_text().startswith("digraph"), text
    (tmp_path / "taken").write_text("")
    code, text = hpvmc(capsys, "viz", str(program), "-o", str(tmp_path / "taken" / "g.dot"))
    assert code == 2 and "cannot create the folder" in text and "internal error" not in text, text


@pytest.mark.parametrize("trace", [[1, 2], {"traceEvents": [{"cat": "node", "ph": "X", "args": 3}]},
                                   {"traceEvents": [{"cat": "node", "ph": "X", "dur": "long"}]}])
def test_viz_with_a_malformed_profile_says_so(tmp_path: Path, capsys, program: Path, trace) -> None:
    profile = tmp_path / "trace.json"
    profile.write_text(json.dumps(trace))
    code, text = hpvmc(capsys, "viz", str(program), "-o", str(tmp_path / "g.dot"), "--profile", str(profile))
    assert code == 1 and "not a Chrome-trace JSON file" in text and "internal error" not in text, text


def test_run_shows_the_message_of_sys_exit(tmp_path: Path, capsys) -> None:
    host = tmp_path / "host.py"
    host.write_text("import sys\nsys.exit('the input is too small')\n")
    code, text = hpvmc(capsys, "run", str(host))
    assert code == 1 and "the input is too small" in text, text


def test_a_launch_error_from_set_values_has_no_borrowed_location(capsys, program: Path) -> None:
    code, text = hpvmc(capsys, "run", str(program), "--graph", "root", "--target", "python",
                       "--set", "a=4", "--set", "c=4", "--set", "n=4", "--set", "a_bytes=999")
    assert code == 1 and "999 bytes" in text, text
    assert __file__ not in text and "runpy" not in text, text  # not hpvmc's caller's line
