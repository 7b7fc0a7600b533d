"""Front-end errors that break no named rule of the reference (types, names, arity, helpers).
Each `bad_*` leaf fails on the line marked `# ERR:tag`; tests/test_frontend_errors.py runs them
as the one node of common.root_for's root."""
import json
import typing

import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, f32, i8, i64

from .common import incr

LIMIT = 10
NAMES = [1, 2, 3]


@hpvm.leaf
def bad_unannotated(a: InOut[Ptr[f32]], a_bytes: i64,
                    n):  # ERR:unannotated
    a[0] = 1.0


@hpvm.leaf
def bad_default(a: InOut[Ptr[f32]], a_bytes: i64,
                n: i64 = 4):  # ERR:default
    a[0] = 1.0


@hpvm.leaf
def bad_varargs(a: InOut[Ptr[f32]], a_bytes: i64,
                *rest: i64):  # ERR:varargs
    a[0] = 1.0


@hpvm.leaf
def bad_kwonly(a: InOut[Ptr[f32]], a_bytes: i64, *,
               n: i64):  # ERR:kwonly
    a[0] = 1.0


@hpvm.leaf
def bad_not_an_hpvm_type(a: InOut[Ptr[f32]], a_bytes: i64,
                         n: str):  # ERR:not-hpvm-type
    a[0] = 1.0


@hpvm.leaf
def bad_unknown_name(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(undefined_thing)  # ERR:unknown-name  # noqa: F821


@hpvm.leaf
def bad_used_before_assignment(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = later  # ERR:before-assignment
    later = 1.0


@hpvm.leaf
def bad_index_scalar(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(n[0])  # ERR:index-scalar


@hpvm.leaf
def bad_float_index(a: InOut[Ptr[f32]], a_bytes: i64):
    a[1.5] = 0.0  # ERR:float-index


@hpvm.leaf
def bad_float_var_index(a: InOut[Ptr[f32]], a_bytes: i64):
    x = a[0]
    a[x] = 0.0  # ERR:float-var-index


@hpvm.leaf
def bad_slice(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0:2] = 0.0  # ERR:slice


@hpvm.leaf
def bad_intrinsic_too_many(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.get_node_instance_id_x(hpvm.get_node(), 1)  # ERR:intrinsic-too-many


@hpvm.leaf
def bad_intrinsic_too_few(a: InOut[Ptr[f32]], a_bytes: i64):
    i = hpvm.get_node_instance_id_x()  # ERR:intrinsic-too-few


@hpvm.leaf
def bad_get_node_arg(a: InOut[Ptr[f32]], a_bytes: i64):
    node = hpvm.get_node(0)  # ERR:get-node-arg


@hpvm.leaf
def bad_barrier_arg(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.barrier(1)  # ERR:barrier-arg


@hpvm.leaf
def bad_atomic_arity(a: InOut[Ptr[f32]], a_bytes: i64):
    hpvm.atomic_add(a, 0)  # ERR:atomic-arity


@hpvm.leaf
def bad_handle_not_node(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    i = hpvm.get_node_instance_id_x(n)  # ERR:handle-not-node


@hpvm.leaf
def bad_literal_too_big(a: InOut[Ptr[f32]], a_bytes: i64):
    x = i8(1)
    y = x + 300  # ERR:literal-too-big
    a[0] = f32(y)


@hpvm.leaf
def bad_compare_literal_too_big(a: InOut[Ptr[f32]], a_bytes: i64):
    x = i8(1)
    if x < 300:  # ERR:compare-literal-too-big
        a[0] = 1.0


@hpvm.leaf
def bad_declared_literal_too_big(a: InOut[Ptr[f32]], a_bytes: i64):
    x: i8 = 300  # ERR:declared-literal-too-big
    a[0] = f32(x)


@hpvm.leaf
def bad_store_literal_too_big(a: InOut[Ptr[f32]], a_bytes: i64):
    small = hpvm.malloc(4, i8)
    small[0] = 300  # ERR:store-literal-too-big


@hpvm.leaf
def ok_cast_wraps(a: InOut[Ptr[f32]], a_bytes: i64):
    x = i8(300)
    y = i8(1) + 100
    a[0] = f32(x) + f32(y)


@hpvm.func
def early_return(x: i64) -> i64:
    if x > 0:
        return x  # ERR:early-return
    x = -x
    return x


@hpvm.leaf
def bad_helper_early_return(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(early_return(n))


@hpvm.func
def factorial(x: i64) -> i64:
    r = 1
    if x > 1:
        r = x * factorial(x - 1)  # ERR:recursion
    return r


@hpvm.leaf
def bad_recursive_helper(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(factorial(n))


@hpvm.func
def ping(x: i64) -> i64:
    return pong(x)


@hpvm.func
def pong(x: i64) -> i64:
    return ping(x)  # ERR:mutual-recursion


@hpvm.leaf
def bad_mutual_recursion(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(ping(n))


@hpvm.func
def helper_arity(x: i64, y: i64) -> i64:
    return x + y


@hpvm.leaf
def bad_helper_arity(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(helper_arity(n))  # ERR:helper-arity


@hpvm.func
def helper_no_value(x: i64):
    x = x + 1


@hpvm.leaf
def bad_helper_result_used(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    v = helper_no_value(n)  # ERR:helper-no-value
    a[0] = f32(v)


@hpvm.leaf
def bad_leaf_calls_leaf(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(incr(n))  # ERR:leaf-calls-leaf


class Pair(typing.NamedTuple):
    lo: i64
    hi: i64


@hpvm.leaf
def bad_namedtuple_missing_field(n: i64) -> Pair:
    return Pair(lo=n)  # ERR:namedtuple-missing


@hpvm.leaf
def bad_namedtuple_unknown_field(n: i64) -> Pair:
    return Pair(lo=n, hi=n, mid=n)  # ERR:namedtuple-unknown


@hpvm.leaf
def ok_namedtuple(n: i64) -> Pair:
    return Pair(hi=n + 1, lo=n)


@hpvm.leaf
def bad_reassign_pointer(a: InOut[Ptr[f32]], a_bytes: i64, c: InOut[Ptr[f32]], c_bytes: i64):
    a = c  # ERR:reassign-pointer


@hpvm.leaf
def bad_pointer_arithmetic(a: InOut[Ptr[f32]], a_bytes: i64):
    b = a * 2  # ERR:pointer-arithmetic (a + 1 is an offset pointer; a * 2 means nothing)


@hpvm.leaf
def bad_handle_arithmetic(a: InOut[Ptr[f32]], a_bytes: i64):
    h = hpvm.get_node()
    x = h + 1  # ERR:handle-arithmetic


@hpvm.leaf
def bad_int_pow(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(n ** n)  # ERR:int-pow


@hpvm.leaf
def bad_bitwise_float(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = a[0] & 1  # ERR:bitwise-float


@hpvm.leaf
def bad_module_list(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(NAMES)  # ERR:module-list


@hpvm.leaf
def bad_call_module_list(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(NAMES(1))  # ERR:call-module-list


@hpvm.leaf
def bad_attribute_of_param(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(n.real)  # ERR:attribute-of-param


@hpvm.leaf
def bad_keyword_call(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = hpvm.f32(x=1)  # ERR:keyword-call


@hpvm.leaf
def bad_range_float(a: InOut[Ptr[f32]], a_bytes: i64):
    for i in range(2.5):  # ERR:range-float
        a[0] = 1.0


@hpvm.leaf
def bad_while_else(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    while n > 0:  # ERR:while-else
        n = n - 1
    else:
        a[0] = 1.0


@hpvm.leaf
def bad_division_by_zero(a: InOut[Ptr[f32]], a_bytes: i64):
    a[0] = f32(1 / 0 + LIMIT)  # ERR:division-by-zero


@hpvm.leaf
def bad_handle_reassigned(a: InOut[Ptr[f32]], a_bytes: i64):
    h = hpvm.get_node()
    h = hpvm.get_parent_node(h)  # ERR:handle-reassigned


@hpvm.leaf
def bad_tuple_unpack(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    x, y = n  # ERR:tuple-unpack


@hpvm.leaf
def bad_return_annotation(n: i64) -> str:  # ERR:return-annotation
    return n


# -- graph bodies ---------------------------------------------------------------------------------

@hpvm.graph
def bad_graph_unannotated(a: InOut[Ptr[f32]], a_bytes: i64,
                          n):  # ERR:graph-unannotated
    pass


@hpvm.graph
def bad_graph_name_error(n: i64):
    hpvm.node(incr, x=nothing_here)  # ERR:graph-name-error  # noqa: F821


@hpvm.graph
def bad_graph_python_error(n: i64):
    table = {}
    hpvm.node(incr, x=table["n"])  # ERR:graph-key-error


@hpvm.graph
def bad_graph_returns_two(n: i64) -> i64:
    def make(k):
        return hpvm.node(incr, x=k)  # a nested function's return is not the graph's

    a = make(n)
    return a.out[0], a.out[0]  # ERR:graph-returns-two


@hpvm.graph
def bad_graph_library_error(n: i64):
    settings = json.loads("{not json")  # ERR:graph-library-error
    hpvm.node(incr, x=n)


@hpvm.leaf
def bad_multiline_expression(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):
    a[0] = f32(n +
               n * undefined_in_continuation)  # ERR:multiline  # noqa: F821


def make_nested_leaf():
    @hpvm.leaf
    def nested_bad(a: InOut[Ptr[f32]], a_bytes: i64):
        if a[0] > 0.0:
            a[0] = nowhere  # ERR:nested  # noqa: F821

    return nested_bad


def decorate_builtin():
    return hpvm.leaf(print)  # ERR:decorate-builtin


def decorate_class():
    @hpvm.graph  # ERR:decorate-class
    class NotAGraph:
        pass

    return NotAGraph


lambda_leaf = hpvm.leaf(
    lambda x: x)  # ERR:lambda-leaf
