"""What hpvm-py keeps on disk and reads from the environment, tried as a hostile or unlucky machine
would: cache entries whose digest matches but whose bytes are no usable code, a cache directory
that is a file, is full, or is removed while a program runs, processes compiling one graph at once,
keys that must change with the code generator, and HPVM_* variables given bad values."""
from __future__ import annotations

import errno
import hashlib
import multiprocessing
import os
import shutil
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import llvmlite
import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.api.host import compile_graph
from hpvm_py.backends import jit, registry
from hpvm_py.backends.cpu import threads
from hpvm_py.backends.nvptx import device, toolchain
from hpvm_py.backends.nvptx.backend import NvptxBackend
from hpvm_py.distributed import waiting
from hpvm_py.errors import CompileError, DistributedError, HPVMError, HPVMWarning, LaunchError
from hpvm_py.support import cache, cores, settings, stats
from hpvm_py.support.loc import UNKNOWN
from conftest import child_pythonpath
from programs import out_coverage as P

ROOT = Path(__file__).resolve().parent.parent
N = 64
needs_cpu = pytest.mark.skipif(not registry.available("cpu"), reason="the cpu target cannot run here")


def _launch(target: str = "cpu", seed: int = 0) -> None:
    a = np.random.default_rng(seed).standard_normal(N).astype(np.float32)
    c = np.zeros(N, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(P.copy_graph, a, c, N))
    np.testing.assert_array_equal(c, a)


_CHILD = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
import numpy as np, hpvm_py as hpvm
from hpvm_py.support import stats
from programs import out_coverage as P
a = np.random.default_rng(7).standard_normal(64).astype(np.float32); c = np.zeros(64, np.float32)
with hpvm.runtime({target!r}):
    hpvm.wait(hpvm.launch(P.copy_graph, a, c, 64))
assert (c == a).all(), c
print("compiles", stats.count("cpu_compiles"))
"""


def _child(folder: Path, target: str = "cpu", **env: str) -> subprocess.CompletedProcess:
    """A fresh process (nothing in its memory cache) launching copy_graph with this cache."""
    code = _CHILD.format(root=str(ROOT), tests=str(ROOT / "tests"), target=target)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240,
                          env={**os.environ, "HPVM_CACHE_DIR": str(folder), **env})


def _rewrite(entry: Path, data: bytes) -> None:
    """Replace a cache entry, digest and all: the digest check passes, only the bytes are wrong."""
    entry.write_bytes(data)
    entry.with_name(entry.name + ".sha256").write_text(hashlib.sha256(data).hexdigest())


def _other_object() -> bytes:
    return jit.emit_object(jit.optimize("define i32 @other() {\n  ret i32 1\n}\n"))


@needs_cpu
@pytest.mark.parametrize("garbage", ["empty", "random", "truncated", "other-function"])
def test_a_cached_object_that_is_no_usable_code_is_compiled_again(tmp_path: Path, garbage: str) -> None:
    """Such an entry crashed the process (LLVM's loader trusts its input) or failed the launch
    with an internal error (a driver looked up at address 0)."""
    folder = tmp_path / "cache"
    first = _child(folder)
    assert first.returncode == 0, first.stderr
    [entry] = folder.rglob("*.cpu.o")
    good = entry.read_bytes()
    data = {"empty": b"", "random": np.random.default_rng(3).bytes(4096),
            "truncated": good[:len(good) // 2], "other-function": _other_object()}[garbage]
    _rewrite(entry, data)
    again = _child(folder)
    assert again.returncode == 0, f"rc {again.returncode}: {again.stderr[-2000:]}"
    assert "compiles 1" in again.stdout  # made again, not loaded
    assert entry.read_bytes() == good  # and the entry repaired


def _full_disk_fdopen(real: Any) -> Any:
    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:
        handle = real(fd, *args, **kwargs)

        class Full:
            def __enter__(self) -> "Full":
                return self

            def __exit__(self, *exc: Any) -> None:
                handle.close()

            def write(self, data: bytes) -> int:
                handle.write(data[:1])  # half-written, as a disk that fills up leaves it
                raise OSError(errno.ENOSPC, "No space left on device")
        return Full()
    return fdopen


def test_a_full_cache_directory_leaves_no_partial_file_and_says_so(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    monkeypatch.setattr(cache, "_refused", set())
    monkeypatch.setattr(cache.os, "fdopen", _full_disk_fdopen(os.fdopen))
    with pytest.warns(HPVMWarning, match="HPVM_CACHE_DIR"):
        assert cache.store("ab" * 32, ".bin", b"code" * 100) is None
    assert [p.name for p in folder.rglob("*") if p.is_file()] == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per directory, not once per compile
        assert cache.store("cd" * 32, ".bin", b"code") is None


@needs_cpu
def test_a_cache_directory_that_is_a_file_is_named_and_launches_still_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "a-file"
    path.write_text("not a directory")
    monkeypatch.setenv("HPVM_CACHE_DIR", str(path))
    monkeypatch.setattr(cache, "_refused", set())
    with pytest.warns(HPVMWarning, match=f"{path}.*not a directory.*HPVM_CACHE_DIR"):
        assert cache.load("ef" * 32, ".bin") is None
    with pytest.warns(HPVMWarning, match="HPVM_CACHE_DIR"):  # below a file: ENOTDIR
        monkeypatch.setenv("HPVM_CACHE_DIR", str(path / "below"))
        assert cache.store("ef" * 32, ".bin", b"x") is None
    assert path.read_text() == "not a directory"
    _launch()


@needs_cpu
def test_a_cache_directory_removed_while_running_is_made_again(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "cache"
    monkeypatch.setenv("HPVM_CACHE_DIR", str(folder))
    assert cache.store("12" * 32, ".bin", b"one") is not None
    shutil.rmtree(folder)
    assert cache.load("12" * 32, ".bin") is None
    assert cache.store("34" * 32, ".bin", b"two") is not None
    assert cache.load("34" * 32, ".bin") == b"two"


def _compile_in_child(folder: str, seed: int, barrier: Any, results: Any) -> None:
    os.environ["HPVM_CACHE_DIR"] = folder
    sys.path[:0] = [str(ROOT), str(ROOT / "tests")]
    try:
        barrier.wait(60)
        for _ in range(3):
            _launch("cpu", seed)
        results.put((seed, "ok"))
    except BaseException as exc:  # reported to the parent, which fails the test
        results.put((seed, repr(exc)))


@needs_cpu
def test_processes_compiling_one_graph_at_once_all_run_right(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(3), ctx.Queue()
    procs = [ctx.Process(target=_compile_in_child, args=(str(folder), seed, barrier, results))
             for seed in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    got = sorted(results.get(timeout=5) for _ in procs)
    assert got == [(seed, "ok") for seed in range(3)], got
    assert all(p.exitcode == 0 for p in procs)
    entries = [p for p in folder.rglob("*") if p.is_file()]
    assert not [p for p in entries if p.name.startswith(".tmp-")]  # no half-written file stays
    for p in entries:
        if not p.name.endswith(".sha256"):
            assert hashlib.sha256(p.read_bytes()).hexdigest() == \
                p.with_name(p.name + ".sha256").read_text().strip()


@pytest.mark.skipif(not registry.available("gpu"), reason="the gpu target cannot run here")
def test_the_gpu_target_without_a_cache_leaves_no_temporary_folder(tmp_path: Path) -> None:
    """HPVM_NO_CACHE=1 put each kernel's source in a temporary folder of its own, never removed."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    done = _child(tmp_path / "cache", "gpu", HPVM_NO_CACHE="1", TMPDIR=str(tmp))
    assert done.returncode == 0, done.stderr[-2000:]
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("hpvm-triton-")]


def _env(first: Path, **variables: str) -> dict[str, str]:
    """This environment for a child process, `first` ahead on its PYTHONPATH (the rest kept: a
    GPU machine finds lark there) and `variables` set."""
    return {**os.environ, "PYTHONPATH": child_pythonpath(first), **variables}


def _code_version_of(package_root: Path) -> str:
    code = "from hpvm_py.backends.base import code_version; print(code_version(('cpu',)))"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          timeout=120, env=_env(package_root),
                          cwd=package_root).stdout.strip()


@pytest.mark.parametrize("edited", ["passes/bounds.py", "backends/jit.py", "ir/semantics.py"])
def test_an_edit_to_code_the_cpu_target_shares_changes_its_cache_keys(tmp_path: Path, edited: str) -> None:
    """Only backends/cpu/ was hashed: an edit to the bounds pass (which decides the checks the code
    keeps) or to jit.py's pipeline reused objects made by the code before it."""
    copy = tmp_path / "src"
    shutil.copytree(ROOT / "hpvm_py", copy / "hpvm_py", ignore=shutil.ignore_patterns("__pycache__"))
    before = _code_version_of(copy)
    with open(copy / "hpvm_py" / edited, "a") as f:
        f.write("\n# edited\n")
    assert _code_version_of(copy) != before


@pytest.mark.skipif(not registry.compilable("nvptx"),
                    reason="ptxas is not installed")
def test_ptx_made_by_another_llvm_is_not_reused(monkeypatch: pytest.MonkeyPatch) -> None:
    [(leaf, ctx, _)] = compile_graph(P.copy_graph, "nvptx").leaf_kernels()

    def compiles() -> int:
        monkeypatch.setattr(NvptxBackend, "_memory", {})  # only the disk cache may answer
        NvptxBackend().compile_leaf(leaf, ctx)
        return stats.count("nvptx_compiles")
    first = compiles()
    assert compiles() == first  # the disk cache answers
    monkeypatch.setattr(llvmlite, "__version__", "0.0.0-another")
    assert compiles() == first + 1


# -- settings given bad values: an error or a warning that names the variable -------------------


@pytest.mark.parametrize("value", ["abc", "-2", "0", "1.5", " 4"])
def test_a_bad_thread_count_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HPVM_NUM_THREADS", value)
    with pytest.raises(LaunchError, match="HPVM_NUM_THREADS"):
        cores.default_threads()


@needs_cpu
def test_more_threads_than_the_system_starts_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    real, started = threading.Thread.start, []

    def start(self: threading.Thread) -> None:
        if len(started) == 2:
            raise RuntimeError("can't start new thread")
        started.append(self)
        real(self)
    monkeypatch.setattr(threading.Thread, "start", start)
    with pytest.raises(LaunchError, match="HPVM_NUM_THREADS"):
        threads.NativePool(8)
    monkeypatch.setattr(threading.Thread, "start", real)
    for t in started:
        t.join(5)
        assert not t.is_alive()  # the workers started before the failure were stopped


@pytest.mark.parametrize("value, on", [("false", False), ("OFF", False), ("No", False),
                                       ("true", True), ("Yes", True), ("1", True), ("0", False)])
def test_flags_read_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, value: str, on: bool) -> None:
    monkeypatch.setenv("HPVM_AUTOTUNE", value)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings.AUTOTUNE.on() is on


def test_a_flag_of_another_value_is_named_in_a_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HPVM_NO_CACHE", "disable-it")
    monkeypatch.setattr(settings, "_warned", set())
    with pytest.warns(HPVMWarning, match="HPVM_NO_CACHE='disable-it'"):
        assert settings.NO_CACHE.on()


def test_a_misspelled_setting_is_named_with_the_one_meant(tmp_path: Path) -> None:
    """HPVM_NOCACHE=1 was silently ignored (the cache stayed on); a name near no setting (a test's
    own HPVM_TEST_OUT) passes without a warning. The warning names the user's line."""
    program = tmp_path / "prog.py"
    program.write_text("import hpvm_py as hpvm\nwith hpvm.runtime('python'):\n    pass\n")
    env = _env(ROOT, HPVM_NOCACHE="1", HPVM_TEST_OUT="x")
    done = subprocess.run([sys.executable, "-W", "always", str(program)], capture_output=True,
                          text=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert f"{program}:2: HPVMWarning: HPVM_NOCACHE is not a setting" in done.stderr, done.stderr
    assert "did you mean HPVM_NO_CACHE?" in done.stderr and "HPVM_TEST_OUT" not in done.stderr


def test_an_unknown_log_level_is_named_in_a_warning() -> None:
    code = "import warnings; from hpvm_py.support import log; log.logger('x')"
    done = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True, text=True,
                          timeout=60, env=_env(ROOT, HPVM_LOG="verbose"))
    assert done.returncode == 0 and "HPVM_LOG='verbose'" in done.stderr, done.stderr


@pytest.mark.parametrize("value", ["", "abc", "-1", "0", "nan", "2.5"])
def test_a_bad_comm_timeout_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    """By the ranks' waits and by rank 0 merging profiles alike (settings.positive_seconds)."""
    monkeypatch.setenv("HPVM_COMM_TIMEOUT", value)
    if value in ("", "2.5"):
        expected = 60.0 if value == "" else 2.5  # unset or empty: the default
        assert waiting.timeout_from_env() == expected
        assert settings.positive_seconds(settings.COMM_TIMEOUT) == expected
        return
    with pytest.raises(DistributedError, match="HPVM_COMM_TIMEOUT"):
        waiting.timeout_from_env()
    with pytest.raises(HPVMError, match="HPVM_COMM_TIMEOUT"):
        settings.positive_seconds(settings.COMM_TIMEOUT)


@pytest.mark.parametrize("value", ["garbage", "sm90", "SM_90", "sm_"])
def test_a_bad_nvptx_arch_is_refused_by_name(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("HPVM_NVPTX_ARCH", value)
    with pytest.raises(CompileError, match="HPVM_NVPTX_ARCH"):
        device.arch()
    monkeypatch.setenv("HPVM_NVPTX_ARCH", "sm_80")  # read per call, not once per process
    assert device.arch() == "sm_80"


@pytest.mark.parametrize("contents", [None, b"not bitcode"])
def test_a_bad_libdevice_is_refused_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            contents: bytes | None) -> None:
    path = tmp_path / "libdevice.10.bc"
    if contents is not None:
        path.write_bytes(contents)
    monkeypatch.setenv("HPVM_LIBDEVICE", str(path))
    module = ('target triple = "nvptx64-nvidia-cuda"\ndeclare float @__nv_expf(float)\n'
              'define void @k(ptr %p) {\n  %x = load float, ptr %p\n  %y = call float @__nv_expf(float %x)\n'
              '  store float %y, ptr %p\n  ret void\n}\n')
    with pytest.raises(CompileError, match="HPVM_LIBDEVICE"):
        toolchain.to_ptx(module, ("k",), "sm_90", UNKNOWN)
