"""Programs mutated at the AST level (the examples' leaves and graphs with a statement, an
annotation or a return replaced) get a located hpvm_py.errors exception or run; never an internal
error, an exception escaping hpvm_py, or an error located at the caller instead of the program.
Then the minimized reproducers of what such a fuzzer found: a graph returning a non-output, `None`
and non-dtype element types, long elif chains, and blocks nested past Python's own limits."""
from __future__ import annotations

import ast
import random
import traceback
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import hpvm_py as hpvm
from differential.data import import_file, source_file
from hpvm_py.errors import CompileError, FrontendError, HPVMError, InternalError, VerificationError


ROOT = Path(__file__).resolve().parent.parent
PACKAGE = str(ROOT / "hpvm_py")

HEAD = """\
import numpy as np
import hpvm_py as hpvm
from hpvm_py import In, InOut, Out, Ptr, f32, i64
"""


def load(source: str) -> tuple[str, Any]:
    """Import `source` from a file of its own: (its path, the module)."""
    path = source_file(source)
    return str(path), import_file(path)


def line_of(path: str, text: str) -> int:
    return next(i for i, line in enumerate(Path(path).read_text().splitlines(), 1) if text in line)


# -- the generator -------------------------------------------------------------------------------

SEEDS = {name: (ROOT / "examples" / f"{name}.py").read_text().split("\ndef main(")[0]
         for name in ("vadd", "saxpy", "histogram", "reduction")}
ANNOTATIONS = ["Ptr[np]", "Ptr[None]", "None", "In[Ptr[np.float32]]", "Ptr[hpvm]", "np", "In[f32]",
               "Ptr[Ptr[f32]]", "Out[i64]", "tuple[i64, f32]", "hpvm.u64", "Ptr[np.complex64]"]
GRAPH_RETURNS = ["(i64, {out})", "({out}, 3)", "({out}, {param} * 2)", "({param}, {out})", "{out}",
                 "[{out}]", "({out}, np.float32)"]


def _elif_chain(var: str, branches: int) -> list[ast.stmt]:
    text = f"if {var} == 0:\n    pass\n" + "".join(f"elif {var} == {k}:\n    pass\n"
                                                  for k in range(1, branches))
    return ast.parse(text).body


def mutate(source: str, rng: random.Random, family: int) -> str:
    """One mutation of `family` (the families in turn, each case's details from rng)."""
    tree = ast.parse(source)
    defs = [d for d in tree.body if isinstance(d, ast.FunctionDef)]
    graphs = [d for d in defs if any("graph" in ast.unparse(x) for x in d.decorator_list)]
    leaves = [d for d in defs if d not in graphs]
    if family == 0:  # a parameter's annotation
        fn = rng.choice(defs)
        arg = rng.choice(fn.args.args)
        arg.annotation = ast.parse(rng.choice(ANNOTATIONS), mode="eval").body
    elif family == 1:  # what a graph returns (its annotation made to promise two outputs)
        fn = rng.choice(graphs)
        nodes = [s for s in ast.walk(fn) if isinstance(s, ast.Call) and ast.unparse(s.func) == "hpvm.node"]
        call = nodes[-1]
        statement = next(s for s in fn.body if call in ast.walk(s))
        fn.body[fn.body.index(statement)] = ast.Assign(targets=[ast.Name("made", ast.Store())], value=call,
                                                       lineno=statement.lineno)
        fn.body = [s for s in fn.body if not isinstance(s, ast.Return)]
        ints = [a.arg for a in fn.args.args if ast.unparse(a.annotation) == "i64"]
        text = rng.choice(GRAPH_RETURNS).format(out="made.out[0]", param=rng.choice(ints))
        fn.body.append(ast.parse(f"return {text}").body[0])
        fn.returns = ast.parse("tuple[i64, i64]", mode="eval").body
    else:  # a long elif chain at the top of a leaf
        fn = rng.choice(leaves)
        var = fn.args.args[-1].arg
        fn.body[0:0] = _elif_chain(var, rng.choice([99, 100, 127, 129, 300]))
    ast.fix_missing_locations(tree)
    return ast.unparse(tree) + "\n"


def _escaped(error: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame inside hpvm_py of an exception that is not an HPVMError (a program's
    own Python error, raised in its module code, is its own)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames or not frames[-1].filename.startswith(PACKAGE):
        return None
    return frames[-1]


@pytest.mark.parametrize("seed", range(3))
def test_mutated_programs_run_or_fail_located(tmp_path: Path, seed: int) -> None:
    rng = random.Random(7100 + seed)
    outcomes = {"ran": 0, "refused": 0, "python": 0}
    for case in range(9):
        name = rng.choice(sorted(SEEDS))
        source = mutate(SEEDS[name], rng, case % 3)
        path = source_file(source)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                module = import_file(path)
                for target in ("python", "cpu"):
                    hpvm.compile(module.root, target=target)
            outcomes["ran"] += 1
        except InternalError as error:
            pytest.fail(f"{error}\n{source}")
        except HPVMError as error:
            assert error.loc is not None and error.loc.file == str(path), f"{error}\n{source}"
            assert 1 <= error.loc.line <= len(source.splitlines()), f"{error}\n{source}"
            outcomes["refused"] += 1
        except Exception as error:  # noqa: BLE001 - what is raised is the test's subject
            frame = _escaped(error)
            assert frame is None, f"{type(error).__name__}: {error} at {frame.filename}:{frame.lineno}\n{source}"
            outcomes["python"] += 1
    assert outcomes["refused"] > 0, outcomes


# -- a graph returning something that is no node output ------------------------------------------

RETURNS = HEAD + """
@hpvm.leaf
def one(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> i64:
    return n


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> tuple[i64, i64]:
    s = hpvm.node(one, a=a, a_bytes=a_bytes, n=n)
    return RETURNED
"""


@pytest.mark.parametrize("returned, what", [("(i64, s.out[0])", "ScalarType"), ("(s.out[0], 3)", "int"),
                                            ("(s.out[0], n * 2)", "DimSym"),
                                            ("(n, s.out[0])", "a graph parameter")])
def test_graph_returning_no_node_output_is_refused_at_its_return(tmp_path: Path, returned: str,
                                                                 what: str) -> None:
    path, module = load(RETURNS.replace("RETURNED", returned))
    with pytest.raises(VerificationError) as info:
        hpvm.compile(module.root, target="python")
    error = info.value
    assert error.rule == "outputs-bound"
    assert (error.loc.file, error.loc.line) == (path, line_of(path, "return ("))
    assert f"must be a node output (node.out.x), not {what}" in error.message


@pytest.mark.parametrize("returned", ["Summary(*(total, n))", "Summary(**{'total': total, 'count': n})"])
def test_unpacking_into_a_named_output_is_refused(tmp_path: Path, returned: str) -> None:
    """`*t` was read as the first field ("count not given"), `**d` as a field named None."""
    source = HEAD + f"""from typing import NamedTuple


class Summary(NamedTuple):
    total: f32
    count: i64


@hpvm.leaf
def summarise(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> Summary:
    total = a[0]
    return {returned}


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64) -> Summary:
    s = hpvm.node(summarise, a=a, a_bytes=a_bytes, n=n)
    return s.out.total, s.out.count
"""
    path, module = load(source)
    with pytest.raises(FrontendError, match="unpacking is not supported") as info:
        hpvm.compile(module.root, target="python")
    assert info.value.rule == "supported-python"
    assert (info.value.loc.file, info.value.loc.line) == (path, line_of(path, "return Summary("))


# -- element types that are no dtype -------------------------------------------------------------

def test_ptr_of_an_object_numpy_cannot_read_is_a_located_error(tmp_path: Path) -> None:
    source = HEAD + "\n\n@hpvm.leaf\ndef f(a: In[Ptr[np]], a_bytes: i64):\n    pass\n"
    with pytest.raises(FrontendError, match=r"Ptr\[\.\.\.\] needs a scalar element type") as info:
        load(source)
    assert info.value.loc.line == line_of(info.value.loc.file, "def f(")


@pytest.mark.parametrize("annotation", ["Ptr[None]", "None"])
def test_none_is_no_type(tmp_path: Path, annotation: str) -> None:
    """np.dtype(None) is float64: `k: None` was an f64 parameter, `Ptr[None]` an f64 buffer."""
    source = HEAD + f"""

@hpvm.leaf
def f(a: InOut[Ptr[f32]], a_bytes: i64, k: {annotation}):
    pass


@hpvm.graph
def root(a: InOut[Ptr[f32]], a_bytes: i64, k: {annotation}):
    hpvm.node(f, a=a, a_bytes=a_bytes, k=k)
"""
    with pytest.raises(FrontendError) as info:
        path, module = load(source)
        hpvm.compile(module.root, target="python")
    loc = info.value.loc
    assert f"k: {annotation}" in Path(loc.file).read_text().splitlines()[loc.line - 1]


# -- elif chains and nesting ---------------------------------------------------------------------

def chain_source(branches: int, helper_branches: int = 0) -> str:
    """A leaf storing k for n == k through an elif chain of `branches` (and past its end, a
    helper's chain of `helper_branches`, inlined under the leaf's innermost else)."""
    lines = [HEAD]
    if helper_branches:
        lines += ["@hpvm.func", "def h(n: i64) -> f32:", "    r = -1.0", "    if n == 0:", "        r = 0.0"]
        lines += [f"    elif n == {k}:\n        r = {k}.0" for k in range(1, helper_branches)]
        lines += ["    return r", ""]
    lines += ["@hpvm.leaf", "def leaf(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):", "    if n == 0:",
              "        a[0] = 0.0"]
    lines += [f"    elif n == {k}:\n        a[0] = {k}.0" for k in range(1, branches)]
    lines += ["    else:", f"        a[0] = {f'h(n - {branches})' if helper_branches else '-1.0'}", ""]
    lines += ["@hpvm.graph", "def root(a: InOut[Ptr[f32]], a_bytes: i64, n: i64):",
              "    hpvm.node(leaf, a=a, a_bytes=a_bytes, n=n)", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("branches", [100, 127])
def test_long_elif_chains_run(tmp_path: Path, target: str, branches: int) -> None:
    """The python target wrote an elif as `else: if`: 99 of them passed Python's limit of 100
    indentation levels (an internal IndentationError)."""
    _, module = load(chain_source(branches))
    for n in (0, 57, branches - 1, branches + 3):
        a = np.full(2, 7.0, np.float32)
        with hpvm.runtime(target):
            hpvm.wait(hpvm.launch(module.root, a, a.nbytes, n))
        assert a[0] == (n if n < branches else -1.0), (n, a)


@pytest.mark.parametrize("branches", [129, 300])
def test_elif_chains_past_the_nesting_limit_are_refused_at_the_line(tmp_path: Path, branches: int) -> None:
    """128 blocks deep, as the textual IR allows; 300 elifs were a RecursionError."""
    path, module = load(chain_source(branches))
    with pytest.raises(FrontendError, match="statements nest more than 128 blocks deep") as info:
        hpvm.compile(module.root, target="cpu")
    assert info.value.rule == "supported-python"
    assert (info.value.loc.file, info.value.loc.line) == (path, line_of(path, "elif n == 128:"))


def test_helpers_inlined_past_the_nesting_limit_are_refused(tmp_path: Path) -> None:
    """Each body is within the limit, the leaf with the helper inlined is not (a RecursionError in
    the cpu code generator)."""
    path, module = load(chain_source(100, helper_branches=40))
    with pytest.raises(VerificationError, match="once its helpers are inlined") as info:
        hpvm.compile(module.root, target="cpu")
    assert info.value.rule == "supported-python"
    assert info.value.loc.file == path
    _, module = load(chain_source(60, helper_branches=60))  # 120 deep: runs
    a = np.zeros(2, np.float32)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, 60 + 17))
    assert a[0] == 17.0


def nested_text(depth: int, kind: str) -> str:
    """A leaf in textual IR whose store sits under `depth` nested fors or ifs (the IR allows 128)."""
    locals_ = "".join(f"  local %i{d}: i64\n" for d in range(depth))
    opens = "".join("  " * (d + 1) + (f"for %i{d} = range(0:i64, %n, 1:i64) {{\n" if kind == "for"
                                      else f"if lt({d}:i64, %n) {{\n") for d in range(depth))
    closes = "".join("  " * (d + 1) + "}\n" for d in reversed(range(depth)))
    store = "  " * (depth + 1) + "store %a[0:i64] = add<f32>(load<f32>(%a, 0:i64), 1.0:f32)\n"
    return ("version 1\nmodule @root\n\n"
            "graph @root(%a: inout ptr<f32>, %a_bytes: i64, %n: i64) -> () {\n"
            "  node %leaf = @leaf\n  bind_in %a -> %leaf.0\n  bind_in %a_bytes -> %leaf.1\n"
            "  bind_in %n -> %leaf.2\n}\n\n"
            "leaf @leaf(%a: inout ptr<f32>, %a_bytes: i64, %n: i64) -> () target(any) {\n"
            f"{locals_}{opens}{store}{closes}}}\n")


@pytest.mark.parametrize("depth, kind", [(21, "for"), (110, "if")])
def test_text_blocks_past_pythons_limits(target: str, depth: int, kind: str) -> None:
    """21 nested loops or 110 nested ifs are valid IR; the targets that generate Python (python,
    gpu) refuse them with a CompileError at the leaf (an internal SyntaxError), the others run."""
    graph = hpvm.from_text(nested_text(depth, kind), "nested.hpvm")
    a = np.zeros(2, np.float32)
    n = 1 if kind == "for" else depth + 1
    if target in ("python", "gpu"):
        with pytest.raises(CompileError) as info, hpvm.runtime(target):
            hpvm.wait(hpvm.launch(graph, a, a.nbytes, n))
        text = nested_text(depth, kind).splitlines()
        assert info.value.loc.file == "nested.hpvm"
        assert text[info.value.loc.line - 1].startswith("leaf @leaf")
        return
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(graph, a, a.nbytes, n))
    assert a[0] == 1.0
