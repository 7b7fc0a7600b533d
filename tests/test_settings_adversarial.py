"""Settings and hpvmc switches under attack: a bad value of an HPVM_* variable is an hpvm_py.errors
exception naming the variable (never an internal error), docs/settings.md is the table
settings.py declares, and hpvmc's commands end in their documented exit statuses."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64
from hpvm_py.backends import registry
from hpvm_py.backends.cpu import threads
from hpvm_py.backends.nvptx import toolchain
from hpvm_py.device import cuda_available
from hpvm_py.distributed import chooser, ranks
from hpvm_py.errors import CompileError, DistributedError, HPVMError, HPVMWarning, LaunchError
from hpvm_py.support import settings, stats
from hpvm_py.support.loc import UNKNOWN

ROOT = Path(__file__).resolve().parent.parent


def hpvmc(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "hpvm_py.cli", *args], capture_output=True,
                          text=True, timeout=300, cwd=cwd, env=env)


# -- hpvmc: a program that exits while it is imported ------------------------------------------


@pytest.mark.parametrize("body", ["import sys\nsys.exit(0)\n",
                                  "import argparse\nargparse.ArgumentParser().parse_args()\n"])
@pytest.mark.parametrize("command", [["check"], ["compile"], ["viz", "-o", "g.dot"],
                                     ["run", "--graph", "root"]])
def test_a_program_that_exits_at_import_is_an_error_at_its_line(tmp_path: Path, body: str,
                                                                 command: list[str]) -> None:
    """sys.exit() at module level (or argparse, which reads hpvmc's own arguments) ended hpvmc with
    the program's status: `hpvmc check` exited 0, printing nothing, a program it never checked."""
    program = tmp_path / "prog.py"
    program.write_text(body)
    done = hpvmc(command[0], str(program), *command[1:], cwd=tmp_path)
    assert done.returncode == 1, (done.returncode, done.stderr)
    assert f"{program}:2:1: error: the program exited" in done.stderr, done.stderr
    assert "if __name__" in done.stderr
    assert "internal error" not in done.stderr and "ok" not in done.stdout


# -- HPVM_PTXAS: a program that is no ptxas ------------------------------------------------------


@pytest.mark.parametrize("script", ["#!/bin/sh\nexit 0\n", None])
def test_a_ptxas_that_writes_no_cubin_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        script: str | None) -> None:
    """HPVM_PTXAS=/bin/true (a program that succeeds without writing the cubin) ended in an
    internal FileNotFoundError; neither that nor a path that cannot run named the variable."""
    fake = tmp_path / "ptxas"
    if script is not None:
        fake.write_text(script)
        fake.chmod(0o755)
    monkeypatch.setenv("HPVM_PTXAS", str(fake))
    with pytest.raises(CompileError, match="HPVM_PTXAS") as caught:
        toolchain.assemble(".version 8.0\n.target sm_90\n.address_size 64\n", "sm_90", "k", UNKNOWN)
    assert caught.value.loc is UNKNOWN


# -- "bytes" settings: a number too large for any size --------------------------------------------


@pytest.mark.parametrize("value", ["99999999999999T", "8388608T", str(1 << 63)])
def test_a_heap_size_past_any_file_size_is_refused_by_name(tmp_path: Path, value: str) -> None:
    """HPVM_HEAP_BYTES=99999999999999T passed the setting's check and failed in the heap segment's
    reservation as an internal OverflowError."""
    code = "import hpvm_py.distributed as dist\ndist.init(device='cpu')\n"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPVM_DIST_LAUNCHER": "single",
           "HPVM_HEAP_BYTES": value, "HPVM_HEAP_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=env)
    assert done.returncode == 1
    assert f"DistributedError: <string>:2:1: error: HPVM_HEAP_BYTES={value!r} must be a number of " \
           "bytes, at most 2**63 - 1" in done.stderr, done.stderr
    assert not list(tmp_path.iterdir())  # no segment left behind


# -- HPVM_DIST_DEVICE: named in its errors ---------------------------------------------------------


@pytest.mark.parametrize("value", ["GPU", "tpu"] + ([] if cuda_available() else ["cuda"]))
def test_a_bad_dist_device_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The errors said `hpvm.distributed.init(): device='GPU'` to a program whose init() named
    no device: the value came from HPVM_DIST_DEVICE, which they did not name."""
    monkeypatch.setenv("HPVM_DIST_DEVICE", value)
    with pytest.raises(DistributedError, match=f"HPVM_DIST_DEVICE={value!r}"):
        ranks.device_kind(None)
    with pytest.raises(DistributedError, match=f"device={value!r}"):  # the argument, as it was
        ranks.device_kind(value)


# -- docs/settings.md is the table settings.py declares -----------------------------------------


def test_each_row_of_the_settings_doc_is_the_declared_setting() -> None:
    """The rows of HPVM_COMM_PUSH_BYTES and HPVM_COMM_ONE_SHOT_PUSH_BYTES differed from what
    `hpvmc config` prints, the first with defaults the chooser does not have (4 MiB on 2 GPUs, 8
    MiB on 4: it has 1 and 4). Every row: the variable's kind, default and help, word for word."""
    text = (ROOT / "docs" / "settings.md").read_text()
    rows = dict(re.findall(r"^\| `(HPVMC?_\w+)` \| (.*) \|$", text, re.MULTILINE))
    expected = {s.name: f"{s.kind} | {f'`{s.default}`' if s.default else '-'} | {s.help}"
                for s in settings.SETTINGS}
    assert rows == expected
    assert chooser.push_threshold(2) == 1 << 20 and chooser.push_threshold(4) == 4 << 20
    assert chooser.push_threshold(4, elem_bytes=4) == 1 << 20
    assert chooser.one_shot_push_threshold(2) == chooser.one_shot_push_threshold(4) == 512 << 10


# -- hpvmc viz -o in a folder that does not exist yet ---------------------------------------------

VIZ_PROGRAM = textwrap.dedent('''
    import hpvm_py as hpvm
    from hpvm_py import In, Out, Ptr, f32, i64

    @hpvm.leaf
    def double(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64):
        i = hpvm.instance_id(0)
        b[i] = a[i] * 2.0

    @hpvm.graph
    def root(a: In[Ptr[f32]], a_bytes: i64, b: Out[Ptr[f32]], b_bytes: i64, n: i64):
        hpvm.node(double, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes)
''')


@pytest.mark.parametrize("suffix", ["dot", pytest.param("svg", marks=pytest.mark.skipif(
    shutil.which("dot") is None, reason="needs Graphviz"))])
def test_viz_makes_the_folder_of_its_output(tmp_path: Path, suffix: str) -> None:
    """-o in a missing folder: a .dot was a usage error (exit 2), a .svg Graphviz's failure (exit
    1); compile -o and run --trace make their folders."""
    program = tmp_path / "prog.py"
    program.write_text(VIZ_PROGRAM)
    out = tmp_path / "pictures" / "new" / f"root.{suffix}"
    done = hpvmc("viz", str(program), "-o", str(out))
    assert done.returncode == 0, done.stderr
    assert out.stat().st_size > 0
    blocked = tmp_path / "a_file"
    blocked.write_text("")
    done = hpvmc("viz", str(program), "-o", str(blocked / f"root.{suffix}"))
    assert done.returncode == 2 and "cannot create the folder" in done.stderr, done.stderr


# -- HPVM_CPU_SPINS: a number the pool's code cannot hold ----------------------------------------


@pytest.mark.parametrize("value", [str(1 << 63), str(1 << 64), "9" * 30])
def test_a_spin_count_past_an_i64_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """The count becomes an i64 constant of the pool's generated code, which LLVM wraps:
    HPVM_CPU_SPINS=18446744073709551616 (asking to spin for ever) made workers that never spin."""
    monkeypatch.setenv("HPVM_CPU_SPINS", value)
    with pytest.raises(LaunchError, match=f"HPVM_CPU_SPINS={value!r}"):
        threads.idle_spins(4)
    monkeypatch.setenv("HPVM_CPU_SPINS", str((1 << 63) - 1))
    assert threads.idle_spins(4) == (1 << 63) - 1


# -- HPVM_CPU_NONTEMPORAL changed between launches ------------------------------------------------


@hpvm.leaf
def vadd(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    c[i] = a[i] + b[i]


@hpvm.graph
def vadd_graph(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
               c_bytes: i64, n: i64):
    hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes)


@pytest.mark.skipif(not registry.available("cpu"), reason="needs the cpu target")
def test_a_store_setting_changed_between_launches_is_seen_by_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A replay (the same buffers again) ran the store driver its recording chose: after
    HPVM_CPU_NONTEMPORAL=off, =on changed nothing for the graph's next launches, and a bad value
    went unnoticed; the normal path reads the variable at each launch."""
    rng = np.random.default_rng()
    n = 1 << 14
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = np.zeros(n, np.float32)

    def launch() -> dict[str, int]:
        before = stats.snapshot()
        c[:] = 0
        hpvm.wait(hpvm.launch(vadd_graph, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
        np.testing.assert_array_equal(c, a + b)
        after = stats.snapshot()
        return {k: after.get(k, 0) - before.get(k, 0)
                for k in ("replayed_launches", "cpu_nontemporal_launches")}

    with hpvm.runtime("cpu"):
        monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "off")
        launch()
        assert launch() == {"replayed_launches": 1, "cpu_nontemporal_launches": 0}
        monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "on")
        assert launch() == {"replayed_launches": 0, "cpu_nontemporal_launches": 1}
        assert launch()["replayed_launches"] == 1  # recorded again, under the new value
        monkeypatch.setenv("HPVM_CPU_NONTEMPORAL", "bogus")
        with pytest.raises(LaunchError, match="HPVM_CPU_NONTEMPORAL='bogus'"):
            launch()


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="needs a CUDA GPU (Triton's interpreter records no launches; runs on the GPU machines)")
def test_a_launcher_setting_changed_between_launches_is_seen_by_the_next(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The same for HPVM_TRITON_LAUNCHER: a recording's gpu launches hold the launcher chosen
    when it was made, so a changed value must send the next launch down the normal path."""
    rng = np.random.default_rng()
    n = 256
    a, b = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    c = np.zeros(n, np.float32)

    def replayed() -> int:
        before = stats.snapshot().get("replayed_launches", 0)
        c[:] = 0
        hpvm.wait(hpvm.launch(vadd_graph, a, a.nbytes, b, b.nbytes, c, c.nbytes, n))
        hpvm.request_memory(c)
        np.testing.assert_array_equal(c, a + b)
        return stats.snapshot().get("replayed_launches", 0) - before

    with hpvm.runtime("gpu"):
        for buf in (a, b, c):  # (a launch on untracked host arrays is not recorded on a GPU)
            hpvm.track_memory(buf)
        monkeypatch.setenv("HPVM_TRITON_LAUNCHER", "own")
        replayed()
        assert replayed() == 1
        monkeypatch.setenv("HPVM_TRITON_LAUNCHER", "triton")
        assert replayed() == 0
        assert replayed() == 1  # recorded again, under the new value
        monkeypatch.setenv("HPVM_TRITON_LAUNCHER", "bogus")
        with pytest.raises(LaunchError, match="HPVM_TRITON_LAUNCHER='bogus'"):
            replayed()


# -- HPVM_PTXAS changed between compiles ---------------------------------------------------------

FAKE_PTXAS = """#!{python}
import sys
if sys.argv[1] == "--version":
    print("fake ptxas {tag}")
    sys.exit(0)
# a CUDA ELF image as far as the cache's check reads (e_machine 190), tagged with its maker
open(sys.argv[sys.argv.index("-o") + 1], "wb").write(b"\\x7fELF" + bytes(14) + b"\\xbe\\x00" + b"{tag}")
"""


@hpvm.graph
def vadd_small(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: Out[Ptr[f32]],
               c_bytes: i64):
    hpvm.node(vadd, grid=(64,), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes)


@pytest.mark.skipif(not registry.compilable("nvptx"), reason="the nvptx target cannot compile here")
def test_a_ptxas_set_between_compiles_assembles_the_next_cubin(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """The cubin's disk cache key held the version of the first ptxas the process ran (read once):
    after HPVM_PTXAS named another, a compile got the first one's cubin from the disk cache and
    the ptxas asked for never ran."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("HPVM_NO_CACHE", raising=False)
    for tag in ("A", "B"):
        fake = tmp_path / f"ptxas-{tag}"
        fake.write_text(FAKE_PTXAS.format(python=sys.executable, tag=tag))
        fake.chmod(0o755)
        monkeypatch.setenv("HPVM_PTXAS", str(fake))
        vadd_small.compiled_for.clear()  # a compile of its own (the graph keeps what it compiled)
        kernel, = [k for _, _, k in hpvm.compile(vadd_small, target="nvptx").leaf_kernels()]
        assert kernel.cubin.endswith(tag.encode())


# -- hpvmc cache on a directory compiles do not use ----------------------------------------------


def test_hpvmc_cache_says_that_a_cache_not_private_to_this_user_is_not_used(tmp_path: Path) -> None:
    """`hpvmc cache` counted the entries of a group-writable cache directory, without a word,
    while every compile refused it with a warning (and `--clear` left it alone)."""
    folder = tmp_path / "cache"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPVM_CACHE_DIR": str(folder)}
    env.pop("HPVM_NO_CACHE", None)
    subprocess.run([sys.executable, "-m", "hpvm_py.cli", "compile", str(ROOT / "examples" / "saxpy.py"),
                    "--emit", "llvm"], capture_output=True, env=env, timeout=300, check=True)
    listed = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "cache"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert listed.returncode == 0 and " 0 entries" not in listed.stdout, listed.stdout
    folder.chmod(0o777)
    listed = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "cache"], capture_output=True,
                            text=True, env=env, timeout=120)
    assert listed.returncode == 0 and f"{folder}: 0 entries" in listed.stdout, listed.stdout
    assert "writable by another user: it is not used" in listed.stderr, listed.stderr


# -- "seconds" settings are numbers in ASCII, as the others -------------------------------------


@pytest.mark.parametrize("value", ["\u0665", "\u0661\u0660", "\uff15", "1_0", " 5", "5\n"])
def test_a_timeout_not_in_ascii_digits_is_refused_by_name(monkeypatch: pytest.MonkeyPatch,
                                                          value: str) -> None:
    """float() read HPVM_COMM_TIMEOUT=\u0665 (Arabic-Indic five) as 5 seconds, and "1_0" as 10,
    where every other number setting refuses them (settings.md: "A number is written in ASCII
    digits")."""
    monkeypatch.setenv("HPVM_COMM_TIMEOUT", value)
    with pytest.raises(HPVMError, match="HPVM_COMM_TIMEOUT"):
        settings.positive_seconds(settings.COMM_TIMEOUT)
    for text, seconds in (("5", 5.0), ("2.5", 2.5), ("1e3", 1000.0)):
        monkeypatch.setenv("HPVM_COMM_TIMEOUT", text)
        assert settings.positive_seconds(settings.COMM_TIMEOUT) == seconds


@pytest.mark.skipif(not registry.available("cpu"), reason="needs the cpu target (it reads HPVM_REBIND)")
def test_a_warning_about_a_settings_value_names_the_users_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A flag's odd value is read deep inside a launch: its warning named hpvm_py's own line
    (api/host.py), not the launch that read it."""
    monkeypatch.setattr(settings, "_warned", set())
    monkeypatch.setenv("HPVM_REBIND", "maybe")
    n = 16
    a = np.random.default_rng().standard_normal(n).astype(np.float32)
    c = np.zeros(n, np.float32)
    with hpvm.runtime("cpu"), pytest.warns(HPVMWarning, match="HPVM_REBIND='maybe'") as caught:
        hpvm.wait(hpvm.launch(vadd_graph, a, a.nbytes, a, a.nbytes, c, c.nbytes, n))  # this line
    assert [Path(w.filename).name for w in caught] == [Path(__file__).name]
    np.testing.assert_array_equal(c, a + a)
