"""`hpvm.torch.op(graph, ...)`: a graph as a `torch.library.custom_op` (docs/torch.md).

The op's arguments are the graph's In and InOut pointers (tensors) and the scalar parameters the
caller passes, in parameter order; it allocates the Out pointers (their shapes from `shapes=`) and
returns them, then the graph's own outputs as 0-d tensors. InOut pointers are mutated in place
(`mutates_args`). The pointers' sizes are filled from the tensors. A fake implementation gives the
results' shapes and dtypes, so `torch.compile(fullgraph=True)` traces through the op; `backward=`
(a graph or a Python function) registers autograd.
"""
from __future__ import annotations

import inspect
import itertools
from typing import Any, Callable

import torch

from ..errors import HPVMError
from ..frontend.decorators import GraphDef
from ..rt.compiler import CompiledGraph, LoadedGraph
from ..api import host as api
from ..rt.boundary import api_boundary
from ..support.loc import Loc
from ..types import SCALAR_TYPES, ScalarType, bf16, bf16_from_bits, int_to_float
from .spec import build, fail, graph_name, graph_params, is_library_file, user_loc

_DTYPES = {"i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32,
           "i64": torch.int64, "u8": torch.uint8, "u16": torch.uint16, "u32": torch.uint32,
           "u64": torch.uint64, "f16": torch.float16, "bf16": torch.bfloat16,
           "f32": torch.float32, "f64": torch.float64}
GPU_TARGETS = ("gpu", "nvptx")
CPU_TARGETS = ("cpu", "python")
INT64_MAX = (1 << 63) - 1  # torch passes an op's integer arguments as int64 (SymInt)

# name -> (serial number, where made) of the TorchOp that holds it now. torch.library.custom_op
# lets a later op of a name replace an earlier one (for notebooks that run a cell again), which
# leaves the earlier TorchOp calling the later op's graph or schema: the earlier one checks this
# and refuses instead. (Numbers, not weak references to the ops: Dynamo traces a dict lookup, and
# nothing here keeps an op alive.)
_HOLDERS: dict[str, tuple[int, Any]] = {}
_SERIALS = itertools.count(1)


def torch_dtype(t: ScalarType) -> Any:
    return _DTYPES[t.name]


def _schema_type(t: ScalarType) -> str:
    if t.is_bool:
        return "bool"
    return "float" if t.is_float else "SymInt"


@torch.compiler.assume_constant_result
def _int_as_float(value: int, type_name: str) -> float:
    """int_to_float, which Dynamo calls while it traces rather than tracing its NumPy (the int
    is a constant there: a symbolic one is no `int`, and torch converts it). The type goes by
    name: torch 2.11's Dynamo cannot take a frozen dataclass as a constant argument."""
    return int_to_float(value, SCALAR_TYPES[type_name])


def _is_graph(obj: Any) -> bool:
    return isinstance(obj, (GraphDef, LoadedGraph, CompiledGraph))


def _op_name(graph: Any, name: str | None) -> str:
    if name is not None:
        if not isinstance(name, str):
            raise fail(f"hpvm.torch.op: name= is a {type(name).__name__}; give a string, "
                       "'namespace::name' (or 'name', in the hpvm namespace)")
        given = name
        if "::" not in name:
            name = f"hpvm::{name}"
        namespace, _, opname = name.partition("::")
        if not (namespace.isidentifier() and opname.isidentifier()):
            raise fail(f"hpvm.torch.op: name {given!r} is not 'namespace::name' of identifiers")
        shadow = _shadowed(namespace, opname)
        if shadow is not None:
            raise fail(f"hpvm.torch.op: name {name!r}: {shadow} is an attribute of torch's own, "
                       "not an op, so torch cannot reach an op of that name: choose another name")
        return name
    base = graph_name(graph)
    opname, k = base, 1
    while hasattr(torch.ops.hpvm, opname):  # one per process: a second op of the graph gets _2
        k += 1
        opname = f"{base}_{k}"
    return f"hpvm::{opname}"


def _shadowed(namespace: str, opname: str) -> str | None:
    """`torch.ops.NS.NAME` when it is an attribute of torch's that is no op namespace or op
    (`torch.ops.load_library`, `torch.ops.NS.name`, dunders): torch looks ops up as attributes,
    finds that instead, and fails inside custom_op with an AttributeError. None: the name is free
    or an op's. (getattr_static: no lookup creates anything or runs __getattr__.)"""
    found = inspect.getattr_static(torch.ops, namespace, None)
    if found is not None and not isinstance(found, torch._ops._OpNamespace):
        return f"torch.ops.{namespace}"
    found = inspect.getattr_static(getattr(torch.ops, namespace), opname, None)
    if found is not None and not isinstance(found, torch._ops.OpOverloadPacket):
        return f"torch.ops.{namespace}.{opname}"
    return None


class TorchOp:
    """A graph as a torch op: call it like a function (by position or by parameter name).

    Attributes: `custom_op` (the `torch.library.CustomOpDef`), `overload` (the
    `torch.ops.<namespace>.<name>.default` that compiled graphs call: pass it to
    `torch.library.opcheck`), `name`, `inputs` (the op's arguments), `results`, `mutated`,
    `schema`, `backward_op` (the op of a backward graph, if any)."""

    def __init__(self, graph: Any, *, name: str | None = None, shapes: dict[str, Any] | None = None,
                 scalars: dict[str, Any] | None = None, target: str | dict[str, str] | None = None,
                 backward: Any = None, backward_shapes: dict[str, Any] | None = None):
        if not _is_graph(graph):
            raise fail(f"hpvm.torch.op() takes an @hpvm.graph function (or a graph from "
                       f"hpvm.from_text / hpvm.load), not {type(graph).__name__}")
        self.name = _op_name(graph, name)
        self.signature = sig = build(graph, self.name, shapes, scalars)
        self.targets = _targets(self.name, target)
        self.inputs = list(sig.inputs)
        self.results = sig.results()
        self.mutated = list(sig.mutated)
        self.schema = self._schema()
        self._arity = len(sig.inputs)
        try:
            self.custom_op = torch.library.custom_op(self.name, self._impl, mutates_args=tuple(sig.mutated),
                                                     schema=self.schema)
        except RuntimeError as exc:
            raise fail(f"hpvm.torch.op: torch refused to define {self.name}: {exc}") from None
        self.custom_op.register_fake(self._fake)
        namespace, _, opname = self.name.partition("::")
        self.overload = getattr(getattr(torch.ops, namespace), opname).default
        self.made_at: Loc | None = user_loc()
        self._serial = next(_SERIALS)
        _HOLDERS[self.name] = (self._serial, self.made_at)
        self.backward_op: TorchOp | None = None
        self._grad: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any]] | None = None
        if backward is not None:
            self._register_backward(backward, backward_shapes)
        elif backward_shapes:
            raise fail(f"hpvm.torch.op({self.name}): backward_shapes= without backward=")

    def __repr__(self) -> str:
        return f"<hpvm.torch.op {self.name}{self.schema}>"

    # -- calling --------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs or len(args) != self._arity:
            args = self._order(args, kwargs)
        serial, made_at = _HOLDERS[self.name]
        if serial != self._serial:
            where = f" at {made_at}" if made_at is not None else ""
            raise fail(f"{self.name}: this op was replaced by the op of the same name made "
                       f"later{where} (torch keeps one op per name and drops the earlier one's "
                       "implementation): call the later op, or give the two ops different names")
        # torch.fx.symbolic_trace passes Proxies, which stand for tensors and numbers alike: the
        # op is then only recorded (the checks run when the traced module runs it)
        if not any(isinstance(a, torch.fx.Proxy) for a in args):
            self._check_kinds(args)
            args = self._rounded(args)
        return self.overload(*args)

    def _order(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        names = self.inputs
        if len(args) > len(names):
            raise fail(f"{self.name} takes {len(names)} argument(s) ({', '.join(names)}), got "
                       f"{len(args)}")
        values = dict(zip(names, args))
        for key, value in kwargs.items():
            if key not in names:
                raise fail(f"{self.name} has no argument {key!r} (arguments: {', '.join(names)})")
            if key in values:
                raise fail(f"{self.name}: argument {key!r} given twice (by position and by name)")
            values[key] = value
        missing = [n for n in names if n not in values]
        if missing:
            raise fail(f"{self.name} takes ({', '.join(names)}): missing {', '.join(missing)}")
        return tuple(values[n] for n in names)

    def _check_kinds(self, args: tuple[Any, ...]) -> None:
        sig = self.signature
        for name, value in zip(self.inputs, args):
            if name in sig.tensors:
                if not isinstance(value, torch.Tensor):
                    raise fail(f"argument {name!r} of {self.name} is a pointer ({sig.elem(name)}): "
                               f"pass a torch tensor, not {type(value).__name__}")
                if not torch.compiler.is_compiling():
                    self._check_memory(name, value)
                # the check torch makes of `w.add_(g)`: with grad mode on, autograd would not see
                # the write; under torch.no_grad() (an optimizer's update) it is allowed
                if name in sig.mutated and value.requires_grad and torch.is_grad_enabled():
                    raise fail(f"argument {name!r} of {self.name} is written in place (InOut[...]) "
                               "but requires grad, and grad mode is on: autograd cannot see what "
                               "the graph writes into it; call the op under torch.no_grad() (as "
                               "an optimizer step does), or pass tensor.detach()")
                continue
            t = sig.elem(name)
            if isinstance(value, torch.Tensor):
                raise fail(f"argument {name!r} of {self.name} is a scalar {t}: pass a number, not a "
                           "tensor (use .item() for a 0-d tensor)")
            if t.is_bool:
                ok = isinstance(value, bool)
            elif t.is_float:
                ok = isinstance(value, (int, float, torch.SymInt, torch.SymFloat)) and not isinstance(value, bool)
            else:
                ok = isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool)
            if not ok:
                raise fail(f"argument {name!r} of {self.name} is a scalar {t}: got "
                           f"{type(value).__name__}")
            # (while torch traces, sizes are symbolic and torch checks them: a symbolic value in
            # Python's comparisons broke Dynamo's fake run on torch 2.11)
            if type(value) is int and not t.is_bool and not torch.compiler.is_compiling():
                self._check_range(name, t, value)

    def _rounded(self, args: tuple[Any, ...]) -> tuple[Any, ...]:
        """A float parameter's Python int rounded to the parameter's type here, once, as the launch
        rounds it (and torch's `x * 2**60`): torch would pass it to the op as a double, rounding it
        twice (2**60 + 2**36 + 1 is 2**60 + 2**37 as an f32, but 2**60 by way of f64)."""
        sig = self.signature
        return tuple(_int_as_float(value, sig.elem(name).name)
                     if type(value) is int and name not in sig.tensors and sig.elem(name).is_float
                     else value for name, value in zip(self.inputs, args))

    def _check_memory(self, name: str, tensor: Any) -> None:
        """Tensors whose memory the graph cannot use as they are, refused here: torch's dispatcher
        would fail on them before the op's checks run, with its own NotImplementedError (a nested
        tensor: the op has no kernel for it) or RuntimeError (writing a negative view or a zero
        tensor, which torch's fallbacks for them do not support for an op returning no tensor)."""
        if tensor.is_nested:
            raise fail(f"argument {name!r} of {self.name} is a nested tensor: a graph indexes "
                       "dense memory; pass a dense one (tensor.to_padded_tensor(0), or "
                       "torch.cat(tensor.unbind()))")
        if name not in self.signature.mutated:
            return  # (torch hands the op a negative view or a zero tensor resolved, in new memory)
        if tensor.is_neg():
            raise fail(f"argument {name!r} of {self.name} is written in place (InOut[...]) but "
                       "is a negative view (its memory holds its values negated, as torch's "
                       "conj().imag makes them): pass tensor.resolve_neg() and use that tensor")
        if tensor._is_zerotensor():
            raise fail(f"argument {name!r} of {self.name} is written in place (InOut[...]) but "
                       "is a zero tensor (torch's efficient zeros, which have no memory): pass "
                       "tensor.clone() and use that tensor")

    def _check_range(self, name: str, t: ScalarType, value: int) -> None:
        """Here, at the user's line, rather than as torch's "Expected a value of type 'int' ...
        found type 'int'" (beyond int64, or for a float parameter beyond every float) or the
        launch's error from inside torch's dispatcher."""
        if t.is_float:
            try:
                float(value)
            except OverflowError:
                raise fail(f"argument {name!r} of {self.name} is a scalar {t}: {value} is too "
                           "large for a float") from None
            return
        lo, hi = t.min_value(), t.max_value()
        if not lo <= value <= hi:
            raise fail(f"argument {name!r} of {self.name} is a scalar {t}: {value} is out of its "
                       f"range [{lo}, {hi}]")
        if value > INT64_MAX:
            raise fail(f"argument {name!r} of {self.name} is a scalar {t}: {value} is beyond "
                       f"{INT64_MAX}, the largest integer torch passes to an op (as int64); give "
                       "the graph an i64 parameter, or fix the value with scalars=")

    def _schema(self) -> str:
        sig = self.signature
        args, alias = [], iter("abcdefghijklmnopqrstuvwxyz")
        for name in sig.inputs:
            if name in sig.mutated:
                args.append(f"Tensor({next(alias)}!) {name}")
            elif name in sig.tensors:
                args.append(f"Tensor {name}")
            else:
                args.append(f"{_schema_type(sig.elem(name))} {name}")
        count = len(sig.results())
        returns = "()" if count == 0 else "Tensor" if count == 1 else \
            "(" + ", ".join(["Tensor"] * count) + ")"
        return f"({', '.join(args)}) -> {returns}"

    # -- checks shared by the real and the fake implementation ------------------------------------

    def _check(self, values: dict[str, Any]) -> Any:
        """The device of the call, after checking every tensor's dtype, device and shape."""
        sig = self.signature
        device, first = None, None
        for name in sig.tensors:
            t = values[name]
            if t.layout != torch.strided:  # (sparse: no contiguous() or data pointer to launch on)
                raise fail(f"argument {name!r} of {self.name} is a {t.layout} tensor: pass a dense "
                           "one (tensor.to_dense())")
            want = torch_dtype(sig.elem(name))
            if t.dtype != want:
                raise fail(f"argument {name!r} of {self.name} must be a {want} tensor "
                           f"({sig.elem(name)} elements), got {t.dtype}")
            if device is None:
                device, first = t.device, name
            elif t.device != device:
                raise fail(f"argument {name!r} of {self.name} is on {t.device} but {first!r} is on "
                           f"{device}: every tensor of one call lives on one device")
            if name in sig.mutated and not t.is_contiguous():
                raise fail(f"argument {name!r} of {self.name} is written in place (InOut[...]) and "
                           "must be contiguous: pass tensor.contiguous() and use that tensor")
            if name in sig.shapes:
                expected = sig.shape(name, values)
                if tuple(t.shape) != tuple(expected):
                    raise fail(f"argument {name!r} of {self.name} must have shape "
                               f"{tuple(expected)}, got {tuple(t.shape)}")
        if device is None:  # outputs only: on the default device
            device = torch.get_default_device()
        if device.type not in ("cpu", "cuda", "meta"):
            raise fail(f"{self.name}: tensors on {device} are not supported (cpu or cuda)")
        return device

    def _allocate(self, values: dict[str, Any], device: Any) -> list[Any]:
        sig = self.signature
        return [torch.empty(sig.shape(o, values), dtype=torch_dtype(sig.elem(o)), device=device)
                for o in sig.outputs]

    def _fake(self, *args: Any) -> Any:
        sig = self.signature
        values = sig.values(args)
        device = self._check(values)
        results = self._allocate(values, device)
        results += [torch.empty((), dtype=torch_dtype(t), device=device) for _, t in sig.returns]
        return _pack(results)

    # -- running ------------------------------------------------------------------------------

    def _target(self, device: Any) -> str:
        kind = device.type
        chosen = self.targets.get(kind)
        running = api._runtime
        if running is not None and chosen is not None and chosen != running.target:
            raise fail(f"{self.name} runs on target {chosen!r} (its target=), but the runtime "
                       f"running in this process has target {running.target!r}: there is one "
                       "runtime per process; leave target= out to use the running one")
        if running is not None:
            if kind == "cuda" and running.target not in GPU_TARGETS:
                raise fail(f"{self.name} got tensors on {device}, but the runtime running in this "
                           f"process has target {running.target!r}, which runs on the host: run "
                           "the op on CPU tensors, or start the runtime with target 'gpu' or "
                           "'nvptx'")
            return str(running.target)
        return chosen or ("gpu" if kind == "cuda" else "cpu")

    def _impl(self, *args: Any) -> Any:
        try:
            return self._run(args)
        except HPVMError as exc:
            # the launch locates its errors at the innermost frame outside hpvm_py, which here is
            # torch's dispatcher (torch/_library/custom_ops.py): name the user's call instead. (A
            # location in the user's own code, a leaf's line, stays.)
            if exc.loc is None or is_library_file(exc.loc.file):
                exc.loc = user_loc() or exc.loc
            raise

    def _run(self, args: tuple[Any, ...]) -> Any:
        sig = self.signature
        values = sig.values(args)
        device = self._check(values)
        results = self._allocate(values, device)
        call: dict[str, Any] = {}
        strided = []
        for name in sig.tensors:
            t = values[name]
            if name in sig.mutated:
                # torch lets an op write a tensor that requires grad (__call__ has refused it with
                # grad mode on; inside the op grad mode is always off): the launch, which refuses
                # such tensors, gets the same memory without autograd's flag
                call[name] = t.detach()
            elif t.is_contiguous():
                call[name] = t
            else:
                strided.append(name)
        call.update(zip(sig.outputs, results))
        for name in sig.scalars + list(sig.constants) + list(sig.derived):
            call[name] = _plain(values[name])
        with api.runtime(self._target(device)):
            for name in strided:
                call[name] = _gathered(values[name])
            returned = self._launch(call, [call[n] for n in sig.tensors + sig.outputs])
        if sig.returns:
            if len(sig.returns) == 1 and not isinstance(returned, tuple):
                returned = (returned,)
            results += [torch.tensor(_returned(v, t), dtype=torch_dtype(t), device=device)
                        for v, (_, t) in zip(returned, sig.returns)]
        return _pack(results)

    def _launch(self, call: dict[str, Any], buffers: list[Any]) -> Any:
        """Launch and wait; then let go of the tensors this call tracked (bringing their data
        home), so that a training loop's fresh tensors are never held by the runtime."""
        tracker = api._active().tracker
        fresh = {id(b): b for b in buffers if tracker.lookup(b) is None}
        try:
            return api.wait(api.launch(self.signature.graph, **call))
        finally:
            for b in fresh.values():
                if tracker.lookup(b) is not None:
                    api.untrack_memory(b)

    # -- autograd -------------------------------------------------------------------------------

    def _register_backward(self, backward: Any, shapes: dict[str, Any] | None) -> None:
        sig = self.signature
        if sig.mutated:
            raise fail(f"hpvm.torch.op({self.name}): backward= needs an op that mutates nothing, "
                       f"but the graph writes {', '.join(sig.mutated)} in place (InOut[...]): make "
                       "them Out parameters (the op then returns them)")
        if _is_graph(backward):
            self.backward_op = _backward_op(self, backward, shapes or {})
            self._grad = self._graph_grad
        elif callable(backward):
            if shapes:
                raise fail(f"hpvm.torch.op({self.name}): backward_shapes= goes with a backward graph")
            self._grad = backward
        else:
            raise fail(f"hpvm.torch.op({self.name}): backward= takes a graph or a function "
                       f"(saved, grads) -> {{input: gradient}}, not {type(backward).__name__}")
        self.custom_op.register_autograd(self._backward, setup_context=self._setup_context)

    def _setup_context(self, ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        sig = self.signature
        results = list(output) if isinstance(output, (tuple, list)) else \
            ([] if output is None else [output])
        tensors = [v for n, v in zip(sig.inputs, inputs) if n in sig.tensors] + results
        ctx.save_for_backward(*tensors)
        ctx.hpvm_names = [n for n in sig.inputs if n in sig.tensors] + sig.results()
        values = sig.values(inputs)
        ctx.hpvm_scalars = {n: values[n] for n in sig.scalars + list(sig.constants) + list(sig.derived)}

    def _backward(self, ctx: Any, *grads: Any) -> tuple[Any, ...]:
        sig = self.signature
        saved = dict(zip(ctx.hpvm_names, ctx.saved_tensors))
        saved.update(ctx.hpvm_scalars)
        incoming = {}
        for name, grad in zip(sig.results(), grads):
            incoming[name] = torch.zeros_like(saved[name]) if grad is None else grad
        got = self._grad(saved, incoming) or {}
        return tuple(got.get(n) if n in sig.tensors else None for n in sig.inputs)

    def _graph_grad(self, saved: dict[str, Any], grads: dict[str, Any]) -> dict[str, Any]:
        bwd = self.backward_op
        assert bwd is not None
        values = {**saved, **{f"grad_{n}": g for n, g in grads.items()}}
        out = bwd(*[values[n] for n in bwd.inputs])
        out = list(out) if isinstance(out, tuple) else [out]
        return {n.removeprefix("grad_"): g for n, g in zip(bwd.results, out)}


def _backward_op(forward: TorchOp, graph: Any, shapes: dict[str, Any]) -> TorchOp:
    """The op of a backward graph. Its parameters are named after the forward's: its In pointers
    are forward inputs, results (`y`) and incoming gradients (`grad_y`), its Out pointers the
    gradients of forward inputs (`grad_x`, shaped like `x` unless `shapes` says otherwise), its
    scalars forward scalars (those the caller passed, the constants and the derived ones, as the
    forward computed them)."""
    fsig = forward.signature
    where = f"hpvm.torch.op({forward.name}): the backward graph"
    params = graph_params(graph)
    tensors = set(fsig.tensors) | set(fsig.results())
    grads_in = {f"grad_{n}" for n in fsig.results()}
    grads_out = {f"grad_{n}" for n in fsig.tensors}
    shapes = dict(shapes)
    scalar_names = fsig.scalars + list(fsig.constants) + list(fsig.derived)
    for name, direction in params:
        if direction is None:
            if name not in scalar_names:
                raise fail(f"{where} has a scalar {name!r}, which is no scalar of the forward "
                           f"graph ({', '.join(scalar_names) or 'it has none'})")
        elif direction == "out":
            if name not in grads_out:
                raise fail(f"{where} writes {name!r}; its Out pointers are gradients of the "
                           f"forward's tensor inputs: {', '.join(sorted(grads_out))}")
            if name not in shapes:
                like = name.removeprefix("grad_")
                if like not in [n for n, _ in params]:
                    raise fail(f"{where}: give {name!r} a shape in backward_shapes=, or take "
                               f"{like!r} as an In parameter (its shape is then {name!r}'s)")
                shapes[name] = like
        elif name not in tensors and name not in grads_in:
            raise fail(f"{where} reads {name!r}; its In pointers are the forward's tensors and "
                       f"results ({', '.join(sorted(tensors))}) and their gradients "
                       f"({', '.join(sorted(grads_in))})")
        elif direction == "inout":
            raise fail(f"{where} writes {name!r} in place (InOut[...]); a backward graph only "
                       "reads what the forward saved: declare it In")
    return TorchOp(graph, name=f"{forward.name}_backward", shapes=shapes,
                   target=forward.targets or None)


def _targets(name: str, target: str | dict[str, str] | None) -> dict[str, str]:
    if target is None:
        return {}
    chosen = dict(target) if isinstance(target, dict) else \
        {"cuda" if target in GPU_TARGETS else "cpu": target}
    for kind, t in chosen.items():
        allowed = GPU_TARGETS if kind == "cuda" else CPU_TARGETS if kind == "cpu" else ()
        if t not in allowed:
            raise fail(f"hpvm.torch.op({name}): target {t!r} for {kind} tensors: choose one of "
                       f"{', '.join(allowed) or 'nothing (cpu or cuda tensors only)'}")
    return chosen


def _gathered(tensor: Any) -> Any:
    """A contiguous copy of a strided In tensor, made by torch on the host (or its GPU), not by
    the launch: so the tracked buffers sharing its memory (the user's tracked base or view, whose
    newest data a launch left on a device) bring that data home first, as the launch does for the
    buffers it is given; the copy would read their stale home copy otherwise."""
    api._active().tracker.bring_home(tensor)
    return tensor.contiguous()


def _pack(results: list[Any]) -> Any:
    if not results:
        return None
    return results[0] if len(results) == 1 else tuple(results)


def _returned(value: Any, t: ScalarType) -> Any:
    """A graph output as torch.tensor() takes it: wait() gives a bf16 as its bits (a NumPy uint16,
    as NumPy has no bfloat16), which torch.tensor(..., dtype=torch.bfloat16) would read as a
    number (1.5, bits 0x3fc0, would come back as 16320.0)."""
    if t == bf16:
        return float(bf16_from_bits(value))
    return _plain(value)


def _plain(value: Any) -> Any:
    """A launch argument from a value torch handed over (a SymInt is concrete by now)."""
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value.node.hint if hasattr(value.node, "hint") else int(value)
    if hasattr(value, "item") and not isinstance(value, torch.Tensor):
        return value.item()
    return value


@api_boundary
def op(graph: Any, *, name: str | None = None, shapes: dict[str, Any] | None = None,
       scalars: dict[str, Any] | None = None, target: str | dict[str, str] | None = None,
       backward: Any = None, backward_shapes: dict[str, Any] | None = None) -> TorchOp:
    """A graph as a torch custom op (`torch.library.custom_op`); see docs/torch.md.

    Args:
        graph: an `@hpvm.graph` function (or a graph from `hpvm.from_text` / `hpvm.load`).
        name: the op's name, "namespace::name" (default "hpvm::<graph name>", with a suffix when
            taken).
        shapes: parameter -> shape, for every Out pointer (the op allocates it; its dtype is the
            pointer's element type) and, checked at each call, for any In/InOut pointer. A shape
            is an input's name (that tensor's shape), a tuple of ints and scalar parameter names,
            or a function whose parameters name the op's values (returns an int or a tuple).
        scalars: scalar parameter -> a number (a constant) or a function of the op's values (by
            parameter name: `lambda x: x.numel()`); these are not arguments of the op.
        target: where the graph runs: a target name, or {"cpu": ..., "cuda": ...}. Default: the
            running runtime's target when it fits the tensors' device, else "cpu" for CPU tensors
            and "gpu" for CUDA tensors.
        backward: a graph computing gradients (parameters named `x`, `y`, `grad_y`, `grad_x`:
            docs/torch.md), or a function `(saved, grads) -> {input: gradient}` of dicts by
            parameter name, which may call other ops; registers autograd.
        backward_shapes: shapes of the backward graph's Out pointers (default: `grad_x` like `x`).

    Returns:
        A TorchOp: call it with the In/InOut tensors and the remaining scalars, by position or
        by parameter name; it returns the Out tensors then the graph's outputs (one: the tensor;
        none: None).

    Raises:
        LaunchError: a spec that does not fit the graph, a name torch cannot reach; at a call, a
            wrong dtype, device or shape, a non-contiguous InOut tensor, an InOut tensor that
            requires grad with grad mode on, an integer scalar out of its range, an op whose name
            a later op took over. Launch errors as for `hpvm.launch`, at the user's call.
    """
    return TorchOp(graph, name=name, shapes=shapes, scalars=scalars, target=target,
                   backward=backward, backward_shapes=backward_shapes)
