"""Check and convert the host's arguments to a graph's parameters, before anything runs."""
from __future__ import annotations

import itertools
import math
import operator
import threading
from typing import Any

import numpy as np

from ..errors import LaunchError
from ..frontend.callsite import caller_loc
from ..ir import dfg as D
from ..ir import semantics as S
from ..ir.kernel import shown_name
from ..types import PtrType, ScalarType, bf16, f64, i64, int_to_float
from .buffers import (HOST, buffer_kind, describe, elem_matches, foreign_device, given_nbytes,
                      is_buffer, moved, negated, not_dense, note_written, span, why_not_writable,
                      zero_tensor)
from .executor import BoundBuffer
from .tracker import MemoryObject, MemoryTracker, overlap


def size_companions(func: D.GraphFunc) -> dict[int, int]:
    """Parameter index of each pointer's size -> the pointer's index: the i64 that follows a
    pointer parameter is its size in bytes (the `pointer-size` rule)."""
    params = func.params
    return {i + 1: i for i, p in enumerate(params[:-1])
            if isinstance(p.type, PtrType) and params[i + 1].type == i64}


def complete_arguments(func: D.GraphFunc, args: tuple[Any, ...], kwargs: dict[str, Any]
                       ) -> tuple[Any, ...]:
    """One value per parameter, in order, from a launch's (or push's) positional and keyword
    arguments. Positional arguments are the first parameters in order, or, when they leave out
    every pointer's size, the other parameters in order; any parameter may be named instead. A
    size left out is its buffer's `nbytes`."""
    params = func.params
    if not kwargs and len(args) == len(params):
        return args  # the full form: nothing to do (a repeated launch's fast path)
    index, companions, short = _signature(func)
    values: dict[int, Any] = {}
    if len(args) == len(short) and not any(params[i].name in kwargs for i in short):
        positions = short  # every size left out
    elif len(args) <= len(params):
        positions = range(len(args))  # the first parameters, the rest by name
    else:
        raise LaunchError(_arity(func, companions, f"got {len(args)}"), caller_loc())
    values.update(zip(positions, args))
    for name, value in kwargs.items():
        i = index.get(name)
        if i is None:
            raise LaunchError(f"graph {shown_name(func)} has no parameter {name!r} (parameters: "
                              f"{', '.join(index)})", caller_loc())
        if i in values:
            raise LaunchError(f"graph {shown_name(func)}: parameter {name!r} given twice (by position and "
                              "by name)", caller_loc())
        values[i] = value
    for size, pointer in companions.items():
        if size not in values and pointer in values:
            values[size] = given_nbytes(values[pointer])
    if len(values) < len(params):
        missing = [p.name for i, p in enumerate(params) if i not in values]
        raise LaunchError(_arity(func, companions, f"missing {', '.join(missing)}"), caller_loc())
    return tuple([values[i] for i in range(len(params))])


_SIGNATURES: dict[int, tuple[D.GraphFunc, tuple[Any, ...]]] = {}  # id(func) -> (func, signature)


def note_writes(func: D.GraphFunc, args: tuple[Any, ...]) -> None:
    """note_written() of each buffer argument the graph writes (Out or InOut), once its checks
    passed (a launch, a push)."""
    _kinds(func)  # (its pointers, worked out once per graph)
    for i, read_only in _POINTERS[id(func)]:
        if not read_only and type(args[i]) is not np.ndarray:
            note_written(args[i])


def _signature(func: D.GraphFunc) -> tuple[dict[str, int], dict[int, int], tuple[int, ...]]:
    """A graph's parameter positions by name, its sizes' pointers (size_companions) and the
    positions of the parameters that are not sizes, worked out once per graph (a launch by
    keyword spends its time here otherwise)."""
    known = _SIGNATURES.get(id(func))
    if known is not None and known[0] is func:
        return known[1]
    companions = size_companions(func)
    signature = ({p.name: i for i, p in enumerate(func.params)}, companions,
                 tuple(i for i in range(len(func.params)) if i not in companions))
    if len(_SIGNATURES) >= _KINDS_KEPT:
        _SIGNATURES.clear()  # (as _kinds: a program compiles a few graphs, tests thousands)
    _SIGNATURES[id(func)] = (func, signature)
    return signature


def _arity(func: D.GraphFunc, companions: dict[int, int], problem: str) -> str:
    every = [p.name for p in func.params]
    short = [p.name for i, p in enumerate(func.params) if i not in companions]
    return (f"graph {shown_name(func)} takes ({', '.join(every)}), or without the pointers' sizes "
            f"({', '.join(short)}), by position or by name: {problem}")


IMMUTABLE_NUMBERS = (int, float, np.generic)  # numbers whose value an argument object keeps


def bind_arguments(func: D.GraphFunc, args: tuple[Any, ...], tracker: MemoryTracker,
                   devices: set[str], last: tuple[tuple[Any, ...], list[Any]] | None = None
                   ) -> list[Any]:
    """One value per parameter: BoundBuffer for pointers, a typed NumPy scalar otherwise.

    devices: where the graph's leaves run; a buffer on any other device is rejected. last: the
    arguments and values of this graph's previous call with the same `devices` (a stream's last
    push): an argument that is the very object it was then keeps its value when that cannot have
    changed (a number; a buffer still tracked as the same memory, still writable if written).
    """
    if len(args) != len(func.params):
        names = ", ".join(p.name for p in func.params)
        raise LaunchError(f"graph {shown_name(func)} takes {len(func.params)} argument(s) ({names}), "
                          f"got {len(args)}", caller_loc())
    kinds = _kinds(func)
    if last is not None:
        return _bind_again(func, args, tracker, devices, kinds, *last)
    params = func.params
    env: list[Any] = []
    for i, arg in enumerate(args):
        p = params[i]
        if kinds[i] == _POINTER:
            env.append(bind_buffer(func, p, arg, tracker, devices))
            continue
        value = scalar_argument(func, p.name, p.type, arg)
        env.append(value)
        if kinds[i] == _SIZE:
            _check_size(func, params[i - 1].name, env[i - 1], p.name, int(value))
    return env


def _bind_again(func: D.GraphFunc, args: tuple[Any, ...], tracker: MemoryTracker, devices: set[str],
                kinds: tuple[int, ...], last_args: tuple[Any, ...], last_env: list[Any]) -> list[Any]:
    """bind_arguments after a call with `last_args`: an argument that is the very object it was
    then keeps its value when that cannot have changed (a number; a buffer still tracked as the
    same memory, still writable if written); the others are bound again, in order."""
    params = func.params
    env = list(last_env)
    again = list(itertools.compress(range(len(args)), map(operator.is_not, args, last_args)))
    for i, _read_only in _POINTERS[id(func)]:
        arg = args[i]
        if arg is not last_args[i]:
            continue
        obj = env[i].obj
        # the kind its checks passed for (bind_buffer): a dtype, contiguity or
        # writability changed in place since (`a.dtype = np.int32`) is checked again
        checked = checks_passed(obj, params[i])
        if obj.released or checked is None or buffer_kind(arg) != checked[2] or \
                moved(arg, obj.address, obj.nbytes):
            again.append(i)
    again += [i for i in _SCALARS[id(func)] if args[i] is last_args[i] and
              not isinstance(args[i], IMMUTABLE_NUMBERS)]
    if not again:
        return env
    again.sort()
    for i in again:
        p = params[i]
        env[i] = bind_buffer(func, p, args[i], tracker, devices) if kinds[i] == _POINTER else \
            scalar_argument(func, p.name, p.type, args[i])
    # a size bound again, or the size of a buffer bound again: checked against that buffer
    for i in sorted({i + 1 if kinds[i] == _POINTER else i for i in again} & _SIZES[id(func)]):
        _check_size(func, params[i - 1].name, env[i - 1], params[i].name, int(env[i]))
    return env


_SCALAR, _POINTER, _SIZE = 0, 1, 2  # a parameter's kind; a size: the scalar after a pointer
_KINDS: dict[int, tuple[D.GraphFunc, tuple[int, ...]]] = {}  # id(func) -> (func, its kinds)
_KINDS_KEPT = 256
# id(func) -> the positions of its pointers (each with whether the graph only reads it), of its
# other parameters, of its sizes (with _KINDS)
_POINTERS: dict[int, tuple[tuple[int, bool], ...]] = {}
_SCALARS: dict[int, tuple[int, ...]] = {}
_SIZES: dict[int, frozenset[int]] = {}


def _kinds(func: D.GraphFunc) -> tuple[int, ...]:
    """Each parameter's kind, worked out once per graph."""
    known = _KINDS.get(id(func))
    if known is not None and known[0] is func:
        return known[1]
    params = func.params
    kinds = tuple(_POINTER if isinstance(p.type, PtrType) else
                  _SIZE if i > 0 and isinstance(params[i - 1].type, PtrType) else _SCALAR
                  for i, p in enumerate(params))
    assert all(isinstance(p.type, ScalarType) for p, k in zip(params, kinds) if k != _POINTER)
    if len(_KINDS) >= _KINDS_KEPT:
        for kept in (_KINDS, _POINTERS, _SCALARS, _SIZES):
            kept.clear()  # (a program compiles a few graphs; tests compile thousands)
    _KINDS[id(func)] = (func, kinds)
    _POINTERS[id(func)] = tuple((i, params[i].direction == "in") for i, k in enumerate(kinds)
                                if k == _POINTER)
    _SCALARS[id(func)] = tuple(i for i, k in enumerate(kinds) if k != _POINTER)
    _SIZES[id(func)] = frozenset(i for i, k in enumerate(kinds) if k == _SIZE)
    return kinds


def bind_buffer(func: D.GraphFunc, p: Any, arg: Any, tracker: MemoryTracker, devices: set[str]
                ) -> BoundBuffer:
    """Pointer parameter p's value for `arg`, checked (a buffer tracked as other memory than it
    is now is tracked afresh, or refused when the user tracked it: MemoryTracker.lookup)."""
    # a stream pushes, and a loop launches, the same buffers again and again: a tracked object
    # remembers the parameters it passed the checks for (only while tracked, so nothing here keeps
    # a buffer alive after untrack_memory or cleanup)
    obj = tracker.lookup(arg)
    if obj is not None:
        checked = checks_passed(obj, p)
        # (the same kind as then: its dtype, contiguity or writability may have been changed in
        # place since, `a.dtype = ...`, `t.data = t.view(torch.int32)`, `t.as_strided_(...)`)
        if checked is not None and checked[1] == devices and buffer_kind(arg) == checked[2]:
            return BoundBuffer(obj)
    else:
        # a loop that launches on a fresh buffer each time: one of the kind that last passed this
        # parameter's checks passes them too, and needs only its address and size
        last = kind_checked(tracker, p, arg, devices)
        if last is not None:
            address, nbytes = span(arg)
            # (the entry shared: no container of its own, see MemoryObject)
            return BoundBuffer(tracker.track_launched(arg, last[3], nbytes, address, last))
    bound = _check_buffer(func, p, arg, tracker, devices, obj)
    kind = buffer_kind(arg)
    entry = (p, devices, kind, bound.obj.home)
    _note_checks(bound.obj, entry)
    if kind is not None:
        _remember(tracker.checked_kinds, id(p), entry)
    return bound


def kind_checked(tracker: MemoryTracker, p: Any, arg: Any, devices: frozenset[str]
                 ) -> tuple[Any, ...] | None:
    """The runtime's entry (parameter, devices, buffer kind, home) of the buffer that last passed
    parameter p's checks against these devices, when `arg` is of its kind (it passes them too,
    its size aside); else None."""
    last = tracker.checked_kinds.get(id(p))
    if last is not None and last[0] is p and last[1] == devices and buffer_kind(arg) == last[2]:
        return last
    return None


# What a buffer passed (MemoryObject.checked_for): the entry (parameter, devices, buffer kind,
# home) of the one parameter it passed the checks for, or a dict of them by id(parameter).

def checks_passed(obj: MemoryObject, p: Any) -> tuple[Any, ...] | None:
    """The entry of the checks `obj`'s buffer passed as parameter `p`, or None."""
    checked = obj.checked_for
    if type(checked) is dict:
        checked = checked.get(id(p))
    return checked if checked is not None and checked[0] is p else None


def _note_checks(obj: MemoryObject, entry: tuple[Any, ...]) -> None:
    checked = obj.checked_for
    if checked is None or (type(checked) is tuple and checked[0] is entry[0]):
        obj.checked_for = entry
        return
    if type(checked) is tuple:
        checked = obj.checked_for = {id(checked[0]): checked}
    _remember(checked, id(entry[0]), entry)


_CHECKED_KEPT = 64  # parameters remembered per buffer and per runtime (_remember)
# held while a table changes: threads launching at once evict from one, the runtime's (two took
# its oldest entry, and the second's `del` was a KeyError: an internal error of its launch)
_REMEMBERING = threading.Lock()


def _remember(checked: dict[int, tuple[Any, ...]], key: int, value: tuple[Any, ...]) -> None:
    """Remember what passed a parameter's checks, in a table that keeps the _CHECKED_KEPT
    parameters most recently checked: each graph, and each IR rebuilt after a watched global
    changed, has parameters of its own, and an entry holds its parameter, so a long-lived buffer
    or runtime would otherwise hold every graph's parameters a program ever launched. (Only after
    a full check: an evicted parameter costs one more check, never a wrong answer.)"""
    with _REMEMBERING:
        checked.pop(key, None)  # (again, as the most recent)
        while len(checked) >= _CHECKED_KEPT:
            del checked[next(iter(checked))]
        checked[key] = value


def _check_buffer(func: D.GraphFunc, p: Any, arg: Any, tracker: MemoryTracker, devices: set[str],
                  obj: MemoryObject | None) -> BoundBuffer:
    elem = p.type.elem
    if not is_buffer(arg):
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} is a pointer ({p.type}): pass a NumPy "
                          f"array or a torch tensor of {elem}, not {type(arg).__name__}", caller_loc())
    sparse = not_dense(arg)
    if sparse is not None:
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} {sparse}: a kernel indexes dense "
                          "memory; pass tensor.to_dense()", caller_loc())
    if negated(arg):
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} is a negative view (its memory holds "
                          "its values negated, as torch's conj().imag makes them): a kernel reads "
                          "that memory; pass tensor.resolve_neg()", caller_loc())
    if zero_tensor(arg):
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} is a zero tensor (torch's "
                          "efficient zeros, which have no memory): a kernel indexes memory; pass "
                          "tensor.clone()", caller_loc())
    info = describe(arg)
    if not elem_matches(info, elem):
        got = info.elem.name if info.elem is not None else "an unsupported dtype"
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} must hold {elem} elements, got {got}",
                          caller_loc())
    if not info.contiguous:
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} is not contiguous; pass "
                          "np.ascontiguousarray(...) or tensor.contiguous()", caller_loc())
    refusal = why_not_writable(arg) if p.direction in ("out", "inout") else None
    if refusal is not None:
        spelling = "Out" if p.direction == "out" else "InOut"
        advice = "; pass a writeable array" if isinstance(arg, np.ndarray) else ""
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} is written by the graph "
                          f"({spelling}[...]) but {refusal}{advice}", caller_loc())
    foreign = foreign_device(info)
    if foreign is not None:
        raise LaunchError(f"argument {p.name!r} of {shown_name(func)} {foreign}: pass a CPU or CUDA tensor",
                          caller_loc(), rule="buffer-device")
    if info.device != HOST and info.device not in devices:
        gpus = sorted(d for d in devices if d != HOST)
        where = ", ".join(gpus) if gpus else "the host only"
        move = f"move it to {gpus[0]} (tensor.to({gpus[0]!r}))" if gpus else "pass a host buffer"
        index = info.device.partition(":")[2]
        raise LaunchError(f"argument {p.name!r} lives on {info.device}, but no node of {shown_name(func)} "
                          f"runs there (its nodes run on {where}): {move}, or place a node that uses "
                          f"it on that GPU (hint 'gpu:{index}'); between the devices a graph runs "
                          "on, the runtime moves data itself", caller_loc(), rule="buffer-device")
    return BoundBuffer(obj or tracker.track(arg, implicit=True, info=info))


def check_overlaps(func: D.GraphFunc, env: list[Any], devices: frozenset[str]) -> None:
    """Refuse two buffer arguments that share memory (`a` and `a[2:6]`) where the graph writes one
    of them and runs nodes away from their home: there each gets a copy of its own, which the
    other's writes would not reach (a non-streaming launch; a stream runs such items stage by
    stage). On their home device both are the same memory, used in place."""
    buffers = [(i, bound.obj) for i, bound in enumerate(env) if isinstance(bound, BoundBuffer)]
    if len(buffers) < 2 or all(devices == {obj.home} for _, obj in buffers):
        return
    params = func.params
    for k, (i, a) in enumerate(buffers):
        for j, b in buffers[k + 1:]:
            if a is b or a.home != b.home or not overlap(a, b) or devices == {a.home}:
                continue
            written = [params[n].name for n in (i, j) if params[n].direction in ("out", "inout")]
            if written:
                away = ", ".join(sorted(devices - {a.home}))
                raise LaunchError(
                    f"arguments {params[i].name!r} and {params[j].name!r} of {shown_name(func)} share "
                    f"memory (one is a view of the other, or both of one array), and the graph "
                    f"writes {written[0]!r} with nodes on {away}, where each gets a copy of its "
                    "own: the other's would not see the writes. Pass the array once (and index "
                    "it with an offset), or copies that do not share memory", caller_loc(),
                    rule="buffer-overlap")


def _check_size(func: D.GraphFunc, ptr_name: str, buf: BoundBuffer, size_name: str, size: int) -> None:
    if size < 0:
        raise LaunchError(f"argument {size_name!r} of {shown_name(func)} is {size}; a size in bytes cannot "
                          "be "
                          "negative", caller_loc())
    if size > buf.obj.nbytes:
        raise LaunchError(f"argument {size_name!r} of {shown_name(func)} says {ptr_name!r} has {size} "
                          "bytes, but "
                          f"the buffer has only {buf.obj.nbytes}", caller_loc())


def scalar_argument(func: D.GraphFunc, name: str, t: ScalarType, arg: Any) -> Any:
    """A host value for scalar parameter `name`, checked and converted to t."""
    kind = type(arg)
    scalar, low, high = t.host_value  # the common cases first (launches, replays)
    if kind is float and t.kind == "float" and t.name != "bf16" and low <= arg <= high:
        return scalar(arg)
    if kind is int and t.kind in ("int", "uint") and low <= arg <= high:
        return scalar(arg)
    where = f"argument {name!r} of {shown_name(func)}"
    if is_buffer(arg):
        if len(arg.shape) != 0:
            raise LaunchError(f"{where} is a scalar {t}, not a buffer", caller_loc())
        if not isinstance(arg, np.ndarray) and arg.is_meta:  # (its item() is torch's error)
            raise LaunchError(f"{where} is a meta tensor, which has a shape but no value: pass "
                              "a number", caller_loc())
        if np.ma.is_masked(arg):  # (its item() is the data under the mask, or 0 for np.ma.masked)
            raise LaunchError(f"{where} is masked (np.ma), so it holds no value: pass a number",
                              caller_loc())
        arg = arg.item()  # a 0-d array or tensor is a number
    if isinstance(arg, np.generic):
        arg = arg.item()
    if t.is_bool:
        if isinstance(arg, (bool, int)) and arg in (0, 1):
            return np.bool_(arg)
        raise LaunchError(f"{where} is an i1: pass True or False", caller_loc())
    if t.is_float:
        if isinstance(arg, int) and not isinstance(arg, bool):
            try:
                float(arg)
            except OverflowError:  # an int beyond every float
                raise LaunchError(f"{where} is a {t}: {arg} is too large for a float",
                                  caller_loc()) from None
            # rounded once, as the leaf's cast of an i64 rounds (np.float32(arg) rounds twice,
            # through f64); beyond t's range it is inf, as a float argument becomes
            return S.value_dtype(t).type(int_to_float(arg, t))
        if isinstance(arg, (float, np.floating)):  # (np.longdouble: its item() is itself)
            with np.errstate(over="ignore"):  # beyond t's range it is inf, by rule
                return S.cast(np.float64(arg), f64, t) if t == bf16 else S.value_dtype(t).type(arg)
        raise LaunchError(f"{where} is a {t}: pass a number, not {type(arg).__name__}", caller_loc())
    if isinstance(arg, bool) or not isinstance(arg, int):
        raise LaunchError(f"{where} is a {t}: pass an int, not {type(arg).__name__}", caller_loc())
    if not t.min_value() <= arg <= t.max_value():
        raise LaunchError(f"{where} is a {t}: {arg} is out of its range [{t.min_value()}, "
                          f"{t.max_value()}]", caller_loc())
    return t.numpy_dtype.type(arg)


def same_scalar(value: Any, last: Any) -> bool:
    """Whether a scalar argument has the bits it had in a launch's last run (a stream's item, a
    replay): then the packed launch need not be written again."""
    if type(value) is not type(last) or not isinstance(value, IMMUTABLE_NUMBERS) or not value == last:
        return False  # (NaN: never the same; a 0-d array or tensor may have changed in place)
    return value != 0 or not isinstance(value, (float, np.floating)) or \
        math.copysign(1.0, value) == math.copysign(1.0, last)
