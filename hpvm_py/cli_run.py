"""`hpvmc run --graph NAME` and `hpvmc run FILE.hpvm`: launch one graph from the command line.

Every parameter of the root graph gets a value from `--set NAME=VALUE`:
- a buffer: `NAME=N` (N elements: inputs random in [0, 1) from a fixed seed, outputs zero) or
  `NAME=FILE.npy` (converted to the element type);
- the i64 size in bytes that follows a buffer: filled in from the buffer unless set;
- a scalar: `NAME=NUMBER`.
The graph runs once; the root's outputs are printed, and the buffers it writes are summarised (or
saved as DIR/NAME.npy with -o DIR).
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

import numpy as np

import hpvm_py as hpvm

from .errors import HPVMError
from .frontend.callsite import caller_loc
from .ir import kernel as K
from .ir import semantics as S
from .support.settings import is_decimal
from .types import PtrType, ScalarType, bf16, f64

_SEED = 20261123


class RunUsageError(Exception):
    """A parameter without a usable value (the CLI reports it as a usage error)."""


def parse_settings(pairs: list[str]) -> dict[str, str]:
    settings: dict[str, str] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise RunUsageError(f"--set takes NAME=VALUE, got {pair!r}")
        settings[name.strip()] = value.strip()
    return settings


def _is_size_of_buffer(params: list[K.Param], i: int) -> bool:
    return i > 0 and isinstance(params[i - 1].type, PtrType) and params[i].type.name == "i64"


def _buffer(param: K.Param, value: str, rng: np.random.Generator) -> np.ndarray:
    elem: ScalarType = param.type.elem
    if value.endswith(".npy"):
        path = Path(value)
        if not path.exists():
            raise RunUsageError(f"--set {param.name}={value}: no such file")
        data = _read_npy(param, value, path)
        if elem == bf16:
            return data if data.dtype == np.uint16 else S.bf16_to_bits(data.astype(np.float32))
        if data.dtype.kind == "f" and not elem.is_float:
            # as the language converts (saturating, NaN to 0): NumPy's astype leaves NaN and
            # out-of-range values to C, which wraps or gives INT_MIN
            return S.cast(data, f64, elem)
        with np.errstate(all="ignore"):
            return data.astype(elem.numpy_dtype)
    if not is_decimal(value):  # (int() also reads other scripts' digits, "1_0", " 5")
        raise RunUsageError(f"--set {param.name}={value}: a buffer takes an element count (ASCII "
                            "digits) or a .npy file")
    count = int(value)
    if count < 0:
        raise RunUsageError(f"--set {param.name}={value}: a negative element count")
    # a count NumPy cannot allocate fails in np.zeros/rng as ValueError or MemoryError, which
    # hpvmc would report as an internal error: refuse it here, with the size it asks for
    too_big = RunUsageError(f"--set {param.name}={value}: cannot allocate {count} elements of "
                            f"{elem} ({count * elem.numpy_dtype.itemsize:,} bytes)")
    if count > np.iinfo(np.intp).max // elem.numpy_dtype.itemsize:
        raise too_big
    try:
        return _fresh_buffer(param, count, rng)
    except MemoryError:
        raise too_big from None


def _read_npy(param: K.Param, value: str, path: Path) -> np.ndarray:
    """The numbers of a .npy file, flattened. A file np.load cannot read (not a .npy, a folder,
    pickled objects) or whose elements are not numbers (strings, complex, records) is a usage
    error naming the --set: converting such data would fail inside NumPy, or silently drop parts
    of each value (the imaginary part, all fields but one)."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise RunUsageError(f"--set {param.name}={value}: not a readable .npy file of numbers "
                            f"({getattr(exc, 'strerror', None) or exc})") from None
    if not isinstance(data, np.ndarray) or data.dtype.kind not in "biuf":
        kind = data.dtype if isinstance(data, np.ndarray) else type(data).__name__
        raise RunUsageError(f"--set {param.name}={value}: the file holds {kind} values; a buffer "
                            "takes booleans, integers or floats")
    return data.reshape(-1)


def _fresh_buffer(param: K.Param, count: int, rng: np.random.Generator) -> np.ndarray:
    """`count` elements: zeros for an output, random values for an input."""
    elem: ScalarType = param.type.elem
    if param.direction == "out":
        return np.zeros(count, elem.numpy_dtype)
    if elem.is_float:
        values = rng.random(count, dtype=np.float32)
        return S.bf16_to_bits(values) if elem == bf16 else values.astype(elem.numpy_dtype)
    if elem.is_bool:
        return rng.random(count) < 0.5
    return rng.integers(0, 100, count).astype(elem.numpy_dtype)


def _scalar(param: K.Param, value: str) -> Any:
    t: ScalarType = param.type
    try:
        if not value.isascii():  # float() and int() also read other scripts' digits ("\u0663")
            raise ValueError(value)
        if t.is_float:
            # the number as written: launch rounds an integer to t once (float() would round it
            # to f64 first, and refuses 0x notation); -0 keeps its sign, as float() read it
            try:
                number = int(value, 0)
            except ValueError:
                return float(value)
            return -0.0 if number == 0 and value.startswith("-") else number
        if t.is_bool:
            if value.lower() not in ("0", "1", "true", "false"):
                raise ValueError(value)
            return value.lower() in ("1", "true")
        number = int(value, 0)
    except ValueError:
        raise RunUsageError(f"--set {param.name}={value}: expected a number of type {t}") from None
    if not t.min_value() <= number <= t.max_value():
        raise RunUsageError(f"--set {param.name}={value}: out of range for {t}")
    return t(number)


def graph_arguments(params: list[K.Param], settings: dict[str, str]) -> tuple[list[Any], dict[str, np.ndarray]]:
    """The launch arguments in parameter order, and the buffers by parameter name."""
    names = {p.name for p in params}
    unknown = sorted(set(settings) - names)
    if unknown:
        raise RunUsageError(f"the graph has no parameter {', '.join(unknown)} (parameters: "
                            f"{', '.join(p.name for p in params)})")
    rng = np.random.default_rng(_SEED)
    args: list[Any] = []
    buffers: dict[str, np.ndarray] = {}
    missing: list[str] = []
    for i, p in enumerate(params):
        value = settings.get(p.name)
        if isinstance(p.type, PtrType):
            if value is None:
                missing.append(f"{p.name} ({p.direction} buffer of {p.type.elem}: N elements or a .npy)")
                args.append(None)
                continue
            buffers[p.name] = _buffer(p, value, rng)
            args.append(buffers[p.name])
        elif value is None and _is_size_of_buffer(params, i) and args[-1] is not None:
            args.append(args[-1].nbytes)
        elif value is None:
            if not _is_size_of_buffer(params, i):
                missing.append(f"{p.name} ({p.type})")
            args.append(None)
        else:
            args.append(_scalar(p, value))
    if missing:
        raise RunUsageError("give a value with --set NAME=VALUE for: " + "; ".join(missing))
    return args, buffers


def _summary(array: np.ndarray, elem: ScalarType) -> str:
    values = S.bf16_from_bits(array) if elem == bf16 else array
    shown = ", ".join(f"{v:g}" if elem.is_float else str(v) for v in values[:6].tolist())
    more = ", ..." if values.size > 6 else ""
    total = float(np.sum(values, dtype=np.float64)) if values.size else 0.0
    return f"{values.size} x {elem}: [{shown}{more}] sum {total:g}"


def run_graph(graph: Any, args: argparse.Namespace, report: Callable[[str], None]) -> int:
    """Launch `graph` once with the command line's values; print what it computed."""
    root = graph.module().root_func
    params = root.params
    launch_args, buffers = graph_arguments(params, parse_settings(args.set or []))
    out_dir = Path(args.output) if args.output else None
    if out_dir is not None:  # before the launch: a bad -o is a usage error, not a lost run
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise RunUsageError(f"-o {out_dir}: cannot create the folder ({exc.strerror or exc})") from None
    outer = caller_loc()  # where a launch error about the --set values would otherwise point
    try:
        with hpvm.runtime(args.target):
            outputs = hpvm.wait(hpvm.launch(graph, *launch_args))
    except HPVMError as exc:
        if exc.loc == outer:  # not the program's line but hpvmc's own caller (runpy, the script)
            exc.loc = None
        raise
    # wait() gives a root's one output bare (a 0 of which `or ()` dropped, and any other it could
    # not iterate), several (or a `-> tuple[T]`) as a tuple, none as None
    results = () if outputs is None else outputs if isinstance(outputs, tuple) else (outputs,)
    for i, (port, value) in enumerate(zip(root.outputs, results)):
        # a bf16 comes back as its bits (NumPy has no bfloat16): shown as its value, as in buffers
        print(f"output {i}: {S.bf16_from_bits(value) if port.type == bf16 else value}")
    for p in params:
        if not isinstance(p.type, PtrType) or p.direction == "in":
            continue
        if out_dir is None:
            print(f"{p.name}: {_summary(buffers[p.name], p.type.elem)}")
        else:
            np.save(out_dir / f"{p.name}.npy", buffers[p.name])
            report(f"wrote {out_dir / (p.name + '.npy')}")
    return 0
