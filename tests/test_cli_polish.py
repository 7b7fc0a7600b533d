"""hpvmc details (issue 24, item 5): --emit checked and resolved to a target before anything is
compiled, several emits on stdout under a header each, programs named like standard modules, and
`hpvmc viz`'s legend and scalar arrows, and `--variants` (the gpu target's other kernels)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hpvm_py.backends import registry
from hpvm_py.cli import EMITS, parse_emits
from hpvm_py.ir.dot import HIDE_SCALARS_ABOVE, count_arrows, module_to_dot

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def hpvmc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hpvm_py.cli", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env=env)


# a program that leaves a mark when it is imported: a command refused before loading leaves none
MARKING = textwrap.dedent('''
    from pathlib import Path
    import hpvm_py as hpvm
    from hpvm_py import In, Out, Ptr, f32, i64

    Path(__file__).with_suffix(".imported").touch()

    @hpvm.leaf
    def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
        i = hpvm.instance_id(0)
        y[i] = x[i] * 2.0

    @hpvm.graph
    def root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
        hpvm.node(scale, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)
''')


@pytest.fixture
def marking(tmp_path: Path) -> Path:
    path = tmp_path / "prog.py"
    path.write_text(MARKING)
    return path


def test_the_emit_table_is_the_backends() -> None:
    for kind, (suffix, target) in EMITS.items():
        if target is None:
            continue
        backend = registry.get(target)
        if backend is not None:  # importable here
            assert backend.emits.get(kind) == suffix, (kind, target)
            assert registry.emitter(kind) == target
    for target in registry.TARGETS:
        backend = registry.get(target)
        for kind, suffix in (backend.emits if backend is not None else {}).items():
            assert EMITS[kind] == (suffix, registry.emitter(kind))


def test_parse_emits_keeps_the_order_and_drops_repeats() -> None:
    assert parse_emits("dot, ir,dot") == ["dot", "ir"]


@pytest.mark.parametrize("emit", ["bogus", "ir,asm", ",", "IR"])
def test_a_wrong_emit_is_refused_before_the_program_loads(marking: Path, emit: str) -> None:
    result = hpvmc("compile", str(marking), "--emit", emit)
    assert result.returncode == 2
    assert "--emit" in result.stderr and "ir, dot, llvm, triton, ptx" in result.stderr
    assert "Traceback" not in result.stderr
    assert not marking.with_suffix(".imported").exists()


@pytest.mark.parametrize("emit,target,needed", [("triton", "cpu", "gpu"), ("ptx", "gpu", "nvptx"),
                                                ("llvm", "python", "cpu"), ("ir,triton", "nvptx", "gpu")])
def test_an_emit_at_odds_with_the_target_is_a_clear_error(marking: Path, emit: str, target: str,
                                                          needed: str) -> None:
    result = hpvmc("compile", str(marking), "--emit", emit, "--target", target)
    assert result.returncode == 2
    assert f"--target is {target}" in result.stderr and f"--target {needed}" in result.stderr
    assert not marking.with_suffix(".imported").exists()  # refused before anything compiled


def test_emits_of_two_targets_are_refused(marking: Path) -> None:
    result = hpvmc("compile", str(marking), "--emit", "llvm,ptx")
    assert result.returncode == 2 and "once per target" in result.stderr
    assert not marking.with_suffix(".imported").exists()


@pytest.mark.skipif(not registry.compilable("gpu"), reason="the gpu target does not compile here")
@pytest.mark.parametrize("explicit", [False, True])
def test_emit_triton_implies_the_gpu_target(marking: Path, tmp_path: Path, explicit: bool) -> None:
    extra = ["--target", "gpu"] if explicit else []
    result = hpvmc("compile", str(marking), "--emit", "triton", *extra, "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "for gpu" in result.stderr
    assert "@triton.jit" in (tmp_path / "out" / "scale.triton.py").read_text()


def test_several_emits_on_stdout_come_under_a_header_each(marking: Path) -> None:
    result = hpvmc("compile", str(marking), "--emit", "ir,dot,llvm")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    headers = [line for line in out.splitlines() if line.startswith("==> ")]
    assert headers == ["==> root.hpvm (ir) <==", "==> root.dot (dot) <==", "==> scale.ll (llvm) <=="]
    ir, dot, llvm = (out.split(h + "\n", 1)[1] for h in headers)
    assert ir.startswith("; hpvm-py textual IR") and dot.startswith("digraph") and "define" in llvm
    assert "\n\n==> root.dot (dot) <==\n" in out  # a blank line before each later header


def test_one_emit_on_stdout_has_no_header(marking: Path) -> None:
    result = hpvmc("compile", str(marking), "--emit", "ir")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("; hpvm-py textual IR") and "==>" not in result.stdout


# ---------------------------------------------------------------------------------------------
# programs named like standard modules

NAMESAKE = textwrap.dedent('''
    import {name}
    from _helper import SCALE
    import hpvm_py as hpvm
    from hpvm_py import In, Out, Ptr, f32, i64

    assert hasattr({name}, "{attr}"), "the standard module, not this program"

    @hpvm.leaf
    def scale(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64):
        i = hpvm.instance_id(0)
        y[i] = x[i] * SCALE

    @hpvm.graph
    def root(x: In[Ptr[f32]], x_bytes: i64, y: Out[Ptr[f32]], y_bytes: i64, n: i64):
        hpvm.node(scale, grid=n, x=x, x_bytes=x_bytes, y=y, y_bytes=y_bytes)

    if __name__ == "__main__":
        import numpy as np
        x = np.arange(8, dtype=np.float32)
        y = np.zeros_like(x)
        with hpvm.runtime("cpu"):
            hpvm.wait(hpvm.launch(root, x, x.nbytes, y, y.nbytes, 8))
            hpvm.request_memory(y)
        assert (y == x * SCALE).all()
        print("namesake ok")
''')


# string and types are imported before any program; colorsys only by the program itself
@pytest.mark.parametrize("name,attr", [("string", "ascii_letters"), ("types", "SimpleNamespace"),
                                       ("colorsys", "rgb_to_hsv")])
def test_a_program_named_like_a_standard_module_loads(tmp_path: Path, name: str, attr: str) -> None:
    program = tmp_path / f"{name}.py"
    program.write_text(NAMESAKE.format(name=name, attr=attr))
    (tmp_path / "_helper.py").write_text("SCALE = 3.0\n")  # a module next to the program
    check = hpvmc("check", str(program))
    assert check.returncode == 0, check.stderr
    # from the program's folder, as the `hpvmc` script runs (`python -m` would put the folder first
    # on sys.path before hpvm_py loads: Python's own rule, which hpvmc cannot change)
    shim = tmp_path / "bin" / "hpvmc.py"
    shim.parent.mkdir()
    shim.write_text("import sys\nfrom hpvm_py.cli import main\nsys.exit(main())\n")
    here = subprocess.run([sys.executable, str(shim), "check", program.name], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert here.returncode == 0, here.stderr
    compiled = hpvmc("compile", str(program), "--emit", "ir,llvm", "-o", str(tmp_path / "out"))
    assert compiled.returncode == 0, compiled.stderr
    assert (tmp_path / "out" / "root.hpvm").is_file()
    viz = hpvmc("viz", str(program), "-o", str(tmp_path / "g.dot"))
    assert viz.returncode == 0, viz.stderr
    launched = hpvmc("run", str(program), "--graph", "root", "--set", "x=4", "--set", "y=4",
                     "--set", "n=4", "--target", "cpu")
    assert launched.returncode == 0, launched.stderr
    ran = hpvmc("run", str(program), "--target", "cpu")
    assert ran.returncode == 0, ran.stderr
    assert "namesake ok" in ran.stdout


# ---------------------------------------------------------------------------------------------
# hpvmc viz


def _arrows(text: str) -> int:
    return sum(1 for line in text.splitlines() if "->" in line and "legend/" not in line)


def test_viz_draws_a_legend_of_what_the_picture_holds(tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    assert hpvmc("viz", str(EXAMPLES / "edge_detection.py"), "-o", str(out)).returncode == 0
    text = out.read_text()
    assert "cluster_legend" in text and 'label="legend"' in text
    for shown in ("leaf node, replicated", "all-to-all edge", "streaming", "bind: a parent's input"):
        assert shown in text, shown
    assert "library node" not in text  # edge detection has no collective
    assert hpvmc("viz", str(EXAMPLES / "edge_detection.py"), "--no-legend", "-o", str(out)).returncode == 0
    assert "legend" not in out.read_text()


def test_viz_hides_scalar_and_size_arrows_of_a_large_graph_by_default(tmp_path: Path) -> None:
    out = tmp_path / "g.dot"
    program = str(EXAMPLES / "edge_detection.py")
    counts = {}
    for flag in ("", "--hide-scalars", "--show-scalars"):
        result = hpvmc("viz", program, *([flag] if flag else []), "-o", str(out))
        assert result.returncode == 0, result.stderr
        counts[flag] = (_arrows(out.read_text()), "scalar and size arrows hidden" in out.read_text())
    shown, hidden = counts["--show-scalars"][0], counts["--hide-scalars"][0]
    assert shown > HIDE_SCALARS_ABOVE and hidden < shown - 20  # ~40 arrows become a few
    assert counts[""] == counts["--hide-scalars"] and counts["--hide-scalars"][1]
    assert not counts["--show-scalars"][1]
    text = out.read_text()  # --show-scalars: the sizes and image dimensions are there
    assert '"pipeline/in":p15 -> "pipeline/gaussian_smoothing"' in text
    conflict = hpvmc("viz", program, "--hide-scalars", "--show-scalars", "-o", str(out))
    assert conflict.returncode == 2 and "not allowed" in conflict.stderr


def test_viz_shows_every_arrow_of_a_small_graph_by_default(tmp_path: Path) -> None:
    import vadd

    module = vadd.root.module()
    assert count_arrows(module) <= HIDE_SCALARS_ABOVE
    assert module_to_dot(module) == module_to_dot(module, hide_scalars=False)
    assert _arrows(module_to_dot(module)) > _arrows(module_to_dot(module, hide_scalars=True))


def test_hidden_constants_move_into_the_node_label() -> None:
    from programs.const_inputs import constants_root

    module = constants_root.module()
    shown = module_to_dot(module, hide_scalars=False)
    hidden = module_to_dot(module, hide_scalars=True)
    assert 'label="2.5"' in shown and "k = 2.5" not in shown
    assert "k = 2.5" in hidden and "small = -128" in hidden and "neg = true" in hidden
    assert "const0" not in hidden


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed")
@pytest.mark.parametrize("flag", ["--hide-scalars", "--show-scalars"])
def test_viz_with_a_legend_renders(tmp_path: Path, flag: str) -> None:
    out = tmp_path / "g.svg"
    result = hpvmc("viz", str(EXAMPLES / "edge_detection.py"), flag, "-o", str(out))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes().startswith(b"<?xml") and b"legend" in out.read_bytes()


def test_variants_writes_the_kernels_a_launch_may_run_instead(tmp_path: Path) -> None:
    """`--emit triton --variants`: the suite's stencil has every variant, each a Python file that
    says when it runs; the quads variant alone splits centres into quads. A leaf without a trailing
    guard on its coordinates (saxpy) has no rows or quads kernel."""
    result = hpvmc("compile", str(EXAMPLES / "hpvm_suite" / "stencil.py"), "--emit", "triton",
                   "--variants", "-o", str(tmp_path))
    assert result.returncode == 0, result.stderr
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == sorted(f"naive_kernel{v}.triton.py" for v in
                             ("", ".checked", ".fixed", ".literal", ".quads", ".rows"))
    texts = {p.name: p.read_text() for p in tmp_path.iterdir()}
    for name, text in texts.items():
        compile(text, name, "exec")  # each is a module Triton can import
        if name != "naive_kernel.triton.py":
            variant = name.split(".")[1]
            assert text.startswith(f"# naive_kernel, variant {variant!r}: "), text[:120]
    assert [n for n, text in texts.items() if "_quads(" in text] == ["naive_kernel.quads.triton.py"]
    assert "E0_0: tl.constexpr" in texts["naive_kernel.fixed.triton.py"]
    assert "E0_0: tl.constexpr" not in texts["naive_kernel.triton.py"]
    saxpy = hpvmc("compile", str(EXAMPLES / "saxpy.py"), "--emit", "triton", "--variants")
    assert saxpy.returncode == 0, saxpy.stderr
    headers = [line for line in saxpy.stdout.splitlines() if line.startswith("==> ")]
    assert headers and not any(".rows." in h or ".quads." in h for h in headers), headers


def test_variants_without_a_leaf_kind_is_refused(marking: Path) -> None:
    result = hpvmc("compile", str(marking), "--emit", "ir", "--variants")
    assert result.returncode == 2 and "--variants" in result.stderr and "--emit triton" in result.stderr
    assert not marking.with_suffix(".imported").exists()
