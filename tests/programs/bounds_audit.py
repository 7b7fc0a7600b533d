"""Leaves for the audit of the bounds analysis (tests/test_bounds_soundness.py): each one indexes
`out` (8 elements) with `k` (an i64 given per instance: the analysis knows its minimum and maximum)
through one construct whose semantics an interval analysis can get wrong."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i8, i64, u8, u32


@hpvm.leaf
def floordiv(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[7 // k] = 1  # k may be 0 (gives 0) or negative (gives a negative index)


@hpvm.leaf
def modulo(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[5 % k] = 1  # Python's %: the divisor's sign


@hpvm.leaf
def shift_right(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[(k - 4) >> 1] = 1  # a negative value stays negative


@hpvm.leaf
def shift_left(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[1 << k] = 1


@hpvm.leaf
def float_cast(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[i64(f32(k) * 0.5)] = 1


@hpvm.leaf
def unsigned_wrap(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[u32(k) - u32(1)] = 1  # 0 - 1 wraps to 2**32 - 1


@hpvm.leaf
def loaded_guard(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    x = data[0]
    if x < u8(k):
        out[x] = 1


@hpvm.leaf
def select(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[k if data[0] > 3 else 0] = 1


@hpvm.leaf
def atomic_old(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    old = hpvm.atomic_add(out, 0, k)
    out[old] = 1  # the old content: anything


@hpvm.leaf
def clamp(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[max(min(k, 7), 0)] = 1


@hpvm.leaf
def min_only(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[min(k, 7)] = 1


@hpvm.leaf
def narrow_guard(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    if i8(k) < i8(8) and i8(k) >= i8(0):  # says nothing about k itself
        out[k] = 1


@hpvm.leaf
def abs_index(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    out[abs(k)] = 1


@hpvm.leaf
def relation_in_loop(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    a = i64(data[0])
    if a + k < 8 and a + k >= 0:
        for t in range(3):
            out[a + k] = 1  # true in the first iteration only: a grows
            a = a + 1


@hpvm.leaf
def relation_kept(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    a = i64(data[0])
    if a + k < 8 and a + k >= 0:
        for t in range(3):
            out[a + k] = 1  # a and k do not change in the loop


@hpvm.leaf
def loop_var_assigned(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    for t in range(k):
        t = t + 100
        out[t - 100] = 1
    out[k - 1] = 2


@hpvm.leaf
def zero_trip(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    t = 50
    for t in range(k):
        out[t] = 1
    out[t - 43] = 2  # t is still 50 when the loop ran zero times


@hpvm.leaf
def while_true(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    j = 0
    while True:
        if j >= k:
            break
        out[j] = 1
        j = j + 1
    out[j - 1] = 2


@hpvm.leaf
def many_loops(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    a = 0
    b = 0
    c = 0
    for t in range(k):
        for w in range(k):
            for z in range(k):
                a = b + 1
                b = c * 2
                c = a - b
                if a < 8 and a >= 0:
                    out[a] = 1
                while c > 3:
                    c = c - 1
                    if data[0] == 0:
                        break
    out[0] = a


@hpvm.leaf
def narrow_param(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i8):
    out[k] = 1  # k arrives as i8: 200 given in an int64 array becomes -56


# -- exact affine forms of variables, kept per path (bounds_analysis.paths) ---------------------


@hpvm.leaf
def clamped_grid(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    # a 2 x 4 grid, row k // 4 - 1 and column k % 4 - 1 clamped by moving the offset back
    row = k // 4 - 1
    col = k % 4 - 1
    off = row * 4 + col
    if row < 0:
        off = col
    elif row > 1:
        off = 4 + col
    if col < 0:
        off -= col
    elif col > 3:
        off = off - col + 3
    out[off] = 1


@hpvm.leaf
def clamped_one_short(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    off = k - 2
    if k - 2 < -1:  # -1 is let through
        off -= k - 2
    elif k - 2 > 7:
        off = off - (k - 2) + 7
    out[off] = 1


@hpvm.leaf
def form_after_change(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    j = k % 8
    off = j + 2
    j = j + 5
    out[off - j + 3] = 1  # off - j is -3 now: an index of 0 for a proof that kept j's old value


@hpvm.leaf
def form_in_loop(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    j = k % 4
    off = j + 1
    for t in range(3):
        out[off - j] = 1  # 1, then 0, then -1
        off = off - 1


@hpvm.leaf
def forms_of_many_paths(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    j = k % 8
    off = j
    for bit in range(5):  # 32 paths: joined, and the join knows nothing exact
        if data[bit] > 3:
            off = off + 1
    if j < 4:
        out[off - j] = 1  # 0 to 5


# -- residues: `x % m == r` (bounds_analysis._congruence) ----------------------------------------


@hpvm.leaf
def parity_neighbour(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64, k: i64):
    if k % 2 == 0:
        out[k + 1] = 1  # an even k below 8 is at most 6
    else:
        out[k - 1] = 1  # an odd k from 0 is at least 1 (-1 is odd too: Python's %)


@hpvm.leaf
def parity_by_elimination(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64,
                          k: i64):
    # a Bayer mosaic's choice of neighbours: the last branch is odd only because the others are not
    col = k // 2
    if k % 2 == 0 and col % 2 == 0:
        out[k + 1] = 1
    elif (k & 1) == 0 and col % 2 == 1:
        out[k] = 1
    elif k % 2 != 0 and col % 2 == 0:
        out[k - 1] = 1
    else:
        out[k - 1] = 1


@hpvm.leaf
def parity_after_change(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64,
                        k: i64):
    j = k
    if j % 2 == 0:
        j = j + 1  # odd now
        if j < 8:  # a proof that kept "even" would bound j by 6 here
            out[j + 1] = 1  # k = 6: out[8]


@hpvm.leaf
def parity_of_negatives(out: InOut[Ptr[i64]], out_bytes: i64, data: In[Ptr[u8]], data_bytes: i64,
                        k: i64):
    if k % 2 == 1:  # k = -3, -1, 1, 3 for k in [-3, 4]
        out[k + 4] = 1
