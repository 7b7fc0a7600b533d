"""TritonKernel: packs a launch's arguments for the generated kernel into a TritonLaunch
(prepared.py: it launches one program per block of leaf instances, brings scalar outputs back and
reports recorded out-of-bounds accesses)."""
from __future__ import annotations

import functools
import itertools
import math
import threading
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...errors import CompileError, ExecutionError, HPVMError, LaunchError
from ...ir import kernel as K
from ...ir import semantics as S
from ...ir.context import NodeContext, instance_counts
from ...passes.bounds import BoundsProof
from ...support import stats
from .. import heapview
from ...types import PtrType, ScalarType, bf16, f32
from ..base import MAX_SCRATCH_BYTES, BufferArg, LeafKernel, scratch_past_limit, shares_memory
from ...device import gpu_device, typed_tensor
from ...device.devices import torch_dtype
from ...device.outputs import DeviceOutputs, error_word
from . import autotune
from .codegen import MAX_GROUP_LANES, SUGGESTION, TritonSource, kernel_name as _kernel_name
from .dotmatch import DotLoop
from .host_math import interpreting
from .loader import load_kernel
from .prepared import Layout, TritonLaunch, scalar_bits
from .privatise import MAX_PRIVATE_ELEMENTS
from .quads import QUAD, quads_fit
from .scratch import size_of

MAX_BLOCK = 1024  # lanes per program for leaves without barriers
# At least a warp of lanes: Triton 3.6 failed to compile some kernels on 1-lane blocks (its
# TritonGPUCoalesce pass), and lanes past the grid are masked off anyway.
MIN_BLOCK = 32
# CUDA's grid: at most 2**31 - 1 programs along x, 65535 along y and z
GRID_LIMITS = (2**31 - 1, 65535, 65535)


@dataclass(frozen=True)
class DotConfig:
    """Block shape and schedule of the tl.dot kernels (dottiles.py)."""

    bm: int
    bn: int
    bk: int
    group: int  # block rows per group of programs (L2 reuse of B)
    warps: int
    stages: int



@dataclass(frozen=True)
class PrivateConfig:
    """Launches with privatised counts (privatise.py): blocks of up to `block` lanes in `warps`
    warps, ITERS blocks per program so that a launch has about `programs` programs (each merges
    its counts once: fewer programs than blocks, yet enough to fill every multiprocessor)."""

    block: int
    warps: int
    programs: int


# Large blocks keep many loads in flight between tl.histogram's barriers (docs/performance.md).
GPU_PRIVATE = PrivateConfig(block=4096, warps=8, programs=4224)
# Largest lane position a privatised kernel may compute in 32-bit arithmetic (i32's maximum).
LANES32_LIMIT = 2**31 - 1
INTERPRETER_PRIVATE = PrivateConfig(block=1024, warps=1, programs=4)


@dataclass(frozen=True)
class TileConfig:
    """Programs over tiles of the combined grid (gridtiles.py): for leaves with fewer than `lanes`
    instances per parent instance, tiles of `lanes` lanes (x first) in `warps` warps."""

    lanes: int
    warps: int


GRID_TILES = TileConfig(lanes=512, warps=4)


@dataclass(frozen=True)
class SpreadConfig:
    """Programs with spread reduction loops (spread.py): one per parent instance, of `lanes`
    lanes (chunks of that many consecutive iterations) in `warps` warps; a launch of fewer than
    `programs` / 2 parent instances splits a splittable loop over programs // P programs each."""

    lanes: int
    warps: int
    programs: int


# The interpreter takes fewer lanes: it combines them one call of the combiner at a time; it
# splits over 3 programs so that the test suite runs the split form (programs without a chunk
# included).
GPU_SPREAD = SpreadConfig(lanes=1024, warps=4, programs=264)  # 2 per multiprocessor of an H100
SPREAD_LANES = 1 << 18  # lanes a spread launch aims at over all its programs (an H100 runs 270K)
INTERPRETER_SPREAD = SpreadConfig(lanes=64, warps=1, programs=3)

# Chosen on the H100 (docs/performance.md); the interpreter takes tl.dot's smallest blocks.
GPU_DOT = DotConfig(bm=128, bn=128, bk=32, group=8, warps=8, stages=3)
INTERPRETER_DOT = DotConfig(bm=16, bn=16, bk=16, group=2, warps=1, stages=1)
# Smaller blocks for outputs that GPU_DOT's blocks do not spread over the multiprocessors: the
# tensor-parallel MLP's 256 x 2048 output is 32 blocks of 128 x 128 for the 132 multiprocessors of
# an H100/H200, which left three quarters of the GPU idle (benchmarks/RESULTS.md).
SMALLER_DOTS = (DotConfig(bm=128, bn=64, bk=32, group=8, warps=4, stages=3),
                DotConfig(bm=64, bn=64, bk=32, group=8, warps=4, stages=3),
                DotConfig(bm=64, bn=32, bk=32, group=8, warps=4, stages=3))
# Tried by the autotuner only: IEEE fp32 tl.dot runs on FMA units, where more programs per
# multiprocessor hide latency better than larger blocks. The HPVM suite's sgemm (1024 x 1056 x
# 992, one H100): 0.089 ms in 64 x 32 (2 warps), 0.140 in dot_config's 128 x 64, cuBLAS 0.096.
# With HPVM_DOT_PRECISION=tf32x3, examples/sgemm.py at 4096^3 takes 2.57 ms in 256 x 64 (8 warps)
# and 3.0 to 8.0 in the others (cuBLAS fp32: 2.65; benchmarks/gpu/dot_blocks.py --parboil 4096).
# 32 x 32 in 2 warps: outputs of a few hundred rows with a long k (a tensor-parallel matmul's
# 256 x 1024 from k = 2048) in twice as many programs as 64 x 32.
TUNED_DOTS = SMALLER_DOTS + (DotConfig(bm=64, bn=32, bk=32, group=8, warps=2, stages=3),
                             DotConfig(bm=256, bn=64, bk=32, group=8, warps=8, stages=3),
                             DotConfig(bm=32, bn=32, bk=32, group=8, warps=2, stages=3))


def dot_config(rows: int, cols: int, multiprocessors: int) -> DotConfig:
    """The largest block shape (GPU_DOT first) whose blocks of a rows x cols output give every
    multiprocessor one (nine in ten is enough), else the smallest."""
    for config in (GPU_DOT,) + SMALLER_DOTS:
        if -(-rows // config.bm) * -(-cols // config.bn) * 10 >= multiprocessors * 9:
            return config
    return SMALLER_DOTS[-1]


def on_gpu() -> bool:
    """Kernels run on a real GPU (not Triton's interpreter): timing them means something."""
    return not interpreting()


def _next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


class TritonKernel(LeafKernel):
    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext,
                 make_source: Callable[[bool, bool, bool, bool], TritonSource]):
        self.leaf = leaf
        self.ctx = ctx
        self._make_source = make_source
        # compile errors surface when the graph is compiled
        self.source = make_source(False, True, False, False)
        self._variants: dict[tuple[bool, bool, bool, bool], tuple[TritonSource, Any]] = {}
        # the bounds proof of the leaf as the `rows` variant runs it (rowguard.py), if it has one
        guard = self.source.row_guard
        self._row_proof = None if guard is None else BoundsProof(guard, ctx)
        # and of the quads variant, which also loads each group's centre, where the rows proof
        # does not cover those (quads.py)
        centres = self.source.quad_proof
        self._quad_proof = None if centres is None else BoundsProof(centres, ctx)
        self._shapes: dict[tuple[str, str, str, str], Any] = {}  # tuned block shapes (or DotConfigs)
        self._lock = threading.Lock()

    def _variant(self, fixed_grid: bool, optimised: bool, rows: bool = False,
                 quads: bool = False) -> tuple[TritonSource, Any]:
        """The kernel for any grid, or the one whose leaf extents are constants (small grids);
        the optimised kernel (tl.dot, privatised counts, grid tiles, `rows`: a trailing guard's
        loads masked by its row conjuncts, `quads`: and its neighbouring loads served from quads
        of lanes), or the literal translation."""
        can_optimise = self.source.dot is not None or bool(self.source.private) or self.source.tiles
        rows = rows and optimised and can_optimise
        key = (fixed_grid, optimised and can_optimise, rows, quads and rows)
        with self._lock:
            found = self._variants.get(key)
            if found is None:
                first = key == (False, can_optimise, False, False)
                source = self.source if first else self._make_source(*key)
                try:
                    found = (source, load_kernel(source.text, source.digest, source.kernel))
                except SyntaxError as exc:  # Python's limits: 100 indentation levels, 20 nested loops
                    raise self._failure(exc) from None
                self._variants[key] = found
            return found

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> TritonLaunch:
        """Everything a launch needs, packed; run() may be called again with patched scalars."""
        import torch

        P, L = instance_counts(extents)
        if P * L == 0:
            return TritonLaunch(self, None, None, [], {}, (0, 1, 1), self._outputs([]), None, [], {}, {}, 0)
        source, kernel = self._variant(L <= MAX_BLOCK, optimised=True)
        counts = self._private_counts(source, args)
        if (source.dot is not None and not _dot_fits(source.dot, extents)) or \
                any(n > MAX_PRIVATE_ELEMENTS for n in counts.values()) or \
                (counts and self._counted_buffer_shared(source, args)) or \
                (source.tiles and not _tiles_fit(extents, L)):
            source, kernel = self._variant(L <= MAX_BLOCK, optimised=False)
        else:
            rows, quads = self.variant(args, extents) or (False, False)
            if rows:
                source, kernel = self._variant(L <= MAX_BLOCK, optimised=True, rows=True, quads=quads)
                stats.bump_one("row_guard_launches")
                if quads:
                    stats.bump_one("quad_launches")
        layout = self._layout(source, extents, P, L, counts)
        self._check_grid(layout.grid, P)
        device = self._device(args)
        call: list[Any] = []
        uniforms: dict[int, int] = {}  # param -> its position in call
        values: dict[int, int] = {}  # per-parent / per-instance param -> its position in call
        buffers: dict[int, int] = {}  # pointer param -> its position in call
        for i, (p, mode, arg) in enumerate(zip(self.leaf.params, self.ctx.input_modes, args)):
            if mode == "buffer":
                assert isinstance(arg, BufferArg) and isinstance(p.type, PtrType)
                buffers[i] = len(call)
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
        sizes = [size_of(area, self.leaf, args, extents, self.ctx.level_dims) for area in source.scratch]
        for area, total in zip(source.scratch, itertools.accumulate(sizes)):
            if total > MAX_SCRATCH_BYTES:  # as on the other targets
                raise scratch_past_limit(self.leaf, area.loc)
        for area, nbytes in zip(source.scratch, sizes):  # zeroed, one slice per parent instance
            stride = max(1, -(-nbytes // area.elem.nbytes))
            try:
                scratch.append(torch.zeros(P * stride, dtype=torch_dtype(area.elem), device=device))
            except RuntimeError:  # out of memory (torch.OutOfMemoryError is one) or beyond int64
                raise ExecutionError(f"{K.shown_name(self.leaf)}: could not allocate "
                                     f"{P * stride * area.elem.nbytes} bytes of malloc scratch",
                                     area.loc) from None
            call += [scratch[-1], stride]
            if source.checked:
                call.append(nbytes // area.elem.nbytes)
        for level, dims in zip(extents, self.ctx.level_dims):
            call += [int(n) for n in level[:dims]]
        heap = "HEAP_BASES" in source.arguments
        if heap:
            heap = heapview.for_launch(self.leaf, args, device)
            call += [heap.bases, heap.rank, heap.world_size]
        blocks_at = len(call)
        call += [layout.blocks, L]
        err = None
        if source.checked:
            err = error_word(3, torch.device(device))
            call.append(err)
        if source.split_words:
            call.append(_split_area(source.split_words, layout.options["SPLIT"], P, device))
        launch = TritonLaunch(self, source, kernel, call, layout.options, layout.grid,
                              self._outputs(results), err, scratch, uniforms, values, blocks_at,
                              buffers, heap)
        tunable = "tiles" if source.tiles else "dot" if source.dot is not None \
            else "plain" if not (source.private or source.grouped) else None
        least = autotune.MIN_DOT_OUTPUTS if tunable == "dot" else autotune.MIN_INSTANCES
        if tunable and P * L >= least and self._repeatable and autotune.enabled() and on_gpu():
            shape = self._tuned(source, tunable, device, extents, P, L, counts, args, launch)
            if shape is not None:
                launch = launch.relaid(self._layout(source, extents, P, L, counts, shape))
        return launch

    def _tuned(self, source: TritonSource, tunable: str, device: Any, extents: list[tuple[int, ...]],
               P: int, L: int, counts: dict[str, int], args: list[Any],
               launch: TritonLaunch) -> "autotune.Shape | DotConfig | None":
        """The launch's tuned block shape (autotune.py; a tl.dot kernel's DotConfig), or None to
        keep the default; remembered per size class, so that a relaunch asks a dict."""
        shapes: list[Any]
        if tunable == "dot":  # its class: the output's rows and columns, each to a power of two
            rows, cols = _dot_extents(source.dot, extents)
            tunable = f"dot {rows.bit_length()}x{cols.bit_length()}"
            shapes = list(dict.fromkeys((dot_config(rows, cols, autotune.multiprocessors()), GPU_DOT)
                                        + TUNED_DOTS))
        else:
            wanted = GRID_TILES.lanes * 2 if source.tiles else max(MIN_BLOCK, _next_pow2(L))
            shapes = autotune.candidates(min(wanted, MAX_BLOCK), tiles=source.tiles)
        known = (source.digest, tunable, str(device), autotune.size_class(P, L))
        shape = self._shapes.get(known)
        if shape is not None or not autotune.repeatable(self.leaf, args):
            return shape
        if not shapes:
            return None  # programs of fewer lanes than any shape tried: the default fits them
        key = autotune.tuning_key(source.digest, tunable, autotune.device_name(device), P, L)
        # InOut buffers: a run reads what it writes, so the tuning runs go to copies, put back
        inout = [(pos, i) for i, pos in launch.buffers.items() if self.leaf.params[i].direction == "inout"]
        try:
            copies = []
            for pos, i in inout:
                arg = launch.call[pos]
                original = typed_tensor(arg.obj, self.leaf.params[i].type.elem) \
                    if isinstance(arg, BufferArg) else arg
                copies.append((pos, original, original.clone()))
        except (MemoryError, RuntimeError):  # no room for the copies (torch's out-of-memory error)
            return None

        def timed(s: Any) -> float:
            trial = launch.relaid(self._layout(source, extents, P, L, counts, s))
            for pos, _, copy in copies:
                trial.call[pos] = copy
            return autotune.time_launch(trial, lambda: [copy.copy_(original)
                                                        for _, original, copy in copies])

        shape = autotune.choose(key, shapes, timed, self.leaf.name)
        self._shapes[known] = shape
        return shape

    def variant(self, args: list[Any], extents: list[tuple[int, ...]]) -> tuple[bool, bool] | None:
        """For a leaf with a row guard: whether a launch's loads may be masked by its row
        conjuncts (every access stays in bounds with the x conjuncts dropped: the loads the
        `rows` variant makes on lanes that fail them, rowguard.py), and whether its neighbouring
        loads may come from quads as well (quads.py). prepare() packs that variant, so launches
        of other variants must not share its prepared launch."""
        if self._row_proof is None:
            return None
        rows = self._row_proof.holds(args, extents)
        quads = rows and bool(self.source.quad_groups) and quads_fit(extents, self.ctx.level_dims) \
            and (self._quad_proof is None or self._quad_proof.holds(args, extents))
        return rows, quads

    @functools.cached_property
    def _repeatable(self) -> bool:
        return autotune.repeatable_leaf(self.leaf)

    def _layout(self, source: TritonSource, extents: list[tuple[int, ...]], P: int, L: int,
                counts: dict[str, int], shape: "autotune.Shape | DotConfig | None" = None) -> Layout:
        """Programs, lanes and warps of a launch: the kernel's layout (tl.dot blocks, grid tiles,
        one program per parent, privatised counts, or blocks of lanes); `shape` overrides the
        tl.dot blocks, or the lanes and warps (and a grid tile's width) of the defaults of grid
        tiles and blocks of lanes (autotune.py)."""
        # no FP fusion (products rounded once, as on the other targets), and libdevice without its
        # flush of subnormals, which Triton turns on by default: sin(1e-45) was 0, floor(-1e-45)
        # -0.0 and x % y of a subnormal y NaN on a GPU (tests/test_mathfns_adversarial.py)
        options: dict[str, Any] = dict(enable_fp_fusion=False, enable_reflect_ftz=False)
        combined = _combined(extents)
        if source.dot is not None:
            rows, cols = _dot_extents(source.dot, extents)
            dot = shape if isinstance(shape, DotConfig) else INTERPRETER_DOT if interpreting() \
                else dot_config(rows, cols, autotune.multiprocessors())
            # fused multiply-adds inside tl.dot (without them its products are rounded twice)
            options.update(BLOCK=dot.bm * dot.bn, BM=dot.bm, BN=dot.bn, BK=dot.bk, GROUP=dot.group,
                           num_warps=dot.warps, num_stages=dot.stages, enable_fp_fusion=True)
            return Layout(options, (-(-rows // dot.bm) * -(-cols // dot.bn), 1, 1), 1)
        if source.tiles:
            lanes, warps = (shape.lanes, shape.warps) if shape else (GRID_TILES.lanes, GRID_TILES.warps)
            tx = min(_next_pow2(combined[0]), lanes, (shape.width if shape else 0) or lanes)
            ty = min(_next_pow2(combined[1]), lanes // tx)
            block = max(MIN_BLOCK, tx * ty)
            tx = block // ty
            if source.quads:  # a quad's four lanes in one thread, or its parts go through shared memory
                warps = max(1, min(warps, block // (32 * QUAD)))
            options.update(BLOCK=block, TX=tx, TY=ty, num_warps=warps)
            return Layout(options, (-(-combined[0] // tx), -(-combined[1] // ty), combined[2]), 1)
        if source.grouped:
            block = max(MIN_BLOCK, _next_pow2(L))
            if block > MAX_GROUP_LANES:
                raise LaunchError(f"{K.shown_name(self.leaf)} has barrier() and {L} instances per parent "
                                  "instance; "
                                  f"target 'gpu' runs them in one program of at most {MAX_GROUP_LANES} "
                                  f"lanes: {SUGGESTION}", self.leaf.loc)
            options.update(BLOCK=block, num_warps=max(1, min(8, block // 256)))
            return Layout(options, (P, 1, 1), 1)
        if source.private:  # ITERS blocks per program: counts merged once per program
            private = GPU_PRIVATE if not interpreting() else INTERPRETER_PRIVATE
            block = min(private.block, max(MIN_BLOCK, _next_pow2(L)))
            blocks = -(-L // block)
            iters = max(1, min(blocks, P * blocks // private.programs))
            blocks = -(-blocks // iters)
            # every lane's position (parent * L + lane, below programs * ITERS * BLOCK) fits in i32
            options.update(BLOCK=block, ITERS=iters, num_warps=private.warps,
                           LANES32=P * blocks * iters * block <= LANES32_LIMIT)
            for name, n in counts.items():
                options.update({f"{name}__count": n, f"NB_{name}": max(MIN_BLOCK, _next_pow2(n))})
            return Layout(options, (P * blocks, 1, 1), blocks)
        if source.spread:  # one instance per program: its lanes run the loops' iterations
            spread = GPU_SPREAD if not interpreting() else INTERPRETER_SPREAD
            # many parent instances fill the GPU by themselves: fewer lanes each, so that a short
            # loop does not leave most of every program idle
            lanes = max(MIN_BLOCK, min(spread.lanes, _next_pow2(-(-SPREAD_LANES // P))))
            options.update(BLOCK=lanes, num_warps=max(1, spread.warps * lanes // spread.lanes))
            if not source.split_words:
                return Layout(options, (P, 1, 1), 1)
            # few parent instances would leave most of the GPU idle: each one's loop on SPLIT
            # programs (at most a program's lanes: the last one combines them as lanes)
            split = max(1, min(lanes, spread.programs // P))
            options.update(SPLIT=split)
            return Layout(options, (P * split, 1, 1), 1)
        block = min(shape.lanes if shape else MAX_BLOCK, max(MIN_BLOCK, _next_pow2(L)))
        warps = shape.warps if shape else max(1, min(8, block // 256))
        blocks = -(-L // block)
        options.update(BLOCK=block, num_warps=warps)
        return Layout(options, (P * blocks, 1, 1), blocks)

    def _check_grid(self, grid: tuple[int, int, int], P: int) -> None:
        """A grid past CUDA's limits is refused here: Triton's launcher would fail on it with an
        OverflowError (x) or cuLaunchKernel with an invalid value (y, z), neither of which says why."""
        if any(n > limit for n, limit in zip(grid, GRID_LIMITS)):
            raise LaunchError(f"{K.shown_name(self.leaf)}: this launch needs a grid of {grid} programs "
                              f"({P} parent instance(s)), more than a GPU runs (at most "
                              f"{GRID_LIMITS[0]} x {GRID_LIMITS[1]} x {GRID_LIMITS[2]}); target "
                              "'nvptx' runs it (one thread per instance, in launches of at most "
                              "that grid)", self.leaf.loc)

    def _outputs(self, pairs: list[tuple[np.ndarray, Any]]) -> DeviceOutputs:
        return DeviceOutputs(pairs, self.leaf.name, self.leaf.loc)

    def _counted_buffer_shared(self, source: TritonSource, args: list[Any]) -> bool:
        """Whether a privately counted buffer overlaps another buffer argument (read through it,
        an instance's own counts would not show until the merge): the literal kernel runs."""
        counted = {private.name for private in source.private}
        return any(p.name in counted and shares_memory(args, i) for i, p in enumerate(self.leaf.params))

    def _private_counts(self, source: TritonSource, args: list[Any]) -> dict[str, int]:
        """Kernel parameter name -> element count, for each privately counted buffer."""
        found = {}
        for p, arg in zip(self.leaf.params, args):
            for private in source.private:
                if private.name == p.name:
                    found[_kernel_name(p.name)] = arg.nbytes // private.elem.nbytes
        return found

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
        """Per-parent or per-instance scalars as a device array of their register values (a
        device array already: a producer's outputs, which rt/stream/items.py binds as they are)."""
        import torch

        if isinstance(arg, torch.Tensor):
            return arg
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
            return ExecutionError(f"{K.shown_name(self.leaf)}: the Triton interpreter failed: {detail}",
                                  self.leaf.loc)
        return CompileError(f"{K.shown_name(self.leaf)}: Triton could not compile the generated kernel "
                            f"({type(exc).__name__}: {detail}); {SUGGESTION}", self.leaf.loc)


def _split_area(words: int, split: int, P: int, device: Any) -> Any:
    """A launch's area for its split spread loop (spread.py): per parent instance, a ticket counter
    and `split` rows of `words` partial results; zeroed here once, since the program drawing the
    last ticket puts the counter back to zero. Each prepared launch has its own (no per-run memset,
    so it may still be repointed and queued on any stream), and its runs never overlap: like its
    error word and scratch, it is run item after item on one stream (a stream stage's kept launch,
    a replay's recording). Unsplit launches get one unused word."""
    import torch

    return torch.zeros(P * (1 + split * words) if split > 1 else 1, dtype=torch.int64, device=device)


def _dot_extents(dot: DotLoop, extents: list[tuple[int, ...]]) -> tuple[int, int]:
    """Rows and columns of the combined grid a tl.dot kernel covers."""
    def along(dim: int) -> int:
        return extents[0][dim] * (extents[1][dim] if dot.levels == 2 else 1)
    return along(dot.row_dim), along(dot.col_dim)


def _dot_fits(dot: DotLoop, extents: list[tuple[int, ...]]) -> bool:
    """Whether this launch is one the dot loop was proven for: the Parboil form's scratch tiles
    hold one element per leaf instance only when the leaf is tile x tile instances."""
    return dot.tile is None or tuple(extents[0]) == (dot.tile, dot.tile)


def _combined(extents: list[tuple[int, ...]]) -> list[int]:
    """Extents of the combined grid of a leaf and its parent level (gridtiles.py)."""
    return [math.prod(level[d] for level in extents[:2] if d < len(level)) for d in range(3)]


def _tiles_fit(extents: list[tuple[int, ...]], leaf_instances: int) -> bool:
    """Whether grid tiles pay (small parent instances) and the launch grid fits CUDA's limits on
    its y and z axes."""
    _, y, z = _combined(extents)
    return leaf_instances < GRID_TILES.lanes and y < 65536 and z < 65536
