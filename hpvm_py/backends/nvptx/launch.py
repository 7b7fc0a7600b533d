"""NvptxKernel: packs a launch's arguments as kernel parameters and launches the cubin with
cuda-bindings on torch's current CUDA stream.

The contract (backends/base.py): buffers arrive as BufferArg(obj=<torch CUDA tensor>,
address=tensor.data_ptr(), nbytes, array=None); per_parent / per_instance scalars as NumPy arrays
(copied to the device); outputs as host NumPy arrays, filled after the kernel (which waits for it).
Checked kernels (bounds-checked code) are waited for too, to report the first out-of-bounds access
at its source line.
"""
from __future__ import annotations

import ctypes
import math
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

import numpy as np

from ...errors import LaunchError
from ...support import stats
from ...ir import kernel as K
from ...passes.lanes import LaneLoop, atom_values
from ...types import PtrType
from ..base import BufferArg, LeafKernel, NodeContext
from .. import heapview
from ..access_errors import recorded
from ...device import faults
from ...device.kernel_launch import ParamSlots, launch_failure
from ...device.libcuda import launch_kernel
from ...device.outputs import DeviceLaunch, DeviceOutputs, error_word
from ..cpu.abi import DIMS_PER_LEVEL
from ..cpu.accesses import sites
from ..cpu.kernel import checked_extents, pack_scalar, scalar_array
from ..cpu.memory import ERROR_SLOT_WORDS
from ..cpu.prepare import localize_assigned_params
from . import device
from .abi import KernelLayout
from .scratch import Scratch, host_bytes
from .simt import GROUP, lanes_name

BLOCK_THREADS = 256  # threads per block of the flat mapping
LANES_MAX_INSTANCES = 1 << 16  # lanes (one block per instance) for launches of at most these,
LANES_MIN_TRIPS = 32  # whose split loop runs at least this many times,
LANES_MAX_WIDTH = 256  # on up to this many threads per instance
BLOCK_X_2D = 128  # x width of those blocks for leaves of 2 or 3 dimensions
BLOCK_Y_MAX = 1024  # y height at most: what the y dimension leaves goes to (z, parent)
_GRID_X = (1 << 31) - 1
_GRID_YZ = 65535  # beyond it in y or z, a launch runs in chunks
_SHAPES_KEPT = 64  # extents remembered per kernel


class NvptxKernel(LeafKernel):
    def __init__(self, source: K.LeafFunc, leaf: K.LeafFunc, ctx: NodeContext, checked: bool,
                 cubin: bytes, mapping: str, scratch: Scratch | None,
                 code: device.LoadedCubin | None = None, lanes: LaneLoop | None = None,
                 lanes_code: device.LoadedCubin | None = None):
        self.source = source  # the leaf as given; `leaf` is its normalised form
        self.leaf = leaf
        self.ctx = ctx
        self.checked = checked
        self.cubin = cubin
        self.mapping = mapping
        self.scratch = scratch
        self.layout = KernelLayout.of(leaf, ctx)
        self.sites = sites(leaf.body)
        self.code = code or device.LoadedCubin(cubin, leaf.name, leaf.loc)
        self.lanes = lanes  # the loop the lanes kernel splits (passes/lanes.py), if it has one
        names = lanes.params() if lanes is not None else set()
        self.lane_params = frozenset(i for i, p in enumerate(leaf.params) if p.name in names)
        self.lanes_code = lanes_code or (device.LoadedCubin(cubin, lanes_name(leaf), leaf.loc)
                                         if lanes is not None else None)
        self._shapes: dict[tuple, tuple] = {}

    def for_source(self, source: K.LeafFunc) -> "NvptxKernel":
        """This kernel's code for another leaf with equal IR (its own source locations)."""
        kernel = NvptxKernel(source, self.leaf, self.ctx, self.checked, self.cubin, self.mapping,
                             self.scratch, self.code, self.lanes, self.lanes_code)
        kernel.sites = sites(localize_assigned_params(source).body)
        return kernel

    # -- launch ------------------------------------------------------------------------------

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> "PreparedLaunch":
        """Everything a launch needs, packed; run() may be called again with patched scalars."""
        import torch  # noqa: PLC0415 - the device layer's tensors

        key = tuple(map(tuple, extents))
        shape = self._shapes.get(key)
        if shape is None:
            shape = self._shape(extents)
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            self._shapes[key] = shape
        checked, parents, leaves, block, chunks = shape
        ordinal = self._device(args)
        layout = self.layout
        params = ParamSlots(layout.count)
        slots = params.slots
        keep: dict[int, Any] = {}
        cuda = torch.device("cuda", ordinal)
        bound = self._pack_params(args, slots, parents, leaves, cuda, keep)
        device_outputs = self._outputs(outputs, slots, parents, leaves, cuda)
        for level, dims in enumerate(checked):
            for d in range(DIMS_PER_LEVEL):
                slots[layout.extent(level, d)] = dims[d] if d < len(dims) else 1
        heap = None
        if layout.remote:
            heap = heapview.for_launch(self.source, args, cuda)  # its bases live as long as the heap
            slots[layout.heap], slots[layout.heap + 1], slots[layout.heap + 2] = \
                heap.bases_address, heap.rank, heap.world_size
        error = error_word(ERROR_SLOT_WORDS, cuda) if self.checked else None
        if error is not None:
            slots[layout.error] = error.data_ptr()
        shared = self._shared(args, checked, ordinal) if parents * leaves else 0
        fn = self.code.function(ordinal) if parents * leaves else None
        if shared > 48 * 1024:
            self.code.allow_shared(ordinal, shared)
        device.make_current(ordinal)
        stream = torch.cuda.current_stream(cuda).cuda_stream
        launch = PreparedLaunch(self, fn, params, block, chunks, shared, stream, error,
                                DeviceOutputs(device_outputs, self.leaf.name, self.leaf.loc), keep)
        launch.stale -= bound  # a producer's arrays: the same on every replay
        launch.heap_view = heap  # the bases tensor its heap slot points at (as the cpu target's keep)
        width = self._lane_width(args, checked, parents * leaves)
        if width:
            launch.split(self.lanes_code.function(ordinal), width, parents * leaves)
            stats.bump_one("lane_splits")
        return launch

    def _lane_width(self, args: list[Any], extents: list[tuple[int, ...]], instances: int) -> int:
        """The threads per instance of the lanes kernel for this launch, or 0 for the plain one:
        lanes run when few instances would leave the GPU idle, the loop is long enough to share,
        no two of its iterations store to one element (LaneLoop.holds) and the buffers it
        stores to overlap no other buffer argument."""
        lanes = self.lanes
        if lanes is None or not 0 < instances <= LANES_MAX_INSTANCES:
            return 0
        params = {p.name: a for p, a in zip(self.leaf.params, args)
                  if not isinstance(p.type, PtrType)}
        value = atom_values(params, extents)
        trips = lanes.trips(value)
        if trips < LANES_MIN_TRIPS or not lanes.holds(value):
            return 0
        buffers = {p.name: a for p, a in zip(self.leaf.params, args) if isinstance(a, BufferArg)}
        for name in lanes.written:
            mine = buffers.get(name)
            if mine is None or any(_overlap(mine, other)
                                   for key, other in buffers.items() if key != name):
                return 0
        return min(LANES_MAX_WIDTH, max(LANES_MIN_TRIPS, _pow2_at_least(trips)))

    def _shape(self, extents: list[tuple[int, ...]]) -> tuple:
        """What depends only on the extents: (extents, parents, leaves, block, chunks), a chunk
        being (grid, y offset, zp offset) of one launch (the flat mapping's: Chunks)."""
        checked = checked_extents(self.leaf, self.ctx, extents)
        leaves = math.prod(checked[0]) if checked else 1
        parents = math.prod(math.prod(level) for level in checked[1:])
        own = tuple(checked[0]) + (1,) * (3 - len(checked[0]))
        if parents * leaves == 0:
            return checked, parents, leaves, (1, 1, 1), []
        if self.mapping == GROUP:
            if parents > _GRID_X:
                raise LaunchError(f"{K.shown_name(self.leaf)}: {parents} parent instances exceed the GPU's "
                                  "grid (one block per parent instance)", self.leaf.loc)
            return checked, parents, leaves, own, [((parents, 1, 1), 0, 0)]
        block = flat_block(len(checked[0]), own, parents)
        nx, ny, nz = own
        gx = -(-nx // block[0])
        if gx > _GRID_X:
            raise LaunchError(f"{K.shown_name(self.leaf)}: {nx} instances in x exceed the GPU's grid",
                              self.leaf.loc)
        gy_all, gz_all = -(-ny // block[1]), -(-(nz * parents) // block[2])
        return checked, parents, leaves, block, Chunks(gx, gy_all, gz_all, block[1], block[2])

    def _device(self, args: list[Any]) -> int:
        """The GPU of the buffers (the current one when the leaf has none)."""
        import torch  # noqa: PLC0415

        for i in self.layout.buffers:
            obj = getattr(args[i], "obj", None)
            if isinstance(obj, torch.Tensor) and obj.is_cuda:
                return obj.device.index or 0
        return torch.cuda.current_device()

    def _pack_params(self, args: list[Any], slots: ctypes.Array, parents: int, leaves: int,
                     cuda: Any, keep: dict[int, Any]) -> set[int]:
        """Fill the parameter slots; the per-parent / per-instance inputs given as device arrays
        (bound in place, unlike those copied from the host for this launch alone)."""
        import torch  # noqa: PLC0415

        bound: set[int] = set()
        leaf, layout = self.leaf, self.layout
        if len(args) != layout.n_params:
            raise LaunchError(f"{K.shown_name(leaf)} takes {layout.n_params} argument(s), got {len(args)}",
                              leaf.loc)
        for i, (param, mode) in enumerate(zip(leaf.params, self.ctx.input_modes)):
            value = args[i]
            if isinstance(param.type, PtrType):
                if type(value) is not BufferArg:
                    raise LaunchError(f"{K.shown_name(leaf)}: argument {param.name!r} is a pointer and needs "
                                      f"a buffer, got {type(value).__name__}", param.loc)
                if value.on_host:  # a host address would fault on the GPU
                    raise LaunchError(f"{K.shown_name(leaf)}: argument {param.name!r} is in host memory; "
                                      "target 'nvptx' needs the buffer's device copy (a torch "
                                      "CUDA tensor)", param.loc)
                slots[i] = value.address
                slots[layout.nbytes(i)] = value.nbytes
            elif mode == "uniform":
                if np.ndim(value) != 0:
                    raise LaunchError(f"{K.shown_name(leaf)}: argument {param.name!r} is a uniform scalar, "
                                      "got an array", param.loc)
                try:
                    pack_scalar(slots, 8 * i, param.type, value)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise LaunchError(f"{K.shown_name(leaf)}: argument {param.name!r} is not a {param.type} "
                                      f"value: {exc}", param.loc) from None
            else:
                needed = parents if mode == "per_parent" else parents * leaves
                what = f"{K.shown_name(leaf)}: argument {param.name!r} ({mode})"
                if isinstance(value, torch.Tensor) and value.is_cuda:
                    # a producer's device outputs (rt/stream/items.py): read where they are
                    self._bind_device_values(param, value, needed, cuda)
                    keep[i] = value
                    bound.add(i)
                    slots[i] = value.data_ptr()
                    continue
                if isinstance(value, torch.Tensor):
                    value = value.cpu().numpy()
                try:
                    array = scalar_array(param.type, value, needed, what, param.loc)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise LaunchError(f"{what} needs {param.type} values: {exc}", param.loc) from None
                on_device = torch.from_numpy(array.view(np.uint8)).to(cuda)
                keep[i] = on_device
                slots[i] = on_device.data_ptr()
        return bound

    def _bind_device_values(self, param: K.Param, values: Any, needed: int, cuda: Any) -> None:
        """Check a device array of a per-parent / per-instance input: on the launch's GPU, holding
        at least `needed` values of the parameter's memory form."""
        leaf = self.leaf
        nbytes = values.numel() * values.element_size()
        if values.device != cuda or not values.is_contiguous() or \
                nbytes < needed * param.type.numpy_dtype.itemsize:
            raise LaunchError(f"{K.shown_name(leaf)}: argument {param.name!r} needs {needed} {param.type} "
                              f"value(s) on {cuda}, got a device array of {nbytes} bytes on "
                              f"{values.device}", param.loc)

    def _outputs(self, outputs: list[np.ndarray | None], slots: ctypes.Array, parents: int,
                 leaves: int, cuda: Any) -> list[tuple[np.ndarray, Any]]:
        """Device arrays for the used outputs, as (host array, device bytes) pairs."""
        import torch  # noqa: PLC0415

        leaf = self.leaf
        if len(outputs) != self.layout.n_outputs:
            raise LaunchError(f"{K.shown_name(leaf)} has {self.layout.n_outputs} output(s), got "
                              f"{len(outputs)} output array(s)", leaf.loc)
        pairs = []
        for j, (port, mode, out) in enumerate(zip(leaf.outputs, self.ctx.output_modes, outputs)):
            if mode == "unused":
                continue
            needed = parents if mode == "per_parent" else parents * leaves
            if isinstance(port.type, PtrType):
                itemsize, ok = 8, isinstance(out, np.ndarray) and out.dtype.itemsize == 8
            else:
                itemsize = port.type.numpy_dtype.itemsize
                ok = isinstance(out, np.ndarray) and out.dtype == port.type.numpy_dtype
            if not ok or not out.flags.c_contiguous or out.size < needed:
                raise LaunchError(f"{K.shown_name(leaf)}: output {port.name or j} ({mode}) needs a "
                                  f"contiguous array of {needed} element(s)", port.loc)
            # with no instance no kernel writes it: the output is zero, as on every target
            dev = (torch.empty if leaves else torch.zeros)(needed * itemsize, dtype=torch.uint8,
                                                            device=cuda)
            slots[self.layout.output(j)] = dev.data_ptr()
            pairs.append((out, dev))
        return pairs

    # -- shared memory and blocks -------------------------------------------------------------

    def _shared(self, args: list[Any], extents: list[tuple[int, ...]], ordinal: int) -> int:
        """The dynamic shared memory of a launch, after checking the group fits a block."""
        if self.mapping != GROUP:
            return 0
        leaf = self.leaf
        limit = device.limits(ordinal)
        own = tuple(extents[0]) + (1,) * (3 - len(extents[0]))
        if math.prod(own) > limit["threads"] or own[0] > limit["block_x"] or \
                own[1] > limit["block_y"] or own[2] > limit["block_z"]:
            raise LaunchError(
                f"{K.shown_name(leaf)} uses barrier() or malloc(), so each group of its instances (one per "
                f"parent instance) runs as one thread block on target 'nvptx'; a group of "
                f"{' x '.join(map(str, extents[0]))} instances exceeds this GPU's blocks "
                f"({limit['threads']} threads; at most {limit['block_x']} x {limit['block_y']} x "
                f"{limit['block_z']}): give the leaf fewer instances and its parent node more",
                leaf.loc, rule="nvptx-block-size")
        scratch = self.scratch
        if scratch is None or not scratch.mallocs:
            return 0
        total = host_bytes(scratch, leaf, args, extents)  # a static scratch's sizes are checked too
        if total > limit["shared"]:
            raise LaunchError(
                f"{K.shown_name(leaf)}: its malloc() scratch needs {total} bytes of shared memory per group; "
                f"this GPU has {limit['shared']} per block: allocate less per group (give the leaf "
                "fewer instances per parent instance)", scratch.mallocs[0].loc,
                rule="nvptx-shared-memory")
        return total if scratch.dynamic else 0

    # -- errors ------------------------------------------------------------------------------

    def _report(self, error: list[int]) -> None:
        code, index, limit = error
        if code == 0:
            return
        raise recorded(K.shown_name(self.leaf), self.sites, code, index, limit)


class PreparedLaunch(DeviceLaunch):
    """A packed launch of one kernel: issue() launches it (in chunks when its grid exceeds the
    GPU's), check() waits for it when it must report errors; run() also fills the host outputs;
    set_uniform() patches a scalar. `reusable`: nothing was copied to the device for this launch
    only (per-instance inputs copied from the host are, until bind_values() points them at a
    producer's device outputs)."""

    def __init__(self, kernel: NvptxKernel, fn: Any, params: ParamSlots,
                 block: tuple[int, int, int], chunks: Iterable, shared: int, stream: int,
                 error: Any, outputs: DeviceOutputs, keep: dict[int, Any]):
        self.kernel = kernel
        self.fn = fn
        self.params = params  # its slots and the array of their addresses
        self.slots = params.slots
        self.block = block
        self.chunks = chunks
        self.shared = shared
        self.stream = stream
        self._issued_on = stream  # the stream of the last issue(), where check() reads behind it
        self.error = error
        self.outputs = outputs
        self.keep = keep  # param -> its per-instance values on the device, alive with the launch
        self.stale = set(keep)  # those copied from the host for this launch only
        self._params_at = params.address
        self._launch = device.cuda_driver().cuLaunchKernel
        self._direct, self._fn_address = None, 0  # libcuda's own entry point, when loadable
        if fn is not None and launch_kernel() is not None:
            self._direct, self._fn_address = launch_kernel(), int(fn)
        self.plain: tuple | None = None  # (fn, block, chunks) of the plain kernel while split

    @property
    def movable_buffers(self) -> bool:
        """set_buffer() is sound: nothing packed depends on a buffer but its address and size (a
        checked kernel's error word and the lanes kernel's choice were made for these buffers,
        remote accesses go through the heap's bases)."""
        return self.fn is not None and self.error is None and self.plain is None and \
            not self.kernel.layout.remote

    @property
    def repointable(self) -> bool:
        """set_buffer() may point it at other buffers for another launch: movable buffers, and
        neither malloc scratch sized by scalars nor per-instance inputs, which are per launch."""
        scratch = self.kernel.scratch
        return self.movable_buffers and not self.keep and (scratch is None or not scratch.dynamic)

    @property
    def patchable(self) -> bool:
        scratch = self.kernel.scratch
        return scratch is None or not scratch.dynamic

    def set_buffer(self, i: int, arg: Any) -> None:
        self.slots[i] = arg.address
        self.slots[self.kernel.layout.nbytes(i)] = arg.nbytes

    @property
    def copyable(self) -> bool:
        scratch = self.kernel.scratch  # (split: its buffers' overlap was checked for these)
        return self.fn is not None and self.error is None and not self.stale and self.plain is None \
            and not self.kernel.layout.remote and (scratch is None or not scratch.dynamic)

    def copy(self) -> "PreparedLaunch":
        assert self.copyable
        twin = PreparedLaunch(self.kernel, self.fn, self.params.copy(), self.block, self.chunks,
                              self.shared, self.stream, self.error, self.outputs, dict(self.keep))
        twin.stale = set()  # its per-instance inputs are the producers' arrays, as here
        return twin

    def split(self, fn: Any, width: int, instances: int) -> None:
        """Run as the lanes kernel: a block of `width` threads per instance. Patching a scalar
        the choice read takes the plain kernel back (it is right for every value)."""
        self.plain = (self.fn, self.block, self.chunks)
        self.fn, self.block, self.chunks = fn, (width, 1, 1), [((instances, 1, 1), 0, 0)]
        self._fn_address = int(fn) if self._direct is not None else 0

    def set_uniform(self, i: int, value: Any) -> None:
        param = self.kernel.leaf.params[i]
        pack_scalar(self.slots, 8 * i, param.type, value)
        if self.plain is not None and i in self.kernel.lane_params:
            self.fn, self.block, self.chunks = self.plain
            self._fn_address = int(self.fn) if self._direct is not None else 0
            self.plain = None

    def bind_values(self, i: int, values: Any) -> bool:
        """Read per-instance input i from a device array of its memory form (a producer's
        output): False when it does not fit."""
        old = self.keep.get(i)
        if old is None or values.numel() * values.element_size() != old.numel() or \
                values.device != old.device:
            return False
        self.slots[i] = values.data_ptr()
        self.keep[i] = values
        self.stale.discard(i)
        return True

    def issue(self, stream: Any = None) -> None:
        """Queue the kernel (on `stream`, a CUDA stream handle, else the one it was prepared on)."""
        layout, slots, (bx, by, bz) = self.kernel.layout, self.slots, self.block
        stream = self.stream if stream is None else stream
        self._issued_on = stream
        leaf = self.kernel.leaf
        if self.error is not None:
            self.clear_error_word()
        faults.launched(leaf.name, leaf.loc)
        for (gx, gy, gz), y0, zp0 in self.chunks:
            slots[layout.y_offset] = y0
            slots[layout.zp_offset] = zp0
            if self._direct is not None:
                err = self._direct(self._fn_address, gx, gy, gz, bx, by, bz, self.shared, stream,
                                   self._params_at, None)
            else:
                err, = self._launch(self.fn, gx, gy, gz, bx, by, bz, self.shared, stream,
                                    self._params_at, 0)
            if err:
                raise launch_failure(leaf.name, leaf.loc, (gx, gy, gz), self.block, self.shared,
                                     device.error_name(err))

    def each_kernel(self, visit: Any) -> bool:
        if self._direct is None or self.fn is None:
            return False
        layout, slots = self.kernel.layout, self.slots
        for grid, y0, zp0 in self.chunks:
            slots[layout.y_offset] = y0
            slots[layout.zp_offset] = zp0
            visit(self._fn_address, grid, self.block, self.shared, self._params_at)
        return True

    def check(self, ran: bool = False) -> None:
        if self.error is None:
            return
        leaf = self.kernel.leaf
        try:
            error = self.read_error_word(self._issued_on, ran)
        except Exception as exc:  # noqa: BLE001 - a fault of this kernel shows at the copy
            raise faults.reported(exc, leaf.name, leaf.loc) from None
        self.kernel._report(error)
        self.error_clear = True


@dataclass(frozen=True)
class Chunks:
    """The launches of the flat mapping's grid, each (grid, y offset, zp offset): at most 65535
    blocks in y and in z each, made as they are issued. A list of them had one entry per 65535
    blocks of (z, parent) pairs: 2**46 for 2**62 parent instances, a MemoryError before the
    launch (the cpu and python targets run such a launch, instance by instance)."""

    gx: int
    gy: int  # the blocks in y and in (z, parent) pairs, all launches together
    gz: int
    by: int  # a block's threads in y and in z
    bz: int

    def __iter__(self) -> Iterator[tuple[tuple[int, int, int], int, int]]:
        for cy in range(0, self.gy, _GRID_YZ):
            for cz in range(0, self.gz, _GRID_YZ):
                yield ((self.gx, min(_GRID_YZ, self.gy - cy), min(_GRID_YZ, self.gz - cz)),
                       cy * self.by, cz * self.bz)


def flat_block(dims: int, own: tuple[int, int, int], parents: int) -> tuple[int, int, int]:
    """The block shape of the flat mapping: BLOCK_THREADS threads (fewer for small extents), x
    first (coalesced accesses), then y, then the (z, parent) pairs. An x extent below a warp
    takes its power of two, not a warp: a leaf of 4 under many parents then fills each warp with
    8 parents' instances (at a warp, 28 of its 32 threads idled)."""
    nx, ny, nz = own
    if dims == 0:
        return 1, 1, min(64, _pow2_at_least(parents))
    bx = min(BLOCK_THREADS if dims == 1 else BLOCK_X_2D,
             _round_up(nx, 32) if nx >= 32 else _pow2_at_least(nx))
    by = min(BLOCK_THREADS // bx, _pow2_at_least(ny), BLOCK_Y_MAX)
    bz = min(64, BLOCK_THREADS // (bx * by), _pow2_at_least(nz * parents))
    return bx, by, bz


def _overlap(a: BufferArg, b: BufferArg) -> bool:
    return a.nbytes > 0 and b.nbytes > 0 and a.address < b.address + b.nbytes and \
        b.address < a.address + a.nbytes


def _round_up(n: int, multiple: int) -> int:
    return max(multiple, -(-n // multiple) * multiple)


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())
