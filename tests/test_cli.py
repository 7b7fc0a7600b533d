"""hpvmc: check, compile, run, viz; exit statuses; compiled output that runs without the source."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def hpvmc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hpvm_py.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


def test_check_reports_ok_for_a_valid_program() -> None:
    result = hpvmc("check", str(EXAMPLES / "sgemm.py"))
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout


def test_check_reports_a_rule_with_its_location(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(textwrap.dedent("""
        import hpvm_py as hpvm
        from hpvm_py import In, Ptr, f32, i64

        @hpvm.leaf
        def k(a: In[Ptr[f32]], a_bytes: i64):
            i = hpvm.instance_id(0)
            a[i] = 1.0

        @hpvm.graph
        def root(a: In[Ptr[f32]], a_bytes: i64, n: i64):
            hpvm.node(k, grid=n, a=a, a_bytes=a_bytes)
    """))
    result = hpvmc("check", str(bad))
    assert result.returncode == 1
    assert f"{bad}:8:" in result.stderr
    assert "[rule: pointer-direction]" in result.stderr
    assert "^" in result.stderr and "Traceback" not in result.stderr


def test_check_reports_a_syntax_error_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "broken.py"
    bad.write_text("import hpvm_py as hpvm\ndef f(:\n")
    result = hpvmc("check", str(bad))
    assert result.returncode == 1
    assert f"{bad}:2" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("args", [[], ["check"], ["compile", "x.py", "--emit", "bogus"],
                                  ["viz", str(EXAMPLES / "vadd.py")], ["nope"]])
def test_usage_errors_exit_2(args: list[str]) -> None:
    assert hpvmc(*args).returncode == 2


def test_missing_file_is_a_usage_error() -> None:
    result = hpvmc("check", "does_not_exist.py")
    assert result.returncode == 2 and "no such file" in result.stderr


@pytest.mark.parametrize("command", ["check", "compile", "run", "viz"])
def test_every_command_has_help(command: str) -> None:
    result = hpvmc(command, "--help")
    assert result.returncode == 0 and "usage:" in result.stdout


def test_compile_writes_ir_and_dot_and_loads_without_source(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLES / "saxpy.py", work / "saxpy.py")
    out = tmp_path / "out"
    result = hpvmc("compile", str(work / "saxpy.py"), "--emit", "ir,dot", "--target", "python", "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert (out / "root.hpvm").is_file() and (out / "root.dot").is_file()
    assert "digraph" in (out / "root.dot").read_text()
    shutil.rmtree(work)  # the leaves' Python source is gone
    program = tmp_path / "use.py"
    program.write_text(textwrap.dedent(f"""
        import numpy as np
        import hpvm_py as hpvm
        graph = hpvm.load({str(out)!r})
        x = np.arange(1000, dtype=np.float32)
        y = np.ones(1000, dtype=np.float32)
        with hpvm.runtime("python"):
            hpvm.wait(hpvm.launch(graph, x, x.nbytes, y, y.nbytes, 2.0, 1000))
        assert np.array_equal(y, 2 * x + 1), y[:5]
        print("loaded graph ok")
    """))
    result = subprocess.run([sys.executable, str(program)], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    assert "loaded graph ok" in result.stdout


def test_check_accepts_textual_ir(tmp_path: Path) -> None:
    out = tmp_path / "ir"
    assert hpvmc("compile", str(EXAMPLES / "reduction.py"), "--target", "python", "-o", str(out)).returncode == 0
    result = hpvmc("check", str(out / "root.hpvm"))
    assert result.returncode == 0, result.stderr


def test_check_reports_a_parse_error_in_textual_ir(tmp_path: Path) -> None:
    bad = tmp_path / "bad.hpvm"
    bad.write_text("module @root\ngraph @root() -> () {\n  node %x = \n}\n")
    result = hpvmc("check", str(bad))
    assert result.returncode == 1
    assert f"{bad}:" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("suffix", ["dot", "svg", "png"])
def test_viz_renders(tmp_path: Path, suffix: str) -> None:
    if suffix != "dot" and shutil.which("dot") is None:
        result = hpvmc("viz", str(EXAMPLES / "stencil.py"), "-o", str(tmp_path / f"g.{suffix}"))
        assert result.returncode == 1 and "graphviz" in result.stderr
        return
    target = tmp_path / f"g.{suffix}"
    result = hpvmc("viz", str(EXAMPLES / "edge_detection.py"), "-o", str(target))
    assert result.returncode == 0, result.stderr
    data = target.read_bytes()
    assert data.startswith({"dot": b"digraph", "svg": b"<?xml", "png": b"\x89PNG"}[suffix])


def test_viz_without_graphviz_names_the_package(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": str(tmp_path)}  # no `dot` on this PATH
    result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "viz", str(EXAMPLES / "vadd.py"), "-o",
                             str(tmp_path / "g.svg")], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 1
    assert "graphviz" in result.stderr.lower()


def test_run_executes_the_host_code_on_a_target(tmp_path: Path) -> None:
    result = hpvmc("run", str(EXAMPLES / "vadd.py"), "--target", "python", "--size", "1000")
    assert result.returncode == 0, result.stderr
    assert "vadd: 1000 elements OK" in result.stdout


def test_to_text_from_text_graph_behaves_like_the_original(rng) -> None:
    import saxpy

    text = hpvm.to_text(saxpy.root)
    graph = hpvm.from_text(text)
    assert hpvm.to_text(graph) == text
    x = rng.random(777, dtype=np.float32)
    y1 = rng.random(777, dtype=np.float32)
    y2 = y1.copy()
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(saxpy.root, x, x.nbytes, y1, y1.nbytes, 3.0, 777))
        hpvm.wait(hpvm.launch(graph, x, x.nbytes, y2, y2.nbytes, 3.0, 777))
    np.testing.assert_array_equal(y1, y2)


# -- hpvmc run: one graph from the command line; every option of every command does something ----

TWO_GRAPHS = textwrap.dedent('''
    import sys
    import hpvm_py as hpvm
    from hpvm_py import In, Out, Ptr, f32, i64


    @hpvm.leaf
    def affine(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32):
        i = hpvm.instance_id(0)
        y[i] = k * x[i] + 1.0


    @hpvm.leaf
    def negate(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
        i = hpvm.instance_id(0)
        y[i] = -x[i]


    @hpvm.graph
    def scaled(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, k: f32, n: i64):
        hpvm.node(affine, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes, k=k)


    @hpvm.graph
    def negated(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
        hpvm.node(negate, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)


    if __name__ == "__main__":
        print("host code", sys.argv[1:])
''')


@pytest.fixture
def two_graphs(tmp_path: Path) -> Path:
    path = tmp_path / "two_graphs.py"
    path.write_text(TWO_GRAPHS)
    return path


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_run_graph_launches_it_with_set_values(two_graphs: Path, tmp_path: Path, target: str,
                                               rng) -> None:
    x = rng.standard_normal(300).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = tmp_path / "results"
    result = hpvmc("run", str(two_graphs), "--graph", "scaled", "--target", target, "--set",
                   f"x={tmp_path / 'x.npy'}", "--set", "y=300", "--set", "k=2.5", "--set", "n=300",
                   "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert "host code" not in result.stdout  # the graph ran, not the program
    np.testing.assert_array_equal(np.load(out / "y.npy"), np.float32(2.5) * x + np.float32(1))
    assert not (out / "x.npy").exists()  # only what the graph writes


def test_run_graph_prints_a_summary_without_output_dir(two_graphs: Path) -> None:
    result = hpvmc("run", str(two_graphs), "--graph", "negated", "--set", "x=10", "--set", "y=10",
                   "--set", "n=10", "--target", "cpu")
    assert result.returncode == 0, result.stderr
    line = next(l for l in result.stdout.splitlines() if l.startswith("y:"))
    assert "10 x f32" in line and "sum -" in line  # inputs in [0, 1): every output is negative


def test_run_takes_a_textual_ir_file(two_graphs: Path, tmp_path: Path, rng) -> None:
    ir_dir = tmp_path / "ir"
    assert hpvmc("compile", str(two_graphs), "--graph", "scaled", "--target", "python", "-o",
                 str(ir_dir)).returncode == 0
    x = rng.random(64, dtype=np.float32)
    np.save(tmp_path / "x.npy", x)
    result = hpvmc("run", str(ir_dir / "scaled.hpvm"), "--target", "python", "--set",
                   f"x={tmp_path / 'x.npy'}", "--set", "y=64", "--set", "k=-1", "--set", "n=64", "-o",
                   str(tmp_path / "res"))
    assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "res" / "y.npy"), 1 - x)


@pytest.mark.parametrize("args,message", [
    (["--graph", "scaled", "--set", "x=4"], "y (out buffer of f32"),
    (["--graph", "scaled", "--set", "x=4", "--set", "y=4", "--set", "n=4", "--set", "k=two"],
     "expected a number of type f32"),
    (["--graph", "scaled", "--set", "z=1"], "no parameter z"),
    (["--graph", "scaled", "--set", "x"], "NAME=VALUE"),
    (["--graph", "scaled", "--set", "x=missing.npy"], "no such file"),
    (["--graph", "scaled", "--set", "x=4", "--set", "y=4", "--set", "k=1", "--set", "n=300"],
     None),  # n beyond the buffers: an error of the program (exit 1), located
    (["--graph", "nope"], "no @hpvm.graph named 'nope'"),
    (["--set", "x=4"], "name it with --graph"),
])
def test_run_graph_usage_errors(two_graphs: Path, args: list[str], message: str | None) -> None:
    result = hpvmc("run", str(two_graphs), "--target", "cpu", *args)
    assert result.returncode == (2 if message else 1), result.stderr
    assert "Traceback" not in result.stderr
    if message:
        assert message in result.stderr
    else:
        assert "two_graphs.py:" in result.stderr


def test_run_passes_other_arguments_to_the_program(two_graphs: Path) -> None:
    result = hpvmc("run", str(two_graphs), "--size", "3", "--target", "python", "-v", "--",
                   "--graph", "x")
    assert result.returncode == 0, result.stderr
    assert "host code ['--size', '3', '-v', '--graph', 'x']" in result.stdout


def test_check_graph_checks_only_that_graph(two_graphs: Path) -> None:
    both = hpvmc("check", str(two_graphs))
    assert both.returncode == 0 and "2 graph(s)" in both.stdout
    one = hpvmc("check", str(two_graphs), "--graph", "negated")
    assert one.returncode == 0 and "1 graph(s)" in one.stdout
    assert hpvmc("check", str(two_graphs), "--graph", "nope").returncode == 2


def test_compile_graph_target_emit_and_output(two_graphs: Path, tmp_path: Path) -> None:
    several = hpvmc("compile", str(two_graphs))
    assert several.returncode == 2 and "--graph" in several.stderr
    to_stdout = hpvmc("compile", str(two_graphs), "--graph", "negated", "--emit", "ir")
    assert to_stdout.returncode == 0 and "@negated" in to_stdout.stdout and "@scaled" not in to_stdout.stdout
    llvm = hpvmc("compile", str(two_graphs), "--graph", "scaled", "--emit", "llvm", "--target", "cpu",
                 "-o", str(tmp_path / "ll"))
    assert llvm.returncode == 0, llvm.stderr
    assert "define" in (tmp_path / "ll" / "affine.ll").read_text()
    mismatch = hpvmc("compile", str(two_graphs), "--graph", "scaled", "--emit", "llvm", "--target",
                     "python")
    assert mismatch.returncode == 2 and "--target cpu" in mismatch.stderr


def test_viz_graph_draws_the_chosen_graph(two_graphs: Path, tmp_path: Path) -> None:
    result = hpvmc("viz", str(two_graphs), "--graph", "negated", "-o", str(tmp_path / "g.dot"))
    assert result.returncode == 0, result.stderr
    text = (tmp_path / "g.dot").read_text()
    assert "negate" in text and "affine" not in text


def test_version() -> None:
    result = hpvmc("--version")
    assert result.returncode == 0 and result.stdout.strip() == f"hpvmc (hpvm-py) {hpvm.__version__}"
