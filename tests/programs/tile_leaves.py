"""Leaves under a replicated parent, for the gpu target's grid tiles (tests/backends/test_triton.py):
values that differ per parent instance (all-to-all edges inside the replicated group, into and out
of the tiled leaf) and per instance (a one-to-one edge), a uniform z, and a parent grid whose
blocks are not powers of two."""
from __future__ import annotations

import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i64


@hpvm.leaf
def weight(x: In[Ptr[f32]], x_bytes: i64) -> f32:
    """One value per parent instance: x at the parent's linear index."""
    par = hpvm.get_parent_node(hpvm.get_node())
    p = (hpvm.get_node_instance_id_z(par) * hpvm.get_num_node_instances_y(par)
         + hpvm.get_node_instance_id_y(par)) * hpvm.get_num_node_instances_x(par) \
        + hpvm.get_node_instance_id_x(par)
    return x[p % 7] + hpvm.f32(p)


@hpvm.leaf
def offset(nx: i64) -> f32:
    """One value per instance."""
    me = hpvm.get_node()
    return hpvm.f32(hpvm.get_node_instance_id_x(me) * 3 + hpvm.get_node_instance_id_y(me))


@hpvm.leaf
def combine(w: f32, o: f32, y: InOut[Ptr[f32]], y_bytes: i64, nx: i64, ny: i64) -> f32:
    me = hpvm.get_node()
    par = hpvm.get_parent_node(me)
    i = hpvm.get_node_instance_id_x(par) * hpvm.get_num_node_instances_x(me) + hpvm.get_node_instance_id_x(me)
    j = hpvm.get_node_instance_id_y(par) * hpvm.get_num_node_instances_y(me) + hpvm.get_node_instance_id_y(me)
    k = hpvm.get_node_instance_id_z(par)
    if i < nx and j < ny:
        y[(k * ny + j) * nx + i] = w * 10.0 + o + hpvm.f32(k)
    return w + o + 1.0  # one value per parent crosses the all-to-all edge: instance (0, 0)'s


@hpvm.leaf
def record(v: f32, z: InOut[Ptr[f32]], z_bytes: i64):
    par = hpvm.get_parent_node(hpvm.get_node())
    p = (hpvm.get_node_instance_id_z(par) * hpvm.get_num_node_instances_y(par)
         + hpvm.get_node_instance_id_y(par)) * hpvm.get_num_node_instances_x(par) \
        + hpvm.get_node_instance_id_x(par)
    z[p] = v


@hpvm.graph
def group(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]],
          z_bytes: i64, nx: i64, ny: i64, bx: i64, by: i64):
    w = hpvm.node(weight, x=x, x_bytes=x_bytes)
    o = hpvm.node(offset, grid=(bx, by), nx=nx)
    c = hpvm.node(combine, grid=(bx, by), w=hpvm.all_to_all(w.out[0]), o=o.out[0], y=y,
                  y_bytes=y_bytes, nx=nx, ny=ny)
    hpvm.node(record, v=hpvm.all_to_all(c.out[0]), z=z, z_bytes=z_bytes)


@hpvm.graph
def root(x: In[Ptr[f32]], x_bytes: i64, y: InOut[Ptr[f32]], y_bytes: i64, z: InOut[Ptr[f32]],
         z_bytes: i64, nx: i64, ny: i64, nz: i64, bx: i64, by: i64):
    hpvm.node(group, grid=((nx + bx - 1) // bx, (ny + by - 1) // by, nz), x=x, x_bytes=x_bytes, y=y,
              y_bytes=y_bytes, z=z, z_bytes=z_bytes, nx=nx, ny=ny, bx=bx, by=by)
