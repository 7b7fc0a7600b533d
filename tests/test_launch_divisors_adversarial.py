"""The cpu target's performance rewrites at their edges, hunted: launch-wide divisors (the body
emitted twice, shifts and masks where every divisor is a power of two, reciprocals elsewhere),
non-temporal stores, the pool's partitions. Each result is compared with NumPy and the python
target.

The bugs found (each has a regression test below):

- two launch-wide divisors that differ only in the sign of a float zero inside them
  (`i32(1.0 / (f64(d) * 0.0))` and `i32(1.0 / (f64(d) * -0.0))`) compared equal as kernel IR, so
  the cpu target listed one divisor and divided by its reciprocal (or shift) for both: `5 //
  INT_MIN` gave 0. Float constants now compare by their bits.
"""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from conftest import TARGETS
from hpvm_py import In, Out, Ptr, f64, i32, i64, u32


@hpvm.leaf
def signed_zero_divisors(a: In[Ptr[i32]], a_bytes: i64, q: Out[Ptr[i32]], q_bytes: i64,
                         r: Out[Ptr[u32]], r_bytes: i64, d: i32):
    i = hpvm.instance_id(0)
    q[i] = a[i] // i32(1.0 / (f64(d) * 0.0)) + a[i] // i32(1.0 / (f64(d) * -0.0)) * 1000
    # 4 where d > 0 (a power of two: shifts) next to 3, which differ in a zero's sign only
    r[i] = u32(a[i]) // (u32(1.0 / (f64(d) * -0.0)) + u32(4)) \
        + u32(a[i]) % (u32(1.0 / (f64(d) * 0.0)) + u32(4)) * u32(1000000)


@hpvm.graph
def by_signed_zero_divisors(a: In[Ptr[i32]], a_bytes: i64, q: Out[Ptr[i32]], q_bytes: i64,
                            r: Out[Ptr[u32]], r_bytes: i64, d: i32, n: i64):
    hpvm.node(signed_zero_divisors, grid=n, a=a, a_bytes=a_bytes, q=q, q_bytes=q_bytes, r=r,
              r_bytes=r_bytes, d=d)


@pytest.mark.parametrize("target", TARGETS)
def test_divisors_differing_in_a_zeros_sign_are_two_divisors(target: str, rng) -> None:
    a = rng.integers(0, 2**31 - 1, 37, dtype=np.int32)
    q, r = np.zeros_like(a), np.zeros(a.size, np.uint32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(by_signed_zero_divisors, a, a.nbytes, q, q.nbytes, r, r.nbytes, 1,
                              a.size))
    top, bottom = np.int32(2**31 - 1), np.int32(-2**31)  # i32(inf), i32(-inf): casts saturate
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(q, a // top + (a // bottom) * np.int32(1000))
        au = a.astype(np.uint32)
        np.testing.assert_array_equal(r, au // np.uint32(4)
                                      + (au % np.uint32(3)) * np.uint32(1000000))
