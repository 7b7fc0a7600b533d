"""The language's rules, hunted: a graph body that uses a node's output as a value (the output
exists only when the graph runs) is refused as computation in an internal node, at its line, like
the same use of a graph parameter; before, `if a.out[0] == 3:` was silently False and
`if a.out[0]:` silently True, so a graph quietly lost or kept nodes (and `hpvmc check` said ok),
while `a.out[0] + 1` was an error without a rule. Instance counts that go wrong only at launch
(negative, or past 2**63 - 1 instances) name `instance-counts` as the compile-time check does.

Programs in tests/programs/rules_adversarial.py; generated graph bodies below (seeded)."""
from __future__ import annotations

import random

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import ExecutionError, HPVMError, InternalError, LaunchError, VerificationError

from differential.data import load, source_file
from errcheck import check_error, marked_line, program_path
from hpvm_py.cli import main
from programs import rules_adversarial as P

V = VerificationError
STRUCTURE = "internal-nodes-only-structure"

CASES = [
    ("compares_output", "output-eq", STRUCTURE),
    ("branches_on_output", "output-bool", STRUCTURE),
    ("orders_output", "output-lt", STRUCTURE),
    ("adds_to_output", "output-add", STRUCTURE),
    ("negates_output", "output-neg", STRUCTURE),
    ("output_as_int", "output-int", STRUCTURE),
    ("output_as_count", "output-count", "instance-counts"),
    ("output_in_count_expr", "output-count-expr", "instance-counts"),
]


@pytest.mark.parametrize("name,tag,rule", CASES, ids=[c[0] for c in CASES])
def test_an_output_used_as_a_value_in_a_graph_body_is_refused(name, tag, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(P, name), target="python")
    check_error(info.value, V, program_path(P), tag, rule)
    assert "output 0 of node incr" in info.value.message


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_outputs_passed_on_as_structure_still_run(target):
    with hpvm.runtime(target):
        assert hpvm.wait(hpvm.launch(P.ok_outputs_as_structure, 2)) == 5


# -- generated graph bodies ---------------------------------------------------------------------

HEAD = """\
import hpvm_py as hpvm
from hpvm_py import i64


@hpvm.leaf
def incr(x: i64) -> i64:
    return x + 1

"""

# a use of the output `o` (of node `a`) in the graph body: (statement(s), rule); {o} is the output.
# An integer parameter on the left of + - * // % makes an expression whose other operand must be
# a count (`instance-counts`, as for a float parameter there)
VALUE_USES = [
    ("if {o} == 3:\n        pass", STRUCTURE), ("if {o} != n:\n        pass", STRUCTURE),
    ("if {o}:\n        pass", STRUCTURE), ("while {o} > 0:\n        break", STRUCTURE),
    ("k = not {o}", STRUCTURE), ("k = {o} and n", STRUCTURE), ("k = {o} <= 1", STRUCTURE),
    ("k = {o} >= 1", STRUCTURE), ("k = {o} + n", STRUCTURE), ("k = n - {o}", "instance-counts"),
    ("k = {o} * 2", STRUCTURE), ("k = 7 // {o}", STRUCTURE), ("k = {o} % 2", STRUCTURE),
    ("k = {o} / 2", STRUCTURE), ("k = {o} ** 2", STRUCTURE), ("k = {o} & 1", STRUCTURE),
    ("k = abs({o})", STRUCTURE), ("k = float({o})", STRUCTURE), ("k = [1, 2][{o}]", STRUCTURE),
    ("k = range({o})", STRUCTURE), ("k = max({o}, 1)", STRUCTURE), ("k = {o}[0]", STRUCTURE),
    ("k = len({o})", STRUCTURE), ("x, y = {o}", STRUCTURE), ("k = hpvm.f32({o})", STRUCTURE),
    ("k = f'{{{o}:d}}'", STRUCTURE),
    ("hpvm.node(incr, grid={o}, x=n)", "instance-counts"),
    ("hpvm.node(incr, grid=(2, {o}), x=n)", "instance-counts"),
    ("hpvm.node(incr, grid=n * {o}, x=n)", "instance-counts"),
]
OUTPUTS = ["a.out[0]", "tuple(a.out)[0]", "list(a.out)[0]"]


def _graph_using(use: str, output: str) -> str:
    first, *rest = use.format(o=output).split("\n")
    statement = "\n".join([first + "  # ERR:use"] + rest)
    return HEAD + f"""
@hpvm.graph
def root(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    {statement}
    return a.out[0]
"""


def test_generated_value_uses_of_outputs_are_refused_at_their_line():
    rng = random.Random(20261129)
    cases = [(use, rule, rng.choice(OUTPUTS)) for use, rule in VALUE_USES]
    for use, rule, output in cases:
        module = load(_graph_using(use, output))
        with pytest.raises(HPVMError) as info:
            hpvm.compile(module.root, target="python")
        assert not isinstance(info.value, InternalError), (use, info.value)
        check_error(info.value, V, module.__file__, "use", rule)


def test_generated_structural_uses_of_outputs_run_on_every_target():
    """Chains of nodes whose outputs are only passed on (one-to-one, all-to-all, streaming
    edges; kept in lists, tuples and dicts first): accepted, with the chain's value."""
    rng = random.Random(7)
    for case in range(4):
        length = rng.randrange(1, 5)
        lines = ["    last = hpvm.node(incr, x=n)"]
        for _ in range(length):
            wrap = rng.choice(["{o}", "hpvm.all_to_all({o})", "hpvm.streaming({o})",
                               "[{o}][0]", "({o},)[0]", "{{'k': {o}}}['k']"])
            out = wrap.format(o=rng.choice(["last.out[0]", "tuple(last.out)[0]"]))
            lines.append(f"    last = hpvm.node(incr, x={out})")
        body = "\n".join(lines)
        module = load(HEAD + f"\n@hpvm.graph\ndef root(n: i64) -> i64:\n{body}\n    return last.out[0]\n")
        for target in ("python", "cpu"):
            with hpvm.runtime(target):
                assert hpvm.wait(hpvm.launch(module.root, case)) == case + length + 1, (case, body)


def test_hpvmc_check_refuses_a_branch_on_an_output(capsys):
    """`hpvmc check` said `ok` for a graph body branching on a node's output."""
    path = source_file(_graph_using("if {o} == 3:\n        pass", "a.out[0]"))
    assert main(["check", str(path)]) != 0
    out = capsys.readouterr()
    assert f"{path}:{marked_line(str(path), 'use')}:" in out.err + out.out
    assert f"[rule: {STRUCTURE}]" in out.err + out.out


# -- instance counts known only at launch ---------------------------------------------------------


@pytest.mark.parametrize("target", ["python", "cpu", "gpu"])
def test_a_negative_count_at_launch_names_the_rule(target):
    a = np.zeros(4, np.int64)
    with hpvm.runtime(target):
        with pytest.raises(ExecutionError) as info:
            hpvm.wait(hpvm.launch(P.negative_count, a, 2))
    check_error(info.value, ExecutionError, program_path(P), "negative-at-launch", "instance-counts")
    assert not a.any()


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_an_overflowing_count_at_launch_names_the_rule(target):
    a = np.zeros(4, np.int64)
    with hpvm.runtime(target):
        with pytest.raises(LaunchError) as info:
            hpvm.wait(hpvm.launch(P.overflowing_count, a, 2 ** 22))
    check_error(info.value, LaunchError, program_path(P), "overflow-at-launch", "instance-counts")
