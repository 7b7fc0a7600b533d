"""Test configuration: every runtime test runs on each target available here.

Targets: `python` always, `cpu` when its backend imports, `gpu` when a GPU backend is usable (on CI
through TRITON_INTERPRET=1), `nvptx` on a machine with a CUDA GPU. HPVM_TEST_TARGETS=cpu,python
narrows the list.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

# Without an NVIDIA GPU, the gpu target runs through Triton's interpreter (set before triton loads).
if "TRITON_INTERPRET" not in os.environ and not Path("/dev/nvidia0").exists():
    os.environ["TRITON_INTERPRET"] = "1"
# Each GPU lowering is tested as the target that names it (`gpu`: Triton, `nvptx`: LLVM NVPTX);
# the runtime's choice between them is test_lowering_choice.py's (which sets its own mode).
os.environ.setdefault("HPVM_GPU_LOWERING", "off")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))


def available_targets() -> list[str]:
    from hpvm_py.backends import registry

    wanted = os.environ.get("HPVM_TEST_TARGETS")
    names = wanted.split(",") if wanted else ["python", "cpu", "gpu", "nvptx"]
    return [t for t in names if registry.available(t)]


TARGETS = available_targets()


def child_pythonpath(*first: Path | str) -> str:
    """A child process's PYTHONPATH: `first`, then the one this process was given (a GPU machine
    may find lark there)."""
    return os.pathsep.join(filter(None, (*map(str, first), os.environ.get("PYTHONPATH"))))


def _triton_version() -> tuple[int, ...] | None:
    try:
        import triton
    except ImportError:
        return None
    return tuple(int(v) for v in triton.__version__.split(".")[:2])


TRITON = _triton_version()
# Triton's interpreter takes loop bounds computed from arguments from 3.9 on (3.6's cannot: checked)
needs_interpreter_loop_bounds = pytest.mark.skipif(
    TRITON is None or TRITON < (3, 9),
    reason=f"Triton {TRITON}'s interpreter cannot take loop bounds computed from arguments "
           "(3.9's can)")


@pytest.fixture(params=TARGETS)
def target(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture(params=[t for t in TARGETS if t != "python"] or ["python"])
def compiled_target(request: pytest.FixtureRequest) -> str:
    """A compiled target (the python target stands in when none is available)."""
    return request.param


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test session compiles into its own cache directory."""
    monkeypatch.setenv("HPVM_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "hpvm-cache"))


@pytest.fixture
def rng():
    import numpy as np

    return np.random.default_rng()


@pytest.fixture
def output_fetches(monkeypatch: pytest.MonkeyPatch) -> list:
    """Every DeviceOutputs.fetch() of the test (a GPU kernel's scalar outputs brought to the host),
    in order: what a replay that needs nothing from the host between kernels must not do."""
    from hpvm_py.device.outputs import DeviceOutputs

    fetches: list = []
    fetch = DeviceOutputs.fetch
    monkeypatch.setattr(DeviceOutputs, "fetch", lambda self: (fetches.append(self), fetch(self)))
    return fetches

