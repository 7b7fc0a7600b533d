"""Read a Python function's source as an AST positioned in its real file, and resolve annotations."""
from __future__ import annotations

import ast
import inspect
import linecache
import sys
import textwrap
import typing
from dataclasses import dataclass
from typing import Any, Callable

from ..errors import FrontendError, HPVMError
from ..support.loc import Loc
from ..types import Directed, PtrType, ScalarType, Type, f64, resolve_scalar


@dataclass
class FunctionSource:
    """The `def` of a function with line and column numbers as in its file."""

    func: Callable[..., Any]
    file: str
    tree: ast.FunctionDef
    col_shift: int  # columns removed by dedenting
    namespace: dict[str, Any]  # globals, then closure variables

    def loc(self, node: ast.AST) -> Loc:
        return Loc(self.file, getattr(node, "lineno", self.tree.lineno),
                   getattr(node, "col_offset", 0) + self.col_shift)

    def lookup(self, name: str) -> Any:
        if name in self.namespace:
            return self.namespace[name]
        builtins = self.namespace.get("__builtins__", __builtins__)
        if isinstance(builtins, dict):
            return builtins.get(name, _MISSING)
        return getattr(builtins, name, _MISSING)


_MISSING = object()


def is_missing(obj: Any) -> bool:
    return obj is _MISSING


def function_loc(func: Callable[..., Any]) -> Loc:
    code = func.__code__
    text = linecache.getline(code.co_filename, code.co_firstlineno)  # col: the line's indentation
    return Loc(code.co_filename, code.co_firstlineno, _indent(text) if text.strip() else 0)


def read_function(func: Callable[..., Any]) -> FunctionSource:
    loc = function_loc(func)
    try:
        lines, first_line = inspect.getsourcelines(func)
    except (OSError, TypeError) as exc:
        raise FrontendError(
            f"cannot read the source of {func.__qualname__}: {exc}; leaves are compiled from source, "
            "so define them in a file (not in an interactive prompt or exec'd string)", loc) from None
    text = "".join(lines)
    dedented = textwrap.dedent(text)
    col_shift = _indent(lines[0]) - _indent(dedented.splitlines()[0]) if lines else 0
    try:
        module = ast.parse(dedented)
    except SyntaxError:  # the lines of a lambda inside a larger expression
        module = ast.parse("pass")
    ast.increment_lineno(module, first_line - 1)
    fdef = module.body[0]
    if not isinstance(fdef, ast.FunctionDef):
        raise FrontendError(f"{func.__qualname__} must be a plain `def` function", loc)
    namespace = dict(func.__globals__)
    if func.__closure__:
        for name, cell in zip(func.__code__.co_freevars, func.__closure__):
            try:
                namespace[name] = cell.cell_contents
            except ValueError:  # an empty cell: the closure variable is not assigned yet
                pass
    return FunctionSource(func, loc.file, fdef, col_shift, namespace)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def resolve_annotation(src: FunctionSource, annotation: Any, node: ast.AST | None) -> Any:
    """Evaluate a (possibly string) annotation in the function's namespace."""
    if isinstance(annotation, str):
        try:
            return eval(annotation, src.namespace)  # noqa: S307 - the user's own annotation text
        except HPVMError:
            raise
        except NameError as exc:
            hint = (" (a string annotation, as `from __future__ import annotations` makes, sees module "
                    "globals and the closure variables the body uses)")
            raise FrontendError(f"cannot evaluate the annotation {annotation!r}: {exc}{hint}",
                                src.loc(node) if node is not None else function_loc(src.func)) from None
        except Exception as exc:
            raise FrontendError(f"cannot evaluate the annotation {annotation!r}: {exc}",
                                src.loc(node) if node is not None else function_loc(src.func)) from None
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
