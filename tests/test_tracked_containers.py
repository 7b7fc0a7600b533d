"""The tracker keeps what it knows of a buffer in as few containers as it can (rt/tracker.py,
MemoryObject): valid bits as shared frozensets, no copies dict while the user's buffer is the only
copy, the checks passed and the host argument held bare until a second parameter comes. These
tests hold the count (the garbage collector's cost of a launch on fresh tensors grows with it)
and try the forms' transitions: one buffer as two parameters, of one element type and of two,
alternated with fresh buffers, against the python target."""
from __future__ import annotations

import collections
import gc

import numpy as np
import pytest

import hpvm_py as hpvm
from programs import tracked_containers as P

torch = pytest.importorskip("torch")

N = 16


def _scale(g: object, a: object, c: object, k: float) -> None:
    hpvm.wait(hpvm.launch(g, a, a.nbytes, c, c.nbytes, k, N))


def test_a_launch_on_a_fresh_tensor_leaves_at_most_two_tracked_containers() -> None:
    with hpvm.runtime("cpu"):
        g = hpvm.compile(P.scale_graph, target="cpu")
        source = torch.ones(N)
        outputs = [torch.zeros(N) for _ in range(400)]
        for out in outputs[:100]:
            _scale(g, source, out, 2.0)
        gc.collect()
        before = collections.Counter(type(o).__name__ for o in gc.get_objects())
        for out in outputs[100:]:
            _scale(g, source, out, 2.0)
        gc.collect()
        left = collections.Counter(type(o).__name__ for o in gc.get_objects()) - before
        # the tracked object and its host argument (cpu kernels take the address from it)
        assert sum(left.values()) <= 2.5 * 300, left.most_common(6)  # (7 each before)
        assert all(torch.equal(out, torch.full((N,), 3.0)) for out in outputs)


@pytest.mark.parametrize("target", ["cpu", "python"])
@pytest.mark.parametrize("seed", range(3))
def test_one_buffer_as_two_parameters_between_fresh_ones(target: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    shared = rng.standard_normal(N).astype(np.float32)
    expected = shared.copy()
    with hpvm.runtime(target):
        g = hpvm.compile(P.scale_graph, target=target)
        for step in range(12):
            k = float(rng.integers(-3, 4))
            choice = rng.integers(3)
            if choice == 0:  # in place: the same array as a and c
                _scale(g, shared, shared, k)
                expected = expected * np.float32(k) + np.float32(1.0)
            elif choice == 1:  # read by a, written into a fresh array
                out = np.full(N, np.nan, np.float32)
                _scale(g, shared, out, k)
                np.testing.assert_array_equal(out, expected * np.float32(k) + np.float32(1.0))
            else:  # written as c from a fresh array
                fresh = rng.standard_normal(N).astype(np.float32)
                _scale(g, fresh, shared, k)
                expected = fresh * np.float32(k) + np.float32(1.0)
            np.testing.assert_array_equal(shared, expected, err_msg=f"step {step}")


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """bf16 bits of f32 values that bf16 holds exactly (x % 256 * 0.5 needs 8 significant bits)."""
    return (values.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


@pytest.mark.parametrize("target", ["cpu", "python"])
def test_one_array_viewed_as_two_element_types(target: str) -> None:
    # a uint16 array is both the u16 input and the bf16 (raw bits) output: two host views of it
    rng = np.random.default_rng(5)
    with hpvm.runtime(target):
        g = hpvm.compile(P.bits_graph, target=target)
        for _ in range(4):
            x = rng.integers(0, 2**16, N, dtype=np.uint16)
            alone = x.copy()
            y = np.zeros(N, np.uint16)
            hpvm.wait(hpvm.launch(g, alone, alone.nbytes, y, y.nbytes, N))  # two arrays
            hpvm.wait(hpvm.launch(g, x, x.nbytes, x, x.nbytes, N))  # one, as both
            expected = _bf16_bits((alone % 256).astype(np.float32) * np.float32(0.5))
            np.testing.assert_array_equal(y, expected)
            np.testing.assert_array_equal(x, expected)
            hpvm.wait(hpvm.launch(g, x, x.nbytes, x, x.nbytes, N))  # again: its kept views
            np.testing.assert_array_equal(
                x, _bf16_bits((expected % 256).astype(np.float32) * np.float32(0.5)))
