"""The gpu target's privatised counts (backends/triton/privatise.py): per-program counts from
tl.histogram, merged once per program, must give what the atomics give, on random data.

Runs through Triton's interpreter without a GPU; launches of a few thousand instances span several
programs of several blocks each (kernel.INTERPRETER_PRIVATE), so merges from many programs meet.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py import cli
from hpvm_py.backends import registry
from hpvm_py.backends.base import BufferArg
from hpvm_py.backends.triton import kernel as triton_kernel
from hpvm_py.backends.triton.host_math import interpreting
from hpvm_py.backends.triton.privatise import MAX_PRIVATE_ELEMENTS
from programs import count_leaves as C

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(not registry.available("gpu"), reason="no triton")


def emitted(tmp_path: Path, program: Path, graph: str) -> str:
    status = cli.main(["compile", str(program), "--graph", graph, "--target", "gpu",
                       "--emit", "triton", "-o", str(tmp_path)])
    assert status == 0
    (path,) = tmp_path.glob("*.triton.py")
    return path.read_text()


@pytest.mark.parametrize("nbins", [256, 7, MAX_PRIVATE_ELEMENTS + 3])
def test_histogram_counts_privately_and_matches_bincount(nbins: int, tmp_path: Path, rng) -> None:
    import histogram

    text = emitted(tmp_path, ROOT / "examples" / "histogram.py", "root")
    assert "tl.histogram(" in text and "tl.atomic_add(v_bins + " in text
    n = 20000  # 20 blocks: 4 programs of 5 blocks each
    data = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    start = rng.integers(0, 100, nbins, dtype=np.int32)  # counts are added to what is there
    bins = start.copy()
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(histogram.root, data, data.nbytes, bins, bins.nbytes, nbins, n))
        hpvm.request_memory(bins)
    np.testing.assert_array_equal(bins, start + np.bincount(data % nbins, minlength=nbins))


def test_adds_and_subs_under_masks_and_loops_agree_with_the_cpu_target(tmp_path: Path, rng) -> None:
    assert "tl.histogram(" in emitted(tmp_path, ROOT / "tests" / "programs" / "count_leaves.py",
                                      "mixed_root")
    n, grid, nbins = 8500, 9000, 33  # 9 blocks: programs of 2 blocks, the last one's second empty
    data = rng.integers(-1000, 1000, n, dtype=np.int32)
    start = rng.integers(0, 2**32, nbins, dtype=np.uint32)  # sums wrap around
    results = {}
    for target in ("cpu", "gpu"):
        bins = start.copy()
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(C.mixed_root, data, data.nbytes, bins, bins.nbytes, nbins, n, grid))
            hpvm.request_memory(bins)
        results[target] = bins
    np.testing.assert_array_equal(results["gpu"], results["cpu"])
    i = np.arange(n)
    expected = start.astype(np.int64)
    np.add.at(expected, data[data >= 0] % nbins, 3)
    np.add.at(expected, (-data[data < 0]) % nbins, -1)
    np.add.at(expected, np.concatenate([np.arange(r) for r in i % 3]).astype(np.int64), 1)
    np.testing.assert_array_equal(results["gpu"], (expected % 2**32).astype(np.uint32))


def test_steps_at_the_ends_of_the_type_wrap_as_the_atomics_do(tmp_path: Path, rng) -> None:
    """Found by the differential fuzzer: a privatised sub of -2**31 negated the step past i32."""
    assert "tl.histogram(" in emitted(tmp_path, ROOT / "tests" / "programs" / "count_leaves.py",
                                      "extreme_steps_root")
    n, nbins = 3000, 16
    data = rng.integers(-10**6, 10**6, n, dtype=np.int32)
    start = rng.integers(-2**31, 2**31, nbins, dtype=np.int64).astype(np.int32)
    results = {}
    for target in ("cpu", "gpu"):
        bins = start.copy()
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(C.extreme_steps_root, data, data.nbytes, bins, bins.nbytes, nbins, n))
            hpvm.request_memory(bins)
        results[target] = bins
    np.testing.assert_array_equal(results["gpu"], results["cpu"])
    expected = start.astype(np.int64)
    np.add.at(expected, data.astype(np.int64) % nbins, 2**31)  # -(-2**31) + (2**31 - 1) - (2**31 - 1)
    np.testing.assert_array_equal(results["gpu"], expected.astype(np.uint32).astype(np.int32))


@pytest.mark.parametrize("lanes32", [True, False])
@pytest.mark.parametrize("n", [5000, 4096])
def test_indices_outside_the_buffer_count_nowhere(lanes32: bool, n: int, tmp_path: Path,
                                                  monkeypatch, rng) -> None:
    """A launch whose bounds are not proven runs the checked kernel instead; the privatised
    kernel, launched directly here, still drops indices below 0 and past the buffer, with lane
    positions in 32-bit (a launch whose extents fit) or 64-bit arithmetic, over full and partial
    blocks."""
    import torch

    assert "tl.histogram(" in emitted(tmp_path, ROOT / "tests" / "programs" / "count_leaves.py",
                                      "shifted_root")
    if not lanes32:
        monkeypatch.setattr(triton_kernel, "LANES32_LIMIT", 0)
    ((_, _, kernel),) = hpvm.compile(C.shifted_root, target="gpu").leaf_kernels()
    nbins, shift = 37, 20
    device = "cpu" if interpreting() else "cuda"
    data = torch.from_numpy(rng.integers(-2**31, 2**31, n, dtype=np.int64).astype(np.int32))
    data[: n // 2] = torch.from_numpy(rng.integers(0, nbins + 2 * shift, n // 2, dtype=np.int32))
    start = torch.from_numpy(rng.integers(0, 100, nbins, dtype=np.int32))
    data, bins = data.to(device), start.clone().to(device)
    args = [BufferArg(obj=t, address=t.data_ptr(), nbytes=t.numel() * 4, array=None) if
            isinstance(t, torch.Tensor) else t for t in (data, n * 4, bins, nbins * 4, shift)]
    launch = kernel.prepare(args, [], [(n,)])
    assert launch.options["LANES32"] is lanes32
    launch.run()
    index = data.cpu().numpy().astype(np.int64) - shift
    inside = index[(index >= 0) & (index < nbins)]
    np.testing.assert_array_equal(bins.cpu().numpy(), start.numpy() + np.bincount(inside, minlength=nbins))


def test_atomics_whose_old_value_is_used_stay_atomic(tmp_path: Path, rng) -> None:
    assert "tl.histogram(" not in emitted(tmp_path, ROOT / "tests" / "programs" / "count_leaves.py",
                                          "ticket_root")
    n, nbins = 2000, 5
    data = rng.integers(0, 10**6, n, dtype=np.int32)
    bins = np.zeros(nbins, np.int32)
    out = np.full(n, -1, np.int32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(C.ticket_root, data, data.nbytes, bins, bins.nbytes, out, out.nbytes,
                              nbins, n))
        hpvm.request_memory(bins)
        hpvm.request_memory(out)
    counts = np.bincount(data % nbins, minlength=nbins)
    np.testing.assert_array_equal(bins, counts)
    for b in range(nbins):  # each bin handed out the tickets 0 .. count - 1, once each
        assert sorted(out[data % nbins == b].tolist()) == list(range(counts[b]))


def test_data_dependent_amounts_stay_atomic(tmp_path: Path, rng) -> None:
    assert "tl.histogram(" not in emitted(tmp_path, ROOT / "tests" / "programs" / "count_leaves.py",
                                          "weighted_root")
    n, nbins = 2000, 9
    data = rng.integers(0, 10**6, n, dtype=np.int32)
    bins = np.zeros(nbins, np.int32)
    with hpvm.runtime("gpu"):
        hpvm.wait(hpvm.launch(C.weighted_root, data, data.nbytes, bins, bins.nbytes, nbins, n))
        hpvm.request_memory(bins)
    np.testing.assert_array_equal(bins, np.bincount(data % nbins, weights=data % 5, minlength=nbins))


@pytest.mark.parametrize("d, e", [(256, 64), (1, 1), (7, 7), (-8, 2**31), (-256, 0), (0, 3),
                                  (2**40, 2**32 - 1)])
def test_remainders_by_a_scalar_divisor_agree_with_the_python_target(d: int, e: int, rng) -> None:
    """The histogram's `data[i] % nbins`: a divisor that is the same for every instance is tested
    once per program for a power of two (then a mask) instead of dividing per lane."""
    n = 300
    x = rng.integers(-2**62, 2**62, n, dtype=np.int64)
    x[:4] = [0, -1, 2**62, -2**63]
    results = {}
    for target in ("python", "gpu"):
        out = np.zeros(2 * n, np.int64)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(C.remainders_root, x, x.nbytes, out, out.nbytes, d, e, n))
            hpvm.request_memory(out)
        results[target] = out
    np.testing.assert_array_equal(results["gpu"], results["python"])
    if d:
        np.testing.assert_array_equal(results["gpu"][0::2], x % d)  # floored, as Python's


def test_f16_and_bf16_atomics_agree_with_the_python_target(rng) -> None:
    """Add, sub and exchange on 16-bit floats (a compare-and-swap loop on their bits): the sums
    match the python target's, which rounds after every operation like the gpu target. Values are
    multiples of 1/8 with few bits, so every order of the adds gives the same sums; the old values
    of the exchanges and adds depend on the order and are checked to be ones that occur."""
    n = 200
    x = (rng.integers(-16, 16, n) / 8).astype(np.float32)
    idx = rng.integers(0, 4, n).astype(np.int32)
    results = {}
    for target in ("python", "gpu"):
        h = np.zeros(8, np.float16)
        b = np.zeros(8, np.uint16)  # bf16 bits
        old = np.zeros(n, np.float32)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(C.half_atomics_root, x, x.nbytes, idx, idx.nbytes, h, h.nbytes, b,
                                  b.nbytes, old, old.nbytes, n))
            for buf in (h, b, old):
                hpvm.request_memory(buf)
        results[target] = (h, b, old)
    (h, b, old), (h_ref, b_ref, _) = results["gpu"], results["python"]
    sums = np.zeros(4)
    np.add.at(sums, idx, x)
    np.testing.assert_array_equal(h[:4], sums.astype(np.float16))
    np.testing.assert_array_equal(h[:4], h_ref[:4])
    np.testing.assert_array_equal(b[:4], b_ref[:4])  # -sums in bf16 bits
    np.testing.assert_array_equal(b[4:], b_ref[4:])  # sums of the adds, whatever their order
    assert set(h[4:].tolist()) <= set(x.tolist()) | {0.0}  # the last exchange of each element wins
