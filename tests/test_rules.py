"""One failing program per rule of the language (hpvm_py.ir.verify.RULES), checked through the
public path (hpvm.compile / hpvm.launch), plus passing twins that show a rule is not over-eager.

Every failure must be the right HPVMError subclass, name the rule, and point at the marked line of
the test program with the source line and a caret."""
from __future__ import annotations

import copy

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import FrontendError, HPVMError, VerificationError
from hpvm_py.ir import dfg as D
from hpvm_py.ir import kernel as K
from hpvm_py.ir.verify import RULES, verify_module

from errcheck import check_error, program_path
from programs import common
from programs import host_calls as H
from programs import rules_graph as G
from programs import rules_leaf as L

V, F = VerificationError, FrontendError

# (graph in programs/rules_graph.py, tag of the offending line, error class, rule)
GRAPH_CASES = [
    ("bad_cycle", "cycle", V, "dfg-acyclic"),
    ("bad_cycle_downstream", "cycle-downstream", V, "dfg-acyclic"),
    ("bad_self_loop", "self-loop", V, "dfg-acyclic"),
    ("bad_self_nesting", "self-nesting", V, "hierarchy-acyclic"),
    ("mutual_a", "mutual-nesting", V, "hierarchy-acyclic"),
    ("bad_edge_from_other_graph", "edge-other-graph", V, "edge-siblings"),
    ("bad_input_from_other_graph", "input-other-graph", V, "edge-siblings"),
    ("bad_bind_other_param", "bind-other-param", V, "edge-siblings"),
    ("bad_grid_other_param", "grid-other-param", V, "edge-siblings"),
    ("bad_two_edges_from_one_output", "two-from-src", V, "edge-unique-ports"),
    ("bad_two_edges_into_one_input", "two-into-dst", V, "edge-unique-ports"),
    ("bad_grid_extents", "grid-extents", V, "one-to-one-grids"),
    ("bad_grid_dims", "grid-dims", V, "one-to-one-grids"),
    ("bad_grid_single_to_many", "grid-single", V, "one-to-one-grids"),
    ("bad_edge_types", "edge-types", V, "edge-types"),
    ("bad_bind_input_types", "bind-input-types", V, "bind-types"),
    ("bad_bind_output_types", "bind-output-types", V, "bind-types"),
    ("bad_bind_ptr_elem", "bind-ptr-elem", V, "bind-types"),
    ("bad_child_writes_parent_in", "writes-parent-in", V, "bind-direction"),
    ("bad_two_binds_one_input", "two-binds-in", V, "bind-unique-dest"),
    ("bad_output_bound_twice", "two-binds-out", V, "bind-unique-dest"),
    ("bad_child_output_bound_twice", "two-binds-src", V, "bind-unique-dest"),
    ("bad_edge_and_bind", "edge-and-bind", V, "input-single-source"),
    # at the source written later, whatever its kind (edges are checked before binds)
    ("bad_bind_and_edge", "bind-and-edge", V, "input-single-source"),
    ("bad_constant_and_edge", "constant-and-edge", V, "input-single-source"),
    ("bad_input_unconnected", "unconnected", V, "inputs-connected"),
    ("bad_output_unbound", "unbound", V, "outputs-bound"),
    ("bad_returns_too_many", "too-many-returned", V, "outputs-bound"),
    ("bad_returns_param", "returns-param", V, "outputs-bound"),
    ("bad_pointer_edge", "pointer-edge", V, "no-pointers-on-edges"),
    ("bad_root_pointer_output", "root-pointer-out", V, "no-pointers-on-edges"),
    ("bad_four_dims", "four-dims", V, "max-three-dims"),
    ("bad_float_param_count", "float-param-count", V, "instance-counts"),
    ("bad_float_literal_count", "float-count", V, "instance-counts"),
    ("bad_bool_count", "bool-count", V, "instance-counts"),
    ("bad_negative_count", "negative-count", V, "instance-counts"),
    ("bad_float_in_count_expr", "float-count-expr", V, "instance-counts"),
    ("bad_index_pointer", "index-pointer", V, "internal-nodes-only-structure"),
    ("bad_branch_on_param", "branch", V, "internal-nodes-only-structure"),
    ("bad_float_of_param", "float-of-param", V, "internal-nodes-only-structure"),
    ("bad_leaf_called_in_graph", "leaf-called-in-graph", F, "node-function"),
    ("bad_intrinsic_in_graph", "intrinsic-in-graph", F, "intrinsics-in-leaves"),
    ("bad_node_plain_function", "plain-function", V, "node-function"),
    ("bad_node_helper", "helper-node", V, "node-function"),
    ("bad_node_string", "string-node", V, "node-function"),
    ("bad_src_port_name", "src-port-name", V, "ports-exist"),
    ("bad_dst_port_index", "dst-port-index", V, "ports-exist"),
    ("bad_keyword_input", "keyword-input", V, "ports-exist"),
    ("bad_out_attribute", "out-attribute", V, "ports-exist"),
    ("bad_out_index", "out-index", V, "ports-exist"),
    ("bad_bind_parent_port", "bind-parent-port", V, "ports-exist"),
    ("bad_bind_output_port", "bind-output-port", V, "ports-exist"),
    ("bad_duplicate_name", "duplicate-name", V, "unique-node-names"),
    ("bad_name_clashes_generated", "generated-name", V, "unique-node-names"),
    ("bad_hint", "hint", V, "hint-target"),
    ("bad_hint_keyword", "hint-keyword", V, "hint-target"),
    ("bad_literal_input", "literal-input", V, "node-inputs"),
    ("bad_too_many_positional", "too-many-positional", V, "node-inputs"),
    ("bad_input_twice", "input-twice", V, "node-inputs"),
    ("bad_edge_kind", "edge-kind", V, "edge-kinds"),
    ("bad_all_to_all_bind", "all-to-all-bind", V, "edge-kinds"),
    ("bad_edge_kind_bool", "edge-kind-bool", V, "edge-kinds"),
    ("bad_graph_pointer_without_direction", "graph-no-direction", V, "pointer-direction"),
    ("bad_graph_pointer_without_size", "graph-no-size", V, "pointer-size"),
]

# (leaf in programs/rules_leaf.py, tag, error class, rule); each runs as the one node of a root
LEAF_CASES = [
    ("bad_no_direction", "no-direction", V, "pointer-direction"),
    ("bad_store_through_in", "store-in", V, "pointer-direction"),
    ("bad_load_from_out", "load-out", V, "pointer-direction"),
    ("bad_atomic_on_out", "atomic-out", V, "pointer-direction"),
    ("bad_atomic_on_in", "atomic-in", V, "pointer-direction"),
    ("bad_store_through_in_via_helper", "helper-store-in", V, "pointer-direction"),
    ("bad_size_i32", "size-i32", V, "pointer-size"),
    ("bad_pointer_last", "pointer-last", V, "pointer-size"),
    ("bad_two_pointers", "two-pointers", V, "pointer-size"),
    ("bad_instance_id_3", "instance-id-3", F, "max-three-dims"),
    ("bad_num_instances_dynamic", "num-instances-dynamic", F, "max-three-dims"),
    ("asks_y", "y-on-1d", V, "instance-query-dims"),
    ("asks_above_root", "above-root", V, "instance-query-dims"),
    ("asks_parent_x", "parent-x", V, "single-instance-root"),
    ("asks_parent_count", "parent-count", V, "single-instance-root"),
    ("bad_create_node_in_leaf", "create-node-in-leaf", V, "leaf-no-graph-builders"),
    ("bad_node_sugar_in_leaf", "node-sugar-in-leaf", V, "leaf-no-graph-builders"),
    ("uses_helper_barrier", "helper-barrier", V, "helper-no-intrinsics"),
    ("uses_helper_instance_id", "helper-instance-id", V, "helper-no-intrinsics"),
    ("uses_helper_atomic", "helper-atomic", V, "helper-no-intrinsics"),
    ("uses_helper_malloc", "helper-malloc", V, "helper-no-intrinsics"),
    ("bad_lambda", "lambda", F, "supported-python"),
    ("bad_list_comprehension", "listcomp", F, "supported-python"),
    ("bad_try", "try", F, "supported-python"),
    ("bad_with", "with", F, "supported-python"),
    ("bad_import", "import", F, "supported-python"),
    ("bad_fstring", "fstring", F, "supported-python"),
    ("bad_python_call", "python-call", F, "supported-python"),
    ("bad_iterate_list", "iterate-list", F, "supported-python"),
    ("bad_string_constant", "string-constant", F, "supported-python"),
    ("bad_missing_return", "missing-return", F, "leaf-returns-outputs"),
    ("bad_return_count", "return-count", F, "leaf-returns-outputs"),
    ("bad_return_without_outputs", "return-without-outputs", F, "leaf-returns-outputs"),
    ("bad_int_accumulator", "int-accumulator", F, "typing-narrowing"),
    ("bad_float_literal_to_int", "float-literal-to-int", F, "typing-narrowing"),
    ("bad_i64_to_i32", "i64-to-i32", F, "typing-narrowing"),
    ("bad_malloc_in_if", "malloc-in-if", F, "malloc-uniform"),
    ("bad_malloc_instance_size", "malloc-instance-size", F, "malloc-uniform"),
    ("bad_malloc_in_expression", "malloc-expression", F, "malloc-uniform"),
    ("bad_malloc_local_instance_size", "malloc-local-instance-size", F, "malloc-uniform"),
    ("bad_malloc_local_divergent", "malloc-local-divergent", F, "malloc-uniform"),
    ("bad_malloc_local_from_memory", "malloc-local-memory", F, "malloc-uniform"),
    ("bad_malloc_local_in_loop", "malloc-local-loop", F, "malloc-uniform"),
    ("bad_malloc_size_doubling", "malloc-size-doubling", F, "malloc-uniform"),
    ("bad_barrier_in_divergent_if", "barrier-divergent-if", V, "barrier-uniform"),
    ("bad_barrier_in_divergent_loop", "barrier-divergent-loop", V, "barrier-uniform"),
    ("bad_return_before_barrier", "return-before-barrier", V, "barrier-uniform"),
    ("bad_return_in_loop_with_barrier", "return-in-barrier-loop", V, "barrier-uniform"),
    ("bad_return_in_divergent_loop", "return-in-divergent-loop", V, "barrier-uniform"),
    ("bad_break_before_barrier", "break-before-barrier", V, "barrier-uniform"),
    ("bad_continue_in_barrier_loop", "continue-in-barrier-loop", V, "barrier-uniform"),
]

# (root graph in programs/rules_leaf.py, tag, error class, rule)
NESTED_CASES = [
    ("root_single_parent", "parent-x", V, "instance-query-dims"),
]


@pytest.mark.parametrize("name,tag,cls,rule", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_graph_rule(name, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(G, name), target="python")
    check_error(info.value, cls, program_path(G), tag, rule)


@pytest.mark.parametrize("name,tag,cls,rule", LEAF_CASES, ids=[c[0] for c in LEAF_CASES])
def test_leaf_rule(name, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(getattr(L, name)), target="python")
    check_error(info.value, cls, program_path(L), tag, rule)


@pytest.mark.parametrize("name,tag,cls,rule", NESTED_CASES, ids=[c[0] for c in NESTED_CASES])
def test_nested_rule(name, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(L, name), target="python")
    check_error(info.value, cls, program_path(L), tag, rule)


def test_the_same_error_twice():
    """A failing compile leaves nothing half-built: compiling again reports the same error."""
    errors = []
    for _ in range(2):
        with pytest.raises(VerificationError) as info:
            hpvm.compile(G.bad_edge_and_bind, target="python")
        errors.append(str(info.value))
    assert errors[0] == errors[1]


# -- rules checked when the graph launches -------------------------------------------------------


def test_symbolic_grids_checked_at_launch():
    with hpvm.runtime("python"):
        with pytest.raises(VerificationError) as info:
            hpvm.wait(hpvm.launch(G.grids_n_m, 4, 5))
    check_error(info.value, VerificationError, program_path(G), "grid-symbolic", "one-to-one-grids")


def test_symbolic_grids_pass_when_equal():
    compiled = hpvm.compile(G.grids_n_m, target="python")
    assert compiled.deferred, "n and m differ symbolically: the check must wait for the launch"
    with hpvm.runtime("python"):
        assert hpvm.wait(hpvm.launch(G.grids_n_m, 3, 3)) is None


def test_equal_grid_expressions_need_no_launch_check():
    assert hpvm.compile(G.ok_grids_same_expression, target="python").deferred == []


def test_grids_equal_at_launch_pass():
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(G.ok_grids_equal_at_launch, 3))


# -- rules broken at decoration time or in host code ---------------------------------------------


def test_leaf_target_at_decoration():
    with pytest.raises(HPVMError) as info:
        G.make_leaf_with_bad_target()
    check_error(info.value, FrontendError, program_path(G), "leaf-target", "hint-target")


@pytest.mark.parametrize("name,tag,cls,rule", [
    ("edge_in_host_code", "host-edge", V, "builders-in-internal-nodes"),
    ("node_in_host_code", "host-node", V, "builders-in-internal-nodes"),
    ("bind_in_host_code", "host-bind", V, "builders-in-internal-nodes"),
    ("get_node_in_host_code", "host-get-node", F, "intrinsics-in-leaves"),
    ("barrier_in_host_code", "host-barrier", F, "intrinsics-in-leaves"),
    ("call_leaf_in_host_code", "host-leaf-call", F, "node-function"),
])
def test_host_code_misuse(name, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        getattr(H, name)()
    check_error(info.value, cls, program_path(H), tag, rule)


# -- passing twins -------------------------------------------------------------------------------

OK_GRAPHS = ["ok_chain", "ok_fan_out_two_outputs", "ok_grids_same_expression", "ok_directions",
             "ok_child_reads_parent_out",
             "ok_all_to_all_other_grid", "ok_three_dims", "ok_python_loop_builds_nodes",
             "ok_unnamed_nodes", "ok_hints", "ok_reference_form_kinds"]


@pytest.mark.parametrize("name", OK_GRAPHS)
def test_passing_graph(name):
    compiled = hpvm.compile(getattr(G, name), target="python")
    assert compiled.name == getattr(G, name).name


def test_passing_graph_runs():
    a = np.arange(6, dtype=np.float32)
    c = np.zeros(6, dtype=np.float32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(G.ok_directions, a, a.nbytes, c, c.nbytes, 6))
        hpvm.request_memory(c)
    np.testing.assert_array_equal(c, a + 1)
    with hpvm.runtime("python"):
        assert hpvm.wait(hpvm.launch(G.ok_chain, 5)) == 11


def test_child_reads_what_a_sibling_wrote_to_an_out_pointer():
    a = np.arange(5, dtype=np.float32)
    c = np.zeros(5, dtype=np.float32)
    d = np.zeros(5, dtype=np.float32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(G.ok_child_reads_parent_out, a, a.nbytes, c, c.nbytes, d, d.nbytes, 5))
        hpvm.request_memory(d)
    np.testing.assert_array_equal(d, a * 2 + 1)


def test_unnamed_nodes_get_fresh_names():
    names = [n.name for n in G.ok_unnamed_nodes.module().root_func.nodes]
    assert len(set(names)) == 3 and names[0] == "consume_1"


def _run_leaf(leaf, n=4, grid="n"):
    a = np.arange(8, dtype=np.float32)
    c = np.zeros(8, dtype=np.float32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(common.root_for(leaf, grid), a, a.nbytes, c, c.nbytes, n, 0))
        hpvm.request_memory(a)
        hpvm.request_memory(c)
    return a, c


def test_inout_reads_writes_and_atomics():
    a, _ = _run_leaf(L.ok_inout, n=4)
    assert a[0] == 0 + 1 + 4 and a[1] == 2 and a[3] == 4 and a[4] == 4


def test_out_written_in_read():
    a, c = _run_leaf(L.ok_out_written_in_read, n=3)
    np.testing.assert_array_equal(c[:3], a[:3])
    assert c[3] == 0


def test_supported_subset_runs():
    a, _ = _run_leaf(L.ok_supported, n=3)
    expected = 0.0 + 2 ** 0.5
    np.testing.assert_allclose(a[:3], [expected] * 3, rtol=1e-6)


def test_returns_on_every_path_compiles():
    hpvm.compile(common.root_for(L.ok_returns_on_every_path, grid=None), target="python")


def test_widening_is_implicit():
    a, _ = _run_leaf(L.ok_widening, n=3, grid=None)
    assert a[0] == 0 + 1 + 2 + 0


def test_uniform_malloc():
    a, _ = _run_leaf(L.ok_malloc, n=4)
    np.testing.assert_array_equal(a[:4], np.arange(4))


@pytest.mark.parametrize("n", [3, 8])
def test_malloc_size_held_in_locals_runs_on_every_target(target, n):
    rng = np.random.default_rng(n)
    a = rng.random(8, dtype=np.float32)
    c = np.zeros(8, np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(common.root_for(L.ok_malloc_size_in_locals), a, a.nbytes, c, c.nbytes,
                              n, 0))
    want = np.zeros(8, np.float32)
    want[:n] = np.roll(a[:n], -1) + a[:n] * 2.0
    np.testing.assert_allclose(c, want, rtol=1e-6)


def test_malloc_size_is_the_value_of_its_locals_in_the_ir():
    leaf = L.ok_malloc_size_in_locals.ir
    (malloc,) = [s.value for s in leaf.body if isinstance(s, K.Assign) and isinstance(s.value, K.Malloc)]
    names = {e.name for e in K.walk_exprs(malloc.nbytes) if isinstance(e, K.Var)}
    assert names == {"n"}  # the parameter's input: nb, pad and the reassigned n are replaced


def test_malloc_local_errors_say_why():
    with pytest.raises(FrontendError, match="assigned in the loop"):
        hpvm.compile(common.root_for(L.bad_malloc_local_in_loop), target="python")


def test_root_dims_query_is_allowed():
    a, _ = _run_leaf(L.asks_root_dims, n=1)
    assert a[0] == 0


def test_parent_query_in_replicated_parent():
    a = np.zeros(8, dtype=np.float32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(L.root_replicated_parent, a, a.nbytes))
        hpvm.request_memory(a)
    assert a[0] == 1 and a[1] == 1 and a[2:].sum() == 0  # parent instances 0 and 1 wrote


# -- the verifier on IR that skipped the front end's early checks (as parsed text does) -----------


def _mutated(graph, mutate):
    module = copy.deepcopy(graph.module())
    mutate(module)
    return module


def _verify_fails(module, rule):
    with pytest.raises(VerificationError) as info:
        verify_module(module)
    assert info.value.rule == rule
    return info.value


def test_verifier_duplicate_node_names():
    def mutate(m):
        m.root_func.nodes[1].name = m.root_func.nodes[0].name
    err = _verify_fails(_mutated(G.ok_fan_out_two_outputs, mutate), "unique-node-names")
    assert err.loc.line > 0


def test_verifier_node_of_undefined_function():
    def mutate(m):
        m.root_func.nodes[0].func = "nowhere"
    _verify_fails(_mutated(G.ok_chain, mutate), "node-function")


def test_verifier_root_is_a_leaf():
    def mutate(m):
        m.root = common.incr.name
    _verify_fails(_mutated(G.ok_chain, mutate), "node-function")


def test_verifier_hierarchy_cycle():
    module = copy.deepcopy(L.root_replicated_parent.module())
    inner = module.functions[module.root_func.nodes[0].func]
    inner.nodes[0].func = inner.name  # the inner graph now contains itself
    _verify_fails(module, "hierarchy-acyclic")


def test_verifier_edge_to_unknown_node():
    def mutate(m):
        m.root_func.edges[0].dst = "elsewhere"
    _verify_fails(_mutated(G.ok_chain, mutate), "edge-siblings")


def test_verifier_edge_port_out_of_range():
    def mutate(m):
        m.root_func.edges[0].src_port = 3
    _verify_fails(_mutated(G.ok_chain, mutate), "ports-exist")


def test_verifier_edge_kind():
    def mutate(m):
        m.root_func.edges[0].kind = "some_to_some"
    _verify_fails(_mutated(G.ok_chain, mutate), "edge-kinds")


def test_verifier_hint():
    def mutate(m):
        m.root_func.nodes[0].hint = "tpu"
    _verify_fails(_mutated(G.ok_chain, mutate), "hint-target")


def test_verifier_four_dims():
    def mutate(m):
        m.root_func.nodes[0].dims = [D.DimConst(1)] * 4
    _verify_fails(_mutated(G.ok_chain, mutate), "max-three-dims")


def test_verifier_count_of_unknown_param():
    def mutate(m):
        m.root_func.nodes[0].dims = [D.DimParam("zz")]
    _verify_fails(_mutated(G.ok_chain, mutate), "instance-counts")


# -- every rule is exercised ---------------------------------------------------------------------

EXTRA_RULES = {"one-to-one-grids", "hint-target", "builders-in-internal-nodes", "intrinsics-in-leaves",
               "memory-in-bounds",  # tests/test_bounds_errors.py
               "remote-access", "remote-rank",  # tests/test_remote_access.py
               "pointer-views",  # tests/test_views.py
               "host-intrinsics-in-host-code",  # tests/test_rules_reference.py
               "kernel-types"}  # tests/test_text_ir_types.py (the textual IR: no Python program breaks it)


def test_every_rule_has_a_failing_program():
    tested = {c[3] for c in GRAPH_CASES + LEAF_CASES + NESTED_CASES} | EXTRA_RULES
    assert set(RULES) <= tested, sorted(set(RULES) - tested)
    assert tested <= set(RULES), sorted(tested - set(RULES))


def test_rules_have_descriptions():
    for name, text in RULES.items():
        assert name == name.lower() and " " not in name
        assert text and text == text.strip() and "\n" not in text


def test_barrier_in_a_uniform_loop_is_accepted_on_every_target(target):
    import numpy as np

    a = np.arange(8, dtype=np.float32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(common.root_for(L.ok_barrier_in_uniform_loop), a, a.nbytes, a, a.nbytes, 8, 0))
    assert a[0] == 28.0  # the tree reduction summed 0..7 into a[0]


def test_a_divergent_return_before_a_barrier_is_rejected_on_every_target(target):
    """Instances that return early would leave the others waiting at the barrier: rejected
    whatever the target, with the return located."""
    with pytest.raises(VerificationError) as info:
        with hpvm.runtime(target):
            hpvm.compile(common.root_for(L.bad_return_before_barrier), target=target)
    check_error(info.value, VerificationError, program_path(L), "return-before-barrier",
                "barrier-uniform")
    assert "return" in info.value.message and "barrier()" in info.value.message


@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_uniform_return_before_a_barrier_runs_on_every_target(target, n):
    rng = np.random.default_rng(n)
    a = rng.random(8, dtype=np.float32)
    c = np.zeros(8, np.float32)
    want_a, want_c = a.copy(), c.copy()
    if n // 2 >= 2:
        want_a[:n] += 1.0
        want_c[:n] = np.roll(want_a[:n], -1) + 10.0
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(common.root_for(L.ok_uniform_return_before_barrier), a, a.nbytes,
                              c, c.nbytes, n, 0))
    np.testing.assert_allclose(a, want_a, rtol=1e-6)
    np.testing.assert_allclose(c, want_c, rtol=1e-6)


def test_a_divergent_return_after_the_last_barrier_runs_on_every_target(target):
    rng = np.random.default_rng(7)
    a = rng.random(8, dtype=np.float32)
    plus = a + 1.0
    want = a.copy()
    want[:6] = plus[:6]
    want[0:6:2] = plus[1:6:2]  # even instances copy their odd neighbour; odd ones returned
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(common.root_for(L.ok_return_after_last_barrier), a, a.nbytes,
                              a, a.nbytes, 6, 0))
    np.testing.assert_allclose(a, want, rtol=1e-6)
