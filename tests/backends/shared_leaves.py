"""Leaves that several CPU-backend test files exercise (one definition each)."""
import hpvm_py as hpvm
from hpvm_py import In, Out, Ptr, f32, i64


@hpvm.leaf
def stencil(A0: In[Ptr[f32]], A0_bytes: i64, An: Out[Ptr[f32]], An_bytes: i64, c0: f32, c1: f32):
    node = hpvm.get_node()
    i = hpvm.get_node_instance_id_x(node)
    j = hpvm.get_node_instance_id_y(node)
    k = hpvm.get_node_instance_id_z(node)
    nx = hpvm.get_num_node_instances_x(node)
    ny = hpvm.get_num_node_instances_y(node)
    nz = hpvm.get_num_node_instances_z(node)
    if i > 0 and i < nx - 1 and j > 0 and j < ny - 1 and k > 0 and k < nz - 1:
        idx = i + nx * (j + ny * k)
        An[idx] = (A0[idx + 1] + A0[idx - 1] + A0[idx + nx] + A0[idx - nx] + A0[idx + nx * ny]
                   + A0[idx - nx * ny]) * c1 - A0[idx] * c0
