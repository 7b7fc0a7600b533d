"""TritonKernel: packs a launch's arguments for the generated kernel into a TritonLaunch
(prepared.py: it launches one program per block of leaf instances, brings scalar outputs back and
reports recorded out-of-bounds accesses)."""
from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np

from ...errors import CompileError, ExecutionError, HPVMError, LaunchError
from ...ir import kernel as K
from ...ir import semantics as S
from ...rt import remote
from ...types import PtrType, ScalarType, bf16, f32
from ..base import BufferArg, NodeContext, instance_counts
from ..cuda import gpu_device, typed_tensor
from ..cuda.devices import torch_dtype
from ..cuda.outputs import DeviceOutputs
from .codegen import MAX_GROUP_LANES, SUGGESTION, TritonSource
from .loader import load_kernel
from .prepared import TritonLaunch, scalar_bits
from .scratch import size_of

MAX_BLOCK = 1024  # lanes per program for leaves without barriers
# At least a warp of lanes: Triton 3.6 failed to compile some kernels on 1-lane blocks (its
# TritonGPUCoalesce pass), and lanes past the grid are masked off anyway.
MIN_BLOCK = 32


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class TritonKernel:
    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext, make_source: Callable[[bool], TritonSource]):
        self.leaf = leaf
        self.ctx = ctx
        self._make_source = make_source
        self.source = make_source(False)  # compile errors surface when the graph is compiled
        self._variants: dict[bool, tuple[TritonSource, Any]] = {}
        self._lock = threading.Lock()

    def _variant(self, fixed_grid: bool) -> tuple[TritonSource, Any]:
        """The kernel for any grid, or the one whose leaf extents are constants (small grids)."""
        with self._lock:
            found = self._variants.get(fixed_grid)
            if found is None:
                source = self._make_source(True) if fixed_grid else self.source
                found = (source, load_kernel(source.text, source.digest, source.kernel))
                self._variants[fixed_grid] = found
            return found

    def launch(self, args: list[Any], outputs: list[np.ndarray | None],
               extents: list[tuple[int, ...]]) -> None:
        self.prepare(args, outputs, extents).run()

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> TritonLaunch:
        """Everything a launch needs, packed; run() may be called again with patched scalars."""
        import torch

        P, L = instance_counts(extents)
        if P * L == 0:
            return TritonLaunch(self, None, None, [], {}, (0, 1, 1), self._outputs([]), None, [], {}, {})
        source, kernel = self._variant(L <= MAX_BLOCK)
        if source.grouped:
            block, blocks = max(MIN_BLOCK, _next_pow2(L)), 1
            if block > MAX_GROUP_LANES:
                raise LaunchError(f"{self.leaf.name} has barrier() and {L} instances per parent instance; "
                                  f"target 'gpu' runs them in one program of at most {MAX_GROUP_LANES} "
                                  f"lanes: {SUGGESTION}", self.leaf.loc)
        else:
            block = min(MAX_BLOCK, max(MIN_BLOCK, _next_pow2(L)))
            blocks = -(-L // block)
        device = self._device(args)
        call: list[Any] = []
        uniforms: dict[int, int] = {}  # param -> its position in call
        values: dict[int, int] = {}  # per-parent / per-instance param -> its position in call
        for i, (p, mode, arg) in enumerate(zip(self.leaf.params, self.ctx.input_modes, args)):
            if mode == "buffer":
                assert isinstance(arg, BufferArg) and isinstance(p.type, PtrType)
                call.append(typed_tensor(arg.obj, p.type.elem))
                if source.checked:
                    call.append(self._limit(i, args) // p.type.elem.nbytes)
            elif mode == "uniform":
                assert isinstance(p.type, ScalarType)
                uniforms[i] = len(call)
                call.append(scalar_bits(arg, p.type))
            else:
                assert isinstance(p.type, ScalarType)
                values[i] = len(call)
                call.append(self._values(arg, p.type, device))
        results = []
        for out, mode, host in zip(self.leaf.outputs, self.ctx.output_modes, outputs):
            if mode != "unused" and host is not None:
                assert isinstance(out.type, ScalarType)
                dev = torch.zeros(host.size, dtype=torch_dtype(out.type), device=device)
                results.append((host, dev))
                call.append(dev)
        scratch = []
        for area in source.scratch:  # zeroed before each run, one slice per parent instance
            nbytes = size_of(area, self.leaf, args, extents, self.ctx.level_dims)
            stride = max(1, -(-nbytes // area.elem.nbytes))
            scratch.append(torch.zeros(P * stride, dtype=torch_dtype(area.elem), device=device))
            call += [scratch[-1], stride]
            if source.checked:
                call.append(nbytes // area.elem.nbytes)
        for level, dims in zip(extents, self.ctx.level_dims):
            call += [int(n) for n in level[:dims]]
        if "HEAP_BASES" in source.arguments:
            heap = remote.for_launch(self.leaf, args, device)
            call += [heap.bases, heap.rank, heap.world_size]
        call += [blocks, L]
        err = None
        if source.checked:
            err = torch.zeros(3, dtype=torch.int64, device=device)
            call.append(err)
        options = dict(BLOCK=block, num_warps=max(1, min(8, block // 256)), enable_fp_fusion=False)
        return TritonLaunch(self, source, kernel, call, options, (P * blocks, 1, 1),
                            self._outputs(results), err, scratch, uniforms, values)

    def _outputs(self, pairs: list[tuple[np.ndarray, Any]]) -> DeviceOutputs:
        return DeviceOutputs(pairs, self.leaf.name, self.leaf.loc)

    def _limit(self, index: int, args: list[Any]) -> int:
        """Bytes that pointer parameter `index` may reach (checked mode): the size argument after
        it when that is a uniform integer, never more than the memory object's real size, never
        negative (the rule of the cpu target's checked kernels)."""
        nbytes = args[index].nbytes
        params, modes = self.leaf.params, self.ctx.input_modes
        if index + 1 < len(params) and modes[index + 1] == "uniform":
            t = params[index + 1].type
            if isinstance(t, ScalarType) and t.is_int and not t.is_bool:
                return max(0, min(int(args[index + 1]), nbytes))
        return nbytes

    @staticmethod
    def _device(args: list[Any]) -> Any:
        """The GPU of the buffers; a leaf without any runs on the current one (the executor
        selects the node's GPU)."""
        for arg in args:
            if isinstance(arg, BufferArg) and not isinstance(arg.obj, np.ndarray):
                return arg.obj.device
        if gpu_device().startswith("cuda"):
            import torch

            return torch.device("cuda", torch.cuda.current_device())
        return "cpu"

    @staticmethod
    def _values(arg: Any, t: ScalarType, device: Any) -> Any:
        """Per-parent or per-instance scalars as a device array of their register values."""
        import torch

        values = np.asarray(arg)
        if t == bf16:
            values = S.bf16_from_bits(values) if values.dtype == np.uint16 else values.astype(np.float32)
            t = f32
        host = torch.from_numpy(np.ascontiguousarray(values.astype(t.numpy_dtype)).reshape(-1))
        return host.to(device)

    def _failure(self, exc: Exception) -> HPVMError:
        text = str(exc).strip().splitlines()
        detail = text[-1] if text else type(exc).__name__
        if "interpret" in type(exc).__module__ or type(exc).__name__ == "InterpreterError":
            return ExecutionError(f"{self.leaf.name}: the Triton interpreter failed: {detail}",
                                  self.leaf.loc)
        return CompileError(f"{self.leaf.name}: Triton could not compile the generated kernel "
                            f"({type(exc).__name__}: {detail}); {SUGGESTION}", self.leaf.loc)
