"""Every example runs end to end on every target and matches its NumPy reference."""
from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

# small sizes: the python target runs instance by instance where it must
CASES = {
    "vadd": {"n": 5000},
    "saxpy": {"n": 4099},
    "histogram": {"n": 6000, "nbins": 37},
    "reduction": {"n": 1000},
    "stencil": {"nx": 20, "ny": 17, "nz": 6},
    "sgemm": {"m": 40, "n": 24, "k": 20},
    "edge_detection": {"size": 32, "frames": 3},
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_matches_numpy(name: str, target: str) -> None:
    module = importlib.import_module(name)
    module.main(target, **CASES[name])


def test_edge_detection_without_streaming(target: str) -> None:
    module = importlib.import_module("edge_detection")
    module.main(target, size=24, frames=2, stream=False)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_passes_hpvmc_check(name: str) -> None:
    result = subprocess.run([sys.executable, "-m", "hpvm_py.cli", "check", str(EXAMPLES / f"{name}.py")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "ok" in result.stdout
