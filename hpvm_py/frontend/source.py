"""Read a Python function's source as an AST positioned in its real file, and resolve annotations."""
from __future__ import annotations

import ast
import dis
import inspect
import linecache
import operator
import sys
import typing
from dataclasses import dataclass
from types import CodeType, ModuleType
from typing import Any, Callable

from ..errors import FrontendError, HPVMError
from ..support.loc import Loc, char_column
from ..types import Directed, PtrType, ScalarType, Type, f64, resolve_scalar
from .callsite import caller_loc
from .defs import Definition


_MISSING = object()


class Reads:
    """What a function's compiled form took from outside it: the global, closure and builtin names
    (and attribute chains, `cfg.K`) its body read, each with the object it named then. Compiled code
    holds those values (a module-level constant is folded in), so it is current only while every
    one of them still names the same object; DESIGN: stale compiled code would be a wrong result."""

    def __init__(self, func: Callable[..., Any]):
        self.func = func
        self.cells = dict(zip(func.__code__.co_freevars, func.__closure__ or ()))
        self.seen: dict[tuple[str, ...], Any] = {}

    def resolve(self, chain: tuple[str, ...]) -> Any:
        """What chain names now: the closure cell, else the global, else the builtin; then attributes."""
        name = chain[0]
        cell = self.cells.get(name)
        if cell is not None:
            try:
                obj = cell.cell_contents
            except ValueError:  # an empty cell: the closure variable is not assigned yet
                obj = _MISSING
        else:
            namespace = self.func.__globals__
            obj = namespace.get(name, _MISSING)
            if obj is _MISSING:
                builtins = namespace.get("__builtins__", __builtins__)
                obj = builtins.get(name, _MISSING) if isinstance(builtins, dict) else \
                    getattr(builtins, name, _MISSING)
        for attr in chain[1:]:
            if obj is _MISSING:
                break
            try:
                obj = getattr(obj, attr, _MISSING)
            except Exception:  # noqa: BLE001 - a property that raises: the name reads as missing
                obj = _MISSING
        return obj

    def read(self, chain: tuple[str, ...]) -> Any:
        """Resolve chain and remember what it named (unless that is the language's vocabulary)."""
        obj = self.resolve(chain)
        if not _vocabulary(obj):
            self.seen.setdefault(chain, obj)
        return obj

    def current(self) -> bool:
        """Whether every name read still names what it did (equal numbers of one type count as
        the same: `K = 0.5` assigned again need not recompile); those equal but not identical are
        taken as the values seen, so that Watch's identity test passes again."""
        for chain, then in list(self.seen.items()):
            if not self._same(chain, then):
                return False
            self.seen[chain] = self.resolve(chain)
        return True

    def _same(self, chain: tuple[str, ...], then: Any) -> bool:
        now = self.resolve(chain)
        return now is then or _same_number(now, then)


class Watch:
    """What a module was built from (GraphDef.module): each definition with the Reads its IR was
    made from. Every relaunch asks whether it is current, so the common case is a few C loops:
    the definitions still hold those Reads, and the globals read by name, fetched together per
    module namespace (operator.itemgetter), are the very objects seen. Anything else (a closure
    variable, an attribute chain, a global that moved) is checked name by name (Reads.current)."""

    def __init__(self, deps: list[tuple[Any, Reads | None]]):
        self.deps = deps
        self._owners = tuple(d for d, _ in deps)
        self._reads = tuple(r for _, r in deps)
        self._make_quick()

    def _make_quick(self) -> None:
        names: dict[int, tuple[dict[str, Any], dict[str, Any]]] = {}  # id(namespace) -> it, seen
        self._others: list[Reads] = []
        for reads in self._reads:
            if reads is None:
                continue
            namespace = reads.func.__globals__
            seen = names.setdefault(id(namespace), (namespace, {}))[1]
            for chain, then in reads.seen.items():
                if len(chain) == 1 and chain[0] not in reads.cells and seen.get(chain[0], then) is then:
                    seen[chain[0]] = then
                elif reads not in self._others:
                    self._others.append(reads)
        self._quick = [(namespace, _fetcher(list(seen)), tuple(seen.values()))
                       for namespace, seen in names.values() if seen]

    def current(self) -> bool:
        if not all(map(operator.is_, map(_READS_OF, self._owners), self._reads)):
            return False  # a definition's IR was made again (for another graph that holds it)
        for namespace, fetch, then in self._quick:
            try:
                now = fetch(namespace)
            except KeyError:  # a global deleted, or one read from the builtins
                return self._each_current()
            if not all(map(operator.is_, now, then)):
                return self._each_current()
        return all(reads.current() for reads in self._others)

    def _each_current(self) -> bool:
        if not all(reads is None or reads.current() for reads in self._reads):
            return False
        self._make_quick()  # (values equal but not identical were taken as seen)
        return True


_READS_OF = operator.attrgetter("_reads")


def _fetcher(names: list[str]) -> Callable[[dict[str, Any]], tuple[Any, ...]]:
    """A function of a namespace giving the values of `names` in it, as a tuple (KeyError when
    one is missing)."""
    if len(names) > 1:
        return operator.itemgetter(*names)
    name = names[0]
    return lambda namespace: (namespace[name],)


_NUMBERS = (bool, int, float, complex)


def _same_number(now: Any, then: Any) -> bool:
    """Whether two numbers compile alike: equal and of one type, and for floats also of one
    sign (0.0 == -0.0, but a leaf reading K computes 1/K and copysign(1, K) from its sign; a
    NaN equals nothing, so it is never the same)."""
    if type(now) is not type(then) or type(now) not in _NUMBERS or now != then:
        return False
    return type(now) not in (float, complex) or repr(now) == repr(then)
_LIBRARIES = frozenset(("hpvm_py", "numpy", "math", "builtins"))


def _vocabulary(obj: Any) -> bool:
    """Whether obj is a module, or a function, class or type of hpvm_py, NumPy, math or the
    builtins (`hpvm.get_node`, `f32`, `np.float32`, `abs`): what names bound to these stand for is
    the language, not the program's data, so Reads does not watch them. Every relaunch checks what
    it watches, and these are most of what a body reads (4 to 34 names in the examples: up to
    5.5 us a launch on the CI machine when all were watched). Leaves and helpers are watched: a
    global rebound to another leaf changes the graph."""
    if isinstance(obj, ModuleType):
        return True
    if isinstance(obj, Definition) or not (callable(obj) or isinstance(obj, Type)):
        return False  # (numbers are data, even NumPy's)
    module = getattr(obj, "__module__", None)
    return isinstance(module, str) and module.partition(".")[0] in _LIBRARIES


def global_reads(func: Callable[..., Any]) -> Reads:
    """The names a Python function (a graph body, run when traced) reads from its globals and
    closure as it runs, with their values now: LOAD_GLOBAL / LOAD_NAME / LOAD_DEREF of its code
    and of the code nested in it (comprehensions, lambdas)."""
    reads = Reads(func)
    codes = [func.__code__]
    while codes:
        code = codes.pop()
        for instr in dis.get_instructions(code):
            if instr.opname in ("LOAD_GLOBAL", "LOAD_NAME") or \
                    (instr.opname in ("LOAD_DEREF", "LOAD_CLASSDEREF") and instr.argval in reads.cells):
                reads.read((instr.argval,))
        codes.extend(c for c in code.co_consts if isinstance(c, CodeType))
    return reads


@dataclass
class FunctionSource:
    """The `def` of a function with line and column numbers as in its file."""

    func: Callable[..., Any]
    file: str
    tree: ast.FunctionDef
    namespace: dict[str, Any]  # globals, then closure variables (annotations are evaluated in it)
    reads: Reads  # what the body looked up outside the function, for staleness checks
    lines: list[str]  # the `def`'s lines as parsed, the first being line first_line of the file
    first_line: int

    def loc(self, node: ast.AST) -> Loc:
        line = getattr(node, "lineno", self.tree.lineno)
        index = line - self.first_line
        text = self.lines[index] if 0 <= index < len(self.lines) else ""
        return Loc(self.file, line, char_column(text, getattr(node, "col_offset", 0)))

    def lookup(self, name: str) -> Any:
        return self.reads.read((name,))

    def lookup_chain(self, chain: tuple[str, ...]) -> Any:
        """A dotted name (`cfg.K`, `hpvm.math.sqrt`), remembered as a whole: an attribute assigned
        again after compiling makes the compiled code stale as a rebound global does."""
        return self.reads.read(chain)


def is_missing(obj: Any) -> bool:
    return obj is _MISSING


def function_loc(func: Callable[..., Any]) -> Loc:
    code = func.__code__
    text = linecache.getline(code.co_filename, code.co_firstlineno)  # col: the line's indentation
    return Loc(code.co_filename, code.co_firstlineno, _indent(text) if text.strip() else 0)


def source_lines(func: Callable[..., Any]) -> list[str]:
    """The lines of the file that defines func, as they are now: called when it is decorated, so
    that it is compiled later from the text it was defined by, not from a file edited since (and
    reloaded with importlib.reload, whose new functions read the new text). [] when there is no
    such file (exec of a string, `python -c`)."""
    file = func.__code__.co_filename
    linecache.checkcache(file)  # a file edited since linecache read it: read it again
    return linecache.getlines(file, func.__globals__)


def _block(func: Callable[..., Any], lines: list[str]) -> tuple[list[str], int]:
    """The `def` of func (decorators included) in lines, and its first line number."""
    first = func.__code__.co_firstlineno
    if not 0 < first <= len(lines):
        raise OSError(f"line {first} is beyond the {len(lines)} lines of its file")
    return inspect.getblock(lines[first - 1:]), first


def read_function(func: Callable[..., Any], lines: list[str] | None = None) -> FunctionSource:
    """Parse func's `def`: from lines (its file as it was when func was defined), else from the
    file now."""
    loc = function_loc(func)
    try:
        if lines and getattr(func, "__wrapped__", None) is None:
            lines, first_line = _block(func, lines)
        else:  # inspect follows __wrapped__ to the wrapped function's source, as signature() does
            lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as exc:
        # the `def` has no file to point at (python -c, exec of a string, a prompt): the error is
        # located where the user's code asked for the graph, and names where the `def` was
        raise FrontendError(
            f"cannot read the source of {func.__qualname__} (defined at {loc}): {exc}; leaves and "
            "graphs are compiled from source, so define them in a file (not in `python -c`, an "
            "exec'd string or an interactive prompt)", caller_loc()) from None
    # an indented `def` (a method, a nested function) is parsed as the body of an `if`, not
    # dedented: a line of it may start further left (a comment, a string's or a backslash's
    # continuation), and its columns stay those of its file
    nested = bool(lines) and _indent(lines[0]) > 0
    try:
        module = ast.parse("if 1:\n" * nested + "".join(lines))
    except SyntaxError:  # the lines of a lambda inside a larger expression
        module, nested = ast.parse("pass"), False
    ast.increment_lineno(module, first_line - 1 - nested)
    fdef = module.body[0].body[0] if nested else module.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        what = "an `async def`" if isinstance(fdef, ast.AsyncFunctionDef) else "a lambda" \
            if func.__name__ == "<lambda>" else "not a `def` statement"
        raise FrontendError(f"{func.__qualname__} is {what}: leaves, helpers and graphs are plain "
                            "`def` functions", loc)
    namespace = dict(func.__globals__)
    if func.__closure__:
        for name, cell in zip(func.__code__.co_freevars, func.__closure__):
            try:
                namespace[name] = cell.cell_contents
            except ValueError:  # an empty cell: the closure variable is not assigned yet
                pass
    return FunctionSource(func, loc.file, fdef, namespace, Reads(func), lines, first_line)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def resolve_annotation(src: FunctionSource, annotation: Any, node: ast.AST | None) -> Any:
    """Evaluate a (possibly string) annotation in the function's namespace."""
    if isinstance(annotation, str):
        where = src.loc(node) if node is not None else function_loc(src.func)
        try:
            return eval(annotation, src.namespace)  # noqa: S307 - the user's own annotation text
        except FrontendError as exc:  # (a type written wrongly, located in the eval'd text)
            raise FrontendError(f"cannot evaluate the annotation {annotation!r}: {exc.message}",
                                where) from None
        except HPVMError:
            raise
        except NameError as exc:
            hint = (" (a string annotation, as `from __future__ import annotations` makes, sees module "
                    "globals and the closure variables the body uses)")
            raise FrontendError(f"cannot evaluate the annotation {annotation!r}: {exc}{hint}",
                                where) from None
        except Exception as exc:
            raise FrontendError(f"cannot evaluate the annotation {annotation!r}: {exc}",
                                where) from None
    return annotation


def param_type(annotation: Any) -> tuple[Type, str | None] | None:
    """(type, direction) of a parameter annotation, or None when it is not an hpvm type."""
    if isinstance(annotation, Directed):
        return annotation.type, annotation.direction
    if isinstance(annotation, PtrType):
        return annotation, None
    scalar = resolve_scalar(annotation) if annotation is not float else None
    if annotation is float:
        scalar = f64
    if isinstance(scalar, ScalarType):
        return scalar, None
    return None


def output_types(annotation: Any) -> list[tuple[str | None, Any]] | None:
    """The outputs named by a return annotation: [(name or None, annotation)], None if malformed."""
    if annotation is None or annotation is inspect.Signature.empty or annotation is type(None):
        return []
    origin = typing.get_origin(annotation)
    if origin is tuple:
        args = typing.get_args(annotation)
        if args == ((),):
            return []
        return [(None, a) for a in args]
    if isinstance(annotation, type) and issubclass(annotation, tuple) and hasattr(annotation, "_fields"):
        hints = dict(getattr(annotation, "__annotations__", {}))
        # under `from __future__ import annotations` the fields' types are strings: evaluate them
        # where the NamedTuple was defined
        namespace = vars(sys.modules[annotation.__module__]) if annotation.__module__ in sys.modules else {}
        for name, hint in hints.items():
            if isinstance(hint, typing.ForwardRef):
                hint = hint.__forward_arg__
            if isinstance(hint, str):
                try:
                    hints[name] = eval(hint, dict(namespace))  # noqa: S307 - the user's annotation
                except Exception:  # noqa: BLE001 - reported as a bad output type by the caller
                    pass
        return [(name, hints.get(name)) for name in annotation._fields]
    return [(None, annotation)]
