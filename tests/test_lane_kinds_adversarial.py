"""Hunted bugs of the lane (rt/fresh_lane.py), rebinding and the checks a fresh buffer skips
(rt/args.py, `checked_kinds`): launches on buffers the normal path would treat otherwise."""
from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import ROOT, TARGETS, child_pythonpath
from hpvm_py.errors import LaunchError
from programs import rebind_graphs as g

torch = pytest.importorskip("torch")

HOST_TARGETS = [t for t in ("cpu", "python") if t in TARGETS]

# A NumPy array resized to another size and back (refcheck=False) has its size and a new address;
# the old memory is freed. Run in a child: a launch on the old address may crash the process.
_RESIZED_BACK = """
import sys
import numpy as np
import hpvm_py as hpvm
from hpvm_py.errors import MemoryTrackingError
sys.path.insert(0, "tests")
from programs import rebind_graphs as g

target, seed = sys.argv[1], int(sys.argv[2])
rng = np.random.default_rng(seed)
n = 1 << 16  # (its memory is mapped for it alone: the old address is unmapped once freed)

def resized_back(a):
    # whether `a` lives elsewhere now (NumPy refuses to resize an array that a recording's weak
    # reference names: a launch that rebinds a recording to it leaves one)
    address = a.ctypes.data
    try:
        a.resize(8 * n, refcheck=False)
    except ValueError:
        return False
    a.resize(n, refcheck=False)
    return a.ctypes.data != address

with hpvm.runtime(target):
    compiled = hpvm.compile(g.update)
    first = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    hpvm.wait(hpvm.launch(compiled, first[0], first[0].nbytes, first[1], first[1].nbytes, n, 1.0))
    moved = 0
    for step in range(6):
        x, y = (rng.standard_normal(n).astype(np.float32) for _ in range(2))
        k = float(rng.uniform(-2, 2))
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k))  # cpu: the lane
        moved += resized_back(x if step % 2 else y)
        xv, yv = rng.standard_normal((2, n)).astype(np.float32)
        x[:], y[:] = xv, yv
        k = float(rng.uniform(-2, 2))
        hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k))
        np.testing.assert_allclose(y, yv + xv * np.float32(k), rtol=1e-5, atol=1e-5,
                                   err_msg=f"seed {seed} step {step}")
    assert moved  # (step 0's, at least: the lane left no weak reference)
    # one the user tracked: an error, as for a resize to another size (on cpu, the launch's
    # recording holds it)
    y = hpvm.track_memory(rng.standard_normal(n).astype(np.float32))
    hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, 1.0))
    hpvm.request_memory(y)
    if resized_back(y):
        try:
            hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, 1.0)
        except MemoryTrackingError as exc:
            assert "was resized" in exc.message and exc.loc.line > 0, exc
        else:
            raise AssertionError("a tracked array resized back to its size was launched on")
print("ok")
"""


@pytest.mark.parametrize("target", HOST_TARGETS)
def test_an_array_resized_back_to_its_size_is_not_launched_on_at_its_old_address(
        target: str) -> None:
    """rt/buffers.py's moved() took a NumPy array for the memory it was tracked as when its size
    was the same: an array launched on (on cpu, on the lane, which keeps no weak reference that
    would stop the resize) and then resized away and back had the next launch run on its freed
    memory (a crash, or its results lost)."""
    seed = int.from_bytes(os.urandom(4), "little")
    done = subprocess.run([sys.executable, "-c", _RESIZED_BACK, target, str(seed)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": child_pythonpath(ROOT)})
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), \
        f"seed {seed}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"


def _negative_view(values: Any) -> Any:
    """A float tensor with torch's negative bit holding `values`: its memory holds them negated
    (public API: z.conj().imag, one element of it contiguous; torch._neg_view for more)."""
    if values.numel() == 1:
        return torch.complex(torch.zeros_like(values), -values).conj().imag
    return torch._neg_view(-values)


@pytest.mark.parametrize("target", HOST_TARGETS)
@pytest.mark.parametrize("n", [1, 12])
def test_a_negative_view_is_refused_on_the_lane_as_on_a_cold_runtime(
        target: str, n: int, rng: np.random.Generator) -> None:
    """A tensor with the negative bit (tensor.is_neg()) has the kind of a plain one of its dtype
    (rt/buffers.py, buffer_kind), and no check looked at the bit: cpu kernels read its memory,
    the values negated (y += x * k gave y - x * k), on the lane as on the normal path, and the
    python target's view of it raised torch's RuntimeError (an internal error)."""
    seen = []
    with hpvm.runtime(target):
        compiled = hpvm.compile(g.update)
        for step in range(40):
            xv, yv = (torch.tensor(rng.standard_normal(n), dtype=torch.float32) for _ in range(2))
            x = _negative_view(xv) if rng.random() < 0.4 else xv.clone()
            assert torch.equal(x, xv)
            y, k = yv.clone(), float(rng.uniform(-2, 2))
            if x.is_neg():
                with pytest.raises(LaunchError, match="negative view") as info:
                    hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k)
                assert info.value.loc.file == __file__
                assert torch.equal(y, yv), f"step {step}: written"
                seen.append(info.value.message)
                continue
            hpvm.wait(hpvm.launch(compiled, x, x.nbytes, y, y.nbytes, n, k))
            torch.testing.assert_close(y, yv + xv * k, rtol=1e-5, atol=1e-5, msg=f"step {step}")
    assert seen
    with hpvm.runtime(target):  # a cold runtime says the same
        with pytest.raises(LaunchError) as info:
            x = _negative_view(torch.ones(n))
            hpvm.launch(g.update, x, x.nbytes, torch.zeros(n), 4 * n, n, 1.0)
    assert info.value.message == seen[0]
