"""hpvmc and hpvm.load under attack: a graph compiled with `hpvmc compile -o DIR` and loaded with
`hpvm.load(DIR)` returns what the Python graph returns (a `tuple[T]` root included); bad `--set`
values and damaged folders are named errors, never internal ones; the DOT text draws any name."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import child_pythonpath
from hpvm_py import cli
from hpvm_py.errors import InternalError, LaunchError, ParseError
from hpvm_py.ir.dot import module_to_dot

ROOT = Path(__file__).resolve().parent.parent
SAXPY = ROOT / "examples" / "saxpy.py"

PROGRAM = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import In, Ptr, f32, i64

    @hpvm.leaf
    def total(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> f32:
        s = f32(0.0)
        for i in range(n):
            s += x[i] * x[i]
        return s

    @hpvm.graph
    def root(x: In[Ptr[f32]], x_bytes: i64, n: i64) -> tuple[f32]:
        a = hpvm.node(total, x=x, x_bytes=x_bytes, n=n)
        return (a.out[0],)
''')


def hpvmc(*args: str) -> tuple[int, str]:
    """hpvmc in this process: (exit status, what it printed to stderr)."""
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = cli.main(list(args))
    return code, err.getvalue()


def launch(root: Any, target: str, args: list[Any]) -> tuple[Any, list[Any]]:
    """The root's outputs and its (copied) arguments after one launch on `target`."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with hpvm.runtime(target):
        out = hpvm.wait(hpvm.launch(root, *copies))
    return out, copies


# -- compile -o, then hpvm.load: the same results ----------------------------------------------


def test_a_tuple_of_one_root_comes_back_as_a_tuple_after_load(tmp_path: Path) -> None:
    """Before: the IR wrote `-> tuple[f32]` and `-> f32` alike as `-> (f32)`, so the loaded
    graph returned the bare value where the Python graph returns a 1-tuple."""
    program = tmp_path / "tuple_one.py"
    program.write_text(PROGRAM, encoding="utf-8")
    assert hpvmc("compile", str(program), "-o", str(tmp_path / "out"))[0] == 0
    assert "-> (f32,)" in (tmp_path / "out" / "root.hpvm").read_text(encoding="utf-8")
    loaded = hpvm.load(tmp_path / "out")
    python_root = cli._load(str(program), "root", need_one=True)[1][0][1]
    x = np.random.default_rng(7).random(13, dtype=np.float32)
    for target in ("python", "cpu"):
        want, _ = launch(python_root, target, [x, x.nbytes, 13])
        got, _ = launch(loaded, target, [x, x.nbytes, 13])
        assert type(want) is tuple and type(got) is tuple and len(got) == 1, (want, got)
        assert np.float32(got[0]).tobytes() == np.float32(want[0]).tobytes()
    text = hpvm.to_text(loaded)
    assert hpvm.to_text(hpvm.from_text(text)) == text  # print -> parse -> print, comma kept


def test_a_leaf_written_as_a_tuple_of_one_is_refused_at_its_line(tmp_path: Path) -> None:
    program = tmp_path / "tuple_leaf.py"
    program.write_text(PROGRAM, encoding="utf-8")
    assert hpvmc("compile", str(program), "-o", str(tmp_path / "out"))[0] == 0
    text = (tmp_path / "out" / "root.hpvm").read_text(encoding="utf-8")
    bad = text.replace("-> (f32) target", "-> (f32,) target")
    with pytest.raises(ParseError) as info:
        hpvm.from_text(bad)
    line = next(i for i, ln in enumerate(bad.splitlines(), 1) if ln.startswith("leaf @total"))
    assert f":{line}:" in str(info.value) and "(T,)" in str(info.value)


def test_saxpy_compiled_and_loaded_matches_the_python_graph_bit_for_bit(tmp_path: Path) -> None:
    assert hpvmc("compile", str(SAXPY), "-o", str(tmp_path / "out"))[0] == 0
    loaded = hpvm.load(tmp_path / "out")
    python_root = cli._load(str(SAXPY), "root", need_one=True)[1][0][1]
    rng = np.random.default_rng(20261124)
    n = 1000 + int(rng.integers(0, 100))
    x, y = rng.random(n, dtype=np.float32), rng.random(n, dtype=np.float32)
    for target in ("python", "cpu"):
        _, want = launch(python_root, target, [x, x.nbytes, y, y.nbytes, np.float32(2.5), n])
        _, got = launch(loaded, target, [x, x.nbytes, y, y.nbytes, np.float32(2.5), n])
        assert got[2].tobytes() == want[2].tobytes()


def test_compile_output_does_not_depend_on_the_hash_seed(tmp_path: Path) -> None:
    outputs = []
    for seed in ("0", "4242"):
        out = tmp_path / f"seed{seed}"
        env = {**os.environ, "PYTHONPATH": child_pythonpath(ROOT), "PYTHONHASHSEED": seed}
        result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "compile", "examples/sgemm.py",
                                 "--emit", "ir,dot,llvm", "-o", str(out)], cwd=ROOT, env=env,
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
        outputs.append({p.name: p.read_bytes() for p in sorted(out.iterdir())})
    assert outputs[0] == outputs[1]


# -- hpvmc run --set: bad values are usage errors ----------------------------------------------


@pytest.fixture(scope="module")
def saxpy_ir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("saxpy")
    assert hpvmc("compile", str(SAXPY), "--emit", "ir", "-o", str(out))[0] == 0
    return out / "root.hpvm"


def _write_npy(path: Path, kind: str) -> None:
    if kind == "strings":
        np.save(path, np.array(["ab", "cd"]))
    elif kind == "complex":  # before: the imaginary parts silently dropped
        np.save(path, np.ones(4, np.complex64))
    elif kind == "records":  # before: silently converted
        np.save(path, np.zeros(3, dtype=[("a", "f4")]))
    elif kind == "objects":
        np.save(path, np.array([1, "a", None], dtype=object))
    elif kind == "garbage":
        path.write_bytes(b"not a numpy file")
    elif kind == "folder":
        path.mkdir()


@pytest.mark.parametrize("kind", ["strings", "complex", "records", "objects", "garbage", "folder"])
def test_a_npy_that_holds_no_numbers_is_a_usage_error(saxpy_ir: Path, tmp_path: Path, kind: str) -> None:
    npy = tmp_path / f"{kind}.npy"
    _write_npy(npy, kind)
    code, err = hpvmc("run", str(saxpy_ir), "--set", f"x={npy}", "--set", "y=4", "--set", "alpha=2",
                      "--set", "n=1")
    assert code == 2, err
    assert f"--set x={npy}" in err and "internal error" not in err


@pytest.mark.parametrize("count", ["99999999999999999999", "10000000000000000"])
def test_a_count_too_large_to_allocate_is_a_usage_error(saxpy_ir: Path, count: str) -> None:
    """Before: NumPy's ValueError or MemoryError, reported as an internal error."""
    code, err = hpvmc("run", str(saxpy_ir), "--set", "x=4", "--set", f"y={count}", "--set", "alpha=2",
                      "--set", "n=1")
    assert code == 2, err
    assert f"--set y={count}: cannot allocate" in err and "internal error" not in err


# -- hpvm.load of damaged folders --------------------------------------------------------------


@pytest.mark.parametrize("setting", ["x=\u0664", "x=1_0", "x=+4", "n=\u0663",
                                     "alpha=\u0662.5", "n=\uff11"])
def test_numbers_in_set_are_ascii(saxpy_ir: Path, setting: str) -> None:
    """int() and float() read other scripts' digits (and `1_0`): --set takes ASCII numbers."""
    given = dict(pair.split("=") for pair in ("x=4", "y=4", "alpha=2", "n=1"))
    given.update([setting.split("=")])
    args = [arg for name, value in given.items() for arg in ("--set", f"{name}={value}")]
    code, err = hpvmc("run", str(saxpy_ir), *args)
    assert code == 2 and f"--set {setting}:" in err, err


def test_scalars_in_set_take_hex_and_floats_take_exponents(saxpy_ir: Path) -> None:
    code, err = hpvmc("run", str(saxpy_ir), "--set", "x=4", "--set", "y=4", "--set", "alpha=2e0",
                      "--set", "n=0x4")
    assert code == 0, err


def _compiled(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    assert hpvmc("compile", str(SAXPY), "--emit", "ir", "-o", str(out))[0] == 0
    return out


def test_load_of_a_file_that_is_not_utf8_names_it(tmp_path: Path) -> None:
    out = _compiled(tmp_path)
    (out / "root.hpvm").write_bytes(b"\xff\xfe; hpvm-py textual IR\n")
    with pytest.raises(LaunchError) as info:
        hpvm.load(out)
    assert not isinstance(info.value, InternalError)
    assert "root.hpvm is not a textual .hpvm file (byte 0" in str(info.value)


def test_load_leaves_out_a_folder_named_like_a_graph(tmp_path: Path) -> None:
    out = _compiled(tmp_path)
    (out / "root.hpvm").unlink()
    (out / "root.hpvm").mkdir()
    with pytest.raises(LaunchError) as info:
        hpvm.load(out)
    assert "has no .hpvm file" in str(info.value)
    # a folder beside a real file: the file is the one graph there (before: IsADirectoryError)
    assert hpvmc("compile", str(SAXPY), "--emit", "ir", "-o", str(tmp_path / "b"))[0] == 0
    shutil.copy(tmp_path / "b" / "root.hpvm", out / "main.hpvm")
    assert hpvm.load(out).module().root_func.name.startswith("root")  # (re-imports: root_N)


def test_load_of_the_hpvm_file_itself_says_to_give_its_folder(tmp_path: Path) -> None:
    out = _compiled(tmp_path)
    with pytest.raises(LaunchError) as info:
        hpvm.load(out / "root.hpvm")
    assert "is a file" in str(info.value) and str(out) in str(info.value)


# -- DOT with odd names ------------------------------------------------------------------------

ODD_NAMES = ["größe", "a{b}|<c>", 'q"uote', "back\\", "a\\nb", "日本 語"]


def _renamed_saxpy(text: str, name: str) -> Any:
    """saxpy's IR with its leaf, node and first parameter called `name`."""
    quoted = json.dumps(name, ensure_ascii=False)
    # (a program imported again gets fresh names, saxpy_2: a process that compiles it once not)
    text = re.sub(r"([@%])saxpy(_\d+)?\b", lambda m: m.group(1) + quoted, text)
    text = re.sub(r"%x\b", lambda _: "%" + quoted, text)
    return hpvm.from_text(text)


@pytest.mark.parametrize("name", ODD_NAMES)
def test_dot_draws_odd_names_as_they_are(tmp_path: Path, name: str) -> None:
    """Before: non-ASCII names were drawn as `\\u00f6` escapes, and a record field's escapes
    (`\\{`) were doubled, which Graphviz refuses ("bad label format")."""
    graph = _renamed_saxpy((_compiled(tmp_path) / "root.hpvm").read_text(encoding="utf-8"), name)
    text = module_to_dot(graph.module(), hide_scalars=False)
    assert "\\u00" not in text and "\\u65" not in text
    record = next(line for line in text.splitlines() if '/in" [shape=record' in line)
    field = "".join("\\" + c if c in "{}|<>\\" else c for c in name).replace('"', '\\"')
    assert f"<p0> {field}|" in record, record
    if shutil.which("dot") is None:
        return
    result = subprocess.run(["dot", "-Tsvg"], input=text.encode(), capture_output=True, timeout=60)
    assert result.returncode == 0 and not result.stderr, result.stderr.decode()
    import html

    drawn = [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", result.stdout.decode())]
    assert name in drawn, drawn


LEAVES_ONLY = '''
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def scale(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = {value} * a[i]
'''


def test_check_takes_a_file_of_leaves_without_a_graph(tmp_path: Path) -> None:
    """docs/cli.md: check verifies every leaf, those no graph uses included; a file of leaves
    alone (a library of kernels) was refused as defining no graph, its leaves never checked."""
    good, bad, empty = tmp_path / "good.py", tmp_path / "bad.py", tmp_path / "empty.py"
    good.write_text(LEAVES_ONLY.format(value="2.0"))
    bad.write_text(LEAVES_ONLY.format(value="undefined_name"))
    empty.write_text("x = 1\n")
    assert hpvmc("check", str(good)) == (0, "")
    code, err = hpvmc("check", str(bad))
    assert code == 1 and f"{bad}:9:12:" in err and "undefined_name" in err
    code, err = hpvmc("check", str(empty))
    assert code == 2 and "defines no @hpvm.graph and no @hpvm.leaf" in err
    # the commands that need a graph still say so
    code, err = hpvmc("viz", str(good), "-o", str(tmp_path / "g.dot"))
    assert code == 2 and "defines no @hpvm.graph" in err
