"""Leaves shared by the rule programs, and a root that instantiates any leaf by parameter names."""
import inspect

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64


@hpvm.leaf
def incr(x: i64) -> i64:
    return x + 1


@hpvm.leaf
def to_float(x: i64) -> f32:
    return f32(x)


@hpvm.leaf
def consume(x: i64):
    pass


@hpvm.leaf
def add_pair(x: i64, y: i64) -> i64:
    return x + y


@hpvm.leaf
def fork_pair(x: i64, y: i64) -> tuple[i64, i64]:
    return x, y


@hpvm.leaf
def vinc(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    c[i] = a[i] + 1.0


@hpvm.leaf
def double_in_place(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    a[i] = a[i] * 2.0


@hpvm.leaf
def peek(a: In[Ptr[f32]], a_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
    x = a[i]


def root_for(leaf, grid="n"):
    """A root graph with one node running `leaf`, each leaf parameter bound by its name.

    The root's parameters are (a, a_bytes, c, c_bytes, n, k); the leaf uses any of these names.
    """
    names = list(inspect.signature(leaf.pyfunc).parameters)

    @hpvm.graph
    def solo_root(a: InOut[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64, n: i64, k: i32):
        given = {"a": a, "a_bytes": a_bytes, "c": c, "c_bytes": c_bytes, "n": n, "k": k}
        hpvm.node(leaf, grid=n if grid == "n" else grid, **{k: given[k] for k in names if k in given})

    return solo_root
