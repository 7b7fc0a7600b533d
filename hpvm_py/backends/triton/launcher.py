"""Relaunching a compiled Triton kernel: with cuLaunchKernel on parameters packed once (the own
launcher), else with Triton's launcher (`CompiledKernel[grid]`).
(docs/architecture.md, "Module notes": backends/triton/launcher.py)"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ...device.kernel_launch import ParamSlots, launch_failure
from ...device.libcuda import CUDA_ERROR_INVALID_CONTEXT, error_text, launch_kernel, make_current
from ...errors import LaunchError
from ...support import settings
from ...support.loc import Loc
from ...support.log import logger

WARP = 32  # threads per warp: Triton's launchers launch 32 x num_warps threads per program
SCRATCH_POINTERS = 2  # the trailing global_scratch and profile_scratch parameters
OVERSIZED_SHARED = 228 * 1024  # beyond it triton 3.9 launches with an extra attribute
_INT_BITS = {"i1": 8, "i8": 8, "i16": 16, "i32": 32, "i64": 64,
             "u1": 8, "u8": 8, "u16": 16, "u32": 32, "u64": 64}
_FLOAT_TYPES = {"fp16": np.float16, "fp32": np.float32, "f32": np.float32, "fp64": np.float64}
_log = logger("triton")


class Unsupported(Exception):
    """The kernel needs something the own launcher does not do (the message says what)."""


def parameters(signature: Mapping[str, Any]) -> list[tuple[int, str]]:
    """The cubin's parameters before the two scratch pointers, as (position in the kernel's
    arguments, Triton type): every argument but the constexprs, in order (an integer equal to 1
    is a constexpr of the signature too)."""
    params = []
    for position, kind in enumerate(signature.values()):
        if not isinstance(kind, str):
            raise Unsupported(f"a tuple argument ({kind})")
        if kind == "constexpr":
            continue
        if not (kind.startswith("*") or kind in _INT_BITS or kind in _FLOAT_TYPES or kind == "bf16"):
            raise Unsupported(f"an argument of type {kind}")  # tensor descriptors (tensordesc<...>)
        params.append((position, kind))
    return params


def refusal(metadata: Any) -> str | None:
    """Why the kernel of this metadata must go through Triton's launcher (None: it need not).
    The features here are the ones Triton's launchers (3.6 and 3.9) launch specially."""
    target = getattr(metadata, "target", None)
    backend = getattr(target, "backend", "cuda")
    checks = [
        (backend != "cuda", f"a {backend} kernel"),
        (getattr(metadata, "warp_size", WARP) != WARP, "warps other than 32 threads"),
        (getattr(metadata, "num_ctas", 1) != 1, "thread-block clusters (num_ctas)"),
        (bool(getattr(metadata, "launch_cooperative_grid", False)), "a cooperative launch"),
        (bool(getattr(metadata, "launch_pdl", False)), "programmatic dependent launch"),
        (bool(getattr(metadata, "global_scratch_size", 0)) or
         bool(getattr(metadata, "profile_scratch_size", 0)), "scratch memory allocated per launch"),
        (bool(getattr(metadata, "tensordesc_meta", None)), "tensor descriptors"),
        (bool(getattr(metadata, "instrumentation_mode", "")), "instrumentation"),
        (getattr(metadata, "shared", 0) > OVERSIZED_SHARED, "oversized shared memory"),
    ]
    return next((why for failed, why in checks if failed), None)


def slot_bits(kind: str, value: Any) -> int:
    """An argument of Triton type `kind` as the bits of its parameter slot (in the low bytes), as
    Triton's launchers pack it: a pointer as its 64-bit address, an integer truncated to its
    width, a float rounded to its format (bf16: the high half of the fp32, truncated)."""
    if kind.startswith("*"):
        if value is None:
            return 0
        return int(value) if isinstance(value, (int, np.integer)) else int(value.data_ptr())
    bits = _INT_BITS.get(kind)
    if bits is not None:
        return int(value) & ((1 << bits) - 1)
    if kind == "bf16":
        return slot_bits("fp32", value) >> 16
    dtype = _FLOAT_TYPES[kind]
    with np.errstate(over="ignore"):
        number = np.array(float(value), dtype=dtype)
    return int(number.view(np.dtype(f"u{number.itemsize}")))


class OwnLauncher:
    """A compiled Triton kernel launched with libcuda's cuLaunchKernel on a parameter block packed
    once; set() patches one argument's slot. The two scratch pointers stay null (their sizes are 0:
    refusal())."""

    def __init__(self, function: int, params: list[tuple[int, str]], args: Sequence[Any],
                 grid: tuple[int, int, int], num_warps: int, shared: int, ordinal: int, leaf: str,
                 loc: Loc | None, owner: Any = None):
        self.function = function
        # what holds the function's module (the CompiledKernel: triton 3.9 unloads it when freed)
        self.owner = owner
        self.kinds = dict(params)  # position -> Triton type
        self.slot_of = {position: i for i, (position, _) in enumerate(params)}
        self.params = ParamSlots(len(params) + SCRATCH_POINTERS)
        for position, kind in params:
            self.params.set(self.slot_of[position], slot_bits(kind, args[position]))
        self._gx, self._gy, self._gz = (int(n) for n in grid)
        self.grid = (self._gx, self._gy, self._gz)
        self.block = (WARP * num_warps, 1, 1)
        self._bx = self.block[0]
        self.shared = shared
        self.ordinal = ordinal  # the device whose context holds the function
        self.leaf, self.loc = leaf, loc
        self._launch = launch_kernel()
        self._address = self.params.address
        self._empty = self._gx * self._gy * self._gz == 0  # Triton launches nothing then

    def set(self, position: int, value: Any) -> None:
        """Argument `position` (of the kernel's arguments) is now `value`; a constexpr's value is
        part of the code (the caller dispatches again when it would change)."""
        slot = self.slot_of.get(position)
        if slot is not None:
            self.params.set(slot, slot_bits(self.kinds[position], value))

    def copy(self) -> "OwnLauncher":
        """The same launch on its own parameter block (set() on either leaves the other as is)."""
        twin = object.__new__(OwnLauncher)
        twin.__dict__.update(self.__dict__)  # (copy.copy costs several times more)
        twin.params = self.params.copy()
        twin._address = twin.params.address
        return twin

    def each_kernel(self, visit: Any) -> bool:
        """For a CUDA graph: the one kernel __call__ launches (none when empty)."""
        if not self._empty:
            visit(self.function, self.grid, self.block, self.shared, self._address)
        return True

    def __call__(self, stream: int) -> None:
        if self._empty:
            return
        err = self._launch(self.function, self._gx, self._gy, self._gz, self._bx, 1, 1, self.shared,
                           stream, self._address, None)
        if err:
            self._retry(err, stream)

    def _retry(self, err: int, stream: int) -> None:
        """A thread with no CUDA context yet gets the device's (as Triton's launcher does), and
        the launch is tried again; any other failure is raised."""
        if err == CUDA_ERROR_INVALID_CONTEXT and make_current(self.ordinal):
            err = self._launch(self.function, self._gx, self._gy, self._gz, self._bx, 1, 1,
                               self.shared, stream, self._address, None)
        if err:
            raise launch_failure(self.leaf, self.loc, self.grid, self.block, self.shared,
                                 error_text(err))


class TritonRunner:
    """Triton's own launcher of the compiled kernel (CompiledKernel[grid]), with the arguments
    kept for it; set() replaces one."""

    def __init__(self, runner: Callable[..., Any], args: Sequence[Any]):
        self.runner = runner
        self.args = list(args)

    def set(self, position: int, value: Any) -> None:
        self.args[position] = value

    def copy(self) -> "TritonRunner":
        return TritonRunner(self.runner, self.args)

    def __call__(self, stream: int) -> None:
        self.runner(*self.args, stream=stream)


def chosen() -> str:
    """HPVM_TRITON_LAUNCHER: "own" or "triton"."""
    value = settings.TRITON_LAUNCHER.get()
    if value not in ("own", "triton"):
        raise LaunchError(f"HPVM_TRITON_LAUNCHER={value!r}: expected own or triton")
    return value


def hooks_set() -> bool:
    """Whether Triton's launch hooks are set (a profiler's, such as Proton's): only Triton's
    launcher calls them."""
    from triton import knobs  # noqa: PLC0415 - triton is optional; its knobs exist from 3.4 on

    runtime = getattr(knobs, "runtime", None)
    hooks = [getattr(runtime, name, None) for name in ("launch_enter_hook", "launch_exit_hook")]
    # an empty HookChain (3.6, 3.9) or None: no hook
    return any(hook is not None and bool(getattr(hook, "calls", True)) for hook in hooks)


def own_launcher(compiled: Any, args: Sequence[Any], grid: tuple[int, int, int], ordinal: int,
                 leaf: str, loc: Loc | None) -> OwnLauncher:
    """The own launcher of a kernel Triton compiled and loaded (its dispatch ran), called with
    `args` (every argument, constexprs included, in the kernel's order); Unsupported when it
    needs Triton's."""
    if chosen() == "triton":
        raise Unsupported("HPVM_TRITON_LAUNCHER=triton")
    if launch_kernel() is None:
        raise Unsupported("libcuda cannot be loaded")
    if hooks_set():
        raise Unsupported("Triton's launch hooks are set")
    metadata = getattr(compiled, "metadata", None)
    if metadata is None:
        raise Unsupported("no metadata")
    why = refusal(metadata)
    if why is not None:
        raise Unsupported(why)
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, Mapping) or len(signature) != len(args):
        raise Unsupported("no signature matching the arguments")
    function = getattr(compiled, "function", None)
    if not function:
        raise Unsupported("the kernel is not loaded")
    return OwnLauncher(int(function), parameters(signature), args, grid, int(metadata.num_warps),
                       int(metadata.shared), ordinal, leaf, loc, owner=compiled)


def fast_launcher(compiled: Any, args: Sequence[Any], grid: tuple[int, int, int], ordinal: int,
                  leaf: str, loc: Loc | None) -> OwnLauncher | TritonRunner:
    """What relaunches the compiled kernel: the own launcher where it can, else Triton's."""
    runner = compiled[grid]  # Triton's launcher; it loads the kernel if the dispatch did not
    try:
        return own_launcher(compiled, args, grid, ordinal, leaf, loc)
    except Unsupported as exc:
        _log.debug("%s: relaunched through Triton's launcher (%s)", leaf, exc)
        return TritonRunner(runner, args)
