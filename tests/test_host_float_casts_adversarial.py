"""Integer semantics hunted across targets (docs/language.md, "Typing" and "Arithmetic"): narrow
and unsigned types, conversions between them and floats, on the host and in leaves.

Found by this hunt (each test below named so fails without its fix):

- `hpvm.f32(2**64)` on the host raised an OverflowError ("does not fit in 64 bits"), where the
  same cast in a leaf gives 2**64 rounded once and docs/language.md gives `hpvm.f32(2**128)` as
  inf: an int beyond 64 bits becomes a float on the host as it does in a leaf:
  test_host_float_of_an_int_beyond_64_bits_is_the_leafs.
"""
from __future__ import annotations

import math
import random

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import load
from hpvm_py.types import SCALAR_TYPES

SEED = 20261130

FORMATS = {"f16": (11, 15), "bf16": (8, 127), "f32": (24, 127), "f64": (53, 1023)}  # digits, emax


def round_exact(x: int, t: str) -> float:
    """The float of type t nearest to the integer x (ties to even), inf beyond t's range; bf16
    rounds through f32, as its conversion from an integer does (docs/language.md)."""
    if t == "bf16":
        through = round_exact(x, "f32")
        return through if math.isinf(through) else round_exact(int(through), "bf16 alone")
    digits, emax = FORMATS[t.split()[0]]
    m = abs(x)
    drop = max(m.bit_length() - digits, 0)
    q, r = m >> drop, m & ((1 << drop) - 1)
    if drop and (r > 1 << (drop - 1) or (r == 1 << (drop - 1) and q & 1)):
        q += 1
    value = q << drop
    out = math.inf if value > ((1 << digits) - 1) << (emax - digits + 1) else float(value)
    return -out if x < 0 else out


CAST_SOURCE = '''
import hpvm_py as hpvm
from hpvm_py import Out, Ptr, i64, f16, bf16, f32, f64


@hpvm.leaf
def literal(out: Out[Ptr[{t}]], out_bytes: i64):
    out[0] = hpvm.{t}({v})


@hpvm.graph
def root(out: Out[Ptr[{t}]], out_bytes: i64):
    hpvm.node(literal, out=out, out_bytes=out_bytes)
'''


@pytest.mark.parametrize("t", ["f16", "bf16", "f32", "f64"])
def test_host_float_of_an_int_beyond_64_bits_is_the_leafs(t: str) -> None:
    rng = random.Random(SEED + len(t))
    values = [2**64, -(2**64), 2**64 + 1, 2**128, -(2**200), 10**400]
    values += [rng.choice([1, -1]) * rng.randrange(2**64, 2**rng.randrange(65, 1100)) for _ in range(4)]
    for v in values:
        want = round_exact(v, t)
        host = getattr(hpvm, t)(v)
        assert float(host) == want, (t, v, host, want)
        assert np.asarray(host).dtype == (np.float32 if t == "bf16" else SCALAR_TYPES[t].numpy_dtype)
        module = load(CAST_SOURCE.format(t=t, v=v))
        out = np.zeros(1, np.uint16 if t == "bf16" else SCALAR_TYPES[t].numpy_dtype)
        with hpvm.runtime("python"):
            hpvm.wait(hpvm.launch(module.root, out, out.nbytes))
        leaf = hpvm.types.bf16_from_bits(out[0]) if t == "bf16" else out[0]
        assert float(leaf) == float(host), (t, v, leaf, host)
