"""Unusual Python around the decorators and hpvm.node: each case runs as documented (and alike on
the python and cpu targets) or is an HPVMError at the user's file:line naming the rule; never an
internal error, a crash, or compiled code that disagrees with the Python it came from."""
from __future__ import annotations

import importlib
import importlib.util
import itertools
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hpvm_py as hpvm
from hpvm_py.errors import FrontendError, HPVMError, InternalError, VerificationError

from conftest import TARGETS
from errcheck import check_caret

_counter = itertools.count()

HEADER = """\
import functools
from typing import NamedTuple

import numpy as np

import hpvm_py as hpvm
from hpvm_py import InOut, Out, Ptr, f32, i8, i64
"""


def load(folder: Path, body: str, name: str = "api") -> tuple[str, object]:
    """Write HEADER + body to a fresh module file in folder and import it: (path, module)."""
    path = folder / f"{name}_{next(_counter)}.py"
    path.write_text(HEADER + textwrap.dedent(body), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return str(path), module


def line_of(path: str, text: str) -> int:
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if text in line)


def run_both(root, *args):
    """The root's outputs (and the arrays passed) on the python and the cpu targets."""
    results = []
    for target in ("python", "cpu"):
        arrays = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        with hpvm.runtime(target):
            out = hpvm.wait(hpvm.launch(root, *arrays))
        results.append((out, [a.tolist() for a in arrays if isinstance(a, np.ndarray)]))
    return results


def located(exc: HPVMError, path: str, text: str, rule: str | None) -> None:
    assert not isinstance(exc, InternalError), exc
    assert exc.rule == rule, exc
    assert os.path.abspath(exc.loc.file) == os.path.abspath(path), exc
    assert exc.loc.line == line_of(path, text), exc
    check_caret(exc)


# -- hpvm.node: inputs named like node()'s own parameters -------------------------------------

NAMED_INPUTS = """
@hpvm.leaf
def f(grid: i64, name: i64, hint: i64, fn: i64, o: Out[Ptr[i64]], o_bytes: i64):
    o[hpvm.instance_id(0)] = fn * 1000 + grid * 100 + name * 10 + hint

@hpvm.graph
def by_keyword(o: Out[Ptr[i64]], o_bytes: i64):
    hpvm.node(f, 2, 3, 4, fn=1, o=o, o_bytes=o_bytes, grid=2, name="n", hint="any")

@hpvm.graph
def function_by_keyword(o: Out[Ptr[i64]], o_bytes: i64):
    hpvm.node(fn=f, grid=2, name=1, o=o, o_bytes=o_bytes)  # ERR name

@hpvm.graph
def grid_meant_as_input(o: Out[Ptr[i64]], o_bytes: i64):
    hpvm.node(f, fn=1, grid=2, o=o, o_bytes=o_bytes)  # ERR grid
"""


def test_an_input_named_fn_goes_by_keyword_and_options_by_theirs(tmp_path: Path) -> None:
    """node()'s function is positional-only: `fn=` names the leaf's input `fn` (before: "got
    multiple values for argument 'fn'")."""
    _, m = load(tmp_path, NAMED_INPUTS)
    for _, arrays in run_both(m.by_keyword, np.zeros(2, np.int64)):
        assert arrays == [[1234, 1234]]


def test_an_option_keyword_that_is_also_an_input_name_says_so(tmp_path: Path) -> None:
    """grid=/name=/hint= are node()'s options (as launch's stream=); an input of that name left
    unconnected, or an option value that only makes sense as the input, names the rule at the line."""
    path, m = load(tmp_path, NAMED_INPUTS)
    with pytest.raises(VerificationError) as info:
        hpvm.compile(m.grid_meant_as_input, target="python")
    located(info.value, path, "# ERR grid", "node-inputs")
    assert "grid= in hpvm.node is the node's own option" in info.value.message
    with pytest.raises(VerificationError) as info:
        hpvm.compile(m.function_by_keyword, target="python")
    located(info.value, path, "# ERR name", "unique-node-names")
    assert "grid= and name= in hpvm.node are the node's own options" in info.value.message


# -- signatures ----------------------------------------------------------------------------------


def test_positional_only_parameters_are_ordinary_inputs(tmp_path: Path) -> None:
    _, m = load(tmp_path, """
        @hpvm.func
        def twice(v: i64, /) -> i64:
            return v * 2

        @hpvm.leaf
        def add(x: i64, /, y: i64) -> i64:
            return twice(x) + y

        @hpvm.graph
        def root(x: i64, /) -> i64:
            return hpvm.node(add, x=x, y=3).out[0]
        """)
    assert [out for out, _ in run_both(m.root, 5)] == [13, 13]


@pytest.mark.parametrize("params, marker", [
    ("x: i64, *, y: i64", "y: i64"),
    ("x: i64, *rest: i64", "*rest"),
    ("x: i64, **named: i64", "**named"),
    ("x: i64, y: i64 = 3", "y: i64 = 3"),
])
def test_parameters_that_are_not_fixed_typed_inputs_are_refused_at_their_line(
        tmp_path: Path, params: str, marker: str) -> None:
    path, m = load(tmp_path, f"""
        @hpvm.leaf
        def f({params}) -> i64:
            return x

        @hpvm.graph
        def root(x: i64) -> i64:
            return hpvm.node(f, x).out[0]
        """)
    with pytest.raises(FrontendError) as info:
        hpvm.compile(m.root, target="python")
    located(info.value, path, marker, None)  # as tests/test_frontend_errors.py has it
    assert "not supported" in info.value.message


def test_namedtuple_fields_left_out_take_their_defaults(tmp_path: Path) -> None:
    """Before: "output field(s) b not given" although Python fills them in."""
    _, m = load(tmp_path, """
        class R(NamedTuple):
            a: i64
            b: i64 = -7
            c: f32 = 0.5
            d: i8 = np.int8(3)

        @hpvm.leaf
        def f(x: i64) -> R:
            return R(x + 1, c=1.5)

        @hpvm.graph
        def root(x: i64) -> R:
            n = hpvm.node(f, x=x)
            return n.out.a, n.out.b, n.out.c, n.out.d
        """)
    for out, _ in run_both(m.root, 5):
        assert tuple(out) == (6, -7, 1.5, 3)


def test_a_non_numeric_namedtuple_default_is_located(tmp_path: Path) -> None:
    path, m = load(tmp_path, """
        class R(NamedTuple):
            a: i64
            b: i64 = None

        @hpvm.leaf
        def f(x: i64) -> R:
            return R(x)  # ERR

        @hpvm.graph
        def root(x: i64) -> R:
            n = hpvm.node(f, x=x)
            return n.out.a, n.out.b
        """)
    with pytest.raises(FrontendError) as info:
        hpvm.compile(m.root, target="python")
    located(info.value, path, "# ERR", "leaf-returns-outputs")


# -- decorators ----------------------------------------------------------------------------------


def test_a_leaf_over_a_functools_wraps_wrapper_is_refused(tmp_path: Path) -> None:
    """The compiled body would be the wrapped function's, silently dropping the wrapper (its
    source is found through __wrapped__): the launch gave 6 where Python gives 12."""
    with pytest.raises(FrontendError) as info:
        load(tmp_path, """
            def doubled(fn):
                @functools.wraps(fn)
                def wrapper(*args):
                    return fn(*args) * 2
                return wrapper

            @hpvm.leaf  # ERR
            @doubled
            def f(x: i64) -> i64:
                return x + 1
            """)
    path = info.value.loc.file
    located(info.value, path, "# ERR", "node-function")
    assert "__wrapped__" in info.value.message


@pytest.mark.parametrize("decorators, marker, says", [
    ("@hpvm.graph\n@hpvm.leaf", "@hpvm.graph", "already an @hpvm.leaf"),
    ("@hpvm.leaf\n@staticmethod", "@hpvm.leaf", "@staticmethod above @hpvm.leaf"),
])
def test_decorators_in_the_wrong_order_say_which_order(tmp_path: Path, decorators: str, marker: str,
                                                      says: str) -> None:
    with pytest.raises(FrontendError) as info:
        load(tmp_path, f"""
{decorators}
def f(x: i64) -> i64:
    return x + 1
""")
    located(info.value, info.value.loc.file, marker, None)
    assert says in info.value.message


def test_lambdas_and_async_defs_say_what_they_are(tmp_path: Path) -> None:
    path, m = load(tmp_path, """
        lam = hpvm.leaf(lambda x: x)

        @hpvm.leaf
        async def coro(x: i64) -> i64:
            return x

        @hpvm.graph
        def root1(x: i64) -> i64:
            return hpvm.node(lam, x).out[0]

        @hpvm.graph
        def root2(x: i64) -> i64:
            return hpvm.node(coro, x).out[0]
        """)
    for root, marker in ((m.root1, "lambda x"), (m.root2, "@hpvm.leaf\nasync")):
        with pytest.raises(FrontendError) as info:
            hpvm.compile(root, target="python")
        assert not isinstance(info.value, InternalError), info.value
        assert ("a lambda" if root is m.root1 else "an `async def`") in info.value.message
        check_caret(info.value)


def test_a_leaf_without_a_source_file_is_located_at_the_users_call() -> None:
    namespace: dict = {}
    exec("import hpvm_py as hpvm\nfrom hpvm_py import i64\n@hpvm.leaf\ndef f(x: i64) -> i64:\n"
         "    return x + 1\n@hpvm.graph\ndef g(x: i64) -> i64:\n    return hpvm.node(f, x).out[0]\n",
         namespace)
    with pytest.raises(FrontendError) as info:
        hpvm.compile(namespace["g"], target="python")  # the line the error points at
    assert info.value.loc.file == __file__, info.value
    assert "<string>" in info.value.message
    check_caret(info.value)


def test_unicode_identifiers_compile_on_every_target(tmp_path: Path) -> None:
    """A non-ASCII leaf name crashed the cpu target (llvmlite looks symbols up as ASCII:
    InternalError) and aborted the process on nvptx (LLVM: unsupported symbol name)."""
    _, m = load(tmp_path, """
        @hpvm.leaf
        def añadir(xλ: i64, sal: Out[Ptr[i64]], sal_bytes: i64) -> i64:
            ψ = xλ + 1
            sal[0] = ψ
            return ψ

        @hpvm.graph
        def raíz(xλ: i64, sal: Out[Ptr[i64]], sal_bytes: i64) -> i64:
            return hpvm.node(añadir, xλ, sal, sal_bytes).out[0]
        """)
    for out, arrays in run_both(m.raíz, 5, np.zeros(1, np.int64)):
        assert out == 6 and arrays == [[6]]
    hpvm.compile(m.raíz, target="nvptx")  # builds PTX without a GPU
    for target in [t for t in TARGETS if t in ("gpu", "nvptx")]:  # (gpu: interpreted on a CPU)
        sal = np.zeros(1, np.int64)
        with hpvm.runtime(target):
            assert hpvm.wait(hpvm.launch(m.raíz, 5, sal)) == 6 and sal.tolist() == [6], target


# -- compiled code follows the Python it came from -------------------------------------------

STALE = """
class cfg:
    K = 10

N = 2
SCALE = 1

@hpvm.func
def scale(x: i64) -> i64:
    return x * SCALE

@hpvm.leaf
def f(o: InOut[Ptr[i64]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = scale(cfg.K) + i

@hpvm.leaf
def g(o: InOut[Ptr[i64]], o_bytes: i64):
    o[hpvm.instance_id(0)] = -1

LEAF = f

@hpvm.graph
def root(o: InOut[Ptr[i64]], o_bytes: i64):
    hpvm.node(LEAF, grid=N, o=o, o_bytes=o_bytes)

def with_closure():
    k = 1

    @hpvm.leaf
    def h(o: InOut[Ptr[i64]], o_bytes: i64):
        o[0] = k

    @hpvm.graph
    def r(o: InOut[Ptr[i64]], o_bytes: i64):
        hpvm.node(h, o=o, o_bytes=o_bytes)

    def bump():
        nonlocal k
        k += 1
    return r, bump
"""


@pytest.mark.parametrize("target", ["python", "cpu"])
def test_globals_closures_and_attributes_changed_after_compiling_recompile(
        tmp_path: Path, target: str) -> None:
    """A module-level constant is folded into the compiled leaf: before, a launch after `K = 3`
    still used the old value on every target, unlike the Python the leaf was written in."""
    _, m = load(tmp_path, STALE)

    def run(root=None) -> list[int]:
        o = np.zeros(4, np.int64)
        hpvm.wait(hpvm.launch(root or m.root, o))
        return o.tolist()

    with hpvm.runtime(target):
        assert run() == [10, 11, 0, 0]
        m.cfg.K = 20  # an attribute the leaf reads
        assert run() == [20, 21, 0, 0]
        m.SCALE = 3  # a global of a helper the leaf inlines
        assert run() == [60, 61, 0, 0]
        m.N = 4  # a global the graph body reads
        assert run() == [60, 61, 62, 63]
        m.LEAF = m.g  # a global naming another leaf
        assert run() == [-1, -1, -1, -1]
        m.LEAF = m.f
        assert run() == [60, 61, 62, 63]
        compiles = hpvm.stats()["graph_compiles"] if "graph_compiles" in hpvm.stats() else None
        assert run() == [60, 61, 62, 63]  # nothing changed: the cached graph runs
        if compiles is not None:
            assert hpvm.stats()["graph_compiles"] == compiles
        r, bump = m.with_closure()
        assert run(r)[0] == 1
        bump()  # a closure variable
        assert run(r)[0] == 2
        assert "= 2" in hpvm.to_text(r) or "2:i64" in hpvm.to_text(r)


WATCHED = """
BIG = 1000000
HALF = 0.5

@hpvm.leaf
def f(o: InOut[Ptr[f32]], o_bytes: i64):
    i = hpvm.instance_id(0)
    o[i] = hpvm.math.sqrt(f32(BIG)) * HALF + f32(i)

@hpvm.graph
def root(o: InOut[Ptr[f32]], o_bytes: i64):
    hpvm.node(f, grid=2, o=o, o_bytes=o_bytes)
"""


def test_what_a_relaunch_watches_is_the_programs_data(tmp_path: Path) -> None:
    """The language's vocabulary (hpvm, its intrinsics and types) is not watched; the
    program's numbers and leaves are. An equal number bound again keeps the compiled graph (and
    the quick identity test passes again after it); a number of another type rebuilds it."""
    _, m = load(tmp_path, WATCHED)
    o = np.zeros(2, np.float32)
    with hpvm.runtime("cpu"):
        hpvm.wait(hpvm.launch(m.root, o))
        np.testing.assert_allclose(o, [500.0, 501.0])
        watched = {chain for definition, reads in m.root._watch.deps if reads is not None
                   for chain in reads.seen}
        assert watched == {("f",), ("BIG",), ("HALF",)}, watched
        module = m.root.module()
        m.BIG = int("1000000")  # equal, another object
        assert m.root.module() is module and m.root._watch.current()
        m.HALF = 0.25
        hpvm.wait(hpvm.launch(m.root, o))
        np.testing.assert_allclose(o, [250.0, 251.0])
        module = m.root.module()
        m.BIG = 1000000.0  # the same number, another type: built again
        assert m.root.module() is not module


def test_a_leaf_compiled_after_its_file_was_edited_and_reloaded_keeps_its_own_source(
        tmp_path: Path) -> None:
    """Before, a leaf first compiled after its module's file was edited (and reloaded) was parsed
    from the new file at its old line numbers: another function's text, or an error."""
    folder = tmp_path / "pkg"
    folder.mkdir()
    path = folder / "reloaded_mod.py"
    source = HEADER + textwrap.dedent("""
        @hpvm.leaf
        def inc(x: i64) -> i64:
            return x + 1
        """)
    path.write_text(source, encoding="utf-8")
    sys.path.insert(0, str(folder))
    try:
        module = importlib.import_module("reloaded_mod")
        old_inc = module.inc
        path.write_text(source.replace("import functools\n", "# moved down\n\n\n").replace(
            "x + 1", "x + 100"), encoding="utf-8")
        stat = os.stat(path)
        os.utime(path, (stat.st_atime + 5, stat.st_mtime + 5))  # mtime differs on coarse clocks
        importlib.reload(module)
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("reloaded_mod", None)

    @hpvm.graph
    def old(x: hpvm.i64) -> hpvm.i64:
        return hpvm.node(old_inc, x).out[0]

    @hpvm.graph
    def new(x: hpvm.i64) -> hpvm.i64:
        return hpvm.node(module.inc, x).out[0]

    assert [out for out, _ in run_both(old, 1)] == [2, 2]
    assert [out for out, _ in run_both(new, 1)] == [101, 101]


@pytest.mark.parametrize("annotation", ["InOut[i64]", "Out[Ptr[Ptr[f32]]]", "Ptr[3]"])
@pytest.mark.parametrize("future", [False, True])
def test_a_type_written_wrongly_is_a_frontend_error_at_its_line(tmp_path: Path, annotation: str,
                                                               future: bool) -> None:
    """`InOut[i64]` raised a bare TypeError from hpvm_py/types.py when Python evaluated the `def`;
    as a string annotation (`from __future__ import annotations`) it is evaluated later, by the
    front end, and must name the same line."""
    body = f"""
        @hpvm.leaf
        def f(a: {annotation}, a_bytes: i64):
            pass

        @hpvm.graph
        def g(a: InOut[Ptr[f32]], a_bytes: i64):
            hpvm.node(f, a=a, a_bytes=a_bytes)
        """
    path = tmp_path / f"wrong_{next(_counter)}.py"
    header = ("from __future__ import annotations\n" if future else "") + HEADER
    path.write_text(header + textwrap.dedent(body), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    with pytest.raises(FrontendError) as info:
        spec.loader.exec_module(module)
        hpvm.compile(module.g, target="python")
    assert info.value.loc is not None and info.value.loc.file == str(path), info.value.loc
    assert info.value.loc.line == line_of(str(path), "def f("), (info.value.loc, str(info.value))
    assert "Ptr" in info.value.message
