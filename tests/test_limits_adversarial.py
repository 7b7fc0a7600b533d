"""Leaves at the language's documented limits (docs/language.md: one expression nests operations
at most 128 deep), on every target's code generator.

- A conditional expression whose condition is a float (`x if v else y`: an implicit `v != 0`)
  made the gpu target's code nest two parentheses per level (`_select_bits((... != 0), ...)`):
  127 deep, Python refused the Triton kernel (more than 200 nested parentheses).
- Such selects nested in the condition of the next, on integers: the launch-time bounds proof
  evaluated each condition once per arm again, 3 ** 127 evaluations (a launch that never ended
  on cpu, gpu and nvptx); the proof now gives up after MAX_EVALUATIONS (the checked kernel runs).
- `e ** 2` and `a < e < b` repeat e in the IR (a tree): nested in each other 128 deep they made
  2 ** 128 nodes and compiling never ended; an operand repeated this way may hold at most 128
  operations (rule `supported-python`, at the operand).

Expected values come from this file.
"""
from __future__ import annotations

import ast
import io
import random
import tokenize

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import FrontendError, HPVMError, InternalError
from differential.data import load

from conftest import TARGETS
from deadlines import deadline

DEPTH = 127  # levels of the chains below: with the leaf `x` inside, 128 operations deep at most

LEAF = '''
import math
import hpvm_py as hpvm
from hpvm_py import In, InOut, Ptr, f32, i32, i64


@hpvm.leaf
def body(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, o: InOut[Ptr[{t}]],
         o_bytes: i64, n: i64):
    i = hpvm.instance_id(0)
    x = a[i]
    y = b[i]
    o[i] = {expr}


@hpvm.graph
def root(a: In[Ptr[{t}]], a_bytes: i64, b: In[Ptr[{t}]], b_bytes: i64, o: InOut[Ptr[{t}]],
         o_bytes: i64, n: i64):
    hpvm.node(body, grid=n, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, o=o, o_bytes=o_bytes, n=n)
'''


def _chain(form: str, levels: int) -> str:
    text = "x"
    for _ in range(levels):
        text = form.format(text)
    return text


def _depth(expr: str) -> int:
    """How deep expr nests operations as docs/language.md counts them (a chained comparison, a
    call and `and`/`or` one level per operand)."""
    deepest, stack = 0, [(ast.parse(expr, mode="eval").body, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, ast.expr):
            chained = len(node.values) if isinstance(node, ast.BoolOp) else \
                len(node.comparators) + 1 if isinstance(node, ast.Compare) else \
                len(node.args) if isinstance(node, ast.Call) else 0
            depth += 1 + max(0, chained - 2)
            deepest = max(deepest, depth)
        stack.extend((child, depth) for child in ast.iter_child_nodes(node))
    return deepest


def _deepest_chain(form: str) -> str:
    """The longest chain of form the language accepts (128 operations deep or just below)."""
    text = "x"
    while _depth(form.format(text)) <= 128:
        text = form.format(text)
    return text


def _run(target: str, t: str, expr: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    module = load(LEAF.format(t=t, expr=expr))
    o = np.zeros_like(a)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, o, o.nbytes, len(a)))
    return o


def _selects(a: np.ndarray, b: np.ndarray, levels: int) -> list:
    """`x if (x if (... x) else y) else y`: each level's condition is the level inside it."""
    out = []
    for x, y in zip(a.tolist(), b.tolist()):
        v = x
        for _ in range(levels):
            v = x if v != 0 else y
        out.append(v)
    return out


def _paren_depth(text: str) -> int:
    depth = deepest = 0
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.OP and token.string in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif token.type == tokenize.OP and token.string in ")]}":
            depth -= 1
    return deepest


# -- a float condition: the gpu target's code, one parenthesis per level -------------------------

@pytest.mark.parametrize("target", TARGETS)
def test_a_select_on_float_conditions_127_deep_runs(target: str) -> None:
    a = np.array([0.0, 1.5, -2.0, 0.0, 3.0], np.float32)
    b = np.array([4.0, 0.0, 0.5, 0.0, -1.0], np.float32)
    out = _run(target, "f32", _chain("(x if {} else y)", DEPTH), a, b)
    assert out.tolist() == _selects(a, b, DEPTH)


@pytest.mark.skipif("gpu" not in TARGETS, reason="the Triton kernels are the gpu target's")
@pytest.mark.parametrize("form", ["(x if {} else y)", "({} if x > y else y)", "(x if x > {} else y)",
                                  "min({}, y)", "hpvm.math.fmin({}, x)", "({} / y)", "(x < {})",
                                  "(-{})", "(not {})"])
def test_every_triton_kernel_of_a_127_deep_chain_is_valid_python(form: str) -> None:
    """Python compiles every kernel the gpu target may launch (what Triton parses on a GPU), each
    nesting about one parenthesis per level of the user's expression."""
    from hpvm_py.backends import registry
    from hpvm_py.rt.compiler import compile_graph

    module = load(LEAF.format(t="f32", expr=_deepest_chain(form)))
    backend = registry.get("gpu")
    for leaf, ctx, _ in compile_graph(module.root, "gpu").leaf_kernels():
        texts = {"plain": backend.emit("triton", leaf, ctx), **backend.emit_variants("triton", leaf, ctx)}
        for variant, text in texts.items():
            compile(text, f"{leaf.name}.{variant}.triton.py", "exec")
            assert _paren_depth(text) <= DEPTH + 16, (form, variant)


# -- selects nested in conditions: the launch-time bounds proof ends ---------------------------

@pytest.mark.parametrize("target", [t for t in TARGETS if t != "python"] or ["python"])
def test_integer_selects_nested_in_conditions_launch_promptly(target: str) -> None:
    a = np.array([0, 3, -2, 0, 7, 1], np.int32)
    b = np.array([5, 0, 1, 0, -1, 2], np.int32)
    with deadline(60):
        out = _run(target, "i32", _chain("(x if {} else y)", DEPTH), a, b)
    assert out.tolist() == _selects(a, b, DEPTH)


# -- repeated operands: refused where they would double per level --------------------------------

@pytest.mark.parametrize("expr", [
    _chain("({} ** 2)", DEPTH),
    _chain("(x < {} < y)", 63),
    _chain("({} ** 3)", 60),
])
def test_repeated_operands_nested_deeply_are_a_located_error(expr: str) -> None:
    module = load(LEAF.format(t="i32", expr=expr))
    with deadline(30):
        with pytest.raises(HPVMError) as info:
            hpvm.compile(module.root, target=TARGETS[0])
    exc = info.value
    assert isinstance(exc, FrontendError) and not isinstance(exc, InternalError), exc
    assert exc.rule == "supported-python" and "128 operations" in exc.message
    assert exc.loc.line == 13 and exc.loc.col > 12  # at the repeated operand, in the statement


@pytest.mark.parametrize("target", TARGETS)
def test_repeated_operands_within_the_limit_still_run(target: str) -> None:
    a = np.array([1, 2, -1, 0, 3], np.int32)
    b = np.array([2, 2, 0, 1, 5], np.int32)
    expr = f"((({_chain('(x + {})', 20)}) ** 2) ** 2) + i32(x < {_chain('(x + {})', 30)} < y)"
    out = _run(target, "i32", expr, a, b)
    want = [((21 * x) ** 2) ** 2 + int(x < 31 * x < y) for x, y in zip(a.tolist(), b.tolist())]
    assert out.tolist() == want


# -- generated chains at the limit: every target agrees ------------------------------------------

FLOAT_FORMS = ["(x + {})", "({} * y)", "(x - {})", "(x if {} else y)", "({} if x > y else y)",
               "min({}, y)", "max(x, {})", "abs({})", "(-{})", "(y if x < {} else x)", "({} ** 2)",
               "hpvm.math.fmin({}, x)"]


@pytest.mark.parametrize("seed", range(2))
def test_generated_float_chains_127_deep_agree_on_every_target(seed: int) -> None:
    rng = random.Random(seed)
    expr = "x"
    while True:
        form = rng.choice(FLOAT_FORMS)
        if form == "({} ** 2)" and _depth(expr) > 20:
            form = "({} * 0.5)"  # a repeated operand holds at most 128 operations
        if _depth(form.format(expr)) > 128:
            break
        expr = form.format(expr)
    assert _depth(expr) >= 126
    a = np.array([0.0, 1.0, -0.5, 2.0, 0.25], np.float32)
    b = np.array([1.0, -1.0, 0.0, 0.5, 3.0], np.float32)
    results = {target: _run(target, "f32", expr, a, b) for target in TARGETS}
    first = next(iter(results.values()))
    for target, out in results.items():
        assert out.tobytes() == first.tobytes(), (target, out, first)
