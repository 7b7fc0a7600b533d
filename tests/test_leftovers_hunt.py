"""Small known defects, fixed (the leftovers of earlier hunts).

What was wrong:
- `hpvm.types.bf16_from_bits(70000)` raised NumPy's OverflowError, where a NumPy int64 of the
  same value wrapped; a float (1.5, a value where bits were meant) was read as its integer part.
"""
from __future__ import annotations

import numpy as np
import pytest

from hpvm_py.types import bf16_from_bits


# -- bf16_from_bits: integers, of which the low 16 bits count --------------------------------------


def _reference(bits: int) -> float:
    return float((np.array([bits & 0xFFFF], np.uint32) << np.uint32(16)).view(np.float32)[0])


def test_bf16_from_bits_takes_the_low_16_bits_of_any_integer(rng: np.random.Generator) -> None:
    """Python ints of any size and sign, NumPy integers and integer arrays: the low 16 bits, as
    hpvm.u16 keeps them (70000 raised NumPy's OverflowError; np.int64(70000) wrapped)."""
    low = rng.integers(0, 1 << 16, 64)
    high = rng.integers(-(1 << 20), 1 << 20, 64)
    ints = [int(lo) + (int(hi) << 16) for lo, hi in zip(low, high)] + [70000, -1, (1 << 70) + 0x3fc0]
    for value in ints:
        for given in (value, np.int64(value) if -(1 << 63) <= value < 1 << 63 else value):
            got = float(bf16_from_bits(given))
            want = _reference(value)
            assert got == want or (np.isnan(got) and np.isnan(want)), (value, got, want)
    array = np.array(ints[:-1], np.int64)
    np.testing.assert_array_equal(bf16_from_bits(array), [_reference(v) for v in ints[:-1]])
    np.testing.assert_array_equal(bf16_from_bits(ints), [_reference(v) for v in ints])
    assert float(bf16_from_bits(0x3fc0)) == 1.5 == float(bf16_from_bits(np.uint16(0x3fc0)))


@pytest.mark.parametrize("value", [1.5, float("nan"), np.float32(2.0), np.array([1.0]), "1", None])
def test_bf16_from_bits_refuses_what_is_no_bit_pattern(value: object) -> None:
    with pytest.raises(TypeError, match="bf16_from_bits"):
        bf16_from_bits(value)
