"""Leaves that count with atomics, for the gpu target's privatised counts
(tests/backends/test_triton_private.py): forms it privatises, and ones it must not."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, bf16, f16, f32, i32, i64, u32


@hpvm.leaf
def mixed(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[u32]], bins_bytes: i64,
          nbins: i32, n: i64):
    """Adds and subs of constants, under a divergent guard and in a per-instance loop."""
    i = hpvm.instance_id(0)
    if i < n:
        v = data[i]
        if v >= 0:
            hpvm.atomic_add(bins, v % nbins, hpvm.u32(3))
        else:
            hpvm.atomic_sub(bins, (-v) % nbins, hpvm.u32(1))
        for r in range(i % 3):
            hpvm.atomic_add(bins, r, hpvm.u32(1))


@hpvm.graph
def mixed_root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[u32]], bins_bytes: i64,
               nbins: i32, n: i64, grid: i64):
    hpvm.node(mixed, grid=grid, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
              nbins=nbins, n=n)


@hpvm.leaf
def ticket(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
           out: InOut[Ptr[i32]], out_bytes: i64, nbins: i32):
    """The old value is used: each instance's ticket within its bin (not privatisable)."""
    i = hpvm.instance_id(0)
    out[i] = hpvm.atomic_add(bins, data[i] % nbins, 1)


@hpvm.graph
def ticket_root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                out: InOut[Ptr[i32]], out_bytes: i64, nbins: i32, n: i64):
    hpvm.node(ticket, grid=n, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
              out=out, out_bytes=out_bytes, nbins=nbins)


@hpvm.leaf
def weighted(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
             nbins: i32):
    """A data-dependent amount: a sum per bin, not a count (not privatised)."""
    i = hpvm.instance_id(0)
    hpvm.atomic_add(bins, data[i] % nbins, data[i] % 5)


@hpvm.graph
def weighted_root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                  nbins: i32, n: i64):
    hpvm.node(weighted, grid=n, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
              nbins=nbins)


@hpvm.leaf
def remainders(x: In[Ptr[i64]], x_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, d: i64,
               e: u32):
    """`%` by divisors that are one scalar for every instance (powers of two take a mask)."""
    i = hpvm.instance_id(0)
    out[2 * i] = x[i] % d
    out[2 * i + 1] = i64(u32(x[i]) % e)


@hpvm.graph
def remainders_root(x: In[Ptr[i64]], x_bytes: i64, out: InOut[Ptr[i64]], out_bytes: i64, d: i64,
                    e: u32, n: i64):
    hpvm.node(remainders, grid=n, x=x, x_bytes=x_bytes, out=out, out_bytes=out_bytes, d=d, e=e)


@hpvm.leaf
def half_atomics(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i32]], idx_bytes: i64,
                 h: InOut[Ptr[f16]], h_bytes: i64, b: InOut[Ptr[bf16]], b_bytes: i64,
                 old: InOut[Ptr[f32]], old_bytes: i64):
    """f16 and bf16 atomic add, sub and exchange; every old value is used too."""
    i = hpvm.instance_id(0)
    j = idx[i]
    v = x[i]
    hpvm.atomic_add(h, j, f16(v))
    hpvm.atomic_sub(b, j, bf16(v))
    old[i] = f32(hpvm.atomic_xchg(h, j + 4, f16(v))) + f32(hpvm.atomic_add(b, j + 4, bf16(v)))


@hpvm.graph
def half_atomics_root(x: In[Ptr[f32]], x_bytes: i64, idx: In[Ptr[i32]], idx_bytes: i64,
                      h: InOut[Ptr[f16]], h_bytes: i64, b: InOut[Ptr[bf16]], b_bytes: i64,
                      old: InOut[Ptr[f32]], old_bytes: i64, n: i64):
    hpvm.node(half_atomics, grid=n, x=x, x_bytes=x_bytes, idx=idx, idx_bytes=idx_bytes, h=h,
              h_bytes=h_bytes, b=b, b_bytes=b_bytes, old=old, old_bytes=old_bytes)


@hpvm.leaf
def extreme_steps(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                  nbins: i64):
    """Constant steps at the ends of i32: subtracting -2**31 wraps to adding it."""
    i = hpvm.instance_id(0)
    hpvm.atomic_sub(bins, hpvm.i64(data[i]) % nbins, hpvm.i32(-2147483648))
    hpvm.atomic_add(bins, hpvm.i64(data[i]) % nbins, hpvm.i32(2147483647))
    hpvm.atomic_sub(bins, hpvm.i64(data[i]) % nbins, hpvm.i32(2147483647))


@hpvm.graph
def extreme_steps_root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                       nbins: i64, n: i64):
    hpvm.node(extreme_steps, grid=n, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
              nbins=nbins)


@hpvm.leaf
def shifted(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
            shift: i64):
    """Indices below 0 and past the buffer when launched unproven: the privatised kernel must
    drop those (the literal kernel would write out of bounds)."""
    i = hpvm.instance_id(0)
    hpvm.atomic_add(bins, hpvm.i64(data[i]) - shift, 1)


@hpvm.graph
def shifted_root(data: In[Ptr[i32]], data_bytes: i64, bins: InOut[Ptr[i32]], bins_bytes: i64,
                 shift: i64, n: i64):
    hpvm.node(shifted, grid=n, data=data, data_bytes=data_bytes, bins=bins, bins_bytes=bins_bytes,
              shift=shift)
