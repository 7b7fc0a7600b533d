"""Programs that each break one rule of the HPVM language reference on the line marked
`# ERR:tag` (tests/test_rules_reference.py), and `ok_*` twins the reference allows."""
import math

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64


@hpvm.leaf
def incr(x: i64) -> i64:
    return x + 1


@hpvm.leaf
def fincr(x: f32) -> f32:
    return x + 1.0


@hpvm.leaf
def spread(x: i64) -> i64:
    return x + hpvm.get_node_instance_id_x(hpvm.get_node())


@hpvm.leaf
def store(x: i64, a: Out[Ptr[f32]], a_bytes: i64):
    a[hpvm.get_node_instance_id_x(hpvm.get_node())] = f32(x)


@hpvm.leaf
def consume(x: i64):
    pass


@hpvm.graph
def inner(n: i64) -> i64:
    return hpvm.node(incr, x=n).out[0]


# -- Intrinsics for Graph Interaction: "can be used only by the host code" ------------------------

@hpvm.graph
def bad_init_in_graph(n: i64) -> i64:
    hpvm.init("python")  # ERR:init-in-graph
    return hpvm.node(incr, x=n).out[0]


@hpvm.graph
def bad_cleanup_in_graph(n: i64) -> i64:
    hpvm.cleanup()  # ERR:cleanup-in-graph
    return hpvm.node(incr, x=n).out[0]


@hpvm.graph
def bad_runtime_in_graph(n: i64) -> i64:
    with hpvm.runtime("python"):  # ERR:runtime-in-graph
        pass
    return hpvm.node(incr, x=n).out[0]


@hpvm.graph
def bad_launch_in_graph(n: i64) -> i64:
    hpvm.launch(inner, 3)  # ERR:launch-in-graph
    return hpvm.node(incr, x=n).out[0]


@hpvm.graph
def bad_wait_in_graph(n: i64) -> i64:
    hpvm.wait(None)  # ERR:wait-in-graph
    return hpvm.node(incr, x=n).out[0]


@hpvm.graph
def bad_track_in_graph(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.track_memory(a)  # ERR:track-in-graph


@hpvm.graph
def bad_push_in_graph(n: i64):
    hpvm.push(None, n)  # ERR:push-in-graph


# -- "Internal nodes only create the structure of the child graph" --------------------------------

@hpvm.graph
def bad_divmod(n: i64):
    q, r = divmod(n, 2)  # ERR:divmod


@hpvm.graph
def bad_round(n: i64):
    hpvm.node(incr, x=round(n * 2))  # ERR:round


@hpvm.graph
def bad_trunc(n: i64):
    hpvm.node(incr, x=math.trunc(n))  # ERR:trunc


@hpvm.graph
def bad_reflected_and(n: i64):
    hpvm.node(incr, x=3 & n)  # ERR:reflected-and


@hpvm.graph
def bad_unary_plus(n: i64):
    hpvm.node(incr, x=+n)  # ERR:unary-plus


@hpvm.graph
def bad_format(n: i64):
    hpvm.node(incr, name=f"n{n:d}", x=n)  # ERR:format


@hpvm.graph
def bad_cast(x: f32):
    hpvm.node(fincr, x=f32(x))  # ERR:cast


@hpvm.graph
def bad_math_function(x: f32):
    hpvm.node(fincr, x=hpvm.math.sqrt(x))  # ERR:math-function


@hpvm.graph
def bad_numpy_ufunc(x: f32):
    hpvm.node(fincr, x=np.exp(x))  # ERR:numpy-ufunc


@hpvm.graph
def bad_numpy_array_count(n: i64):
    hpvm.node(spread, grid=np.array([2]) * n, x=n)  # ERR:numpy-array-count


# -- createNode1D..3D: counts are i64 values ------------------------------------------------------

@hpvm.graph
def bad_numpy_float_count(n: i64):
    hpvm.node(spread, grid=np.float64(2) * n, x=n)  # ERR:numpy-float-count


@hpvm.graph
def bad_numpy_bool_count(n: i64):
    hpvm.node(spread, grid=np.bool_(True), x=n)  # ERR:numpy-bool-count


@hpvm.graph
def ok_numpy_counts(n: i64) -> i64:
    a = hpvm.node(spread, grid=np.int64(2) * n, x=n)
    hpvm.node(consume, grid=(n * np.int32(2),), x=a.out[0])
    return hpvm.node(incr, grid=np.int64(1), x=n).out[0]


# -- createEdge / bind: isStream is an i1 -----------------------------------------------------------

@hpvm.graph
def bad_edge_stream_flag(n: i64):
    a = hpvm.create_node(incr)
    b = hpvm.create_node(consume)
    hpvm.bind_input(a, 0, 0)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 0, stream="no")  # ERR:edge-stream-flag


@hpvm.graph
def bad_bind_stream_flag(n: i64):
    a = hpvm.create_node(consume)
    hpvm.bind_input(a, 0, 0, 2)  # ERR:bind-stream-flag


@hpvm.graph
def ok_stream_flags(n: i64) -> i64:
    a = hpvm.create_node(incr)
    b = hpvm.create_node(incr)
    hpvm.bind_input(a, 0, 0, True)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 0, 1)
    hpvm.bind_output(b, 0, 0, np.bool_(False))


# -- Implementation limitations: a pointer an edge or bind carries is followed by an i64 size -----

@hpvm.leaf
def returns_pointer(a: InOut[Ptr[f32]], a_bytes: i64) -> Ptr[f32]:  # ERR:pointer-output
    return a


@hpvm.graph
def bad_pointer_output(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(returns_pointer, a=a, a_bytes=a_bytes)


@hpvm.leaf
def returns_pointer_and_size(a: InOut[Ptr[f32]], a_bytes: i64) -> tuple[Ptr[f32], i64]:
    return a, a_bytes


@hpvm.graph
def ok_pointer_output_with_size(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(returns_pointer_and_size, a=a, a_bytes=a_bytes)


# -- One-to-one edges join identical grids, checked before the destination runs ------------------

@hpvm.graph
def grids_at_launch(n: i64, m: i64, a: Out[Ptr[f32]], a_bytes: i64):
    p = hpvm.node(spread, grid=n, x=hpvm.streaming(n))
    s = hpvm.streaming
    hpvm.node(store, grid=m, x=s(p.out[0]), a=s(a), a_bytes=s(a_bytes))  # ERR:grids-at-launch
