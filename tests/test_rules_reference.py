"""The HPVM language reference (shared/seeds/hpvm-language-reference.rst), rule by rule: for each
rule a program that breaks it (tests/programs/rules_reference.py) must be refused with the rule's
name, at the offending line with a caret, on every target alike; the `ok_*` twins that the
reference allows must compile (and run).

tests/test_rules.py holds one program per rule of hpvm_py.ir.verify.RULES; this table adds the
cases that a rule-by-rule reading of the reference found slipping through (or reported without a
rule, or differently per target)."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import HPVMError, VerificationError
from hpvm_py.ir.verify import RULES

from errcheck import check_error, program_path
from programs import rules_reference as P

V = VerificationError

# (reference section, graph in programs/rules_reference.py, tag of the offending line, rule)
CASES = [
    ("Intrinsics for Graph Interaction", "bad_init_in_graph", "init-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_cleanup_in_graph", "cleanup-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_runtime_in_graph", "runtime-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_launch_in_graph", "launch-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_wait_in_graph", "wait-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_track_in_graph", "track-in-graph", "host-intrinsics-in-host-code"),
    ("Intrinsics for Graph Interaction", "bad_push_in_graph", "push-in-graph", "host-intrinsics-in-host-code"),
    ("Dataflow Node: internal nodes", "bad_divmod", "divmod", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_round", "round", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_trunc", "trunc", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_reflected_and", "reflected-and", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_unary_plus", "unary-plus", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_format", "format", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_cast", "cast", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_math_function", "math-function", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_numpy_ufunc", "numpy-ufunc", "internal-nodes-only-structure"),
    ("Dataflow Node: internal nodes", "bad_numpy_array_count", "numpy-array-count", "internal-nodes-only-structure"),
    ("createNode1D/2D/3D", "bad_numpy_float_count", "numpy-float-count", "instance-counts"),
    ("createNode1D/2D/3D", "bad_numpy_bool_count", "numpy-bool-count", "instance-counts"),
    ("createEdge: isStream", "bad_edge_stream_flag", "edge-stream-flag", "edge-kinds"),
    ("bind.input: isStream", "bad_bind_stream_flag", "bind-stream-flag", "edge-kinds"),
    ("Implementation Limitations: pointer + size", "bad_pointer_output", "pointer-output", "pointer-size"),
]


@pytest.mark.parametrize("section,name,tag,rule", CASES, ids=[c[1] for c in CASES])
def test_reference_rule_is_refused_at_its_line(section, name, tag, rule):
    assert rule in RULES, (section, rule)
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(P, name), target="python")
    check_error(info.value, V, program_path(P), tag, rule)


def test_host_code_refused_in_a_graph_leaves_the_runtime_running():
    """Before: cleanup() inside a graph body stopped (or unbalanced) the runtime launching it."""
    with hpvm.runtime("python"):
        with pytest.raises(VerificationError) as info:
            hpvm.launch(P.bad_cleanup_in_graph, 1)
        check_error(info.value, V, program_path(P), "cleanup-in-graph", "host-intrinsics-in-host-code")
        assert hpvm.wait(hpvm.launch(P.inner, 4)) == 5


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_reference_twins_run(target):
    with hpvm.runtime(target):
        assert hpvm.wait(hpvm.launch(P.ok_numpy_counts, 3)) == 4
        assert hpvm.wait(hpvm.launch(P.ok_stream_flags, 3)) == 5
        a = np.zeros(4, np.float32)
        hpvm.wait(hpvm.launch(P.ok_pointer_output_with_size, a))
    graph = P.ok_numpy_counts.module().root_func
    assert [len(n.dims) for n in graph.nodes] == [1, 1, 1]


@pytest.mark.parametrize("target", ["python", "cpu"])
@pytest.mark.parametrize("n,m", [(4, 5), (5, 4)])
@pytest.mark.parametrize("stream", [False, True])
def test_one_to_one_grids_checked_before_the_destination_runs(target, n, m, stream):
    """Before: on cpu a larger destination grid failed first as a LaunchError about the leaf's
    argument array (no rule, at the leaf), and a smaller one wrote the buffer before the check."""
    a = np.zeros(8, np.float32)
    with hpvm.runtime(target):
        with pytest.raises(VerificationError) as info:
            if stream:
                h = hpvm.launch(P.grids_at_launch, stream=True)
                hpvm.push(h, n, m, a)
                try:
                    hpvm.pop(h)
                finally:
                    with pytest.raises(VerificationError):
                        hpvm.wait(h)
            else:
                hpvm.wait(hpvm.launch(P.grids_at_launch, n, m, a))
    check_error(info.value, V, program_path(P), "grids-at-launch", "one-to-one-grids")
    assert not a.any(), "the destination ran before its grid was checked"
