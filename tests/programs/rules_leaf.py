"""Leaf-level rule violations: each `bad_*` leaf breaks one rule on the line marked `# ERR:tag`;
`ok_*` leaves are passing twins. tests/test_rules.py instantiates them with common.root_for."""
import math

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i32, i64

from .common import incr


def host_function(x):
    return x * 2


# -- pointer-direction --------------------------------------------------------------------------

@hpvm.leaf
def bad_no_direction(n: i64,
                     a: Ptr[f32],  # ERR:no-direction
                     a_bytes: i64):
    a[0] = 1.0


@hpvm.leaf
def bad_store_through_in(a: In[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    a[i] = x + 1.0  # ERR:store-in


@hpvm.leaf
def bad_load_from_out(a: Out[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    a[i] = 0.0
    a[i] = a[i] + 1.0  # ERR:load-out


@hpvm.leaf
def bad_atomic_on_out(a: Out[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = 0.0
    hpvm.atomic_add(a, 0, 1.0)  # ERR:atomic-out


@hpvm.leaf
def bad_atomic_on_in(a: In[Ptr[f32]], a_bytes: i64):
    old = hpvm.atomic_max(a, 0, 1.0)  # ERR:atomic-in


@hpvm.func
def store_one(p: Ptr[f32], i: i64):
    p[i] = 1.0


@hpvm.leaf
def bad_store_through_in_via_helper(a: In[Ptr[f32]], a_bytes: i64):
    store_one(a, hpvm.instance_id(0))  # ERR:helper-store-in


@hpvm.leaf
def ok_inout(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    a[i] += 1.0
    hpvm.atomic_add(a, 0, 1.0)


@hpvm.leaf
def ok_out_written_in_read(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64):
    i = hpvm.instance_id(0)
    store_one(c, i)
    c[i] = a[i]


# -- pointer-size -------------------------------------------------------------------------------

@hpvm.leaf
def bad_size_i32(a: InOut[Ptr[f32]],  # ERR:size-i32
                 k: i32):
    a[0] = 1.0


@hpvm.leaf
def bad_pointer_last(n: i64,
                     a: InOut[Ptr[f32]]):  # ERR:pointer-last
    a[0] = 1.0


@hpvm.leaf
def bad_two_pointers(a: InOut[Ptr[f32]],  # ERR:two-pointers
                     c: InOut[Ptr[f32]], c_bytes: i64):
    a[0] = c[0]


# -- max-three-dims, instance-query-dims, single-instance-root ----------------------------------

@hpvm.leaf
def bad_instance_id_3(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(hpvm.instance_id(3))  # ERR:instance-id-3


@hpvm.leaf
def bad_num_instances_dynamic(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(hpvm.num_instances(n))  # ERR:num-instances-dynamic


@hpvm.leaf
def asks_y(a: InOut[Ptr[f32]], a_bytes: i64):
    j = hpvm.get_node_instance_id_y(hpvm.get_node())  # ERR:y-on-1d
    a[j] = 1.0


@hpvm.leaf
def asks_parent_x(a: InOut[Ptr[f32]], a_bytes: i64):
    p = hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node()))  # ERR:parent-x
    a[p] = 1.0


@hpvm.leaf
def asks_parent_count(a: InOut[Ptr[f32]], a_bytes: i64):
    parent = hpvm.get_parent_node(hpvm.get_node())
    a[0] = f32(hpvm.get_num_node_instances_x(parent))  # ERR:parent-count


@hpvm.leaf
def asks_above_root(a: InOut[Ptr[f32]], a_bytes: i64):
    top = hpvm.get_parent_node(hpvm.get_parent_node(hpvm.get_node()))
    a[0] = f32(hpvm.get_num_dims(top))  # ERR:above-root


@hpvm.leaf
def asks_root_dims(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(hpvm.get_num_dims(hpvm.get_parent_node(hpvm.get_node())))


@hpvm.graph
def single_parent(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(asks_parent_x, grid=4, a=a, a_bytes=a_bytes)


@hpvm.graph
def replicated_parent(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(asks_parent_x, grid=4, a=a, a_bytes=a_bytes)


@hpvm.graph
def root_single_parent(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(single_parent, a=a, a_bytes=a_bytes)


@hpvm.graph
def root_replicated_parent(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.node(replicated_parent, grid=2, a=a, a_bytes=a_bytes)


# -- leaf-no-graph-builders ---------------------------------------------------------------------

@hpvm.leaf
def bad_create_node_in_leaf(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.create_node(incr)  # ERR:create-node-in-leaf


@hpvm.leaf
def bad_node_sugar_in_leaf(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    hpvm.node(incr, grid=4, x=n)  # ERR:node-sugar-in-leaf


# -- helper-no-intrinsics -----------------------------------------------------------------------

@hpvm.func
def helper_barrier(x: i64) -> i64:
    hpvm.barrier()  # ERR:helper-barrier
    return x


@hpvm.func
def helper_instance_id() -> i64:
    return hpvm.get_node_instance_id_x(hpvm.get_node())  # ERR:helper-instance-id


@hpvm.func
def helper_atomic(p: Ptr[f32]):
    hpvm.atomic_add(p, 0, 1.0)  # ERR:helper-atomic


@hpvm.func
def helper_malloc(n: i64):
    buf = hpvm.malloc(n)  # ERR:helper-malloc


@hpvm.leaf
def uses_helper_barrier(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(helper_barrier(n))


@hpvm.leaf
def uses_helper_instance_id(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(helper_instance_id())


@hpvm.leaf
def uses_helper_atomic(a: InOut[Ptr[f32]], a_bytes: i64):
    helper_atomic(a)


@hpvm.leaf
def uses_helper_malloc(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    helper_malloc(n)


# -- supported-python ---------------------------------------------------------------------------

@hpvm.leaf
def bad_lambda(a: InOut[Ptr[f32]], a_bytes: i64):
    f = lambda v: v + 1  # ERR:lambda  # noqa: E731


@hpvm.leaf
def bad_list_comprehension(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    xs = [a[i] for i in range(n)]  # ERR:listcomp


@hpvm.leaf
def bad_try(a: InOut[Ptr[f32]], a_bytes: i64):
    try:  # ERR:try
        a[0] = 1.0
    except Exception:
        pass


@hpvm.leaf
def bad_with(a: InOut[Ptr[f32]], a_bytes: i64):
    with open("x"):  # ERR:with
        a[0] = 1.0


@hpvm.leaf
def bad_import(a: InOut[Ptr[f32]], a_bytes: i64):
    import os  # ERR:import


@hpvm.leaf
def bad_fstring(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    print(f"n={n}")  # ERR:fstring


@hpvm.leaf
def bad_python_call(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(host_function(n))  # ERR:python-call


@hpvm.leaf
def bad_iterate_list(a: InOut[Ptr[f32]], a_bytes: i64):
    for v in [1, 2, 3]:  # ERR:iterate-list
        a[0] = f32(v)


@hpvm.leaf
def bad_string_constant(a: InOut[Ptr[f32]], a_bytes: i64):
    s = "text"  # ERR:string-constant


@hpvm.leaf
def ok_supported(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    """A docstring is fine."""
    i = hpvm.instance_id(0)
    acc = 0.0
    for k in range(n):
        if k % 2 == 0 and k < 10:
            acc += math.sqrt(f32(k))
        elif k > 100:
            break
        else:
            continue
    while acc > 1000.0:
        acc = acc / 2.0
    a[i] = acc if i < n else -acc


# -- leaf-returns-outputs -----------------------------------------------------------------------

@hpvm.leaf
def bad_missing_return(n: i64) -> i64:  # ERR:missing-return
    if n > 0:
        return n


@hpvm.leaf
def bad_return_count(n: i64) -> i64:
    return n, n  # ERR:return-count


@hpvm.leaf
def bad_return_without_outputs(n: i64):
    return n  # ERR:return-without-outputs


@hpvm.leaf
def ok_returns_on_every_path(n: i64) -> i64:
    if n > 0:
        return n
    else:
        return -n


# -- typing-narrowing ---------------------------------------------------------------------------

@hpvm.leaf
def bad_int_accumulator(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    acc = 0
    for i in range(n):
        acc += a[i]  # ERR:int-accumulator
    a[0] = f32(acc)


@hpvm.leaf
def bad_float_literal_to_int(a: InOut[Ptr[f32]], a_bytes: i64):
    k = 1
    k = 2.5  # ERR:float-literal-to-int
    a[0] = f32(k)


@hpvm.leaf
def bad_i64_to_i32(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    k = i32(0)
    k = n  # ERR:i64-to-i32
    a[0] = f32(k)


@hpvm.leaf
def ok_widening(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    acc = 0.0
    k = i32(0)
    wide = n
    wide = k
    for i in range(n):
        acc += a[i]
    a[0] = acc + f32(wide)


# -- malloc-uniform -----------------------------------------------------------------------------

@hpvm.leaf
def bad_malloc_in_if(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    if n > 0:
        buf = hpvm.malloc(n * 4, f32)  # ERR:malloc-in-if


@hpvm.leaf
def bad_malloc_instance_size(a: InOut[Ptr[f32]], a_bytes: i64):
    buf = hpvm.malloc(hpvm.instance_id(0) * 4)  # ERR:malloc-instance-size


@hpvm.leaf
def bad_malloc_in_expression(a: InOut[Ptr[f32]], a_bytes: i64):
    x = hpvm.malloc(16)[0]  # ERR:malloc-expression


@hpvm.leaf
def bad_malloc_local_instance_size(a: InOut[Ptr[f32]], a_bytes: i64):
    nb = hpvm.instance_id(0) * 4
    buf = hpvm.malloc(nb, f32)  # ERR:malloc-local-instance-size


@hpvm.leaf
def bad_malloc_local_divergent(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    nb = n * 4
    if hpvm.instance_id(0) < 2:
        nb = n * 8
    buf = hpvm.malloc(nb, f32)  # ERR:malloc-local-divergent


@hpvm.leaf
def bad_malloc_local_from_memory(a: InOut[Ptr[f32]], a_bytes: i64):
    nb = i64(a[0])
    buf = hpvm.malloc(nb)  # ERR:malloc-local-memory


@hpvm.leaf
def bad_malloc_local_in_loop(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    nb = 0
    for _ in range(n):
        nb += 4
    buf = hpvm.malloc(nb, f32)  # ERR:malloc-local-loop


@hpvm.leaf
def bad_malloc_size_doubling(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    x = n
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    x = x * x
    buf = hpvm.malloc(x, f32)  # ERR:malloc-size-doubling


@hpvm.leaf
def ok_malloc_size_in_locals(a: InOut[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64,
                             n: i64):
    """The scratch holds 2n floats: the size is computed in locals and a reassigned parameter."""
    i = hpvm.instance_id(0)
    n0 = n
    n = n * 2  # a parameter reassigned before the malloc: the size uses the new value
    pad = 0
    if n0 > 100:  # uniform: the same branch for every instance
        pad = 64
    nb = n * 4 + pad
    buf = hpvm.malloc(nb, f32)
    buf[i] = a[i]
    buf[i + n0] = a[i] * 2.0
    hpvm.barrier()
    c[i] = buf[(i + 1) % n0] + buf[n0 + i]


@hpvm.leaf
def ok_malloc(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    buf = hpvm.malloc(n * 4 + hpvm.num_instances(0), f32)
    i = hpvm.instance_id(0)
    buf[i] = a[i]
    hpvm.barrier()
    a[i] = buf[i]


@hpvm.leaf
def bad_barrier_in_divergent_if(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    if i < 3:
        hpvm.barrier()  # ERR:barrier-divergent-if
    a[i] = 1.0


@hpvm.leaf
def bad_barrier_in_divergent_loop(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.instance_id(0)
    for _ in range(i):
        hpvm.barrier()  # ERR:barrier-divergent-loop
    a[i] = 1.0


@hpvm.leaf
def bad_return_before_barrier(a: InOut[Ptr[f32]], a_bytes: i64):
    scratch = hpvm.malloc(16 * 4, f32)
    i = hpvm.instance_id(0)
    if i >= 4:
        return  # ERR:return-before-barrier
    scratch[i] = 1.0
    hpvm.barrier()
    a[i] = scratch[3 - i]


@hpvm.leaf
def bad_return_in_loop_with_barrier(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    for s in range(n):
        hpvm.barrier()
        if a[i] > f32(s):
            return  # ERR:return-in-barrier-loop
        a[i] = a[i] + 1.0


@hpvm.leaf
def bad_return_in_divergent_loop(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    for _ in range(i):
        return  # ERR:return-in-divergent-loop
    hpvm.barrier()
    a[i] = 1.0


@hpvm.leaf
def bad_break_before_barrier(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    for s in range(n):
        if i == s:
            break
        hpvm.barrier()  # ERR:break-before-barrier
    a[i] = 1.0


@hpvm.leaf
def bad_continue_in_barrier_loop(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    s = 0
    while s < n:
        s += 1
        if a[i] > 0.0:
            if s > 1:
                continue
        hpvm.barrier()  # ERR:continue-in-barrier-loop
    a[i] = 1.0


@hpvm.leaf
def ok_uniform_return_before_barrier(a: InOut[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]],
                                     c_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    half = n // 2
    if half < 2:
        return  # every instance of the group returns, or none does
    a[i] = a[i] + 1.0
    hpvm.barrier()
    c[i] = a[(i + 1) % n] + 10.0


@hpvm.leaf
def ok_return_after_last_barrier(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    a[i] = a[i] + 1.0
    hpvm.barrier()
    if i % 2 == 1:
        return
    a[i] = a[i + 1]


@hpvm.leaf
def ok_barrier_in_uniform_loop(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    s = n // 2
    while s > 0:
        if i < s:
            a[i] = a[i] + a[i + s]
        hpvm.barrier()
        s //= 2
