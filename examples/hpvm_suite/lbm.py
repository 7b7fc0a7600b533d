"""Parboil LBM (lattice-Boltzmann, D3Q19) as HPVM's own port writes it (`parboil/benchmarks/lbm/src/hpvm/`).

One launch is one time step: every cell gathers its 19 distribution values from its neighbours in
the source grid (Parboil's GATHER layout), bounces them back if the cell is an obstacle or else
relaxes them towards equilibrium (BGK, OMEGA = 1.95; cells flagged ACCEL get a fixed velocity),
and writes them to its own place in the destination grid. The host runs `steps` time steps,
swapping the two grids after each, as the original's `for (t = 1; t <= nTimeSteps; t++)` loop
does, then stores the velocity field of the last grid (what Parboil compares).

Grid layout (Parboil's layout_config.h): 20 planes of floats (19 distributions, then FLAGS), each
PADDED_X x PADDED_Y x PADDED_Z = (nx + 8) x ny x (nz + 4) cells, x fastest, and the kernel's
pointer shifted by MARGIN = 2 z-planes, so that the gathers of boundary cells stay inside the
allocation.

DFG (the same as the original's):

    root  lbm_lvl3            single instance
      lbm_lvl2                single instance (createNodeND(0, ...))
        lbm_lvl1              2-D, ny x nz instances (the CUDA grid)
          perform_stream_collide   leaf, 2-D, nx x 1 instances (the CUDA block)

srcG is `In`, dstG `InOut` (`__hpvm__attributes(2, srcG, dstG, 1, dstG)`).

Inputs: Parboil's `short` dataset, 120 x 120 x 150 cells and 100 time steps, lid-driven cavity
(LDC: walls are obstacles, the planes z = 1 and z = nz - 2 are ACCEL cells). Its obstacle file is
in the HPVM repository but not copied here: the port generates an obstacle geometry from the
suite's fixed seed, a sphere of radius 0.3 * min(nx, ny) at (0.4 nx, 0.4 ny, 0.4 nz) plus six
smaller spheres at random places, or reads a Parboil `.of` obstacle file
(`make_inputs(..., obstacles=PATH)`: nz planes of ny lines of nx characters, '.' for fluid, each
line and plane ended by a newline; a file of another size is refused as the original refuses it).
`small` is 16 x 12 x 10 cells, 4 steps.

Check: Parboil's `tools/compare-output` for lbm on the velocity field: each component within
1e-3 * max |component| or 0.2%.

Differences from the original:
- SIZE_X, SIZE_Y, SIZE_Z are compile-time macros in C; here they are three `i64` inputs (nx, ny,
  nz) of every node, so one compiled graph serves both sizes.
- FLAGS cells hold the flag bits as a float *value* (0.0, 1.0, 2.0) that the leaf converts with
  `int()`, where the original stores the bit pattern in the float's bits and reads it back with
  `*(unsigned *)&x`: the front end has no bit casts between float and integer.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

try:
    from ._common import ONCE, Passes, SuiteInputError, optional_numba, parboil_close, read_exact, rng_for
except ImportError:  # loaded as a file (`hpvmc check examples/hpvm_suite/lbm.py`)
    import sys
    from pathlib import Path as _Path

    sys.path.insert(0, str(_Path(__file__).resolve().parent.parent))
    from hpvm_suite._common import ONCE, Passes, SuiteInputError, optional_numba, parboil_close, read_exact, rng_for

OMEGA = 1.95
DFL1 = 1.0 / 3.0
DFL2 = 1.0 / 18.0
DFL3 = 1.0 / 36.0
OBSTACLE = 1
ACCEL = 2
N_CELL_ENTRIES = 20
(C, N, S, E, W, T, B, NE, NW, SE, SW, NT, NB, ST, SB, ET, EB, WT, WB, FLAGS) = range(20)

SIZES = {"small": {"nx": 16, "ny": 12, "nz": 10, "steps": 4},
         "standard": {"nx": 120, "ny": 120, "nz": 150, "steps": 100}}


@hpvm.leaf
def perform_stream_collide(src: In[Ptr[f32]], bytes_src: i64, dst: InOut[Ptr[f32]],
                           bytes_dst: i64, nx: i64, ny: i64, nz: i64):
    this = hpvm.get_node()
    parent = hpvm.get_parent_node(this)
    x = hpvm.get_node_instance_id_x(this)
    y = hpvm.get_node_instance_id_x(parent)
    z = hpvm.get_node_instance_id_y(parent)
    px = nx + 8
    pxy = px * ny
    tot = pxy * (nz + 4)
    # the original's `srcG += MARGIN; dstG += MARGIN`: MARGIN is two z-planes
    src_g = src + 2 * pxy
    dst_g = dst + 2 * pxy
    cell = x + y * px + z * pxy  # CALC_INDEX(x, y, z, 0)
    # gather: each distribution comes from the neighbour it streams out of
    t_c = src_g[cell]
    t_n = src_g[cell + N * tot - px]
    t_s = src_g[cell + S * tot + px]
    t_e = src_g[cell + E * tot - 1]
    t_w = src_g[cell + W * tot + 1]
    t_t = src_g[cell + T * tot - pxy]
    t_b = src_g[cell + B * tot + pxy]
    t_ne = src_g[cell + NE * tot - 1 - px]
    t_nw = src_g[cell + NW * tot + 1 - px]
    t_se = src_g[cell + SE * tot - 1 + px]
    t_sw = src_g[cell + SW * tot + 1 + px]
    t_nt = src_g[cell + NT * tot - px - pxy]
    t_nb = src_g[cell + NB * tot - px + pxy]
    t_st = src_g[cell + ST * tot + px - pxy]
    t_sb = src_g[cell + SB * tot + px + pxy]
    t_et = src_g[cell + ET * tot - 1 - pxy]
    t_eb = src_g[cell + EB * tot - 1 + pxy]
    t_wt = src_g[cell + WT * tot + 1 - pxy]
    t_wb = src_g[cell + WB * tot + 1 + pxy]
    flags = int(src_g[cell + FLAGS * tot])
    if flags & OBSTACLE:
        # bounce back: reflect what flows in to where it came from
        t_n, t_s = t_s, t_n
        t_e, t_w = t_w, t_e
        t_t, t_b = t_b, t_t
        t_ne, t_sw = t_sw, t_ne
        t_nw, t_se = t_se, t_nw
        t_nt, t_sb = t_sb, t_nt
        t_nb, t_st = t_st, t_nb
        t_et, t_wb = t_wb, t_et
        t_eb, t_wt = t_wt, t_eb
    else:
        rho = (t_c + t_n + t_s + t_e + t_w + t_t + t_b + t_ne + t_nw + t_se + t_sw + t_nt + t_nb
               + t_st + t_sb + t_et + t_eb + t_wt + t_wb)
        ux = t_e - t_w + t_ne - t_nw + t_se - t_sw + t_et + t_eb - t_wt - t_wb
        uy = t_n - t_s + t_ne + t_nw - t_se - t_sw + t_nt + t_nb - t_st - t_sb
        uz = t_t - t_b + t_nt - t_nb + t_st - t_sb + t_et - t_eb + t_wt - t_wb
        ux /= rho
        uy /= rho
        uz /= rho
        if flags & ACCEL:
            ux = hpvm.f32(0.005)
            uy = hpvm.f32(0.002)
            uz = hpvm.f32(0.0)
        u2 = 1.5 * (ux * ux + uy * uy + uz * uz) - 1.0
        base = OMEGA * rho
        keep = 1.0 - OMEGA
        w1 = DFL1 * base
        t_c = keep * t_c + w1 * (-u2)
        w2 = DFL2 * base
        t_n = keep * t_n + w2 * (uy * (4.5 * uy + 3.0) - u2)
        t_s = keep * t_s + w2 * (uy * (4.5 * uy - 3.0) - u2)
        t_t = keep * t_t + w2 * (uz * (4.5 * uz + 3.0) - u2)
        t_b = keep * t_b + w2 * (uz * (4.5 * uz - 3.0) - u2)
        t_e = keep * t_e + w2 * (ux * (4.5 * ux + 3.0) - u2)
        t_w = keep * t_w + w2 * (ux * (4.5 * ux - 3.0) - u2)
        w3 = DFL3 * base
        t_nt = keep * t_nt + w3 * ((uy + uz) * (4.5 * (uy + uz) + 3.0) - u2)
        t_nb = keep * t_nb + w3 * ((uy - uz) * (4.5 * (uy - uz) + 3.0) - u2)
        t_st = keep * t_st + w3 * ((-uy + uz) * (4.5 * (-uy + uz) + 3.0) - u2)
        t_sb = keep * t_sb + w3 * ((-uy - uz) * (4.5 * (-uy - uz) + 3.0) - u2)
        t_ne = keep * t_ne + w3 * ((ux + uy) * (4.5 * (ux + uy) + 3.0) - u2)
        t_se = keep * t_se + w3 * ((ux - uy) * (4.5 * (ux - uy) + 3.0) - u2)
        t_et = keep * t_et + w3 * ((ux + uz) * (4.5 * (ux + uz) + 3.0) - u2)
        t_eb = keep * t_eb + w3 * ((ux - uz) * (4.5 * (ux - uz) + 3.0) - u2)
        t_nw = keep * t_nw + w3 * ((-ux + uy) * (4.5 * (-ux + uy) + 3.0) - u2)
        t_sw = keep * t_sw + w3 * ((-ux - uy) * (4.5 * (-ux - uy) + 3.0) - u2)
        t_wt = keep * t_wt + w3 * ((-ux + uz) * (4.5 * (-ux + uz) + 3.0) - u2)
        t_wb = keep * t_wb + w3 * ((-ux - uz) * (4.5 * (-ux - uz) + 3.0) - u2)
    dst_g[cell] = t_c
    dst_g[cell + N * tot] = t_n
    dst_g[cell + S * tot] = t_s
    dst_g[cell + E * tot] = t_e
    dst_g[cell + W * tot] = t_w
    dst_g[cell + T * tot] = t_t
    dst_g[cell + B * tot] = t_b
    dst_g[cell + NE * tot] = t_ne
    dst_g[cell + NW * tot] = t_nw
    dst_g[cell + SE * tot] = t_se
    dst_g[cell + SW * tot] = t_sw
    dst_g[cell + NT * tot] = t_nt
    dst_g[cell + NB * tot] = t_nb
    dst_g[cell + ST * tot] = t_st
    dst_g[cell + SB * tot] = t_sb
    dst_g[cell + ET * tot] = t_et
    dst_g[cell + EB * tot] = t_eb
    dst_g[cell + WT * tot] = t_wt
    dst_g[cell + WB * tot] = t_wb


@hpvm.graph
def lbm_lvl1(src: In[Ptr[f32]], bytes_src: i64, dst: InOut[Ptr[f32]], bytes_dst: i64,
             nx: i64, ny: i64, nz: i64, dim_x1: i64):
    hpvm.node(perform_stream_collide, grid=(dim_x1, 1), src=src, bytes_src=bytes_src, dst=dst,
              bytes_dst=bytes_dst, nx=nx, ny=ny, nz=nz)


@hpvm.graph
def lbm_lvl2(src: In[Ptr[f32]], bytes_src: i64, dst: InOut[Ptr[f32]], bytes_dst: i64,
             nx: i64, ny: i64, nz: i64, dim_x1: i64, dim_x2: i64, dim_y2: i64):
    hpvm.node(lbm_lvl1, grid=(dim_x2, dim_y2), src=src, bytes_src=bytes_src, dst=dst,
              bytes_dst=bytes_dst, nx=nx, ny=ny, nz=nz, dim_x1=dim_x1)


@hpvm.graph
def lbm_lvl3(src: In[Ptr[f32]], bytes_src: i64, dst: InOut[Ptr[f32]], bytes_dst: i64,
             nx: i64, ny: i64, nz: i64, dim_x1: i64, dim_x2: i64, dim_y2: i64):
    hpvm.node(lbm_lvl2, src=src, bytes_src=bytes_src, dst=dst, bytes_dst=bytes_dst, nx=nx, ny=ny,
              nz=nz, dim_x1=dim_x1, dim_x2=dim_x2, dim_y2=dim_y2)


root = lbm_lvl3


# ----------------------------------------------------------------------------------------------
# Host side


def _views(grid: np.ndarray, nx: int, ny: int, nz: int) -> np.ndarray:
    """The 20 planes of a flat grid as (20, nz + 4, ny, nx + 8); cell (x, y, z) is [e, z + 2, y, x]."""
    return grid.reshape(N_CELL_ENTRIES, nz + 4, ny, nx + 8)


def generated_obstacles(nx: int, ny: int, nz: int) -> np.ndarray:
    rng = rng_for("lbm")
    z, y, x = np.mgrid[:nz, :ny, :nx]
    r = 0.3 * min(nx, ny)
    solid = (x - 0.4 * nx) ** 2 + (y - 0.4 * ny) ** 2 + (z - 0.4 * nz) ** 2 < r * r
    for _ in range(6):
        cx, cy, cz = rng.uniform(0, nx), rng.uniform(0, ny), rng.uniform(0, nz)
        rr = rng.uniform(0.05, 0.12) * min(nx, ny)
        solid |= (x - cx) ** 2 + (y - cy) ** 2 + (z - cz) ** 2 < rr * rr
    return solid


def read_obstacle_file(path: str | Path, nx: int, ny: int, nz: int) -> np.ndarray:
    """A Parboil `.of` obstacle file as a (nz, ny, nx) boolean array."""
    size = nx * ny * nz + (ny + 1) * nz
    data = np.frombuffer(read_exact(path, size, f"a {nx} x {ny} x {nz} obstacle file (nz planes "
                                    f"of ny lines of nx characters and a newline, a newline after "
                                    f"each plane)"), np.uint8)
    planes = data.reshape(nz, ny * (nx + 1) + 1)
    if (planes[:, -1] != 10).any():
        z = int(np.flatnonzero(planes[:, -1] != 10)[0])
        raise SuiteInputError(f"{path}: plane {z} does not end with a newline: not a {nx} x {ny} x "
                              f"{nz} obstacle file")
    lines = planes[:, :-1].reshape(nz, ny, nx + 1)
    if (lines[:, :, -1] != 10).any():
        z, y = (int(v) for v in np.argwhere(lines[:, :, -1] != 10)[0])
        raise SuiteInputError(f"{path}: line {y} of plane {z} is not {nx} characters long: not a "
                              f"{nx} x {ny} x {nz} obstacle file")
    return lines[:, :, :nx] != ord(".")


def make_grid(nx: int, ny: int, nz: int, solid: np.ndarray) -> np.ndarray:
    """LBM_allocateGrid + initializeGrid + obstacles + initializeSpecialCellsForLDC, as flat floats."""
    grid = np.zeros(N_CELL_ENTRIES * (nx + 8) * ny * (nz + 4), np.float32)
    v = _views(grid, nx, ny, nz)
    inner = (slice(2, nz + 2), slice(0, ny), slice(0, nx))
    # Parboil initialises through its gather macros; every cell ends up at the rest state
    weights = [DFL1] + [DFL2] * 6 + [DFL3] * 12
    for e, w in enumerate(weights):
        v[(e,) + inner] = np.float32(w)
    flags = np.zeros((nz + 4, ny, nx), np.int64)
    flags[2:nz + 2][solid] |= OBSTACLE
    z, y, x = np.mgrid[-2:nz + 2, :ny, :nx]
    wall = (x == 0) | (x == nx - 1) | (y == 0) | (y == ny - 1) | (z == 0) | (z == nz - 1)
    lid = ~wall & ((z == 1) | (z == nz - 2)) & (x > 1) & (x < nx - 2) & (y > 1) & (y < ny - 2)
    flags[wall] |= OBSTACLE
    flags[lid] |= ACCEL
    v[FLAGS, :, :, :nx] = flags.astype(np.float32)
    return grid


def make_inputs(nx: int, ny: int, nz: int, steps: int, obstacles: str | None = None) -> dict:
    solid = generated_obstacles(nx, ny, nz) if obstacles is None else read_obstacle_file(obstacles, nx, ny, nz)
    return {"nx": nx, "ny": ny, "nz": nz, "steps": steps, "grid": make_grid(nx, ny, nz, solid)}


def velocity_field(grid: np.ndarray, nx: int, ny: int, nz: int) -> np.ndarray:
    """LBM_storeVelocityField's (ux, uy, uz) per cell, through the same gathers, as (nz, ny, nx, 3)."""
    g = _gather(grid, nx, ny, nz, np)
    rho = g[C]
    for e in range(1, 19):
        rho = rho + g[e]
    ux = g[E] - g[W] + g[NE] - g[NW] + g[SE] - g[SW] + g[ET] + g[EB] - g[WT] - g[WB]
    uy = g[N] - g[S] + g[NE] + g[NW] - g[SE] - g[SW] + g[NT] + g[NB] - g[ST] - g[SB]
    uz = g[T] - g[B] + g[NT] - g[NB] + g[ST] - g[SB] + g[ET] - g[EB] + g[WT] - g[WB]
    with np.errstate(divide="ignore", invalid="ignore"):  # padding columns hold no fluid
        return np.stack([ux / rho, uy / rho, uz / rho], -1)[:, :, :nx]


_OFFSETS = {C: (0, 0, 0), N: (0, -1, 0), S: (0, 1, 0), E: (-1, 0, 0), W: (1, 0, 0), T: (0, 0, -1),
            B: (0, 0, 1), NE: (-1, -1, 0), NW: (1, -1, 0), SE: (-1, 1, 0), SW: (1, 1, 0),
            NT: (0, -1, -1), NB: (0, -1, 1), ST: (0, 1, -1), SB: (0, 1, 1), ET: (-1, 0, -1),
            EB: (-1, 0, 1), WT: (1, 0, -1), WB: (1, 0, 1)}


def _gather(grid, nx: int, ny: int, nz: int, xp):
    """The 19 gathered distributions of every cell (whole padded rows), each (nz, ny, nx + 8)."""
    px, pxy = nx + 8, (nx + 8) * ny
    tot = pxy * (nz + 4)
    out = []
    for e in range(19):
        dx, dy, dz = _OFFSETS[e]
        start = e * tot + 2 * pxy + dx + dy * px + dz * pxy
        out.append(grid[start:start + nz * pxy].reshape(nz, ny, px))
    return out


def collide(grid, nx: int, ny: int, nz: int, xp):
    """One time step of the kernel on whole planes: the 19 new distributions, (nz, ny, nx + 8) each."""
    g = _gather(grid, nx, ny, nz, xp)
    px, pxy = nx + 8, (nx + 8) * ny
    tot = pxy * (nz + 4)
    flags = grid[FLAGS * tot + 2 * pxy:FLAGS * tot + (nz + 2) * pxy].reshape(nz, ny, px)
    obstacle = (flags == 1.0) | (flags == 3.0)
    accel = (flags == 2.0) | (flags == 3.0)
    f32 = np.float32
    rho = g[C]
    for e in range(1, 19):
        rho = rho + g[e]
    ux = g[E] - g[W] + g[NE] - g[NW] + g[SE] - g[SW] + g[ET] + g[EB] - g[WT] - g[WB]
    uy = g[N] - g[S] + g[NE] + g[NW] - g[SE] - g[SW] + g[NT] + g[NB] - g[ST] - g[SB]
    uz = g[T] - g[B] + g[NT] - g[NB] + g[ST] - g[SB] + g[ET] - g[EB] + g[WT] - g[WB]
    ux = xp.where(accel, f32(0.005), ux / rho)
    uy = xp.where(accel, f32(0.002), uy / rho)
    uz = xp.where(accel, f32(0.0), uz / rho)
    u2 = f32(1.5) * (ux * ux + uy * uy + uz * uz) - f32(1.0)
    base = f32(OMEGA) * rho
    keep = f32(1.0 - OMEGA)
    w1, w2, w3 = f32(DFL1) * base, f32(DFL2) * base, f32(DFL3) * base

    def relax(t, w, u):
        return keep * t + w * (u * (f32(4.5) * u + f32(3.0)) - u2)

    new = [None] * 19
    new[C] = keep * g[C] + w1 * (-u2)
    new[N], new[S] = relax(g[N], w2, uy), keep * g[S] + w2 * (uy * (f32(4.5) * uy - f32(3.0)) - u2)
    new[T], new[B] = relax(g[T], w2, uz), keep * g[B] + w2 * (uz * (f32(4.5) * uz - f32(3.0)) - u2)
    new[E], new[W] = relax(g[E], w2, ux), keep * g[W] + w2 * (ux * (f32(4.5) * ux - f32(3.0)) - u2)
    new[NT], new[NB] = relax(g[NT], w3, uy + uz), relax(g[NB], w3, uy - uz)
    new[ST], new[SB] = relax(g[ST], w3, -uy + uz), relax(g[SB], w3, -uy - uz)
    new[NE], new[SE] = relax(g[NE], w3, ux + uy), relax(g[SE], w3, ux - uy)
    new[ET], new[EB] = relax(g[ET], w3, ux + uz), relax(g[EB], w3, ux - uz)
    new[NW], new[SW] = relax(g[NW], w3, -ux + uy), relax(g[SW], w3, -ux - uy)
    new[WT], new[WB] = relax(g[WT], w3, -ux + uz), relax(g[WB], w3, -ux - uz)
    swap = {N: S, S: N, E: W, W: E, T: B, B: T, NE: SW, SW: NE, NW: SE, SE: NW, NT: SB, SB: NT,
            NB: ST, ST: NB, ET: WB, WB: ET, EB: WT, WT: EB, C: C}
    return [xp.where(obstacle, g[swap[e]], new[e]) for e in range(19)]


def step_numpy(src: np.ndarray, dst: np.ndarray, nx: int, ny: int, nz: int) -> None:
    with np.errstate(divide="ignore", invalid="ignore"):
        new = collide(src, nx, ny, nz, np)
    v = _views(dst, nx, ny, nz)
    for e in range(19):
        v[e, 2:nz + 2, :, :nx] = new[e][:, :, :nx]


def run(inputs: dict, target: str | None, passes: Passes | None = None) -> dict:
    nx, ny, nz = inputs["nx"], inputs["ny"], inputs["nz"]
    src = inputs["grid"].copy()
    dst = inputs["grid"].copy()
    with hpvm.runtime(target):
        for buf in (src, dst):  # the original's llvm_hpvm_track_mem: the grids stay on the device
            hpvm.track_memory(buf)
        for _ in passes or ONCE:
            for _ in range(inputs["steps"]):
                hpvm.wait(hpvm.launch(root, src, src.nbytes, dst, dst.nbytes, nx, ny, nz, nx, ny,
                                      nz))
                src, dst = dst, src
        hpvm.request_memory(src)
        hpvm.untrack_memory(src)
        hpvm.untrack_memory(dst)
    return {"velocity": velocity_field(src, nx, ny, nz), "grid": src}


def reference(inputs: dict) -> dict:
    nx, ny, nz = inputs["nx"], inputs["ny"], inputs["nz"]
    src = inputs["grid"].copy()
    dst = inputs["grid"].copy()
    for _ in range(inputs["steps"]):
        step_numpy(src, dst, nx, ny, nz)
        src, dst = dst, src
    return {"velocity": velocity_field(src, nx, ny, nz), "grid": src}


def check(outputs: dict, expected: dict) -> str | None:
    ref = expected["velocity"]
    return parboil_close(outputs["velocity"], ref, 1e-3 * float(np.nanmax(np.abs(ref), initial=0)), 0.002,
                         "velocity field")


def torch_program(inputs: dict, device: str):
    import torch

    nx, ny, nz = inputs["nx"], inputs["ny"], inputs["nz"]
    grid0 = torch.from_numpy(inputs["grid"]).to(device)

    def step(src):
        new = collide(src, nx, ny, nz, torch)
        dst = src.clone()
        v = dst.view(N_CELL_ENTRIES, nz + 4, ny, nx + 8)
        for e in range(19):
            v[e, 2:nz + 2, :, :nx] = new[e][:, :, :nx]
        return dst

    def driver(kernel):
        g = grid0
        for _ in range(inputs["steps"]):
            g = kernel(g)
        return g

    return step, driver


def numba_program(inputs: dict, cuda: bool = False):
    """Parboil's OpenMP lbm (`src/omp_base`, GATHER layout): z-planes in parallel."""
    numba = optional_numba()
    if numba is None:
        return None
    nx, ny, nz, steps = inputs["nx"], inputs["ny"], inputs["nz"], inputs["steps"]
    offs = np.array([_OFFSETS[e] for e in range(19)], np.int64)
    swap = np.array([C, S, N, W, E, B, T, SW, SE, NW, NE, SB, ST, NB, NT, WB, WT, EB, ET], np.int64)
    weights = np.array([DFL1] + [DFL2] * 6 + [DFL3] * 12, np.float32)
    # lattice velocities (ex, ey, ez) of each distribution
    vel = -offs
    omega = np.float32(OMEGA)

    def cell_update(src, dst, x, y, z, px, pxy, tot):
        cell = 2 * pxy + x + y * px + z * pxy
        t = np.empty(19, np.float32)
        for e in range(19):
            t[e] = src[e * tot + cell + offs[e, 0] + offs[e, 1] * px + offs[e, 2] * pxy]
        flags = int(src[FLAGS * tot + cell])
        if flags & OBSTACLE:
            for e in range(19):
                dst[e * tot + cell] = t[swap[e]]
            return
        rho = np.float32(0.0)
        ux = np.float32(0.0)
        uy = np.float32(0.0)
        uz = np.float32(0.0)
        for e in range(19):
            rho += t[e]
            ux += vel[e, 0] * t[e]
            uy += vel[e, 1] * t[e]
            uz += vel[e, 2] * t[e]
        ux /= rho
        uy /= rho
        uz /= rho
        if flags & ACCEL:
            ux, uy, uz = np.float32(0.005), np.float32(0.002), np.float32(0.0)
        u2 = np.float32(1.5) * (ux * ux + uy * uy + uz * uz) - np.float32(1.0)
        for e in range(19):
            u = vel[e, 0] * ux + vel[e, 1] * uy + vel[e, 2] * uz
            w = weights[e] * omega * rho
            dst[e * tot + cell] = (np.float32(1.0) - omega) * t[e] + w * (u * (np.float32(4.5) * u + np.float32(3.0)) - u2)

    if cuda:
        global nc  # a module global: the kernels see it as numba.cuda (and the simulator swaps it)
        from numba import cuda as nc

        @nc.jit(device=True)
        def dev_update(src, dst, x, y, z, px, pxy, tot):
            # cell_update with a per-thread array (np.empty does not exist on the device)
            cell = 2 * pxy + x + y * px + z * pxy
            t = nc.local.array(19, numba.float32)
            for e in range(19):
                t[e] = src[e * tot + cell + offs[e, 0] + offs[e, 1] * px + offs[e, 2] * pxy]
            flags = int(src[FLAGS * tot + cell])
            if flags & OBSTACLE:
                for e in range(19):
                    dst[e * tot + cell] = t[swap[e]]
                return
            rho = np.float32(0.0)
            ux = np.float32(0.0)
            uy = np.float32(0.0)
            uz = np.float32(0.0)
            for e in range(19):
                rho += t[e]
                ux += vel[e, 0] * t[e]
                uy += vel[e, 1] * t[e]
                uz += vel[e, 2] * t[e]
            ux /= rho
            uy /= rho
            uz /= rho
            if flags & ACCEL:
                ux, uy, uz = np.float32(0.005), np.float32(0.002), np.float32(0.0)
            u2 = np.float32(1.5) * (ux * ux + uy * uy + uz * uz) - np.float32(1.0)
            for e in range(19):
                u = vel[e, 0] * ux + vel[e, 1] * uy + vel[e, 2] * uz
                w = weights[e] * omega * rho
                dst[e * tot + cell] = (np.float32(1.0) - omega) * t[e] + w * (u * (np.float32(4.5) * u + np.float32(3.0)) - u2)

        @nc.jit
        def kernel(src, dst, nx, ny, nz):
            x, y, z = nc.grid(3)
            if x < nx and y < ny and z < nz:
                dev_update(src, dst, x, y, z, nx + 8, (nx + 8) * ny, (nx + 8) * ny * (nz + 4))

        initial = nc.to_device(inputs["grid"])
        a, b = nc.device_array_like(initial), nc.device_array_like(initial)

        def go():  # from the initial grid every time, copied on the device (as hpvm-py's resident runs)
            a.copy_to_device(initial)
            b.copy_to_device(initial)
            s, d = a, b
            for _ in range(steps):
                kernel[(1, ny, nz), (nx, 1, 1)](s, d, nx, ny, nz)
                s, d = d, s
            nc.synchronize()
            return s
        return go

    update = numba.njit(cell_update)

    @numba.njit(parallel=True)
    def lbm_omp(src, dst, nx, ny, nz, steps):
        px, pxy = nx + 8, (nx + 8) * ny
        tot = pxy * (nz + 4)
        for _ in range(steps):
            for z in numba.prange(nz):
                for y in range(ny):
                    for x in range(nx):
                        update(src, dst, x, y, z, px, pxy, tot)
            src, dst = dst, src
        return src

    def go():  # from the initial grid every time
        a, b = inputs["grid"].copy(), inputs["grid"].copy()
        return lbm_omp(a, b, nx, ny, nz, steps)
    return go
