"""Front-end errors outside the named rules: each must be a FrontendError (or VerificationError)
at the marked line of programs/frontend_cases.py, with the source line and a caret."""
from __future__ import annotations

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import FrontendError, HPVMError, VerificationError

from errcheck import check_error, program_path
from programs import common
from programs import frontend_cases as P

F = FrontendError

# (leaf in programs/frontend_cases.py, tag, rule)
LEAF_CASES = [
    ("bad_unannotated", "unannotated", None),
    ("bad_default", "default", None),
    ("bad_varargs", "varargs", None),
    ("bad_kwonly", "kwonly", None),
    ("bad_not_an_hpvm_type", "not-hpvm-type", None),
    ("bad_unknown_name", "unknown-name", None),
    ("bad_used_before_assignment", "before-assignment", None),
    ("bad_index_scalar", "index-scalar", None),
    ("bad_float_index", "float-index", None),
    ("bad_float_var_index", "float-var-index", None),
    ("bad_slice", "slice", None),
    ("bad_intrinsic_too_many", "intrinsic-too-many", None),
    ("bad_intrinsic_too_few", "intrinsic-too-few", None),
    ("bad_get_node_arg", "get-node-arg", None),
    ("bad_barrier_arg", "barrier-arg", None),
    ("bad_atomic_arity", "atomic-arity", None),
    ("bad_handle_not_node", "handle-not-node", None),
    ("bad_literal_too_big", "literal-too-big", None),
    ("bad_compare_literal_too_big", "compare-literal-too-big", None),
    ("bad_declared_literal_too_big", "declared-literal-too-big", None),
    ("bad_store_literal_too_big", "store-literal-too-big", None),
    ("bad_helper_early_return", "early-return", None),
    ("bad_recursive_helper", "recursion", None),
    ("bad_mutual_recursion", "mutual-recursion", None),
    ("bad_helper_arity", "helper-arity", None),
    ("bad_helper_result_used", "helper-no-value", None),
    ("bad_leaf_calls_leaf", "leaf-calls-leaf", "node-function"),
    ("bad_namedtuple_missing_field", "namedtuple-missing", None),
    ("bad_namedtuple_unknown_field", "namedtuple-unknown", None),
    ("bad_reassign_pointer", "reassign-pointer", "pointer-views"),
    ("bad_pointer_arithmetic", "pointer-arithmetic", "pointer-views"),
    ("bad_handle_arithmetic", "handle-arithmetic", None),
    ("bad_int_pow", "int-pow", None),
    ("bad_bitwise_float", "bitwise-float", None),
    ("bad_module_list", "module-list", "supported-python"),
    ("bad_call_module_list", "call-module-list", "supported-python"),
    ("bad_attribute_of_param", "attribute-of-param", "supported-python"),
    ("bad_keyword_call", "keyword-call", "supported-python"),
    ("bad_range_float", "range-float", None),
    ("bad_while_else", "while-else", "supported-python"),
    ("bad_division_by_zero", "division-by-zero", None),
    ("bad_handle_reassigned", "handle-reassigned", None),
    ("bad_tuple_unpack", "tuple-unpack", None),
    ("bad_return_annotation", "return-annotation", None),
]

GRAPH_CASES = [
    ("bad_graph_unannotated", "graph-unannotated", None),
    ("bad_graph_name_error", "graph-name-error", None),
    ("bad_graph_python_error", "graph-key-error", None),
]


@pytest.mark.parametrize("name,tag,rule", LEAF_CASES, ids=[c[0] for c in LEAF_CASES])
def test_leaf_frontend_error(name, tag, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(getattr(P, name)), target="python")
    check_error(info.value, F, program_path(P), tag, rule)


@pytest.mark.parametrize("name,tag,rule", GRAPH_CASES, ids=[c[0] for c in GRAPH_CASES])
def test_graph_frontend_error(name, tag, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(P, name), target="python")
    check_error(info.value, F, program_path(P), tag, rule)


def test_graph_error_names_the_python_exception():
    with pytest.raises(FrontendError, match="KeyError"):
        hpvm.compile(P.bad_graph_python_error, target="python")


def test_casts_wrap_literals():
    a = np.zeros(4, dtype=np.float32)
    c = np.zeros(4, dtype=np.float32)
    with hpvm.runtime("python"):
        hpvm.wait(hpvm.launch(common.root_for(P.ok_cast_wraps, grid=None), a, a.nbytes, c, c.nbytes, 1, 0))
        hpvm.request_memory(a)
    assert a[0] == 44 + 101


def test_namedtuple_fields_by_keyword():
    leaf = P.ok_namedtuple.ir
    assert [o.name for o in leaf.outputs] == ["lo", "hi"]
    assert [type(v).__name__ for v in leaf.body[-1].values] == ["Var", "BinOp"]


def test_leaf_lowering_is_lazy():
    """A broken leaf fails where it is used, not when its module is imported."""
    assert P.bad_unknown_name.name.startswith("bad_unknown_name")


# -- no internal traceback: malformed leaves written to fresh files --------------------------------

import importlib.util  # noqa: E402
import itertools  # noqa: E402
import textwrap  # noqa: E402

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from errcheck import check_caret, marked_line  # noqa: E402
from hpvm_py.errors import InternalError  # noqa: E402

TEMPLATE = '''\
import math

import numpy as np

import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, f64, i8, i32, i64, u8

{prelude}


@hpvm.leaf
def fuzz_leaf(a: InOut[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[i32]], b_bytes: i64, n: i64, x: f32):
    i = hpvm.get_node_instance_id_x(hpvm.get_node())
{body}


@hpvm.graph
def fuzz_root(a: InOut[Ptr[f32]], a_bytes: i64, b: InOut[Ptr[i32]], b_bytes: i64, n: i64, x: f32):
    hpvm.node(fuzz_leaf, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, n=n, x=x)
'''

_counter = itertools.count()


def load_program(folder, body: str, prelude: str = ""):
    """Write a leaf with `body` (and module-level `prelude`) to a fresh file and import it."""
    path = folder / f"fuzz_{next(_counter)}.py"
    path.write_text(TEMPLATE.format(prelude=textwrap.dedent(prelude),
                                    body=textwrap.indent(textwrap.dedent(body), "    ")))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(path), module


# Every snippet fails to compile, on the line marked `# ERR:x`; (prelude, body)
MALFORMED = [
    ("", "a[0] = [1, 2]  # ERR:x"),
    ("", "a[0] = {1: 2}  # ERR:x"),
    ("", "a[0] = {n}  # ERR:x"),
    ("", "a[0] = (1, 2)  # ERR:x"),
    ("", "a[0] = a  # ERR:x"),
    ("", "a[0] = hpvm.get_node()  # ERR:x"),
    ("", "del n  # ERR:x"),
    ("G = 1", "global G  # ERR:x"),
    ("", "assert n > 0  # ERR:x"),
    ("", "raise ValueError(n)  # ERR:x"),
    ("", "class K:  # ERR:x\n    pass"),
    ("", "def inner():  # ERR:x\n    pass"),
    ("", "a[0] = n.bit_length()  # ERR:x"),
    ("", "a[0] = a[0][0]  # ERR:x"),
    ("", "a[a] = 1.0  # ERR:x"),
    ("", "a[n, n] = 1.0  # ERR:x"),
    ("", "a[:] = 1.0  # ERR:x"),
    ("", "n = 1.5  # ERR:x"),
    ("", "a = 1  # ERR:x"),
    ("", "h = hpvm.get_node()\na[0] = f32(h)  # ERR:x"),
    ("", "if hpvm.get_node():  # ERR:x\n    pass"),
    ("", "a[0] = -hpvm.get_node()  # ERR:x"),
    ("", "for k in range(n, step=2):  # ERR:x\n    pass"),
    ("", "for k in range():  # ERR:x\n    pass"),
    ("", "for k, j in range(3):  # ERR:x\n    pass"),
    ("", "for a in range(3):  # ERR:x\n    pass"),
    ("", "for k in range(x):  # ERR:x\n    pass"),
    ("", "for k in range(2 ** 70):  # ERR:x\n    pass"),
    ("", "for k in range(n):\n    k = 1.5  # ERR:x"),
    ("", "k = i8(0)\nfor k in range(n):  # ERR:x\n    pass"),
    ("", "for k in range(3):  # ERR:x\n    pass\nelse:\n    pass"),
    ("", "a[0] = math.sqrt()  # ERR:x"),
    ("", "a[0] = math.sqrt(a)  # ERR:x"),
    ("", "a[0] = f32(abs(b[0] > 0))  # ERR:x"),
    ("", "a[0] = min(x)  # ERR:x"),
    ("", "a[0] = f32(round(x, 2))  # ERR:x"),
    ("", "a[0] = f32(1, 2)  # ERR:x"),
    ("", "a[0] = f32(a)  # ERR:x"),
    ("", "a[0] = ~x  # ERR:x"),
    ("", "a[0] = ~1.5  # ERR:x"),
    ("", "a[0] = x << 2  # ERR:x"),
    ("", "a[0] = 1.5 << 2  # ERR:x"),
    ("", "a[0] = f32(n ** -1)  # ERR:x"),
    ("", "a[0] = 10.0 ** 400  # ERR:x"),
    ("", "a[0] = (-8) ** 0.5  # ERR:x"),
    ("", "a[0] = f32(n @ n)  # ERR:x"),
    ("", "a[0] = f32(n in n)  # ERR:x"),
    ("", "a[0] = f32(n is n)  # ERR:x"),
    ("", "hpvm.atomic_add(n, 0, 1)  # ERR:x"),
    ("", "hpvm.atomic_and(a, 0, 1)  # ERR:x"),
    ("", "hpvm.atomic_add(a, 1.5, 1.0)  # ERR:x"),
    ("", "hpvm.atomic_add(a, 0, 1.0, 2)  # ERR:x"),
    ("", "buf = hpvm.malloc(16, \"f32\")  # ERR:x"),
    ("", "buf = hpvm.malloc()  # ERR:x"),
    ("", "buf = hpvm.malloc(16)\nbuf = hpvm.malloc(16)  # ERR:x"),
    ("", "buf = hpvm.malloc(16)\nbuf = 1  # ERR:x"),
    ("", "a[0] = hpvm.barrier()  # ERR:x"),
    ("", "print(n, end=\"\")  # ERR:x"),
    ("", "print(hpvm.get_node())  # ERR:x"),
    ("", "a[0] = print(n)  # ERR:x"),
    ("", "y: list = 1  # ERR:x"),
    ("", "a[0]: f32 = 1.0  # ERR:x"),
    ("", "y: f32\ny: f32  # ERR:x"),
    ("", "y: f32 = 1.0\ny: i32 = 1  # ERR:x"),
    ("", "a[0] = f32(hpvm.get_num_dims(n))  # ERR:x"),
    ("", "a[0] = f32(hpvm.instance_id(n))  # ERR:x"),
    ("", "a[0] = f32(hpvm.num_instances(-1))  # ERR:x"),
    ("", "y, z = 1  # ERR:x"),
    ("", "y, z = 1, 2, 3  # ERR:x"),
    ("", "a[0] += [1]  # ERR:x"),
    ("", "n.real = 1  # ERR:x"),
    ("", "a[0] = x if x else hpvm.get_node()  # ERR:x"),
    ("", "a[0] = b[0] if x else a  # ERR:x"),
    ("", "a[0] = \"s\" + \"t\"  # ERR:x"),
    ("", "a[0] = None  # ERR:x"),
    ("", "a[0] = ...  # ERR:x"),
    ("", "a[0] = 1j  # ERR:x"),
    ("", "a[0] = math.pi(1)  # ERR:x"),
    ("", "a[0] = hpvm.math  # ERR:x"),
    ("", "a[0] = hpvm.f32  # ERR:x"),
    ("", "y = 2 ** 70  # ERR:x"),
    ("", "return 1  # ERR:x"),
    ("", "a[0] = (lambda: 1)()  # ERR:x"),
    ("", "a[0] = getattr(n, \"real\")  # ERR:x"),
    ("", "a[0] = f32(len(a))  # ERR:x"),
    ("", "hpvm.edge(1, 2, 0, 0, 0)  # ERR:x"),
    ("", "with hpvm.runtime():  # ERR:x\n    pass"),
    ("", "match n:  # ERR:x\n    case 1:\n        pass"),
    ("", "a[0] = [k for k in range(3)][0]  # ERR:x"),
    ("", "a[0] = not hpvm.get_node()  # ERR:x"),
    ("", "hpvm.barrier  # ERR:x"),
    ("", "a[0] = a[0] + b  # ERR:x"),
    ("", "y = 1\ny = hpvm.get_node()  # ERR:x"),
    ("", "h = hpvm.get_node()\nh = 1  # ERR:x"),
    ("", "a[0] = f32(hpvm.get_node_instance_id_x(hpvm.get_parent_node(5)))  # ERR:x"),
    ("", "a[0] = f32(hpvm.get_node_instance_id_x)  # ERR:x"),
    ("", "a[0] = f32(fuzz_leaf)  # ERR:x"),
    ("", "a[0] = f32(fuzz_root(a, a_bytes, b, b_bytes, n, x))  # ERR:x"),
    ("@hpvm.func\ndef h(p: Ptr[i32]) -> i32:\n    return p[0]", "a[0] = f32(h(a))  # ERR:x"),
    ("@hpvm.func\ndef h(v: i64) -> i64:\n    return  # ERR:x", "a[0] = f32(h(n))"),
    ("@hpvm.func\ndef h(v: i64):\n    return v  # ERR:x", "h(n)"),
    ("@hpvm.func\ndef h(v: i64) -> i64:  # ERR:x\n    if v > 0:\n        return v", "a[0] = f32(h(n))"),
    ("@hpvm.func\ndef h(v: i64) -> Ptr[f32]:  # ERR:x\n    return v", "a[0] = f32(h(n))"),
    ("@hpvm.func\ndef h(v: i64, w: i64) -> i64:\n    return v", "a[0] = f32(h(n, w=n))  # ERR:x"),
    ("@hpvm.func\ndef h(v):  # ERR:x\n    return v", "a[0] = f32(h(n))"),
    ("K = \"text\"", "a[0] = K  # ERR:x"),
    ("K = 10 ** 30", "a[0] = f32(n + K)  # ERR:x"),
    ("K = [1, 2]", "a[0] = f32(K[0])  # ERR:x"),
    ("def py(v):\n    return v", "a[0] = f32(py(n))  # ERR:x"),
]


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@pytest.mark.parametrize("prelude,body", MALFORMED, ids=[f"{i}" for i in range(len(MALFORMED))])
def test_malformed_leaf(fuzz_dir, prelude, body):
    path, module = load_program(fuzz_dir, body, prelude)
    with pytest.raises(HPVMError) as info:
        hpvm.compile(module.fuzz_root, target="python")
    exc = info.value
    assert not isinstance(exc, InternalError), exc
    assert exc.loc is not None and exc.loc.file == path, exc
    assert exc.loc.line == marked_line(path, "x"), exc
    check_caret(exc)


def test_snippets_are_distinct():
    assert len(set(MALFORMED)) == len(MALFORMED) >= 40


# Random well-formed-looking bodies: whatever they do, the front end answers with IR or an HPVMError
# at a line of the program, and a compiled one runs (or fails with an HPVMError) on the python target.

_NAMES = ["n", "x", "i", "v", "w", "a[i]", "b[i]", "a[0]", "b[1]"]
_LITERALS = ["0", "1", "2", "-3", "7", "300", "2 ** 40", "0.5", "1.5", "-2.25", "1e30", "True", "False"]
_BINOPS = ["+", "-", "*", "/", "//", "%", "**", "&", "|", "^", "<<", ">>", "<", "<=", "==", "!=",
           "and", "or"]
_CALLS = ["f32", "i32", "i8", "u8", "f64", "i64", "math.sqrt", "math.floor", "abs", "float", "int",
          "bool"]


def _expr(depth):
    leaf = st.sampled_from(_NAMES + _LITERALS)
    if depth == 0:
        return leaf
    sub = _expr(depth - 1)
    return st.one_of(
        leaf,
        st.tuples(sub, st.sampled_from(_BINOPS), sub).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(st.sampled_from(["-", "not ", "~"]), sub).map(lambda t: f"({t[0]}{t[1]})"),
        st.tuples(st.sampled_from(_CALLS), sub).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} if {t[1]} else {t[2]})"),
        st.tuples(st.sampled_from(["min", "max"]), sub, sub).map(lambda t: f"{t[0]}({t[1]}, {t[2]})"),
    )


def _stmts(depth):
    expr = _expr(2)
    simple = st.one_of(
        st.tuples(st.sampled_from(["v", "w", "a[i]", "b[i]", "a[0]", "x", "n"]),
                  st.sampled_from(["=", "+=", "-=", "*=", "//=", "|="]), expr)
        .map(lambda t: [f"{t[0]} {t[1]} {t[2]}"]),
        expr.map(lambda e: [f"print({e})"]),
    )
    if depth == 0:
        return st.lists(simple, min_size=1, max_size=3).map(lambda ls: sum(ls, []))
    inner = _stmts(depth - 1)
    indent = lambda lines: ["    " + line for line in lines]  # noqa: E731
    compound = st.one_of(
        st.tuples(expr, inner, inner)
        .map(lambda t: [f"if {t[0]}:"] + indent(t[1]) + ["else:"] + indent(t[2])),
        st.tuples(st.sampled_from(["3", "n", "i + 1"]), inner)
        .map(lambda t: [f"for k in range({t[0]}):"] + indent(t[1])),
    )
    return st.lists(st.one_of(simple, compound), min_size=1, max_size=4).map(lambda ls: sum(ls, []))


@settings(max_examples=80, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(body=_stmts(2))
def test_random_leaf_bodies(fuzz_dir, body):
    path, module = load_program(fuzz_dir, "\n".join(["v = 0.0", "w = 0"] + body))
    try:
        hpvm.compile(module.fuzz_root, target="python")
    except HPVMError as exc:
        assert not isinstance(exc, InternalError), exc
        assert exc.loc is not None and exc.loc.file == path, exc
        assert 13 <= exc.loc.line <= 16 + len(body), exc  # inside the leaf
        check_caret(exc)
        return
    a = np.ones(4, dtype=np.float32)
    b = np.ones(4, dtype=np.int32)
    with hpvm.runtime("python"):
        try:
            hpvm.wait(hpvm.launch(module.fuzz_root, a, a.nbytes, b, b.nbytes, 2, np.float32(0.5)))
        except HPVMError as exc:
            assert not isinstance(exc, InternalError), exc
            assert exc.loc is not None and exc.loc.file == path, exc


# -- locations in harder places --------------------------------------------------------------------

from programs import future_annotations as FA  # noqa: E402


@pytest.mark.parametrize("name,tag,cls,rule", [
    ("bad_graph_returns_two", "graph-returns-two", VerificationError, "outputs-bound"),
    ("bad_graph_library_error", "graph-library-error", FrontendError, None),
])
def test_graph_body_locations(name, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(P, name), target="python")
    check_error(info.value, cls, program_path(P), tag, rule)


def test_error_on_a_continuation_line():
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(P.bad_multiline_expression), target="python")
    check_error(info.value, FrontendError, program_path(P), "multiline", None)


def test_error_in_a_nested_leaf_has_the_right_column():
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(P.make_nested_leaf()), target="python")
    check_error(info.value, FrontendError, program_path(P), "nested", None)
    assert info.value.loc.col == 19  # `nowhere` in the indented source line


@pytest.mark.parametrize("maker,tag", [("decorate_builtin", "decorate-builtin"),
                                       ("decorate_class", "decorate-class")])
def test_decorating_something_else_than_a_def(maker, tag):
    with pytest.raises(HPVMError) as info:
        getattr(P, maker)()
    check_error(info.value, FrontendError, program_path(P), tag, None)


def test_lambda_leaf():
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(P.lambda_leaf), target="python")
    check_error(info.value, FrontendError, program_path(P), "lambda-leaf", None)
    assert "def" in info.value.message


def test_leaf_without_a_source_file():
    namespace = {"hpvm": hpvm, "i64": hpvm.i64}
    exec("@hpvm.leaf\ndef from_exec(n: i64):\n    pass\n", namespace)  # noqa: S102
    with pytest.raises(HPVMError) as info:
        hpvm.compile(common.root_for(namespace["from_exec"]), target="python")
    assert isinstance(info.value, FrontendError) and not isinstance(info.value, InternalError)
    assert "in a file" in info.value.message


@pytest.mark.parametrize("graph,tag,cls,rule", [
    ("future_root", "future-pointer-size", VerificationError, "pointer-size"),
    ("future_bind_types", "future-bind-types", VerificationError, "bind-types"),
    ("future_unknown", "future-unknown-annotation", FrontendError, None),
])
def test_string_annotations(graph, tag, cls, rule):
    with pytest.raises(HPVMError) as info:
        hpvm.compile(getattr(FA, graph), target="python")
    check_error(info.value, cls, program_path(FA), tag, rule)
