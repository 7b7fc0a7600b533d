"""Communication nodes: the library functions behind hpvm.comm's factories, and their kernels.

A collective is a `LibraryFunc` (kind + options + parameters), printed and parsed like any function
of the textual IR. The execution plan asks `compile_library` for a kernel with the LeafKernel
interface, so the executor fires it like a leaf; its `launch` builds a `Call` and runs it on the
heap (ranks on one host) or through the launcher's engine (ranks on several hosts).

Targets plug in by `register_target`; every target has `run_collective`, which runs a call where
the heap lives (host memory on CPU ranks, the rank's GPU on GPU ranks), so a graph's collectives
work the same on any target and its leaves get their buffers through the memory tracker.

A collective kernel prepares its launch like a compiled leaf, so a graph launched again with the
same buffers is replayed (rt/replay.py) without walking the plan; the prepared launch keeps its
call and the agreement of its shape (agreement.py), so a relaunch only exchanges the fingerprint.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

from ..backends.base import LeafKernel
from ..errors import CompileError, DistributedError, FrontendError
from ..frontend.decorators import unique_name
from ..ir import dfg as D
from ..ir import kernel as K
from ..ir.targets import TARGETS
from ..support.loc import Loc
from ..types import PtrType, ScalarType, f32, i32, i64, resolve_scalar, u8
from ..rt import library
from ..support import profile, stats
from . import chooser, local, quantize, ranks
from .agreement import Agreed, agreement_of, check, communicator, kept_path, run_remote
from .reduction_arith import torch_dtype
from .call import DTYPES, KINDS, OPS, Buffer, Call, check_arguments
from .moe_plan import MOE_KINDS, SLOT_LIMIT
from .gpu.runner import note_replayed, run_on_gpu

FLOAT_ONLY = ("all_reduce_rmsnorm", "moe_combine")
QUANTIZED_TYPES = ("f16", "bf16", "f32")  # what a node with quantize= takes
RMSNORM_QUANTIZE = ("fp8",)  # all_reduce_rmsnorm's output formats
RANK_LIMIT = 1 << 31  # roots are below it: a descriptor word (i64) and the GPU kernels' i32 hold them


# -- signatures --------------------------------------------------------------------------------


def _ptr(name: str, t: ScalarType, direction: str) -> list[K.Param]:
    return [K.Param(name=name, type=PtrType(t), direction=direction),
            K.Param(name=f"{name}_bytes", type=i64)]


def signature(kind: str, t: ScalarType, quantize: str | None = None) -> list[K.Param]:
    """The parameters of a collective (DESIGN.md's signatures); all_reduce_rmsnorm with quantize=
    also writes the fp8 codes and per-row scales of its output."""
    if kind in ("all_reduce", "broadcast"):
        return _ptr("buf", t, "inout")
    if kind in ("all_gather", "reduce_scatter"):
        return _ptr("src", t, "in") + _ptr("dst", t, "out")
    if kind == "moe_dispatch":
        return (_ptr("tokens", t, "in") + _ptr("expert", i32, "in") + _ptr("recv", t, "out")
                + _ptr("counts", i32, "out") + _ptr("origin", i32, "out") + _ptr("slot", i32, "out"))
    if kind == "moe_combine":
        return (_ptr("expert_out", t, "in") + _ptr("slot", i32, "in") + _ptr("gate", f32, "in")
                + _ptr("out", t, "out"))
    assert kind == "all_reduce_rmsnorm"
    params = (_ptr("x", t, "inout") + _ptr("residual", t, "inout") + _ptr("weight", t, "in")
              + [K.Param(name="hidden", type=i64)])
    if quantize:
        params += _ptr("out", u8, "out") + _ptr("scales", f32, "out")
    return params


def library_func(kind: str, dtype: Any, loc: Loc, **options: str | int | float) -> D.LibraryFunc:
    """A collective's IR function; bad arguments raise FrontendError at `loc` (the user's call)."""
    t = resolve_scalar(dtype)
    if t is None or t.name not in DTYPES:
        allowed = ", ".join(DTYPES)
        raise FrontendError(f"hpvm.comm.{kind}(): element type {dtype!r} is not supported (use one of "
                            f"{allowed})", loc, rule="collective-type")
    if kind in FLOAT_ONLY and not t.is_float:
        raise FrontendError(f"hpvm.comm.{kind}(): {t} is not a floating-point type", loc,
                            rule="collective-type")
    _check_options(kind, options, lambda msg: FrontendError(f"hpvm.comm.{kind}(): {msg}", loc,
                                                            rule="collective-options"))
    if options.get("quantize") and t.name not in QUANTIZED_TYPES:
        raise FrontendError(f"hpvm.comm.{kind}(quantize={options['quantize']!r}): element type {t} is "
                            f"not quantized (use one of {', '.join(QUANTIZED_TYPES)})", loc,
                            rule="collective-type")
    suffix = "".join(f"_{options['op']}" if k == "op" else f"_root{v}" for k, v in options.items()
                     if k in ("op", "root"))
    suffix += f"_q{options['quantize']}" if "quantize" in options else ""
    return D.LibraryFunc(name=unique_name(f"{kind}_{t.name}{suffix}"), kind=kind,
                         options={"dtype": t.name, **options},
                         params=signature(kind, t, options.get("quantize")), outputs=[], loc=loc)


def _check_options(kind: str, options: dict, error: Callable[[str], Exception]) -> None:
    expected = {"all_reduce": {"op"}, "reduce_scatter": {"op"}, "all_gather": set(),
                "broadcast": {"root"}, "all_reduce_rmsnorm": {"eps"},
                **dict.fromkeys(MOE_KINDS, {"hidden", "experts", "capacity"})}[kind]
    if kind in ("all_reduce", "all_reduce_rmsnorm") and "quantize" in options:
        expected = expected | {"quantize"}  # given only when the node quantizes
        _check_quantize(kind, options, error)
    if set(options) != expected:
        raise error(f"options {sorted(options)} do not match {sorted(expected)}")
    if kind in MOE_KINDS:
        check_moe_options(options, error)
    if "op" in options and options["op"] not in OPS:
        raise error(f"op={options['op']!r} is not one of {', '.join(OPS)}")
    root = options.get("root", 0)
    if isinstance(root, bool) or not isinstance(root, int) or not 0 <= root < RANK_LIMIT:
        raise error(f"root={root!r} must be a rank number (an int in [0, {RANK_LIMIT}))")
    eps = options.get("eps", 1.0)
    # (an int beyond a float's range passed, and failed as float(eps) at the launch: internal)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps > 0 or \
            (isinstance(eps, int) and eps > sys.float_info.max):
        raise error(f"eps={eps!r} must be a positive number")


def _check_quantize(kind: str, options: dict, error: Callable[[str], Exception]) -> None:
    mode = options["quantize"]
    allowed = quantize.MODES if kind == "all_reduce" else RMSNORM_QUANTIZE
    if mode not in allowed:
        raise error(f"quantize={mode!r} is not one of {', '.join(allowed)} (or None: not quantized)")
    if options.get("op", "sum") != "sum":
        raise error(f"quantize={mode!r} needs op='sum' (the quantized all-reduce is a sum), not "
                    f"op={options['op']!r}")
def check_moe_options(options: dict, error: Callable[[str], Exception]) -> None:
    """hidden, experts and capacity: positive ints, the slots within an i32."""
    for name in ("hidden", "experts", "capacity"):
        value = options[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise error(f"{name}={value!r} must be a positive int")
    if options["experts"] * options["capacity"] >= SLOT_LIMIT or options["hidden"] >= SLOT_LIMIT:
        raise error(f"experts x capacity = {options['experts'] * options['capacity']} and hidden = "
                    f"{options['hidden']} must each be below 2**31 (slots are i32)")


# -- kernels -----------------------------------------------------------------------------------

# target -> fn(world, call, agreed): how a target runs a call (host memory for cpu and python);
# `agreed`: the agreement a prepared launch kept (or None); returns the one it used (or None)
Runner = Callable[[Any, Call, "Agreed | None"], "Agreed | None"]
_runners: dict[str, Runner] = {}


def register_target(target: str, runner: Runner) -> None:
    _runners[target] = runner


def compile_library(func: D.LibraryFunc, node: D.Node, target: str, bound: list[str | None],
                    replicated: bool) -> "CollectiveKernel":
    """The kernel of a communication node; CompileError for what cannot run."""
    if func.kind not in KINDS:
        raise CompileError(f"node {node.name}: library kind {func.kind!r} is unknown (known: "
                           f"{', '.join(KINDS)})", node.loc, rule="library-kind")
    options = dict(func.options)
    dtype = resolve_scalar(str(options.pop("dtype", "")))

    def error(message: str) -> CompileError:
        return CompileError(f"node {node.name} ({func.kind}): {message}", node.loc, rule="library-kind")

    if dtype is None or dtype.name not in DTYPES:
        raise error(f"dtype {func.options.get('dtype')!r} is not one of {', '.join(DTYPES)}")
    _check_options(func.kind, options, error)
    if options.get("quantize") and dtype.name not in QUANTIZED_TYPES:
        raise error(f"dtype {dtype} is not quantized (quantize= takes {', '.join(QUANTIZED_TYPES)})")
    if func.params != signature(func.kind, dtype, options.get("quantize")) or func.outputs:
        raise error("its parameters do not match the collective's signature")
    if node.dims or replicated:
        raise CompileError(f"communication node {node.name} is replicated; a collective runs once "
                           "per rank: create it without a grid, outside replicated graphs", node.loc,
                           rule="collective-once")
    runner = _runners.get(target)
    if runner is None:
        raise CompileError(f"communication node {node.name} ({func.kind}) is not available on the "
                           f"{target} target yet", node.loc, rule="library-target")
    return CollectiveKernel(func, dtype, options, node, bound, runner)


class CollectiveKernel(LeafKernel):
    """A communication node, launched by the executor like a leaf kernel (one instance)."""

    prepares = True

    def __init__(self, func: D.LibraryFunc, dtype: ScalarType, options: dict, node: D.Node,
                 bound: list[str | None], runner: Runner):
        self.func, self.dtype, self.options, self.node = func, dtype, options, node
        self.bound = bound
        self.runner = runner
        self._tensors: dict[tuple[int, str], tuple[Any, Any]] = {}  # (id(host array), type) -> (array, view)

    @property
    def device(self) -> str:
        """Where the executor hands this node its buffers: the heap's device (the host heap on
        CPU ranks, whatever the target; the rank's GPU on GPU ranks)."""
        world = ranks.current()
        return "host" if world is None else world.device

    def launch(self, args: list[Any], outputs: list[Any], extents: list[tuple[int, ...]]) -> None:
        self.runner(self._world(), self._call(args), None)

    def prepare(self, args: list[Any], outputs: list[Any], extents: list[tuple[int, ...]]
                ) -> "PreparedCollective":
        return PreparedCollective(self, list(args))

    def _world(self) -> ranks.World:
        world = ranks.current()
        if world is None:
            raise DistributedError(f"communication node {self.node.name} needs the ranks: call "
                                   "hpvm.distributed.init() before launching it", self.node.loc,
                                   rule="distributed-init")
        return world

    def _tensor(self, arg: Any, elem: ScalarType) -> Any:
        """A flat torch view of a buffer argument of element type `elem`: the device tensor
        itself, or a view of a host buffer's NumPy view (kept while the same array comes back)."""
        import torch

        if not arg.on_host:  # device memory: the tracker's tensor (the user's own for heap buffers)
            flat = arg.obj.reshape(-1)
            want = torch_dtype(elem)
            return flat if flat.dtype == want else flat.view(torch.uint8).view(want)
        array = arg.host_array()
        kept = self._tensors.get((id(array), elem.name))
        if kept is not None and kept[0] is array:
            return kept[1]
        tensor = torch.from_numpy(array)
        if elem.name == "bf16":  # NumPy holds bf16 as uint16 bits
            tensor = tensor.view(torch_dtype(elem))
        if len(self._tensors) > 64:
            self._tensors.clear()
        self._tensors[(id(array), elem.name)] = (array, tensor)
        return tensor

    def _call(self, args: list[Any]) -> Call:
        params = self.func.params
        buffers = []
        for i, p in enumerate(params):
            if isinstance(p.type, PtrType):
                arg = args[i]
                elem = p.type.elem
                tensor = self._tensor(arg, elem)
                buffers.append(Buffer(param=p.name, bound=self.bound[i], tensor=tensor,
                                      address=arg.address, nbytes=arg.nbytes, size=int(args[i + 1]),
                                      elem=None if elem == self.dtype else elem))
        hidden = next((int(a) for p, a in zip(params, args) if p.name == "hidden"),
                      int(self.options.get("hidden", 0)))
        return Call(kind=self.func.kind, dtype=self.dtype, node=self.node.name, loc=self.node.loc,
                    buffers=buffers, op=str(self.options.get("op", "sum")),
                    root=int(self.options.get("root", 0)), hidden=hidden,
                    eps=float(self.options.get("eps", 0.0)),
                    quantize=str(self.options.get("quantize") or ""),
                    experts=int(self.options.get("experts", 0)),
                    capacity=int(self.options.get("capacity", 0)))


class PreparedCollective:
    """A communication node's launch, packed (backends/base.py's PreparedLaunch): its Call is made
    once, and the agreement of its shape is kept between runs; a replay that changes a size
    (set_uniform) makes both again."""

    reusable = True
    copyable = False  # its agreement is of its buffers' heap offsets: other buffers agree anew

    def __init__(self, kernel: CollectiveKernel, args: list[Any]):
        self.kernel, self.args = kernel, args
        self._call: Call | None = None
        self._agreed: Agreed | None = None
        self._timeout: float | None = None

    def set_uniform(self, i: int, value: Any) -> None:
        if type(value) is not type(self.args[i]) or value != self.args[i]:
            self.args[i] = value
            self._call = self._agreed = None

    def run(self) -> None:
        kernel = self.kernel
        call = self._call
        if call is None:
            call = self._call = kernel._call(self.args)
        world = kernel._world()
        self._agreed = kernel.runner(world, call, self._agreed)
        self._timeout = world.timeout  # what its kernel was launched (or captured) with

    @property
    def capturable(self) -> bool:
        """Its launch may go into a replayed launch's CUDA graph (rt/replay.py), or a graph that
        holds it may be replayed: GPU ranks of one host that agreed on the call, in the world and
        with the timeout of its last run (its kernel keeps its epochs on the device, and checks
        the peers' fingerprints itself)."""
        agreed, world = self._agreed, ranks.current()
        return agreed is not None and agreed.mine is None and world is not None and \
            agreed.world is world and world.timeout == self._timeout and \
            world.device.startswith("cuda") and world.single_host

    def replayed(self) -> None:
        """Its kernel ran in a replayed CUDA graph: `wait` checks what it found, as after run()."""
        assert self._agreed is not None and self._call is not None
        note_replayed(self._agreed.world, self._call, self._agreed)


_host_lock = threading.Lock()  # one collective at a time per rank: ranks must agree on the order


def run_on_host(world: ranks.World, call: Call, agreed: Agreed | None = None) -> Agreed | None:
    """cpu and python targets: the heap path on one host, the engine across hosts."""
    with _host_lock:
        return _run_on_host(world, call, agreed)


def _run_on_host(world: ranks.World, call: Call, agreed: Agreed | None) -> Agreed | None:
    path = kept_path(agreed, world) or chooser.choose(world.single_host, call.kind,
                                                      call.buffers[0].size, call.quantize)
    stats.bump_one(f"collectives_{path}")
    if path == "remote":
        run_remote(world, call, check_arguments(call, world.size))
        return None
    agreed = agreement_of(world, call, path, entry=agreed)
    comm = communicator(world)
    staged = local.stage(comm, call, path, agreed.state) if agreed.mine is None else None
    check(comm, call, agreed)
    local.run(comm, call, path, agreed.state, staged)
    return agreed


def run_collective(world: ranks.World, call: Call, agreed: Agreed | None = None) -> Agreed | None:
    """Where the heap lives decides, whatever the target of the graph: the host algorithms on
    CPU ranks, the GPU kernels (gpu/runner.py) on GPU ranks."""
    if profile.on:
        return _profiled(world, call, agreed)
    if world.device == "host":
        return run_on_host(world, call, agreed)
    return run_on_gpu(world, call, agreed)


def _profiled(world: ranks.World, call: Call, agreed: Agreed | None) -> Agreed | None:
    """A collective inside `hpvm.profile()`: a "collective" event on this rank (and its GPU time
    on a GPU rank); the algorithm that ran is in its args."""
    before = stats.snapshot()
    info: dict[str, Any] = {"kind": call.kind, "node": call.node, "dtype": str(call.dtype),
                            "bytes": call.buffers[0].size, "rank": world.rank, "ranks": world.size}
    with profile.span("collective", f"{call.kind} {call.node}", args=info):
        if world.device == "host":
            agreed = run_on_host(world, call, agreed)
        else:
            timer = profile.gpu_begin(world.device)
            agreed = run_on_gpu(world, call, agreed)
            profile.gpu_end(timer, "gpu_kernel", f"{call.kind} {call.node}", world.device)
        after = stats.snapshot()
        info["path"] = ",".join(k.removeprefix("collectives_") for k in after
                                if k.startswith("collectives_") and after[k] != before.get(k, 0))
    return agreed


for _target in TARGETS:
    register_target(_target, run_collective)
library.register(compile_library)
