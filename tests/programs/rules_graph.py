"""Graph-level rule violations. Each `bad_*` graph breaks one rule on the line marked `# ERR:tag`;
each `ok_*` graph is a passing twin that shows the rule is not over-eager."""
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64

from .common import add_pair, consume, double_in_place, fork_pair, incr, to_float, vinc


def plain_python(x):
    return x


@hpvm.func
def helper_inc(x: i64) -> i64:
    return x + 1


# -- dfg-acyclic --------------------------------------------------------------------------------

@hpvm.graph
def bad_cycle(n: i64):
    a = hpvm.create_node(add_pair)
    b = hpvm.create_node(incr)
    hpvm.bind_input(a, 0, 0)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 0)
    hpvm.edge(b, a, hpvm.ONE_TO_ONE, 0, 1)  # ERR:cycle


@hpvm.graph
def bad_cycle_downstream(n: i64):
    a = hpvm.create_node(fork_pair)
    d1 = hpvm.create_node(incr)
    d2 = hpvm.create_node(consume)
    hpvm.bind_input(a, n, 0)
    hpvm.edge(d1, d2, hpvm.ONE_TO_ONE, 0, 0)  # after the cycle, but not on it
    hpvm.edge(a, d1, hpvm.ONE_TO_ONE, 1, 0)
    b = hpvm.create_node(incr)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 0)
    hpvm.edge(b, a, hpvm.ONE_TO_ONE, 0, 1)  # ERR:cycle-downstream


@hpvm.graph
def bad_self_loop(n: i64):
    a = hpvm.create_node(add_pair)
    hpvm.bind_input(a, 0, "x")
    hpvm.edge(a, a, hpvm.ONE_TO_ONE, 0, "y")  # ERR:self-loop


@hpvm.graph
def ok_chain(n: i64) -> i64:
    a = hpvm.create_node(add_pair)
    b = hpvm.create_node(incr)
    hpvm.bind_input(a, 0, 0)
    hpvm.bind_input(a, 0, 1)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 0)
    hpvm.bind_output(b, 0, 0)


# -- hierarchy-acyclic --------------------------------------------------------------------------

@hpvm.graph
def bad_self_nesting(n: i64):
    hpvm.create_node(bad_self_nesting)  # ERR:self-nesting


@hpvm.graph
def mutual_a(n: i64):
    hpvm.node(mutual_b, n=n)


@hpvm.graph
def mutual_b(n: i64):
    hpvm.node(mutual_a, n=n)  # ERR:mutual-nesting


# -- edge-siblings ------------------------------------------------------------------------------

LEAKED = {}


@hpvm.graph
def leaky_inner(n: i64):
    LEAKED["node"] = hpvm.node(incr, x=n)
    LEAKED["param"] = n


@hpvm.graph
def bad_edge_from_other_graph(n: i64):
    hpvm.node(leaky_inner, n=n)
    mine = hpvm.create_node(consume)
    hpvm.edge(LEAKED["node"], mine, hpvm.ONE_TO_ONE, 0, 0)  # ERR:edge-other-graph


@hpvm.graph
def bad_input_from_other_graph(n: i64):
    hpvm.node(leaky_inner, n=n)
    hpvm.node(consume, x=LEAKED["node"].out[0])  # ERR:input-other-graph


@hpvm.graph
def bad_bind_other_param(n: i64):
    hpvm.node(leaky_inner, n=n)
    hpvm.node(consume, x=LEAKED["param"])  # ERR:bind-other-param


@hpvm.graph
def bad_grid_other_param(n: i64):
    hpvm.node(leaky_inner, n=n)
    hpvm.node(consume, grid=LEAKED["param"], x=n)  # ERR:grid-other-param


# -- edge-unique-ports --------------------------------------------------------------------------

@hpvm.graph
def bad_two_edges_from_one_output(n: i64):
    a = hpvm.node(incr, x=n)
    hpvm.node(consume, x=a.out[0])
    hpvm.node(consume, x=a.out[0])  # ERR:two-from-src


@hpvm.graph
def bad_two_edges_into_one_input(n: i64):
    a = hpvm.node(incr, x=n)
    b = hpvm.node(incr, x=n)
    c = hpvm.create_node(consume)
    hpvm.edge(a, c, hpvm.ONE_TO_ONE, 0, 0)
    hpvm.edge(b, c, hpvm.ONE_TO_ONE, 0, "x")  # ERR:two-into-dst


@hpvm.graph
def ok_fan_out_two_outputs(n: i64):
    a = hpvm.node(fork_pair, x=n, y=n)
    hpvm.node(consume, x=a.out[0])
    hpvm.node(consume, x=a.out[1])


# -- one-to-one-grids ---------------------------------------------------------------------------

@hpvm.graph
def bad_grid_extents(n: i64):
    a = hpvm.node(incr, grid=4, x=n)
    hpvm.node(consume, grid=8, x=a.out[0])  # ERR:grid-extents


@hpvm.graph
def bad_grid_dims(n: i64):
    a = hpvm.node(incr, grid=(4, 4), x=n)
    hpvm.node(consume, grid=16, x=a.out[0])  # ERR:grid-dims


@hpvm.graph
def bad_grid_single_to_many(n: i64):
    a = hpvm.node(incr, x=n)
    hpvm.node(consume, grid=2, x=a.out[0])  # ERR:grid-single


@hpvm.graph
def grids_n_m(n: i64, m: i64):
    a = hpvm.node(incr, grid=n, x=n)
    hpvm.node(consume, grid=m, x=a.out[0])  # ERR:grid-symbolic


@hpvm.graph
def ok_grids_same_expression(n: i64, m: i64):
    a = hpvm.node(incr, grid=(n, m + 1), x=n)
    hpvm.node(consume, grid=(n, m + 1), x=a.out[0])


@hpvm.graph
def ok_grids_equal_at_launch(n: i64):
    a = hpvm.node(incr, grid=n * 2, x=n)
    hpvm.node(consume, grid=2 * n, x=a.out[0])


@hpvm.graph
def ok_all_to_all_other_grid(n: i64):
    a = hpvm.node(incr, grid=4, x=n)
    hpvm.node(consume, grid=8, x=hpvm.all_to_all(a.out[0]))


# -- edge-types, bind-types ---------------------------------------------------------------------

@hpvm.graph
def bad_edge_types(n: i64):
    a = hpvm.node(to_float, x=n)
    hpvm.node(consume, x=a.out[0])  # ERR:edge-types


@hpvm.graph
def bad_bind_input_types(x: f32):
    hpvm.node(consume, x=x)  # ERR:bind-input-types


@hpvm.graph
def bad_bind_output_types(n: i64) -> f32:
    a = hpvm.node(incr, x=n)
    return a.out[0]  # ERR:bind-output-types


@hpvm.graph
def bad_bind_ptr_elem(a: InOut[Ptr[i64]], a_bytes: i64):
    hpvm.node(double_in_place, grid=1, a=a, a_bytes=a_bytes)  # ERR:bind-ptr-elem


# -- bind-direction -----------------------------------------------------------------------------

@hpvm.graph
def bad_child_writes_parent_in(a: In[Ptr[f32]], a_bytes: i64):
    hpvm.node(double_in_place, grid=4, a=a, a_bytes=a_bytes)  # ERR:writes-parent-in


@hpvm.leaf
def write_c(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64) -> i64:
    i = hpvm.instance_id(0)
    c[i] = a[i] * 2.0
    return i


@hpvm.leaf
def read_c(ready: i64, c: In[Ptr[f32]], c_bytes: i64, d: Out[Ptr[f32]], d_bytes: i64):
    i = hpvm.instance_id(0)
    d[i] = c[i] + 1.0


@hpvm.graph
def ok_child_reads_parent_out(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64,
                              d: Out[Ptr[f32]], d_bytes: i64, n: i64):
    """c is Out for the host, but one child reads what its sibling wrote there."""
    w = hpvm.node(write_c, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)
    hpvm.node(read_c, grid=n, ready=hpvm.all_to_all(w.out[0]), c=c, c_bytes=c_bytes, d=d,
              d_bytes=d_bytes)


@hpvm.graph
def ok_directions(a: In[Ptr[f32]], a_bytes: i64, c: Out[Ptr[f32]], c_bytes: i64, n: i64):
    hpvm.node(vinc, grid=n, a=a, a_bytes=a_bytes, c=c, c_bytes=c_bytes)


# -- bind-unique-dest, input-single-source ------------------------------------------------------

@hpvm.graph
def bad_two_binds_one_input(n: i64, m: i64):
    s = hpvm.create_node(consume)
    hpvm.bind_input(s, "n", "x")
    hpvm.bind_input(s, "m", "x")  # ERR:two-binds-in


@hpvm.graph
def bad_output_bound_twice(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    b = hpvm.node(incr, x=n)
    hpvm.bind_output(a, 0, 0)
    hpvm.bind_output(b, 0, 0)  # ERR:two-binds-out


@hpvm.graph
def bad_child_output_bound_twice(n: i64) -> tuple[i64, i64]:
    a = hpvm.node(incr, x=n)
    hpvm.bind_output(a, 0, 0)
    hpvm.bind_output(a, 0, 1)  # ERR:two-binds-src


@hpvm.graph
def bad_edge_and_bind(n: i64):
    a = hpvm.node(incr, x=n)
    s = hpvm.create_node(consume)
    hpvm.edge(a, s, hpvm.ONE_TO_ONE, 0, 0)
    hpvm.bind_input(s, 0, 0)  # ERR:edge-and-bind


@hpvm.graph
def bad_bind_and_edge(n: i64):
    a = hpvm.node(incr, x=n)
    s = hpvm.create_node(consume)
    hpvm.bind_input(s, 0, 0)
    hpvm.edge(a, s, hpvm.ONE_TO_ONE, 0, 0)  # ERR:bind-and-edge


@hpvm.graph
def bad_constant_and_edge(n: i64):
    a = hpvm.node(incr, x=n)
    s = hpvm.node(consume, x=3)
    hpvm.edge(a, s, hpvm.ONE_TO_ONE, 0, 0)  # ERR:constant-and-edge


# -- inputs-connected, outputs-bound ------------------------------------------------------------

@hpvm.graph
def bad_input_unconnected(n: i64):
    hpvm.node(add_pair, x=n)  # ERR:unconnected


@hpvm.graph
def bad_output_unbound(n: i64) -> i64:  # ERR:unbound
    hpvm.node(incr, x=n)


@hpvm.graph
def bad_returns_too_many(n: i64) -> i64:
    a = hpvm.node(fork_pair, x=n, y=n)
    return a.out[0], a.out[1]  # ERR:too-many-returned


@hpvm.graph
def bad_returns_param(n: i64) -> i64:
    hpvm.node(incr, x=n)
    return n  # ERR:returns-param


# -- no-pointers-on-edges -----------------------------------------------------------------------

@hpvm.leaf
def pass_ptr(a: In[Ptr[f32]], a_bytes: i64) -> Ptr[f32]:
    return a


@hpvm.leaf
def take_ptr(p: In[Ptr[f32]], p_bytes: i64):
    x = p[0]


@hpvm.graph
def bad_pointer_edge(a: In[Ptr[f32]], a_bytes: i64):
    src = hpvm.node(pass_ptr, a=a, a_bytes=a_bytes)
    hpvm.node(take_ptr, p=src.out[0], p_bytes=a_bytes)  # ERR:pointer-edge


@hpvm.graph
def bad_root_pointer_output(a: In[Ptr[f32]], a_bytes: i64) -> Ptr[f32]:
    src = hpvm.node(pass_ptr, a=a, a_bytes=a_bytes)
    return src.out[0]  # ERR:root-pointer-out


# -- max-three-dims, instance-counts ------------------------------------------------------------

@hpvm.graph
def bad_four_dims(n: i64):
    hpvm.node(consume, grid=(2, 2, 2, 2), x=n)  # ERR:four-dims


@hpvm.graph
def ok_three_dims(n: i64):
    hpvm.node(consume, grid=(2, n, n + 1), x=n)


@hpvm.graph
def bad_float_param_count(n: i64, x: f32):
    hpvm.node(consume, grid=x, x=n)  # ERR:float-param-count


@hpvm.graph
def bad_float_literal_count(n: i64):
    hpvm.node(consume, grid=1.5, x=n)  # ERR:float-count


@hpvm.graph
def bad_bool_count(n: i64):
    hpvm.create_node_1d(consume, True)  # ERR:bool-count


@hpvm.graph
def bad_negative_count(n: i64):
    hpvm.create_node_2d(consume, 4, -1)  # ERR:negative-count


@hpvm.graph
def bad_float_in_count_expr(n: i64):
    hpvm.node(consume, grid=n * 1.5, x=n)  # ERR:float-count-expr


# -- internal-nodes-only-structure --------------------------------------------------------------

@hpvm.graph
def bad_index_pointer(a: InOut[Ptr[f32]], a_bytes: i64):
    v = a[0]  # ERR:index-pointer
    hpvm.node(double_in_place, grid=1, a=a, a_bytes=a_bytes)


@hpvm.graph
def bad_branch_on_param(n: i64):
    if n > 3:  # ERR:branch
        hpvm.node(consume, x=n)


@hpvm.graph
def bad_float_of_param(n: i64):
    hpvm.node(consume, grid=int(float(n)), x=n)  # ERR:float-of-param


@hpvm.graph
def bad_leaf_called_in_graph(n: i64):
    incr(n)  # ERR:leaf-called-in-graph


@hpvm.graph
def bad_intrinsic_in_graph(n: i64):
    hpvm.get_node()  # ERR:intrinsic-in-graph


@hpvm.graph
def ok_python_loop_builds_nodes(n: i64):
    for _ in range(3):
        hpvm.node(consume, grid=n, x=n)


# -- node-function ------------------------------------------------------------------------------

@hpvm.graph
def bad_node_plain_function(n: i64):
    hpvm.create_node(plain_python)  # ERR:plain-function


@hpvm.graph
def bad_node_helper(n: i64):
    hpvm.node(helper_inc, x=n)  # ERR:helper-node


@hpvm.graph
def bad_node_string(n: i64):
    hpvm.create_node_1d("consume", n)  # ERR:string-node


# -- ports-exist --------------------------------------------------------------------------------

@hpvm.graph
def bad_src_port_name(n: i64):
    a = hpvm.node(incr, x=n)
    b = hpvm.create_node(consume)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, "nope", 0)  # ERR:src-port-name


@hpvm.graph
def bad_dst_port_index(n: i64):
    a = hpvm.node(incr, x=n)
    b = hpvm.create_node(consume)
    hpvm.edge(a, b, hpvm.ONE_TO_ONE, 0, 5)  # ERR:dst-port-index


@hpvm.graph
def bad_keyword_input(n: i64):
    hpvm.node(consume, x=n, bogus=n)  # ERR:keyword-input


@hpvm.graph
def bad_out_attribute(n: i64):
    a = hpvm.node(fork_pair, x=n, y=n)
    hpvm.node(consume, x=a.out.missing)  # ERR:out-attribute


@hpvm.graph
def bad_out_index(n: i64):
    a = hpvm.node(incr, x=n)
    hpvm.node(consume, x=a.out[1])  # ERR:out-index


@hpvm.graph
def bad_bind_parent_port(n: i64):
    s = hpvm.create_node(consume)
    hpvm.bind_input(s, "zz", 0)  # ERR:bind-parent-port


@hpvm.graph
def bad_bind_output_port(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    hpvm.bind_output(a, 0, 1)  # ERR:bind-output-port


# -- unique-node-names --------------------------------------------------------------------------

@hpvm.graph
def bad_duplicate_name(n: i64):
    hpvm.node(consume, name="s", x=n)
    hpvm.node(consume, name="s", x=n)  # ERR:duplicate-name


@hpvm.graph
def bad_name_clashes_generated(n: i64):
    first = hpvm.node(consume, x=n)
    hpvm.node(incr, name=first.name, x=n)  # ERR:generated-name


@hpvm.graph
def ok_unnamed_nodes(n: i64):
    hpvm.node(consume, name="consume_1", x=n)
    hpvm.node(consume, x=n)
    hpvm.node(consume, x=n)


# -- hint-target --------------------------------------------------------------------------------

@hpvm.graph
def bad_hint(n: i64):
    s = hpvm.node(consume, x=n)
    hpvm.hint(s, "tpu")  # ERR:hint


@hpvm.graph
def bad_hint_keyword(n: i64):
    hpvm.node(consume, x=n, hint="fpga")  # ERR:hint-keyword


@hpvm.graph
def ok_hints(n: i64):
    s = hpvm.node(consume, x=n, hint="cpu")
    hpvm.hint(s, "python")


def make_leaf_with_bad_target():
    @hpvm.leaf(target="tpu")  # ERR:leaf-target
    def on_tpu(x: i64):
        pass

    return on_tpu


# -- node-inputs, edge-kinds --------------------------------------------------------------------

@hpvm.graph
def bad_literal_input(n: i64):
    hpvm.node(consume, x="5")  # ERR:literal-input


@hpvm.graph
def bad_too_many_positional(n: i64):
    hpvm.node(consume, n, n)  # ERR:too-many-positional


@hpvm.graph
def bad_input_twice(n: i64):
    hpvm.node(consume, n, x=n)  # ERR:input-twice


@hpvm.graph
def bad_edge_kind(n: i64):
    a = hpvm.node(incr, x=n)
    b = hpvm.create_node(consume)
    hpvm.edge(a, b, 7, 0, 0)  # ERR:edge-kind


@hpvm.graph
def bad_all_to_all_bind(n: i64):
    hpvm.node(consume, x=hpvm.all_to_all(n))  # ERR:all-to-all-bind


@hpvm.graph
def ok_reference_form_kinds(n: i64):
    a = hpvm.node(incr, grid=2, x=n)
    b = hpvm.create_node_1d(consume, 2)
    hpvm.edge(a, b, 0, 0, 0)
    c = hpvm.node(incr, grid=2, x=n)
    d = hpvm.create_node(consume)
    hpvm.edge(c, d, hpvm.ALL_TO_ALL, 0, 0)


# -- parameter rules on graph functions ---------------------------------------------------------

@hpvm.graph
def bad_graph_pointer_without_direction(n: i64,
                                        a: Ptr[f32],  # ERR:graph-no-direction
                                        a_bytes: i64):
    hpvm.node(consume, x=n)


@hpvm.graph
def bad_graph_pointer_without_size(n: i64,
                                   a: InOut[Ptr[f32]]):  # ERR:graph-no-size
    hpvm.node(consume, x=n)


@hpvm.graph
def bad_edge_kind_bool(n: i64):
    a = hpvm.node(incr, x=n)
    b = hpvm.create_node(consume)
    hpvm.edge(a, b, True, 0, 0)  # ERR:edge-kind-bool
