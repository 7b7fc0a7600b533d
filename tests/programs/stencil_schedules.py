"""The 7-point stencil of examples/stencil.py in two other schedules, which walk the grid along z
(benchmarks/gpu/stencil_schedules.py times them against the per-point leaf and a copy):

- `shared_root`: a 2-D block of TX x TY instances walks every z plane; each plane goes through a
  shared tile with a one-point halo (`hpvm.malloc`), the planes below and above stay in
  registers, and the next plane and halo are loaded while this one is computed (2.5-D blocking);
- `walk_root`: the same walk without shared memory: each instance loads its four in-plane
  neighbours itself, one plane ahead.

Both compute what `stencil.reference` does: boundary points keep their value.
"""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64

TX, TY = 32, 8


@hpvm.leaf
def shared_leaf(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
                nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    tile = hpvm.malloc((TY + 2) * (TX + 2) * 4, hpvm.f32, shape=(TY + 2, TX + 2))
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    tx = hpvm.get_node_instance_id_x(me)
    ty = hpvm.get_node_instance_id_y(me)
    i = hpvm.get_node_instance_id_x(block) * TX + tx
    j = hpvm.get_node_instance_id_y(block) * TY + ty
    loads = i < nx and j < ny  # its point fills its place in the tile
    inside = 0 < i < nx - 1 and 0 < j < ny - 1  # its point is computed
    left = inside and tx == 0  # it also loads the halo on that side
    right = inside and tx == TX - 1
    up = inside and ty == 0
    down = inside and ty == TY - 1
    plane = nx * ny
    at = j * nx + i  # plane 0
    below = 0.0
    here = 0.0
    above = 0.0
    if loads:
        below = a0[at]
        if 1 < nz:
            here = a0[at + plane]
    # the halo of plane 1, then of each next plane one step ahead
    hl = 0.0
    hr = 0.0
    hu = 0.0
    hd = 0.0
    if left:
        hl = a0[at + plane - 1]
    if right:
        hr = a0[at + plane + 1]
    if up:
        hu = a0[at + plane - nx]
    if down:
        hd = a0[at + plane + nx]
    for k in range(1, nz - 1):
        at = at + plane
        if loads:
            above = a0[at + plane]
        next_l = 0.0
        next_r = 0.0
        next_u = 0.0
        next_d = 0.0
        if k + 1 < nz - 1:
            if left:
                next_l = a0[at + plane - 1]
            if right:
                next_r = a0[at + plane + 1]
            if up:
                next_u = a0[at + plane - nx]
            if down:
                next_d = a0[at + plane + nx]
        hpvm.barrier()  # every instance is done reading the last plane's tile
        tile[ty + 1, tx + 1] = here
        if left:
            tile[ty + 1, 0] = hl
        if right:
            tile[ty + 1, tx + 2] = hr
        if up:
            tile[0, tx + 1] = hu
        if down:
            tile[ty + 2, tx + 1] = hd
        hpvm.barrier()
        if inside:
            anext[at] = (tile[ty + 1, tx] + tile[ty + 1, tx + 2] + tile[ty, tx + 1]
                         + tile[ty + 2, tx + 1] + below + above) * c1 - here * c0
        below = here
        here = above
        hl = next_l
        hr = next_r
        hu = next_u
        hd = next_d


@hpvm.leaf
def walk_leaf(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
              nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    me = hpvm.get_node()
    block = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(block) * TX + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(block) * TY + hpvm.get_node_instance_id_y(me)
    loads = i < nx and j < ny
    inside = 0 < i < nx - 1 and 0 < j < ny - 1
    plane = nx * ny
    at = j * nx + i
    below = 0.0
    here = 0.0
    above = 0.0
    # the in-plane neighbours of the plane being computed
    west = 0.0
    east = 0.0
    north = 0.0
    south = 0.0
    if loads:
        below = a0[at]
        if 1 < nz:
            here = a0[at + plane]
    if inside and 1 < nz - 1:
        west = a0[at + plane - 1]
        east = a0[at + plane + 1]
        north = a0[at + plane - nx]
        south = a0[at + plane + nx]
    for k in range(1, nz - 1):
        at = at + plane
        if loads:
            above = a0[at + plane]
        next_w = 0.0
        next_e = 0.0
        next_n = 0.0
        next_s = 0.0
        if inside and k + 1 < nz - 1:
            next_w = a0[at + plane - 1]
            next_e = a0[at + plane + 1]
            next_n = a0[at + plane - nx]
            next_s = a0[at + plane + nx]
        if inside:
            anext[at] = (west + east + north + south + below + above) * c1 - here * c0
        below = here
        here = above
        west = next_w
        east = next_e
        north = next_n
        south = next_s


@hpvm.graph
def shared_block(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
                 nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(shared_leaf, grid=(TX, TY), a0=a0, a0_bytes=a0_bytes, anext=anext,
              anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz, c0=c0, c1=c1)


@hpvm.graph
def shared_root(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
                nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(shared_block, grid=((nx + TX - 1) // TX, (ny + TY - 1) // TY), a0=a0,
              a0_bytes=a0_bytes, anext=anext, anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz,
              c0=c0, c1=c1)


@hpvm.graph
def walk_block(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
               nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(walk_leaf, grid=(TX, TY), a0=a0, a0_bytes=a0_bytes, anext=anext,
              anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz, c0=c0, c1=c1)


@hpvm.graph
def walk_root(a0: In[Ptr[f32]], a0_bytes: i64, anext: InOut[Ptr[f32]], anext_bytes: i64,
              nx: i64, ny: i64, nz: i64, c0: f32, c1: f32):
    hpvm.node(walk_block, grid=((nx + TX - 1) // TX, (ny + TY - 1) // TY), a0=a0,
              a0_bytes=a0_bytes, anext=anext, anext_bytes=anext_bytes, nx=nx, ny=ny, nz=nz,
              c0=c0, c1=c1)
