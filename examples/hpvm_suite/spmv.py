"""Parboil SpMV (JDS format) as HPVM's own port writes it (`parboil/benchmarks/spmv/src/hpvm/main.cpp`).

y = A x with A in Parboil's padded JDS (jagged diagonal storage) layout, built on the host as
Parboil's `coo_to_jds` builds it (pad 32, row padding 1, pack size 1, symmetric input mirrored):
rows sorted by their number of entries (most first, `perm` maps back), the row count padded to a
multiple of 32, every row of a group of 32 padded to its group's longest row (`nzcnt[group]`), and
the matrix stored by jagged diagonal (`jds_ptr[d]` is where diagonal d starts; the entry of sorted
row r in diagonal d is at `jds_ptr[d] + r`). The host launches the graph 50 times, as the original
does (`for (i = 0; i < 50; i++)`), on the same input and output.

DFG:

    root  spmv_lvl3           single instance
      spmv_lvl2               single instance (the original: dim_X2 instances, see below)
        spmv_lvl1             1-D, grid / block instances (the CUDA grid)
          spmv_jds            leaf, 1-D, block instances

The block and grid come from Parboil's `compute_active_thread(.., nzcnt_len, 32, 3, 0, 8)`: 192
threads and a grid rounded up to them when nzcnt_len * 32 > 8 * 1536, else 32 threads and
nzcnt_len * 32. The leaf is the original's software-pipelined loop (prefetch of diagonal k while
diagonal k - 2 is accumulated), instance by instance. dst_vector is `InOut` (it is in both lists of
the original's `__hpvm__attributes`), every other pointer `In`; dim is `i32`.

Inputs: Parboil's `large` dataset is Dubcova3 (146,689 rows; its matrix file is not in the HPVM
repository, only its 146,689-element vector). The port generates a symmetric matrix of that many
rows with about the same number of entries (Dubcova3 has 3,636,643, 24.8 a row): each row i gets
a diagonal entry and 4 to 20 entries in the band [max(0, i - 2000), i) of the lower triangle
(repeats dropped), mirrored as Parboil mirrors a symmetric Matrix Market file: 3,658,635 entries,
24.9 a row on average, 5 to 79 a row; values and x uniform in [0, 1) from the suite's fixed seed.
`small` is 1,000 rows with a band of 100 (23,012 entries), 2 launches.
`read_matrix_market(path)` reads a real `.mtx` file instead (coordinate, general or symmetric).

Check: Parboil's `tools/compare-output` for spmv: each element within 1e-4 * max |y| or 0.2%.

Differences from the original:
- spmv_lvl3 creates spmv_lvl2 with 1 instance. The original gives it dim_X2 (= grid / block)
  instances, and spmv_lvl2 gives spmv_lvl1 dim_X2 again: the leaf indexes with its own and its
  parent's ids only, so every instance of spmv_lvl2 repeats the whole product, writing the same
  values, dim_X2 times over (765 times on the large dataset).
- Padding entries of the JDS arrays have column index 0 where Parboil's converter stores -1: the
  original's kernel loads `x_vec[-1]` for them (out of bounds; the product with the 0.0 padding
  value hides it), which hpvm-py's bounds checks refuse.
- A group of 32 rows with no entries at all (a matrix with empty rows) still gets one diagonal
  of padding (`nzcnt` is at least 1): the kernel loads diagonal 0 of every row before it reads
  its group's count, and adds that product once, so without the padding such a row took another
  row's entry of diagonal 1 (or read past the arrays).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64

try:
    from ._common import ONCE, Passes, SuiteInputError, optional_numba, parboil_close, rng_for
except ImportError:  # loaded as a file (`hpvmc check examples/hpvm_suite/spmv.py`)
    import sys
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    from hpvm_suite._common import ONCE, Passes, SuiteInputError, optional_numba, parboil_close, rng_for

WARP_BITS = 5
PAD = 32
ITERATIONS = 50

SIZES = {"small": {"dim": 1000, "band": 100, "iterations": 2},
         "standard": {"dim": 146689, "band": 2000, "iterations": ITERATIONS}}


@hpvm.leaf
def spmv_jds(dst_vector: InOut[Ptr[f32]], bytes_dst_vector: i64, d_data: In[Ptr[f32]],
             bytes_d_data: i64, d_index: In[Ptr[i32]], bytes_d_index: i64, d_perm: In[Ptr[i32]],
             bytes_d_perm: i64, x_vec: In[Ptr[f32]], bytes_x_vec: i64, dim: i32,
             jds_ptr_int: In[Ptr[i32]], bytes_jds_ptr_int: i64, sh_zcnt_int: In[Ptr[i32]],
             bytes_sh_zcnt_int: i64):
    this = hpvm.get_node()
    parent = hpvm.get_parent_node(this)
    lx = hpvm.get_node_instance_id_x(this)
    gx = hpvm.get_node_instance_id_x(parent)
    gridx = hpvm.get_num_node_instances_x(this)
    ix = gx * gridx + lx
    warp_id = ix >> WARP_BITS
    if ix < dim:
        acc: f32 = 0.0
        bound = sh_zcnt_int[warp_id]
        # prefetch diagonal 0
        j = jds_ptr_int[0] + ix
        d = d_data[j]
        i = d_index[j]
        t = x_vec[i]
        if bound > 1:
            # prefetch diagonal 1
            j = jds_ptr_int[1] + ix
            i = d_index[j]
            for k in range(2, bound):
                dn = d_data[j]             # value of diagonal k - 1
                j = jds_ptr_int[k] + ix
                inext = d_index[j]         # column of diagonal k
                tn = x_vec[i]              # x of diagonal k - 1
                acc += d * t               # diagonal k - 2
                i = inext
                d = dn
                t = tn
            dn = d_data[j]
            tn = x_vec[i]
            acc += d * t
            d = dn
            t = tn
        acc += d * t
        dst_vector[d_perm[ix]] = acc


@hpvm.graph
def spmv_lvl1(dst_vector: InOut[Ptr[f32]], bytes_dst_vector: i64, d_data: In[Ptr[f32]],
              bytes_d_data: i64, d_index: In[Ptr[i32]], bytes_d_index: i64, d_perm: In[Ptr[i32]],
              bytes_d_perm: i64, x_vec: In[Ptr[f32]], bytes_x_vec: i64, dim: i32,
              jds_ptr_int: In[Ptr[i32]], bytes_jds_ptr_int: i64, sh_zcnt_int: In[Ptr[i32]],
              bytes_sh_zcnt_int: i64, dim_x1: i64):
    hpvm.node(spmv_jds, grid=dim_x1, dst_vector=dst_vector, bytes_dst_vector=bytes_dst_vector,
              d_data=d_data, bytes_d_data=bytes_d_data, d_index=d_index,
              bytes_d_index=bytes_d_index, d_perm=d_perm, bytes_d_perm=bytes_d_perm, x_vec=x_vec,
              bytes_x_vec=bytes_x_vec, dim=dim, jds_ptr_int=jds_ptr_int,
              bytes_jds_ptr_int=bytes_jds_ptr_int, sh_zcnt_int=sh_zcnt_int,
              bytes_sh_zcnt_int=bytes_sh_zcnt_int)


@hpvm.graph
def spmv_lvl2(dst_vector: InOut[Ptr[f32]], bytes_dst_vector: i64, d_data: In[Ptr[f32]],
              bytes_d_data: i64, d_index: In[Ptr[i32]], bytes_d_index: i64, d_perm: In[Ptr[i32]],
              bytes_d_perm: i64, x_vec: In[Ptr[f32]], bytes_x_vec: i64, dim: i32,
              jds_ptr_int: In[Ptr[i32]], bytes_jds_ptr_int: i64, sh_zcnt_int: In[Ptr[i32]],
              bytes_sh_zcnt_int: i64, dim_x1: i64, dim_x2: i64):
    hpvm.node(spmv_lvl1, grid=dim_x2, dst_vector=dst_vector, bytes_dst_vector=bytes_dst_vector,
              d_data=d_data, bytes_d_data=bytes_d_data, d_index=d_index,
              bytes_d_index=bytes_d_index, d_perm=d_perm, bytes_d_perm=bytes_d_perm, x_vec=x_vec,
              bytes_x_vec=bytes_x_vec, dim=dim, jds_ptr_int=jds_ptr_int,
              bytes_jds_ptr_int=bytes_jds_ptr_int, sh_zcnt_int=sh_zcnt_int,
              bytes_sh_zcnt_int=bytes_sh_zcnt_int, dim_x1=dim_x1)


@hpvm.graph
def spmv_lvl3(dst_vector: InOut[Ptr[f32]], bytes_dst_vector: i64, d_data: In[Ptr[f32]],
              bytes_d_data: i64, d_index: In[Ptr[i32]], bytes_d_index: i64, d_perm: In[Ptr[i32]],
              bytes_d_perm: i64, x_vec: In[Ptr[f32]], bytes_x_vec: i64, dim: i32,
              jds_ptr_int: In[Ptr[i32]], bytes_jds_ptr_int: i64, sh_zcnt_int: In[Ptr[i32]],
              bytes_sh_zcnt_int: i64, dim_x1: i64, dim_x2: i64):
    hpvm.node(spmv_lvl2, dst_vector=dst_vector, bytes_dst_vector=bytes_dst_vector,
              d_data=d_data, bytes_d_data=bytes_d_data, d_index=d_index,
              bytes_d_index=bytes_d_index, d_perm=d_perm, bytes_d_perm=bytes_d_perm, x_vec=x_vec,
              bytes_x_vec=bytes_x_vec, dim=dim, jds_ptr_int=jds_ptr_int,
              bytes_jds_ptr_int=bytes_jds_ptr_int, sh_zcnt_int=sh_zcnt_int,
              bytes_sh_zcnt_int=bytes_sh_zcnt_int, dim_x1=dim_x1, dim_x2=dim_x2)


root = spmv_lvl3


# ----------------------------------------------------------------------------------------------
# Host side: the matrix, its JDS form, the launch geometry


def generate_coo(dim: int, band: int, rng: np.random.Generator):
    """Lower triangle plus diagonal of a banded symmetric matrix (what a symmetric .mtx stores)."""
    counts = rng.integers(4, 21, dim)
    counts = np.minimum(counts, np.arange(dim))  # row i has only i columns left of the diagonal
    rows = np.repeat(np.arange(dim), counts)
    # a column in the band left of the diagonal: [max(0, i - band), i)
    offsets = 1 + (rng.random(rows.size) * np.minimum(band, rows)).astype(np.int64)
    cols = rows - offsets
    keys = np.unique(rows * dim + cols)  # sorted, repeated entries dropped
    rows = np.concatenate([np.arange(dim), keys // dim])
    cols = np.concatenate([np.arange(dim), keys % dim])
    vals = rng.random(rows.size, dtype=np.float32)
    return rows, cols, vals


def read_matrix_market(path: str | Path):
    """(dim, rows, cols, vals) of a coordinate Matrix Market file (0-based; symmetric: one half)."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SuiteInputError(f"{path}: cannot read a Matrix Market file: {exc}") from None
    if not lines or not lines[0].lower().startswith("%%matrixmarket matrix coordinate"):
        raise SuiteInputError(f"{path}: not a Matrix Market coordinate matrix: the first line "
                              f"should start with '%%MatrixMarket matrix coordinate'")
    banner = lines[0].lower().split()
    field, symmetry = banner[3], banner[4] if len(banner) > 4 else "general"
    if field not in ("real", "integer", "pattern") or symmetry not in ("general", "symmetric"):
        raise SuiteInputError(f"{path}: unsupported Matrix Market type '{field} {symmetry}' "
                              f"(expected real, integer or pattern; general or symmetric)")
    body = [ln for ln in lines[1:] if ln.strip() and not ln.startswith("%")]
    try:
        nrows, ncols, nnz = (int(v) for v in body[0].split())
    except (IndexError, ValueError):
        raise SuiteInputError(f"{path}: expected a size line 'rows cols entries' after the "
                              f"header") from None
    if nrows != ncols:
        raise SuiteInputError(f"{path}: expected a square matrix, found {nrows} x {ncols}")
    if len(body) - 1 != nnz:
        raise SuiteInputError(f"{path}: truncated: the size line promises {nnz} entries, the "
                              f"file holds {len(body) - 1}")
    width = 2 if field == "pattern" else 3
    try:
        # reshaped: a matrix without entries is a (0, width) table, not a (0,) one
        table = np.array([ln.split()[:width] for ln in body[1:]], dtype=np.float64).reshape(-1, width)
        if table.shape != (nnz, width):
            raise ValueError
    except ValueError:
        raise SuiteInputError(f"{path}: expected {width} numbers on every entry line") from None
    rows, cols = table[:, 0].astype(np.int64) - 1, table[:, 1].astype(np.int64) - 1
    if rows.min(initial=0) < 0 or cols.min(initial=0) < 0 or max(rows.max(initial=0), cols.max(initial=0)) >= nrows:
        raise SuiteInputError(f"{path}: an entry lies outside the {nrows} x {ncols} matrix")
    vals = np.ones(nnz, np.float32) if field == "pattern" else table[:, 2].astype(np.float32)
    if symmetry == "general":
        return nrows, rows, cols, vals, False
    return nrows, rows, cols, vals, True


def coo_to_jds(dim: int, rows, cols, vals, mirrored: bool) -> dict:
    """Parboil's padded JDS (pad 32, row padding 1, pack size 1), written from its description."""
    if mirrored:
        off = rows != cols
        rows, cols, vals = (np.concatenate([rows, cols[off]]), np.concatenate([cols, rows[off]]),
                            np.concatenate([vals, vals[off]]))
    order = np.argsort(rows.astype(np.int64) * dim + cols, kind="stable")  # by row, then column
    rows, cols, vals = rows[order], cols[order], vals[order]
    padded_rows = (dim + PAD - 1) // PAD * PAD
    sizes = np.zeros(padded_rows, np.int64)
    sizes[:dim] = np.bincount(rows, minlength=dim)
    starts = np.zeros(padded_rows, np.int64)
    starts[:dim] = np.concatenate([[0], np.cumsum(sizes[:dim])[:-1]])
    perm = np.argsort(-sizes, kind="stable")
    sorted_sizes = sizes[perm]
    groups = padded_rows // PAD
    # the longest row of each group leads it; a group of empty rows still gets one diagonal of
    # padding: the kernel loads diagonal 0 before it looks at its group's count, and without it
    # that load takes the next diagonal's entry of another row
    nzcnt = np.maximum(sorted_sizes[::PAD], 1)
    padded = np.repeat(nzcnt, PAD)
    depth = int(nzcnt.max(initial=0))
    lengths = np.array([PAD * int(np.count_nonzero(nzcnt > d)) for d in range(depth)], np.int64)
    jds_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)  # depth + 1 entries
    total = int(lengths.sum())
    data = np.zeros(total, np.float32)
    index = np.zeros(total, np.int32)
    for d in range(depth):
        live = np.flatnonzero(sorted_sizes[:lengths[d]] > d)
        src = starts[perm[live]] + d
        data[jds_ptr[d] + live] = vals[src]
        index[jds_ptr[d] + live] = cols[src]
    assert (padded[:padded_rows] >= sorted_sizes).all()
    return {"data": data, "index": index, "perm": perm.astype(np.int32), "jds_ptr": jds_ptr,
            "nzcnt": nzcnt.astype(np.int32), "nzcnt_len": groups, "dim": dim,
            "rows": rows, "cols": cols, "vals": vals}


def compute_active_thread(task: int, pad: int, major: int = 3, minor: int = 0, sm: int = 8):
    """(block, grid) as Parboil's gpu_info.cpp chooses them."""
    max_thread = (1024 if minor >= 2 else 768) if major == 1 else 1536
    max_block = 8
    if task * pad > sm * max_thread:
        thread = max_thread // max_block
        return thread, (task * pad + thread - 1) // thread * thread
    return pad, task * pad


def make_inputs(dim: int, band: int, iterations: int, matrix: str | None = None) -> dict:
    rng = rng_for("spmv")
    if matrix is None:
        rows, cols, vals = generate_coo(dim, band, rng)
        jds = coo_to_jds(dim, rows, cols, vals, mirrored=True)
    else:
        dim, rows, cols, vals, mirrored = read_matrix_market(matrix)
        jds = coo_to_jds(dim, rows, cols, vals, mirrored)
    jds["x"] = rng.random(jds["dim"], dtype=np.float32)
    jds["iterations"] = iterations
    return jds


def run(inputs: dict, target: str | None, passes: Passes | None = None) -> dict:
    dim = inputs["dim"]
    data, index, perm = inputs["data"], inputs["index"], inputs["perm"]
    x, jds_ptr, nzcnt = inputs["x"], inputs["jds_ptr"], inputs["nzcnt"]
    ax = np.zeros(dim, np.float32)
    block, grid = compute_active_thread(inputs["nzcnt_len"], PAD)
    with hpvm.runtime(target):
        for buf in (ax, data, index, perm, x, jds_ptr, nzcnt):  # llvm_hpvm_track_mem, as the original
            hpvm.track_memory(buf)
        for _ in passes or ONCE:
            for _ in range(inputs["iterations"]):
                hpvm.wait(hpvm.launch(root, ax, ax.nbytes, data, data.nbytes, index, index.nbytes,
                                      perm, perm[:dim].nbytes, x, x.nbytes, dim, jds_ptr,
                                      jds_ptr.nbytes, nzcnt, nzcnt.nbytes, block, grid // block))
        hpvm.request_memory(ax)
        for buf in (ax, data, index, perm, x, jds_ptr, nzcnt):
            hpvm.untrack_memory(buf)
    return {"y": ax}


def reference(inputs: dict) -> dict:
    rows, cols, vals, x = inputs["rows"], inputs["cols"], inputs["vals"], inputs["x"]
    y = np.bincount(rows, weights=vals.astype(np.float64) * x[cols], minlength=inputs["dim"])
    return {"y": y.astype(np.float32)}


def check(outputs: dict, expected: dict) -> str | None:
    ref = expected["y"]
    return parboil_close(outputs["y"], ref, 1e-4 * float(np.abs(ref).max(initial=0)), 0.002, "y")


def _ell(inputs: dict):
    """The JDS arrays as a dense (depth, rows) table, the layout a vectorised gather wants."""
    dim, jds_ptr = inputs["dim"], inputs["jds_ptr"]
    depth = len(jds_ptr) - 1
    vals = np.zeros((depth, dim), np.float32)
    cols = np.zeros((depth, dim), np.int64)
    for d in range(depth):
        n = min(int(jds_ptr[d + 1] - jds_ptr[d]), dim)
        vals[d, :n] = inputs["data"][jds_ptr[d]:jds_ptr[d] + n]
        cols[d, :n] = inputs["index"][jds_ptr[d]:jds_ptr[d] + n]
    return vals, cols


def torch_program(inputs: dict, device: str):
    import torch

    vals, cols = _ell(inputs)
    vals_t = torch.from_numpy(vals).to(device)
    cols_t = torch.from_numpy(cols).to(device)
    perm = torch.from_numpy(inputs["perm"][:inputs["dim"]].astype(np.int64)).to(device)
    x = torch.from_numpy(inputs["x"]).to(device)
    y = torch.zeros(inputs["dim"], device=device)

    def spmv(vals, cols, perm, x, y):
        return y.index_copy(0, perm, (vals * x[cols]).sum(0))

    def driver(kernel):
        for _ in range(inputs["iterations"]):
            out = kernel(vals_t, cols_t, perm, x, y)
        return out

    return spmv, driver


def numba_program(inputs: dict, cuda: bool = False):
    """Parboil's OpenMP spmv (`src/omp_base`, JDS): rows in parallel, one loop over diagonals."""
    numba = optional_numba()
    if numba is None:
        return None
    dim, data, index, perm = inputs["dim"], inputs["data"], inputs["index"], inputs["perm"]
    x, jds_ptr, nzcnt = inputs["x"], inputs["jds_ptr"], inputs["nzcnt"]
    iterations = inputs["iterations"]
    y = np.zeros(dim, np.float32)
    if cuda:
        global nc  # a module global: the kernels see it as numba.cuda (and the simulator swaps it)
        from numba import cuda as nc

        @nc.jit
        def kernel(y, data, index, perm, x, dim, jds_ptr, nzcnt):
            ix = nc.grid(1)
            if ix < dim:
                acc = np.float32(0.0)
                for k in range(nzcnt[ix >> 5]):
                    j = jds_ptr[k] + ix
                    acc += data[j] * x[index[j]]
                y[perm[ix]] = acc

        dev = [nc.to_device(a) for a in (y, data, index, perm, x)]
        dp, dz = nc.to_device(jds_ptr), nc.to_device(nzcnt)

        def go():
            for _ in range(iterations):
                kernel[(dim + 191) // 192, 192](dev[0], dev[1], dev[2], dev[3], dev[4], dim, dp, dz)
            nc.synchronize()
            return dev[0]
        return go

    @numba.njit(parallel=True)
    def spmv_omp(y, data, index, perm, x, dim, jds_ptr, nzcnt, iterations):
        for _ in range(iterations):
            for ix in numba.prange(dim):
                acc = np.float32(0.0)
                for k in range(nzcnt[ix >> 5]):
                    j = jds_ptr[k] + ix
                    acc += data[j] * x[index[j]]
                y[perm[ix]] = acc

    def go():
        spmv_omp(y, data, index, perm, x, dim, jds_ptr, nzcnt, iterations)
        return y
    return go
