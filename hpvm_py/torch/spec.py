"""What a graph's parameters become in a torch op (`hpvm.torch.op`): which are tensor inputs,
which are mutated, which are results, which scalars the caller passes and which are constants or
computed from the inputs, and the shape of every result. Plain Python: nothing here runs torch."""
from __future__ import annotations

import functools
import inspect
import operator
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ..errors import LaunchError
from ..ir import dfg as D
from ..rt.compiler import module_of
from ..rt.args import size_companions
from ..support.loc import Loc
from ..types import PtrType, ScalarType

RULE = "torch-op"
_PACKAGE = str(Path(__file__).resolve().parent.parent).replace("\\", "/") + "/"  # (not hpvm_py_x/)


def is_library_file(filename: str) -> bool:
    """Whether code of this file is hpvm_py's or torch's (or has no file), not the user's (whose
    own folder may be called torch: torch's is where the loaded torch package is)."""
    name = filename.replace("\\", "/")
    return name.startswith(_PACKAGE) or name.startswith(_torch_package()) or name.startswith("<")


def _torch_package() -> str:
    """The folder of the torch package loaded in this process ("<" when none is: nothing starts
    with it that is not already library code)."""
    where = getattr(sys.modules.get("torch"), "__file__", None)
    return _folder(where) if where else "<"


@functools.cache
def _folder(file: str) -> str:
    return str(Path(file).resolve().parent).replace("\\", "/") + "/"


def user_loc() -> Loc | None:
    """The innermost frame outside hpvm_py and torch: where the user called the op (or built it)."""
    frame = sys._getframe(1)
    while frame is not None:
        if not is_library_file(frame.f_code.co_filename):
            return Loc(frame.f_code.co_filename, frame.f_lineno, 0)
        frame = frame.f_back
    return None


def fail(message: str) -> LaunchError:
    return LaunchError(message, user_loc(), rule=RULE)


@dataclass
class Derived:
    """A value computed from other values of the op (a scalar from the inputs, an output's shape):
    `fn` takes the values named `names` as keyword arguments."""
    fn: Callable[..., Any]
    names: tuple[str, ...]

    def __call__(self, values: dict[str, Any]) -> Any:
        return self.fn(**{n: values[n] for n in self.names})


@dataclass
class Signature:
    """The op's view of a graph: every name is a graph parameter's."""
    graph: Any
    func: D.GraphFunc
    name: str                                        # "namespace::opname"
    inputs: list[str]                                # the op's arguments, in parameter order
    tensors: list[str]                               # In and InOut pointers
    mutated: list[str]                               # InOut pointers
    outputs: list[str]                               # Out pointers: the op allocates and returns them
    returns: list[tuple[str, ScalarType]]            # the graph's own outputs: 0-d tensors after them
    scalars: list[str]                               # scalar parameters the caller passes
    constants: dict[str, Any]                        # scalar parameters fixed when the op is made
    derived: dict[str, Derived]                      # scalar parameters computed from the inputs
    shapes: dict[str, Any]                           # pointer -> shape spec (Out: required)
    types: dict[str, Any] = field(default_factory=dict)  # parameter -> ScalarType (pointers: element)

    def elem(self, name: str) -> ScalarType:
        return self.types[name]

    def results(self) -> list[str]:
        return self.outputs + [n for n, _ in self.returns]

    def shape(self, name: str, values: dict[str, Any]) -> tuple[Any, ...]:
        """The shape an output gets (or an input must have), from the op's values."""
        spec = self.shapes[name]
        if isinstance(spec, str):
            value = values[spec]
            shape = tuple(value.shape) if hasattr(value, "shape") else (value,)
        elif isinstance(spec, Derived):
            shape = spec(values)
        else:
            shape = tuple(values[item] if isinstance(item, str) else item for item in spec)
        if isinstance(shape, int) or type(shape).__name__ == "SymInt":
            shape = (shape,)
        try:
            dims = tuple(shape)
        except TypeError:
            raise fail(f"op {self.name}: the shape of {name!r} came out as {shape!r}; a shape is an "
                       "int or a sequence of ints") from None
        sizes: list[Any] = []
        for dim in dims:
            # here rather than as torch.empty's TypeError or RuntimeError from inside the op (a
            # SymInt, while torch traces, is checked by torch when it becomes a number; NumPy
            # integers are ints, as torch takes them)
            if type(dim).__name__ == "SymInt":
                sizes.append(dim)
                continue
            try:
                size = -1 if isinstance(dim, bool) else operator.index(dim)
            except TypeError:
                size = -1
            if size < 0:
                raise fail(f"op {self.name}: the shape of {name!r} came out as {shape!r}; each "
                           "size must be an int >= 0")
            sizes.append(size)
        return tuple(sizes)

    def values(self, args: tuple[Any, ...]) -> dict[str, Any]:
        """Name -> value for every parameter but the pointers' sizes: the op's arguments, the
        constants, then the derived scalars in order."""
        values = dict(zip(self.inputs, args))
        values.update(self.constants)
        for name, rule in self.derived.items():
            values[name] = rule(values)
        return values


def graph_name(graph: Any) -> str:
    pyfunc = getattr(graph, "pyfunc", None)
    name = getattr(pyfunc, "__name__", None) or getattr(graph, "name", None) or "graph"
    return "".join(c if c.isalnum() or c == "_" else "_" for c in str(name))


def graph_params(graph: Any) -> list[tuple[str, str | None]]:
    """(name, direction) of each parameter but the pointers' sizes; a scalar's direction is None."""
    func = module_of(graph).root_func
    companions = size_companions(func)
    return [(p.name, p.direction if isinstance(p.type, PtrType) else None)
            for i, p in enumerate(func.params) if i not in companions]


def build(graph: Any, name: str, shapes: dict[str, Any] | None, scalars: dict[str, Any] | None
          ) -> Signature:
    """Read the graph's parameters and check the specs against them (every mistake is a
    LaunchError that names the parameter)."""
    func = module_of(graph).root_func
    companions = size_companions(func)
    params = [p for i, p in enumerate(func.params) if i not in companions]
    by_name = {p.name: p for p in params}
    shapes = dict(shapes or {})
    scalars = dict(scalars or {})
    where = f"hpvm.torch.op({graph_name(graph)})"
    for key in list(shapes) + list(scalars):
        if key not in by_name:
            sizes = [func.params[i].name for i in companions]
            extra = f" (the sizes {', '.join(sizes)} are filled from the tensors)" if key in sizes else ""
            raise fail(f"{where}: the graph has no parameter {key!r}{extra}; its parameters: "
                       f"{', '.join(by_name)}")
    types = {p.name: (p.type.elem if isinstance(p.type, PtrType) else p.type) for p in params}
    pointers = [p for p in params if isinstance(p.type, PtrType)]
    tensors = [p.name for p in pointers if p.direction in ("in", "inout")]
    mutated = [p.name for p in pointers if p.direction == "inout"]
    outputs = [p.name for p in pointers if p.direction == "out"]
    for key in scalars:
        if isinstance(by_name[key].type, PtrType):
            raise fail(f"{where}: {key!r} is a pointer: scalars= names scalar parameters only")
    caller = [p.name for p in params if not isinstance(p.type, PtrType) and p.name not in scalars]
    inputs = [p.name for p in params if p.name in tensors or p.name in caller]
    constants: dict[str, Any] = {}
    derived: dict[str, Derived] = {}
    for key, value in scalars.items():
        if callable(value):
            known = inputs + list(constants) + list(derived)
            derived[key] = _derived(where, f"scalars[{key!r}]", value, known)
        elif isinstance(value, (bool, int, float)):
            constants[key] = value
        else:
            raise fail(f"{where}: scalars[{key!r}] is a {type(value).__name__}; give a number (a "
                       "constant) or a function of the op's inputs (named by parameter)")
    known = inputs + list(constants) + list(derived)
    specs: dict[str, Any] = {}
    for key, spec in shapes.items():
        if not isinstance(by_name[key].type, PtrType):
            raise fail(f"{where}: shapes[{key!r}]: {key!r} is a scalar, not a pointer")
        specs[key] = _shape_spec(where, key, spec, known, tensors)
    missing = [o for o in outputs if o not in specs]
    if missing:
        raise fail(f"{where}: the graph writes {', '.join(missing)} (Out[...]), which the op "
                   f"allocates and returns: give each a shape, e.g. shapes={{{missing[0]!r}: "
                   f"{tensors[0]!r}}} (like that input), a tuple of ints and scalar names, or a "
                   "function of the inputs" if tensors else
                   f"{where}: the graph writes {', '.join(missing)} (Out[...]): give each a shape "
                   "in shapes=")
    if not tensors and not outputs:
        raise fail(f"{where}: the graph has no pointer parameter, so the op would have no tensor")
    returns = [(o.name or f"out{i}", o.type) for i, o in enumerate(func.outputs)]
    for _, t in returns:
        if not isinstance(t, ScalarType):
            raise fail(f"{where}: the graph returns a {t}; an op returns tensors and scalars only")
    types.update({n: t for n, t in returns})
    return Signature(graph=graph, func=func, name=name, inputs=inputs, tensors=tensors,
                     mutated=mutated, outputs=outputs, returns=returns, scalars=caller,
                     constants=constants, derived=derived, shapes=specs, types=types)


def _derived(where: str, what: str, fn: Callable[..., Any], known: list[str]) -> Derived:
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        raise fail(f"{where}: {what}: cannot read the parameters of {fn!r}") from None
    names = tuple(p.name for p in params
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.default is p.empty)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise fail(f"{where}: {what} takes {', '.join(unknown)}, which the op does not know "
                   f"there: its parameters must name the op's values ({', '.join(known)})")
    return Derived(fn, names)


def _shape_spec(where: str, key: str, spec: Any, known: list[str], tensors: list[str]) -> Any:
    what = f"shapes[{key!r}]"
    if isinstance(spec, str):
        if spec not in known:
            raise fail(f"{where}: {what} = {spec!r} names no input of the op ({', '.join(known)})")
        return spec
    if callable(spec):
        return _derived(where, what, spec, known)
    if isinstance(spec, int) and not isinstance(spec, bool):
        return (spec,)
    if isinstance(spec, (tuple, list)):
        for item in spec:
            if isinstance(item, str) and item in known and item not in tensors:
                continue
            if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                continue
            raise fail(f"{where}: {what}: {item!r} is neither a size nor the name of a scalar "
                       f"parameter")
        return tuple(spec)
    raise fail(f"{where}: {what} is a {type(spec).__name__}: give an input's name (its shape), a "
               "tuple of ints and scalar parameter names, or a function of the op's inputs")
