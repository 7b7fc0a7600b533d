"""A leaf whose uniform scalars fall in every class of Triton's specialisation of an integer
argument (equal to 1: a constexpr; the i32 range, negative too; i64; a multiple of 16), floats
passed as their bits, and a fixed grid's constexpr extents. LAUNCHES are what
tests/backends/triton_compile_check.py compiles as those launches would on an H100, checking the
own launcher's parameters (backends/triton/launcher.py) against each kernel's PTX."""
from __future__ import annotations

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, f64, i32, i64, u8


@hpvm.leaf
def mixed(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, one: i64,
          small: i32, big: i64, aligned: i64, scale: f32, wide: f64, tiny: u8):
    i = hpvm.instance_id(0)
    out[i] = a[i] * scale + f32(one + i64(small) + big + aligned) + f32(wide) + f32(tiny)


@hpvm.graph
def root(a: In[Ptr[f32]], a_bytes: i64, out: Out[Ptr[f32]], out_bytes: i64, n: i64, one: i64,
         small: i32, big: i64, aligned: i64, scale: f32, wide: f64, tiny: u8):
    hpvm.node(mixed, grid=n, a=a, a_bytes=a_bytes, out=out, out_bytes=out_bytes, one=one,
              small=small, big=big, aligned=aligned, scale=scale, wide=wide, tiny=tiny)


def reference(a: np.ndarray, one: int, small: int, big: int, aligned: int, scale: float,
              wide: float, tiny: int) -> np.ndarray:
    """What root computes."""
    total = np.float32(one + small + big + aligned)
    return a * np.float32(scale) + total + np.float32(wide) + np.float32(tiny)


SCALARS = [(1, -3, 1 << 40, 32, 3, 2, 7), (1, 17, 5, 1, 1, 0, 1)]


def _launch(n: int, scalars: tuple[int, ...]) -> tuple[object, list[object], list[tuple[int, ...]]]:
    a = np.zeros(n, np.float32)
    return root, [a, a.nbytes, np.zeros_like(a), a.nbytes, *scalars], [(n,)]


# (graph, the leaf's arguments, the leaf's extents): a small grid (its extent a constexpr) and a
# large one
LAUNCHES = [_launch(n, s) for n in (64, 70_000) for s in SCALARS]
