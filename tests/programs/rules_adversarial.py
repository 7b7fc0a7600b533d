"""Graphs for tests/test_rules_adversarial.py: a graph body that uses a node's output as a value
(compares it, branches on it, computes with it), and counts that go wrong only at launch. Each
offending line is marked `# ERR:<tag>`."""
import hpvm_py as hpvm
from hpvm_py import InOut, Ptr, i64


@hpvm.leaf
def incr(x: i64) -> i64:
    return x + 1


@hpvm.leaf
def mark(a: InOut[Ptr[i64]], a_bytes: i64):
    a[hpvm.instance_id(0)] = 1


@hpvm.graph
def compares_output(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    if a.out[0] == 3:  # ERR:output-eq
        return hpvm.node(incr, x=n).out[0]
    return a.out[0]


@hpvm.graph
def branches_on_output(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    if a.out[0]:  # ERR:output-bool
        return hpvm.node(incr, x=n).out[0]
    return a.out[0]


@hpvm.graph
def orders_output(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    if a.out[0] < n:  # ERR:output-lt
        return hpvm.node(incr, x=n).out[0]
    return a.out[0]


@hpvm.graph
def adds_to_output(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    return hpvm.node(incr, x=a.out[0] + 1).out[0]  # ERR:output-add


@hpvm.graph
def negates_output(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    return hpvm.node(incr, x=-a.out[0]).out[0]  # ERR:output-neg


@hpvm.graph
def output_as_int(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    return hpvm.node(incr, x=int(a.out[0])).out[0]  # ERR:output-int


@hpvm.graph
def output_as_count(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    return hpvm.node(incr, grid=a.out[0], x=n).out[0]  # ERR:output-count


@hpvm.graph
def output_in_count_expr(n: i64) -> i64:
    a = hpvm.node(incr, x=n)
    return hpvm.node(incr, grid=n + a.out[0], x=n).out[0]  # ERR:output-count-expr


@hpvm.graph
def ok_outputs_as_structure(n: i64) -> i64:
    """What a graph body may do with outputs: pass them on (by edge, all-to-all, streaming),
    keep them in variables and containers, and return them."""
    a = hpvm.node(incr, x=n)
    kept = [a.out[0]]
    assert kept[0] is not None
    b = hpvm.node(incr, x=hpvm.all_to_all(kept[0]))
    c = hpvm.node(incr, x=hpvm.streaming(b.out[0]))
    return c.out[0]


@hpvm.graph
def negative_count(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(mark, grid=n - 5, a=a, a_bytes=a_bytes)  # ERR:negative-at-launch


@hpvm.graph
def overflowing_count(a: InOut[Ptr[i64]], a_bytes: i64, n: i64):
    hpvm.node(mark, grid=(n, n, n), a=a, a_bytes=a_bytes)  # ERR:overflow-at-launch
