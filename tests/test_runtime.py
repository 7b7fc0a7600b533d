"""Runtime behaviour across targets: outputs, memory tracking, stats, caching."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import MemoryTrackingError
from programs import pep563_outputs as fa


def test_named_outputs_with_string_annotations(target: str) -> None:
    a = np.arange(5, dtype=np.float32)
    with hpvm.runtime(target):
        result = hpvm.wait(hpvm.launch(fa.root, a, a.nbytes, 5))
    assert isinstance(result, fa.Summary)
    assert result.total == 10.0 and result.count == 5


def test_host_buffers_are_used_in_place_without_copies(target: str, rng) -> None:
    import vadd

    a, b = rng.random(1000, dtype=np.float32), rng.random(1000, dtype=np.float32)
    c = np.zeros(1000, np.float32)
    with hpvm.runtime(target):
        before = hpvm.stats()
        hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, b, b.nbytes, c, c.nbytes, 1000))
        after = hpvm.stats()
    assert np.array_equal(c, a + b)  # written in place
    # a device target copies each input in once and the result back once, when the launch ends
    expected = {"h2d_copies": 2, "d2h_copies": 1, "d2d_copies": 0} if target in ("gpu", "nvptx") else \
        {"h2d_copies": 0, "d2h_copies": 0, "d2d_copies": 0}
    for key, count in expected.items():
        assert after[key] == before[key] + count, key
    assert after["launches"] == before["launches"] + 1


def test_torch_cpu_tensors_work_in_place(target: str) -> None:
    torch = pytest.importorskip("torch")
    import saxpy

    x = torch.arange(100, dtype=torch.float32)
    y = torch.ones(100, dtype=torch.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(saxpy.root, x, x.numel() * 4, y, y.numel() * 4, 2.0, 100))
    assert torch.equal(y, 2 * torch.arange(100, dtype=torch.float32) + 1)


def test_track_untrack_request(target: str) -> None:
    a = np.ones(4, np.float32)
    with hpvm.runtime(target):
        assert hpvm.track_memory(a) is a
        assert hpvm.request_memory(a) is a
        hpvm.untrack_memory(a)
        with pytest.raises(MemoryTrackingError):
            hpvm.request_memory(a)
        with pytest.raises(MemoryTrackingError):
            hpvm.track_memory([1, 2, 3])


def test_a_second_process_compiles_nothing(tmp_path: Path) -> None:
    program = tmp_path / "prog.py"
    program.write_text(textwrap.dedent("""
        import sys
        import numpy as np
        import hpvm_py as hpvm
        sys.path.insert(0, sys.argv[1])
        import stencil
        a = np.random.rand(8, 10, 12).astype(np.float32)
        b = a.copy()
        with hpvm.runtime("cpu"):
            hpvm.wait(hpvm.launch(stencil.root, a, a.nbytes, b, b.nbytes, 12, 10, 8, 0.5, 0.25))
        print("compiles", hpvm.stats()["cpu_compiles"])
    """))
    examples = str(Path(__file__).resolve().parent.parent / "examples")
    env = {**os.environ, "HPVM_CACHE_DIR": str(tmp_path / "cache")}
    first = subprocess.run([sys.executable, str(program), examples], capture_output=True, text=True,
                           timeout=300, env=env)
    second = subprocess.run([sys.executable, str(program), examples], capture_output=True, text=True,
                            timeout=300, env=env)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    assert "compiles 0" not in first.stdout
    assert "compiles 0" in second.stdout
    bypass = subprocess.run([sys.executable, str(program), examples], capture_output=True, text=True,
                            timeout=300, env={**env, "HPVM_NO_CACHE": "1"})
    assert "compiles 0" not in bypass.stdout


def test_checked_variant_reports_out_of_bounds_on_compiled_targets(compiled_target: str) -> None:
    import vadd

    a = np.ones(100, np.float32)
    c = np.zeros(99, np.float32)  # one element short: the launch cannot be proven safe
    with hpvm.runtime(compiled_target):
        with pytest.raises(hpvm.errors.HPVMError) as info:
            hpvm.wait(hpvm.launch(vadd.root, a, a.nbytes, a, a.nbytes, c, c.nbytes, 100))
    assert "out-of-bounds" in str(info.value) or "bytes" in str(info.value)


def test_runtime_subpackage_and_context_manager_coexist() -> None:
    """`hpvm.runtime` is the context manager; the runtime's modules live in `hpvm_py.rt`, the host
    API's in `hpvm_py.api`."""
    import hpvm_py.api.host
    import hpvm_py.rt.executor

    assert hpvm.runtime is hpvm_py.api.host.runtime
    assert hpvm_py.rt.executor.Executor is not None
    assert callable(hpvm.runtime)
