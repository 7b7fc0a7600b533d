"""CpuKernel: checks and packs launch arguments, splits the instance space over the worker pool,
and reports errors the generated code recorded."""
from __future__ import annotations

import ctypes
import functools
import math
import struct
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ...errors import ExecutionError, LaunchError
from ...ir import kernel as K
from ...ir.context import MAX_INSTANCES, NodeContext
from ...ir.semantics import bf16_to_bits
from .. import heapview
from ...support import cache, settings, stats
from ...support.cores import cpu_model
from ...support.version import VERSION
from ...types import PtrType, ScalarType
from ..base import (BufferArg, LeafKernel, code_version, negative_malloc, scratch_past_limit,
                    shares_memory)
from ..access_errors import recorded
from .abi import DIMS_PER_LEVEL, PRIVATE_SUFFIX, ArgLayout
from .accesses import Access
from ..jit import Cpu, LoadedObject, host_signature
from .lltypes import storage_bytes
from .error_slots import ErrorLayout, ErrorSlots
from .nontemporal import LINE_BYTES, SUFFIX as NT_SUFFIX
from .privatise import MERGE_SUFFIX, identity
from .storechoice import StoreTrial
from .storage import MALLOC_FAILED_SITE, NEGATIVE_MALLOC_SITE, STORAGE_ALLOC
from .threads import TASK_WORDS, PoolJob, native_pool

_DRIVER = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64,
                           ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
_MERGE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)

# Launches with fewer instances than this run on the calling thread: waking workers costs more.
# Leaves with loops do more per instance, so their threshold is lower.
SERIAL_INSTANCES = 32 * 1024
SERIAL_INSTANCES_WITH_LOOPS = 2 * 1024
# Partitions per thread: a few, so that a slow thread does not hold the launch up.
PARTS_PER_THREAD = 4
# Privatise a buffer (one copy per partition) only up to this size, and only when the copies take
# at most this many bytes per instance of the launch.
PRIVATE_MAX_BYTES = 1 << 20
PRIVATE_BYTES_PER_INSTANCE = 4
_SHAPES_KEPT = 64  # extents remembered per kernel
_ALWAYS_NONTEMPORAL = StoreTrial.decided(True)
NONTEMPORAL_MODES = ("auto", "on", "off")  # HPVM_CPU_NONTEMPORAL's values


@functools.cache
def last_level_cache_bytes() -> int:
    """The size of the host's largest cache (Linux sysfs), else 32 MiB."""
    sizes = []
    for path in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = path.read_text().strip()
        scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return max(sizes, default=32 << 20)


# Launches whose qualifying stores write at least this many bytes time non-temporal stores
# (nontemporal.py) against normal ones and keep the faster (storechoice.py); smaller outputs stay
# in the caches for their next reader (vadd with a 32 MiB L3: 4 MiB lose 30%, 8 MiB gain 20-25%).
NONTEMPORAL_BYTES = min(4 << 20, last_level_cache_bytes() // 2)
ROWS_ALIKE = 4096  # x loops of this many instances or more take the same store choice


@dataclass
class KernelInfo:
    """What a launch needs to know about the compiled code (recomputed from the IR, never cached)."""

    splittable: bool  # a group may be split across threads (no barrier, no malloc)
    private: dict[str, str]  # privatisable buffers -> merge class
    sites: list[Access]
    loops: bool  # the body has loops: instances may be costly
    nt_bytes: dict[int, int]  # parameter index -> bytes its non-temporal stores write per instance


class LazyCode:
    """Object code compiled when a launch first needs it (the driver with non-temporal stores),
    shared by the kernels of equal IR."""

    def __init__(self, compile_object: Callable[[], LoadedObject]):
        self._compile = compile_object
        self._code: LoadedObject | None = None
        self._lock = threading.Lock()

    def get(self) -> LoadedObject:
        with self._lock:
            if self._code is None:
                self._code = self._compile()
            return self._code


class CpuKernel(LeafKernel):
    def __init__(self, source: K.LeafFunc, leaf: K.LeafFunc, ctx: NodeContext, checked: bool,
                 code: LoadedObject, info: KernelInfo, cpu: Cpu,
                 nontemporal: LazyCode | None = None):
        self.source = source  # the leaf as given; `leaf` is its normalised form
        self.leaf = leaf
        self.cpu = cpu  # what the code is for (jit.code_cpu when it was compiled)
        self.ctx = ctx
        self.checked = checked
        self.info = info
        self.layout = ArgLayout.of(leaf)
        self._code = code  # owns the machine code the drivers point into
        self._driver = _DRIVER(code.address(leaf.name))
        self._private_driver = _DRIVER(code.address(leaf.name + PRIVATE_SUFFIX)) \
            if info.private else None
        self._mergers = {name: _MERGE(code.address(leaf.name + MERGE_SUFFIX + name))
                         for name in info.private}
        self._nontemporal = nontemporal  # None when no store qualifies, or checked
        self._nt_driver: Any = None
        # (log2 bytes written, log2 row length) -> its timing
        self._store_trials: dict[tuple[int, int], StoreTrial] = {}
        # extents -> (extents array, parents, leaves, partitions, their keys); read-only once
        # made, so concurrent launches share them
        self._shapes: dict[tuple, tuple[ctypes.Array, int, int, np.ndarray, ErrorLayout]] = {}
        self._plan = self._packers()

    def for_source(self, source: K.LeafFunc, sites: list[Access]) -> "CpuKernel":
        """This kernel's code for another leaf with the same IR (its own source locations)."""
        info = KernelInfo(self.info.splittable, self.info.private, sites, self.info.loops,
                          self.info.nt_bytes)
        return CpuKernel(source, self.leaf, self.ctx, self.checked, self._code, info, self.cpu,
                         self._nontemporal)

    # -- launch ------------------------------------------------------------------------------

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> "PreparedLaunch":
        """Everything a launch needs, packed; run() may be called again with patched scalars.

        Kept lean: after a large launch the caches hold the kernel's data, not the interpreter's,
        and every Python step here runs slowly. What depends only on the extents is reused.
        """
        key = tuple(map(tuple, extents))
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= _SHAPES_KEPT:
                self._shapes.clear()
            shape = self._shapes[key] = self._shape(extents)
        ext, parents, leaves, template, errors = shape  # template: one task record per partition
        keep: list[Any] = [ext]
        slots = self._pack(args, outputs, parents, leaves, keep)
        if self.layout.remote:
            heap = heapview.for_launch(self.source, args)
            keep.append(heap.bases)
            first = self.layout.heap_slot
            slots[first], slots[first + 1], slots[first + 2] = \
                heap.bases_address, heap.rank, heap.world_size
        privates = self._privates(args, len(template), parents * leaves) if len(template) else {}
        # read at every launch, so that a bad value is refused whether or not a store qualifies
        mode = settings.choice(settings.CPU_NONTEMPORAL, NONTEMPORAL_MODES, LaunchError)
        row = key[0][0] if key and key[0] else parents * leaves  # instances an x loop runs
        trial = None if privates else self._store_trial(args, parents * leaves, row, mode)
        nontemporal = trial is not None and trial.next_variant()
        if privates:
            driver = self._private_driver
        elif nontemporal:
            driver = self._nontemporal_driver()
            stats.bump("cpu_nontemporal_launches")
        else:
            driver = self._driver
        # the task records the native pool reads: the driver, its slots, extents, the partition's
        # ranges and the error slot (built with NumPy: one Python step per partition cost 115 µs
        # a launch at 64 threads' 256 partitions)
        records = template.copy()
        records[:, :3] = (ctypes.cast(driver, ctypes.c_void_p).value, ctypes.addressof(slots),
                          ctypes.addressof(ext))
        error = ErrorSlots(errors, records)
        for i in range(len(template) if privates else 0):
            part_slots = type(slots).from_buffer_copy(slots)
            for index, copies in privates.items():
                part_slots[index] = _address(copies[i])
            keep.append(part_slots)
            records[i, 1] = ctypes.addressof(part_slots)
        merge = (lambda: self._merge(args, privates)) if privates else None
        return PreparedLaunch(self, driver, slots, error, records, merge, keep, list(outputs),
                              reusable=not privates, nontemporal=nontemporal, trial=trial)

    def _shape(self, extents: list[tuple[int, ...]]
               ) -> tuple[ctypes.Array, int, int, np.ndarray, "ErrorLayout"]:
        """The extents array the drivers read, the instance counts, the partitions (task
        records whose words 3-6 hold each one's p_begin, p_end, o_begin, o_end; a launch fills
        in the rest) and the error words for their keys (memory.py: each one's place in instance
        order)."""
        extents = self._check_extents(extents)
        leaves = math.prod(extents[0]) if extents else 1
        parents = math.prod(math.prod(level) for level in extents[1:])
        ext = (ctypes.c_int64 * (max(1, len(extents)) * DIMS_PER_LEVEL))()
        for level, dims in enumerate(extents):
            for d in range(DIMS_PER_LEVEL):
                ext[level * DIMS_PER_LEVEL + d] = dims[d] if d < len(dims) else 1
        # the leaf dimension partitions divide: the outermost with more than one instance
        # (driver.py's _split_dim); those outside it have one, so o steps instance order by
        # leaves // outer
        dims = extents[0] if extents else ()
        outer = dims[max((d for d, n in enumerate(dims) if n > 1), default=0)] if dims else 1
        parts = self._partition(parents, leaves, outer) if parents * leaves else []
        records = np.zeros((len(parts), TASK_WORDS), np.int64)
        records[:, 3:7] = np.array(parts, np.int64).reshape(-1, 4)
        keys = [p * leaves + o * (leaves // outer) for p, _, o, _ in parts]
        return ext, parents, leaves, records, ErrorLayout.of(keys)

    def _partition(self, parents: int, leaves: int, outer: int) -> list[tuple[int, int, int, int]]:
        """Disjoint (p_begin, p_end, o_begin, o_end) ranges: parents when there are enough of them
        (or when a group must stay on one thread), else the leaf's split dimension."""
        threads = native_pool().threads
        serial = SERIAL_INSTANCES_WITH_LOOPS if self.info.loops else SERIAL_INSTANCES
        if parents * leaves < serial or threads == 1:
            return [(0, parents, 0, outer)]
        target = threads * PARTS_PER_THREAD
        if parents >= target or not self.info.splittable or outer < 2:
            return [(a, b, 0, outer) for a, b in _chunks(parents, target)]
        return [(0, parents, a, b) for a, b in _chunks(outer, target)]

    def _store_trial(self, args: list[Any], instances: int, row: int,
                     mode: str) -> StoreTrial | None:
        """The store choice of this launch's size class under HPVM_CPU_NONTEMPORAL's `mode`;
        None: normal stores, no choice to make (no store qualifies, they write too little to
        leave the caches, or an x loop of `row` instances writes no whole cache line, where the
        non-temporal driver's three-part loops only cost: 1.3-2x for rows of 8 to 64 f32).
        A class is the bytes written and the rows' length: one trial's choice for long rows
        was kept for short ones."""
        if self._nontemporal is None or mode == "off":
            return None
        written = sum(min(args[i].nbytes, instances * n) for i, n in self.info.nt_bytes.items())
        if mode == "on":
            return _ALWAYS_NONTEMPORAL
        if written < NONTEMPORAL_BYTES or row * max(self.info.nt_bytes.values()) < LINE_BYTES:
            return None
        size_class = (written.bit_length(), min(row, ROWS_ALIKE).bit_length())
        trial = self._store_trials.get(size_class)
        if trial is None:
            # (host_signature: the code timed is for the kernel's level, by this llvmlite's LLVM)
            key = cache.content_key("stores", repr(self.leaf), self.ctx.key(), str(size_class),
                                    str(native_pool().threads), cpu_model(),
                                    host_signature(self.cpu), VERSION, code_version(("cpu",)))
            trial = self._store_trials.setdefault(size_class,
                                                  StoreTrial(self.leaf.name, size_class[0], key))
        return trial

    def _nontemporal_driver(self) -> Any:
        """The driver with non-temporal stores, compiled by the first launch that wants it."""
        if self._nt_driver is None:
            code = self._nontemporal.get()
            self._nt_driver = _DRIVER(code.address(self.leaf.name + NT_SUFFIX))
        return self._nt_driver

    # -- arguments ---------------------------------------------------------------------------

    def _check_extents(self, extents: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
        return checked_extents(self.leaf, self.ctx, extents)

    def _packers(self) -> list[tuple[int, str, Any]]:
        """Per parameter, decided once: (index, how, detail) where how is buffer/uniform/array."""
        plan = []
        for i, (param, mode) in enumerate(zip(self.leaf.params, self.ctx.input_modes)):
            if isinstance(param.type, PtrType):
                plan.append((i, "buffer", self.layout.nbytes_slot(i)))
            elif mode == "uniform":
                plan.append((i, "uniform", _STRUCT_FORMATS.get(param.type.name)))
            else:
                plan.append((i, "array", mode))
        return plan

    def _pack(self, args: list[Any], outputs: list[np.ndarray | None], parents: int, leaves: int,
              keep: list[Any]) -> ctypes.Array:
        leaf, layout = self.leaf, self.layout
        if len(args) != layout.n_params or len(outputs) != layout.n_outputs:
            raise LaunchError(f"{K.shown_name(leaf)} takes {layout.n_params} argument(s) and "
                              f"{layout.n_outputs} "
                              f"output array(s), got {len(args)} and {len(outputs)}", leaf.loc)
        slots = (ctypes.c_uint64 * layout.slots)()
        for i, how, detail in self._plan:
            value = args[i]
            if how == "buffer":
                if type(value) is not BufferArg:
                    self._bad_argument(i, f"is a pointer and needs a buffer, got {type(value).__name__}")
                slots[i] = value.address
                slots[detail] = value.nbytes
            elif how == "uniform":
                if np.ndim(value) != 0:
                    self._bad_argument(i, "is a uniform scalar, got an array")
                try:  # the common case: a value already of the parameter's type
                    struct.pack_into(detail, slots, 8 * i, value)
                except (TypeError, OverflowError, struct.error):
                    self._pack_uniform(slots, i, value)
            else:
                param = leaf.params[i]
                needed = parents if detail == "per_parent" else parents * leaves
                what = f"{K.shown_name(leaf)}: argument {param.name!r} ({detail})"
                try:
                    array = scalar_array(param.type, value, needed, what, param.loc)
                except (TypeError, ValueError, OverflowError) as exc:
                    raise LaunchError(f"{what} needs {param.type} values: {exc}", param.loc) from None
                keep.append(array)
                slots[i] = _address(array)
        for j, (port, mode, out) in enumerate(zip(leaf.outputs, self.ctx.output_modes, outputs)):
            if mode == "unused":
                continue
            needed = parents if mode == "per_parent" else parents * leaves
            if isinstance(port.type, PtrType):
                same_type = isinstance(out, np.ndarray) and out.dtype.itemsize == 8 and out.dtype.kind in "iu"
            else:
                same_type = isinstance(out, np.ndarray) and out.dtype == port.type.numpy_dtype
            if not same_type or not out.flags.c_contiguous or out.size < needed:
                dtype = "int64 (an address)" if isinstance(port.type, PtrType) else port.type.numpy_dtype
                raise LaunchError(f"{K.shown_name(leaf)}: output {port.name or j} ({mode}) needs a "
                                  "contiguous "
                                  f"{dtype} array of {needed} element(s)", port.loc)
            slots[layout.output_slot(j)] = _address(out)
        return slots

    def _pack_uniform(self, slots: ctypes.Array, i: int, value: Any) -> None:
        param = self.leaf.params[i]
        try:
            pack_scalar(slots, 8 * i, param.type, value)
        except (TypeError, ValueError, OverflowError) as exc:
            raise LaunchError(f"{K.shown_name(self.leaf)}: argument {param.name!r} is not a {param.type} "
                              "value: "
                              f"{exc}", param.loc) from None

    def _bad_argument(self, i: int, problem: str) -> None:
        param = self.leaf.params[i]
        raise LaunchError(f"{K.shown_name(self.leaf)}: argument {param.name!r} {problem}", param.loc)

    # -- privatised atomics ------------------------------------------------------------------

    def _privates(self, args: list[Any], parts: int, instances: int) -> dict[int, list[np.ndarray]]:
        """slot index -> one private copy per partition, for every privatisable buffer, or {} when
        privatising does not pay (a buffer too large to copy). Even a single partition gains:
        plain increments instead of locked ones."""
        if not self.info.private:
            return {}
        copies: dict[int, list[np.ndarray]] = {}
        for i, param in enumerate(self.leaf.params):
            kind = self.info.private.get(param.name)
            if kind is None:
                continue
            buf = args[i]
            # Copies, and merging them, must cost little next to the launch itself.
            if not buf.on_host or buf.nbytes > PRIVATE_MAX_BYTES or \
                    buf.nbytes * parts > instances * PRIVATE_BYTES_PER_INSTANCE or \
                    shares_memory(args, i):
                return {}
            elem = param.type.elem
            count = buf.nbytes // elem.numpy_dtype.itemsize
            copies[i] = [np.full(count, identity(kind, elem), dtype=elem.numpy_dtype)
                         for _ in range(parts)]
        return copies

    def _merge(self, args: list[Any], privates: dict[int, list[np.ndarray]]) -> None:
        for i, copies in privates.items():
            merge = self._mergers[self.leaf.params[i].name]
            for copy in copies:
                merge(args[i].address, _address(copy), copy.size)

    # -- errors ------------------------------------------------------------------------------

    def _error(self, error: list[int]) -> ExecutionError:
        code, index, limit = error
        if code in (MALLOC_FAILED_SITE + 1, NEGATIVE_MALLOC_SITE + 1):
            return self._allocation_error(requested=index, which=limit,
                                          negative=code == NEGATIVE_MALLOC_SITE + 1)
        return recorded(K.shown_name(self.leaf), self.info.sites, code, index, limit)

    def _allocation_error(self, requested: int, which: int, negative: bool) -> ExecutionError:
        """A failed allocation: per-instance storage, or the malloc scratch (at malloc `which`;
        `negative`: its size, `requested`, is negative)."""
        name = K.shown_name(self.leaf)
        if which == STORAGE_ALLOC:
            size = "more than 2**63 - 1" if requested < 0 else str(requested)
            return ExecutionError(f"{name}: could not allocate {size} bytes of per-instance storage "
                                  "(too many instances in one group)", self.leaf.loc)
        mallocs = [s for s in self.source.body if isinstance(s, K.Assign) and isinstance(s.value, K.Malloc)]
        loc = mallocs[which].loc if 0 <= which < len(mallocs) else self.leaf.loc
        if negative:
            return negative_malloc(self.leaf, requested, loc)
        if requested < 0:
            return scratch_past_limit(self.leaf, loc)
        return ExecutionError(f"{name}: could not allocate {requested} bytes of malloc scratch", loc)


class PreparedLaunch:
    """A packed launch of one kernel: run() calls the drivers; set_uniform() patches a scalar.

    A launch with privatised atomics copies buffers per partition, so it is not `reusable`.
    `nontemporal`: it runs the driver with non-temporal stores.
    """

    def __init__(self, kernel: CpuKernel, driver: Any, slots: ctypes.Array, error: ErrorSlots,
                 records: np.ndarray, merge: Callable[[], None] | None, keep: list[Any],
                 outputs: list[np.ndarray | None], reusable: bool, nontemporal: bool,
                 trial: StoreTrial | None = None):
        self.kernel = kernel
        self.driver = driver
        self.slots = slots
        self.error = error
        self.records = records  # the native pool's task records, one row per partition
        self._rows: list[list[int]] | None = None  # the same as Python ints, to run them here
        self.merge = merge
        self.keep = keep  # ctypes arrays and NumPy arrays the drivers read
        # the arrays the output slots point at: held here, since the slots hold only addresses
        # and a replay writes them again (a recorded launch's outputs no one else keeps)
        self.outputs = outputs
        self.reusable = reusable
        # set_buffer() may point it at other buffers of the same sizes, unless a remote access goes
        # through one: each launch must check such buffers on the heap (backends/heapview.py)
        self.repointable = reusable and not kernel.layout.remote
        self.nontemporal = nontemporal
        self.trial = trial if trial is not None and trial.choice is None else None

    def set_uniform(self, i: int, value: Any) -> None:
        """Write a new value of uniform scalar parameter i (same type as at prepare time)."""
        try:
            struct.pack_into(self.kernel._plan[i][2], self.slots, 8 * i, value)
        except (TypeError, OverflowError, struct.error):
            self.kernel._pack_uniform(self.slots, i, value)

    def set_buffer(self, i: int, arg: BufferArg) -> None:
        """Point buffer parameter i at another buffer of the same size as at prepare time."""
        self.slots[i] = arg.address

    @property
    def copyable(self) -> bool:
        return self.repointable

    def copy(self) -> "PreparedLaunch":
        """The same launch on its own parameter slots and error slots, so that set_buffer() and
        set_uniform() on either leave the other as it is (its output arrays are shared)."""
        slots = type(self.slots).from_buffer_copy(self.slots)
        records = self.records.copy()
        records[:, 1] = ctypes.addressof(slots)
        error = ErrorSlots(self.error.layout, records)
        return PreparedLaunch(self.kernel, self.driver, slots, error, records, self.merge,
                              self.keep, list(self.outputs), self.reusable, self.nontemporal,
                              self.trial)

    def set_outputs(self, outputs: list[np.ndarray | None]) -> None:
        """Write the used outputs into other arrays of the dtypes and sizes they had at prepare
        time (None: an unused output)."""
        for j, out in enumerate(outputs):
            if out is not None:
                self.slots[self.kernel.layout.output_slot(j)] = _address(out)
                self.outputs[j] = out

    def run(self) -> None:
        if self.trial is not None:
            self._timed_run(self.trial)
            return
        # one partition runs right here; several go to the native pool, which shares its workers
        # among the launches in flight (or run here in turn if it has no free job slot)
        if len(self.records) > 1 and native_pool().run(self.records):
            self._finish()
        else:
            self._run_here()

    def _timed_run(self, trial: StoreTrial) -> None:
        """A launch while its size class times both kinds of stores: run with the kind the trial
        asks for next, and tell it how long that took."""
        self._use_stores(trial.next_variant())
        start = time.perf_counter()
        self.trial = None
        try:
            self.run()
        finally:
            self.trial = trial
        trial.record(self.nontemporal, time.perf_counter() - start)
        if trial.choice is not None:
            self._use_stores(trial.choice)
            self.trial = None

    def _use_stores(self, nontemporal: bool) -> None:
        if nontemporal == self.nontemporal:
            return
        kernel = self.kernel
        self.driver = kernel._nontemporal_driver() if nontemporal else kernel._driver
        self.records = self.records.copy()  # (a copy: a job begun with the others may still read them)
        self.records[:, 0] = ctypes.cast(self.driver, ctypes.c_void_p).value
        self._rows = None
        self.nontemporal = nontemporal
        if nontemporal:
            stats.bump("cpu_nontemporal_launches")

    def begin(self) -> PoolJob | None:
        """Begin the launch on the native pool's workers and return at once: finish(job) ends it.
        None when it could not be handed over (no free job slot): then it ran here already.
        Launches begun this way are not timed: they may overlap others."""
        if self.trial is not None and self.trial.choice is not None:
            self._use_stores(self.trial.choice)
            self.trial = None
        job = native_pool().start(self.records) if len(self.records) else None
        if job is None:
            self._run_here()
        return job

    @staticmethod
    def done(job: PoolJob) -> bool:
        return native_pool().done(job)

    def finish(self, job: PoolJob | None) -> None:
        """Wait for a started launch (helping to run it), then merge and report as run() does."""
        if job is not None:
            native_pool().wait(job)
            self._finish()

    def _run_here(self) -> None:
        driver, rows = self.driver, self._rows
        if rows is None:
            rows = self._rows = self.records.tolist()
        for task in rows:
            driver(*task[1:])
        self._finish()

    def _finish(self) -> None:
        if self.merge is not None:
            self.merge()
        error = self.error.take()
        if error is not None:
            raise self.kernel._error(error)


def checked_extents(leaf: K.LeafFunc, ctx: NodeContext, extents: list[tuple[int, ...]]
                    ) -> list[tuple[int, ...]]:
    """The extents of a launch as int tuples, one per level, each as long as its level's dims."""
    dims = ctx.level_dims
    if len(extents) != len(dims):
        raise LaunchError(f"{K.shown_name(leaf)}: {len(extents)} levels of extents for a node with "
                          f"{len(dims)} levels", leaf.loc)
    checked = []
    for level, (ext, n) in enumerate(zip(extents, dims)):
        ext = tuple(int(e) for e in ext)
        if len(ext) != n or any(e < 0 for e in ext):
            raise LaunchError(f"{K.shown_name(leaf)}: level {level} has {n} dimension(s); got the "
                              f"extents {ext}", leaf.loc)
        checked.append(ext)
    if math.prod(math.prod(level) for level in checked) > MAX_INSTANCES:
        raise LaunchError(f"{K.shown_name(leaf)}: the extents {checked} give more than 2**63 - 1 instances: "
                          "the instance count overflows 64 bits", leaf.loc)
    return checked


_STRUCT_FORMATS = {"i1": "<?", "i8": "<b", "i16": "<h", "i32": "<i", "i64": "<q", "u8": "<B",
                   "u16": "<H", "u32": "<I", "u64": "<Q", "f16": "<e", "f32": "<f", "f64": "<d"}


def pack_scalar(slots: ctypes.Array, offset: int, t: ScalarType, value: Any) -> None:
    """Write a uniform scalar into its slot in memory form; integers wrap as NumPy casts do."""
    fmt = _STRUCT_FORMATS.get(t.name)
    try:
        if fmt is None:  # bf16: bits when given as uint16, else rounded from a float
            raise OverflowError
        if t.is_bool:
            converted: Any = bool(value)
        elif t.is_float:
            converted = float(value)
        else:
            converted = int(value) & ((1 << t.bits) - 1)
            if t.is_signed and converted >> (t.bits - 1):
                converted -= 1 << t.bits
        struct.pack_into(fmt, slots, offset, converted)
    except (OverflowError, struct.error):  # out of range for struct (inf for a float): NumPy
        data = storage_bytes(t, value)
        ctypes.memmove(ctypes.addressof(slots) + offset, data, len(data))


def _address(array: np.ndarray) -> int:
    return array.__array_interface__["data"][0]


def _chunks(n: int, parts: int) -> list[tuple[int, int]]:
    parts = max(1, min(parts, n))
    bounds = [n * k // parts for k in range(parts + 1)]
    return [(bounds[k], bounds[k + 1]) for k in range(parts)]


def scalar_array(t: ScalarType, value: Any, needed: int, what: str, loc: Any) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim == 0 or array.size < needed:
        raise LaunchError(f"{what} needs an array of at least {needed} values", loc)
    array = array.reshape(-1)
    if t.name == "bf16" and array.dtype != np.uint16:
        return np.ascontiguousarray(bf16_to_bits(array.astype(np.float32)))
    return np.ascontiguousarray(array, dtype=t.numpy_dtype)

