"""hpvm-py: HPVM-style hierarchical dataflow graphs in Python (see docs/ and DESIGN.md).

    import hpvm_py as hpvm

    @hpvm.leaf
    def vadd(a: hpvm.In[hpvm.Ptr[hpvm.f32]], a_bytes: hpvm.i64, ...): ...

    @hpvm.graph
    def root(...):
        hpvm.node(vadd, grid=n, a=a, a_bytes=a_bytes, ...)

    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(root, a, a.nbytes, ...))
"""
from . import comm, distributed, errors, math, symmetric
from .api.host import (cleanup, compile, init, launch, pop, push, request_memory, runtime,
                       stats, track_memory, untrack_memory, wait)
from .api.textio import from_text, load, to_text
from .frontend.decorators import func, graph, leaf
from .frontend.connections import ALL_TO_ALL, ONE_TO_ONE, all_to_all, streaming
from .frontend.graph import (bind_input, bind_output, create_node, create_node_1d, create_node_2d,
                             create_node_3d, edge, hint, node)
from .frontend.intrinsics import (atomic_add, atomic_and, atomic_max, atomic_min, atomic_or,
                                  atomic_sub, atomic_xchg, atomic_xor, barrier, get_node,
                                  get_node_instance_id_x, get_node_instance_id_y,
                                  get_node_instance_id_z, get_num_dims, get_num_node_instances_x,
                                  get_num_node_instances_y, get_num_node_instances_z,
                                  get_parent_node, instance_id, malloc, num_instances,
                                  remote_atomic_add, remote_load, remote_store, view)
from .support.profile import profile
from .support.version import VERSION as __version__
from .types import (In, InOut, Out, Ptr, bf16, f16, f32, f64, i1, i8, i16, i32, i64, u8, u16, u32,
                    u64)



def __getattr__(name: str) -> object:
    """`hpvm.torch` (hpvm_py/torch/) is loaded on first use: it imports torch."""
    if name == "torch":
        import importlib

        try:
            return importlib.import_module(".torch", __name__)
        except ModuleNotFoundError as exc:
            if exc.name != "torch":
                raise
            raise ImportError("hpvm.torch needs PyTorch (pip install torch, or hpvm-py[gpu])",
                              name="torch") from None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
