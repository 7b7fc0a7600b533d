"""Matrix-product leaves for the gpu target's tl.dot recognition (tests/backends/test_triton_dot.py):
forms it must match, and near misses it must leave to the literal translation.

Every `<leaf>_root` graph takes (a, b, c, m, n, k) and runs the leaf on an n x m grid (x = column;
naive_rows_on_x: m x n); a is m x k, b is k x n, c is m x n, all row-major f32.
"""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64

TILE = 16


# -- forms that match --------------------------------------------------------------------------

@hpvm.leaf
def naive(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
          c_bytes: i64, m: i64, n: i64, k: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + t] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.leaf
def naive_rows_on_x(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                    c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    """Rows along x, columns along y, B's factor first, and a start value: still a product."""
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    j = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = c[i * n + j]
    for t in range(k):
        acc += b[t * n + j] * a[i * k + t]
    c[i * n + j] = acc


@hpvm.graph
def naive_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
               c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(naive, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def naive_rows_on_x_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                         c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(naive_rows_on_x, grid=(m, n), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


# -- forms that match and compute another function of (row, k) than a plain product: compared
# with the literal translation on the cpu target

@hpvm.leaf
def c_int_k(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
            c_bytes: i64, m: i64, n: i64, k: i32):
    """C's `int` counter (HPVM-C's Parboil sgemm): the loop variable is i32."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + t] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.leaf
def wrapping_k(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
               c_bytes: i64, m: i64, n: i64, k: i32, w: i32):
    """A's column from an i32 product that wraps (t * w passes 2**31 for large t): the kernel
    must wrap where the literal translation does, or it reads other columns."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + (((t * w) >> 28) & 31)] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.leaf
def non_affine(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
               c_bytes: i64, m: i64, n: i64, k: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + (t * 7) % k] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.graph
def c_int_k_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                 c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i32):
    hpvm.node(c_int_k, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def wrapping_k_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                    c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i32, w: i32):
    hpvm.node(wrapping_k, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k, w=w)


# -- near misses: each must keep the literal translation ----------------------------------------

@hpvm.leaf
def same_dim(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
             c_bytes: i64, m: i64, n: i64, k: i64):
    """Both factors follow the row: a row-wise dot product broadcast along the columns."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + t] * b[t * n + i % n]
    c[i * n + j] = acc


@hpvm.leaf
def extra_term(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
               c_bytes: i64, m: i64, n: i64, k: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += a[i * k + t] * b[t * n + j] + a[i * k + t]
    c[i * n + j] = acc


@hpvm.leaf
def guarded_k(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
              c_bytes: i64, m: i64, n: i64, k: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        if t != j:
            acc += a[i * k + t] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.leaf
def counter_kept(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
                 c_bytes: i64, m: i64, n: i64, k: i64):
    """The loop variable's last value is used after the loop."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    t = 0
    for t in range(k):
        acc += a[i * k + t] * b[t * n + j]
    c[i * n + j] = acc + hpvm.f32(t)


@hpvm.graph
def same_dim_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                  c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(same_dim, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def extra_term_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                    c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(extra_term, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def guarded_k_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                   c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(guarded_k, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def non_affine_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                    c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(non_affine, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def counter_kept_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                      c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(counter_kept, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.leaf
def store_before(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
                 c_bytes: i64, m: i64, n: i64, k: i64):
    """A store before the loop (the dot kernel runs those statements after it: none may store)."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    c[i * n + j] = 1.0
    acc = c[i * n + j]
    for t in range(k):
        acc += a[i * k + t] * b[t * n + j]
    c[i * n + j] = acc


@hpvm.graph
def store_before_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                      c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(store_before, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.leaf
def parboil_transposed(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                       c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    """examples/sgemm.py's leaf reading tile_a transposed: the value comes from another row."""
    tile_a = hpvm.malloc(TILE * TILE * 4, f32)
    tile_b = hpvm.malloc(TILE * TILE * 4, f32)
    me = hpvm.get_node()
    tile = hpvm.get_parent_node(me)
    tx = hpvm.get_node_instance_id_x(me)
    ty = hpvm.get_node_instance_id_y(me)
    col = hpvm.get_node_instance_id_x(tile) * TILE + tx
    row = hpvm.get_node_instance_id_y(tile) * TILE + ty
    acc = 0.0
    for k0 in range(0, k, TILE):
        tile_a[ty * TILE + tx] = a[row * k + k0 + tx] if row < m and k0 + tx < k else 0.0
        tile_b[ty * TILE + tx] = b[(k0 + ty) * n + col] if k0 + ty < k and col < n else 0.0
        hpvm.barrier()
        for t in range(TILE):
            acc += tile_a[t * TILE + ty] * tile_b[t * TILE + tx]
        hpvm.barrier()
    if row < m and col < n:
        c[row * n + col] = acc


@hpvm.graph
def parboil_transposed_tiles(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                             c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(parboil_transposed, grid=(TILE, TILE), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes,
              c=c, c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.graph
def parboil_transposed_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                            c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(parboil_transposed_tiles, grid=((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), a=a,
              a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes, m=m, n=n, k=k)


@hpvm.leaf
def remote_rows(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
                c_bytes: i64, m: i64, n: i64, k: i64):
    """A's rows read with remote_load (rank 0: in a world of one, the local buffer): tl.dot tiles
    would read this rank's buffer whatever the rank."""
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += hpvm.remote_load(a, i * k + t, 0) * b[t * n + j]
    c[i * n + j] = acc


@hpvm.graph
def remote_rows_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                     c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64):
    hpvm.node(remote_rows, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k)


MATCHED = {"naive": naive_root, "naive_rows_on_x": naive_rows_on_x_root}
# graph and the arguments after (m, n, k)
MATCHED_OTHER = {"c_int_k": (c_int_k_root, ()), "wrapping_k": (wrapping_k_root, ((1 << 27) + 1,)),
                 "non_affine": (non_affine_root, ())}
NEAR_MISSES = {"same_dim": same_dim_root, "extra_term": extra_term_root,
               "guarded_k": guarded_k_root,
               "counter_kept": counter_kept_root, "store_before": store_before_root,
               "parboil_transposed": parboil_transposed_root, "remote_rows": remote_rows_root}


# -- the Parboil leaf of examples/sgemm.py on a leaf grid of g x g: proven only for g == TILE -----

from sgemm import sgemm_tile  # noqa: E402 - examples/ is on the tests' path


@hpvm.graph
def sized_tiles(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
                c_bytes: i64, m: i64, n: i64, k: i64, alpha: f32, beta: f32, g: i64):
    hpvm.node(sgemm_tile, grid=(g, g), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k, alpha=alpha, beta=beta)


@hpvm.graph
def sized_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
               c_bytes: i64, m: i64, n: i64, k: i64, alpha: f32, beta: f32, g: i64):
    hpvm.node(sized_tiles, grid=((n + TILE - 1) // TILE, (m + TILE - 1) // TILE), a=a,
              a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c, c_bytes=c_bytes, m=m, n=n, k=k,
              alpha=alpha, beta=beta, g=g)


@hpvm.leaf
def guarded_rows(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64, c: InOut[Ptr[f32]],
                 c_bytes: i64, m: i64, n: i64, k: i64, m2: i64, n2: i64):
    j = hpvm.get_node_instance_id_x(hpvm.get_node())
    i = hpvm.get_node_instance_id_y(hpvm.get_node())
    acc = 0.0
    for t in range(k):
        acc += (a[i * k + t] if i < m2 else 0.0) * (b[t * n + j] if j < n2 else 0.0)
    c[i * n + j] = acc


@hpvm.graph
def guarded_rows_root(a: In[Ptr[f32]], a_bytes: i64, b: In[Ptr[f32]], b_bytes: i64,
                      c: InOut[Ptr[f32]], c_bytes: i64, m: i64, n: i64, k: i64, m2: i64, n2: i64):
    hpvm.node(guarded_rows, grid=(n, m), a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, c=c,
              c_bytes=c_bytes, m=m, n=n, k=k, m2=m2, n2=n2)
