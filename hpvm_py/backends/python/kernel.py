"""Launching python-target leaves: every dynamic instance, per instance or as whole arrays."""
from __future__ import annotations

import bdb
from typing import Any, Iterator

import numpy as np

from ...errors import ExecutionError, HPVMError
from ...ir import kernel as K
from ...ir.context import NodeContext, instance_counts
from ...ir import semantics as S
from ..heapview import for_launch as remote_view
from ...support import settings
from ...support.loc import Loc
from ...types import SCALAR_TYPES, PtrType, bf16
from ..base import Backend, BufferArg, CacheKey, LeafKernel, negative_malloc
from ..access_errors import bad_rank, out_of_bounds
from . import ops
from .codegen import GeneratedLeaf, generate, vector_eligible
from .remote_access import Peers, RankError

_VECTOR_CHUNK = 1 << 20  # instances per vectorised step


class _Group:
    """What the instances of one parent instance share: malloc'd scratch memory."""

    def __init__(self, leaf: K.LeafFunc) -> None:
        self.leaf = leaf
        self.blocks: dict[int, ops.Buffer] = {}

    def malloc(self, site: K.Malloc, nbytes: Any, elem: str) -> ops.Buffer:
        """The scratch of malloc `site` (the generated code passes its IR node, whose place a
        negative size is reported at)."""
        if id(site) not in self.blocks:
            t = SCALAR_TYPES[elem]
            if int(nbytes) < 0:  # as on the compiled targets
                raise negative_malloc(self.leaf, int(nbytes), site.loc)
            count = int(nbytes) // t.nbytes
            self.blocks[id(site)] = ops.Buffer(f"malloc#{len(self.blocks)}",
                                               np.zeros(count, t.numpy_dtype), t == bf16)
        return self.blocks[id(site)]


def _digits(lin: np.ndarray | int, extent: tuple[int, ...]) -> list[Any]:
    """Per-dimension ids (x fastest) of linear indices within one level."""
    out = []
    for n in extent:
        out.append(lin % n if n else lin * 0)
        lin = lin // n if n else lin
    return out


def vector_allowed() -> bool:
    """HPVM_PYTHON_VECTOR=0 runs every leaf instance by instance."""
    return settings.PYTHON_VECTOR.on()


class PythonLeafKernel(LeafKernel):
    prepares = False  # launch() runs the instances; nothing is packed for a replay

    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext, allow_vector: bool = True):
        self.leaf = leaf
        self.ctx = ctx
        self.code: GeneratedLeaf = generate(leaf, ctx, allow_vector and vector_eligible(leaf, ctx))
        self.has_barriers = any(isinstance(st, K.Barrier) for st in K.walk_stmts(leaf.body))

    @property
    def source(self) -> str:
        return self.code.source

    # -- arguments --------------------------------------------------------------------------

    def _buffers(self, args: list[Any]) -> list[Any]:
        values = list(args)
        for i, p in enumerate(self.leaf.params):
            if p.type == bf16 and np.asarray(args[i]).dtype == np.uint16:
                values[i] = S.bf16_from_bits(args[i])  # bf16 values travel on edges as their bits
                continue
            if isinstance(p.type, PtrType):
                arg = args[i]
                array = arg.host_array() if isinstance(arg, BufferArg) else None
                assert array is not None
                # the size argument bounds the accesses when it is one value for every instance,
                # as on the compiled targets (cpu/memory.py, buffer_limit); one fed per instance
                # (a one-to-one edge) does not, and the buffer's own size does
                sized = i + 1 < len(args) and self.ctx.input_modes[i + 1] == "uniform"
                limit = int(args[i + 1]) // p.type.elem.nbytes if sized else len(array)
                values[i] = ops.Buffer(p.name, array[:max(0, limit)], p.type.elem == bf16)
        return values

    def _ids(self, extents: list[tuple[int, ...]], flat: Any, leaf_count: int) -> dict[tuple[int, int], Any]:
        """Instance ids of the flat instance indices `flat` for every level the code asks about."""
        parent = flat // leaf_count if leaf_count else flat * 0
        lin = {0: flat % leaf_count if leaf_count else flat * 0}
        for level in range(1, len(extents)):
            n = int(np.prod(extents[level])) if extents[level] else 1
            lin[level] = parent % n
            parent = parent // n
        ids = {}
        for _, level, dim in self.code.id_params:
            ids[(level, dim)] = _digits(lin[level], extents[level])[dim]
        return ids

    def _counts(self, extents: list[tuple[int, ...]]) -> list[np.int64]:
        return [np.int64(extents[level][dim]) for _, level, dim in self.code.count_params]

    # -- launch -----------------------------------------------------------------------------

    def launch(self, args: list[Any], outputs: list[np.ndarray | None],
               extents: list[tuple[int, ...]]) -> None:
        P, L = instance_counts(extents)
        if P * L == 0:
            return
        values = self._buffers(args)
        peers = Peers(remote_view(self.leaf, args)) if self.code.remote else None
        try:
            with np.errstate(all="ignore"):
                if self.code.vector:
                    self._launch_vector_or_rerun(values, outputs, extents, P, L)
                else:
                    self._launch_instances(self.code, values, outputs, extents, P, L, peers)
        except (HPVMError, bdb.BdbQuit, KeyboardInterrupt):
            raise
        except ops.BoundsError as exc:
            raise out_of_bounds(K.shown_name(self.leaf), self.code.sites[exc.site], exc.index,
                                exc.limit) from None
        except RankError as exc:
            raise bad_rank(K.shown_name(self.leaf), self.code.sites[exc.site], exc.rank,
                           exc.world_size) from None
        except Exception as exc:  # noqa: BLE001 - reported at the user's line
            raise ExecutionError(f"{K.shown_name(self.leaf)}: {exc}", self._user_line(exc)) from None

    def _launch_vector_or_rerun(self, values: list[Any], outputs: list[np.ndarray | None],
                                extents: list[tuple[int, ...]], P: int, L: int) -> None:
        """The vector run; after an out-of-bounds access, the launch again instance by instance.

        The vector mode runs one statement for every instance before the next statement, so the
        first access it finds out of bounds is not always the one that every other target reports:
        the first failing access in sequential order (the lowest failing instance's first failure;
        docs/architecture.md). The buffers the vector run wrote are put back first (their first
        write kept a copy), and the instance-by-instance run reports the canonical error and stops
        where instance mode stops; where it finds no failure, its results are the launch's."""
        journal: list[ops.Buffer] = []
        buffers = [value for value in values if isinstance(value, ops.Buffer)]
        for buf in buffers:
            buf.journal = journal
        try:
            self._launch_vector(values, outputs, extents, P, L)
        except ops.BoundsError:
            ops.restore(journal)
            for buf in buffers:
                buf.journal = None  # (the serial run keeps no copies)
            serial = generate(self.leaf, self.ctx, False)  # built only when a launch fails
            try:
                self._launch_instances(serial, values, outputs, extents, P, L, None)
            except ops.BoundsError as exc:  # its sites are numbered in the serial code
                raise out_of_bounds(K.shown_name(self.leaf), serial.sites[exc.site], exc.index,
                                    exc.limit) from None
            # no instance fails in sequential order (the vector run raced with itself, or read
            # where a serial run does not): that complete run is a valid outcome of the launch
        finally:
            # the copies go with the launch (a recorded launch keeps its Buffers: kept, each
            # launch's copies would pile up)
            for buf in buffers:
                buf.journal = buf.original = None

    def _launch_vector(self, values: list[Any], outputs: list[np.ndarray | None],
                       extents: list[tuple[int, ...]], P: int, L: int) -> None:
        """All instances as arrays, a chunk at a time (temporaries stay small). With barriers a
        chunk holds whole groups, so every group still runs in lockstep between its barriers."""
        n = P * L
        chunk = max(L, _VECTOR_CHUNK // max(L, 1) * L) if self.has_barriers else _VECTOR_CHUNK
        for start in range(0, n, chunk):
            stop = min(n, start + chunk)
            flat = np.arange(start, stop, dtype=np.int64)
            call = []
            for value, mode in zip(values, self.ctx.input_modes):
                if mode == "per_parent":
                    value = np.asarray(value)[flat // L]
                elif mode == "per_instance":
                    value = np.asarray(value)[start:stop]
                call.append(value)
            ids = self._ids(extents, flat, L)
            call += [ids[(level, dim)] for _, level, dim in self.code.id_params]
            call += self._counts(extents)
            call.append(stop - start)
            result = self.code.function(*call)
            self._store_outputs(result, outputs, start, stop, L)

    def _launch_instances(self, code: GeneratedLeaf, values: list[Any],
                          outputs: list[np.ndarray | None], extents: list[tuple[int, ...]], P: int,
                          L: int, peers: Peers | None) -> None:
        counts = self._counts(extents)
        modes = self.ctx.input_modes
        fn = code.function
        # a group with barriers runs all at once; other instances a chunk at a time, so that a
        # huge grid's ids are never made all at once (its first failure ends the launch)
        step = L if code.generator else min(L, _VECTOR_CHUNK)
        for p in range(P):
            group = _Group(self.leaf)
            for first in range(0, L, step):
                flat = np.arange(p * L + first, p * L + min(L, first + step), dtype=np.int64)
                ids = self._ids(extents, flat, L)
                id_lists = [ids[(level, dim)] for _, level, dim in code.id_params]

                def instance_args(lin: int, first: int = first,
                                  id_lists: list = id_lists) -> list[Any]:
                    call = []
                    for value, mode in zip(values, modes):
                        if mode == "per_parent":
                            value = value[p]
                        elif mode == "per_instance":
                            value = value[p * L + lin]
                        call.append(value)
                    call += [ids_of_dim[lin - first] for ids_of_dim in id_lists]
                    call += counts
                    if code.uses_malloc:
                        call.append(group)
                    if peers is not None:
                        call.append(peers)
                    return call

                if code.generator:
                    results = self._run_group(fn, instance_args, L)
                else:
                    results = [fn(*instance_args(lin)) for lin in range(first, first + len(flat))]
                for lin, result in enumerate(results, first):
                    self._store_instance(result, outputs, p, lin, L)

    def _run_group(self, fn: Any, instance_args: Any, L: int) -> list[Any]:
        """Step the instances of one group from barrier to barrier. An instance that has returned
        takes no part in later barriers (the plan has checked that barriers are uniform)."""
        gens: list[Iterator[Any] | None] = [fn(*instance_args(lin)) for lin in range(L)]
        results: list[Any] = [None] * L
        running = L
        while running:
            for lin, gen in enumerate(gens):
                if gen is None:
                    continue
                try:
                    next(gen)
                except StopIteration as stop:
                    results[lin] = stop.value
                    gens[lin] = None
                    running -= 1
        return results

    def _live_outputs(self, result: Any, outputs: list[np.ndarray | None]) -> list[tuple[Any, np.ndarray, str]]:
        """(value, output array, mode) for every output someone reads."""
        if result is None:
            return []
        return [(value, out, mode) for value, out, mode in zip(result, outputs, self.ctx.output_modes)
                if out is not None and mode != "unused"]

    def _store_instance(self, result: Any, outputs: list[np.ndarray | None], p: int, lin: int,
                        L: int) -> None:
        for value, out, mode in self._live_outputs(result, outputs):
            if mode == "per_instance":
                out[p * L + lin] = _to_bits(value, out)
            elif lin == 0:
                out[p] = _to_bits(value, out)

    def _store_outputs(self, result: Any, outputs: list[np.ndarray | None], start: int, stop: int,
                       L: int) -> None:
        for value, out, mode in self._live_outputs(result, outputs):
            full = np.broadcast_to(np.asarray(value), (stop - start,))
            if mode == "per_instance":
                out[start:stop] = _to_bits(full, out)
            else:  # the groups whose instance 0 is in this chunk
                first = np.arange(start, stop, dtype=np.int64) % L == 0
                out[np.arange(start, stop, dtype=np.int64)[first] // L] = _to_bits(full[first], out)

    def _user_line(self, exc: BaseException) -> Loc:
        tb = exc.__traceback__
        line = None
        while tb is not None:
            if tb.tb_frame.f_code.co_filename == self.leaf.loc.file and \
                    tb.tb_frame.f_globals is self.code.namespace:
                line = tb.tb_lineno
            tb = tb.tb_next
        return Loc(self.leaf.loc.file, line or self.leaf.loc.line, 0)


def _to_bits(value: Any, out: np.ndarray) -> Any:
    """Output arrays of bf16 hold bit patterns."""
    if out.dtype == np.uint16 and np.asarray(value).dtype == np.float32:
        return S.bf16_to_bits(value)
    return value


class PythonBackend(Backend):
    name = "python"
    # every access is checked by the generated code itself: no bounds proof, no checked variant
    checks_accesses = True
    # its kernels launch without prepare(): nothing to record for a replay
    replays = False

    def variant(self, checked: bool) -> tuple[Any, ...]:
        return (vector_allowed(),)  # one kernel checks every access: `checked` changes nothing

    def build(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool,
              key: CacheKey) -> PythonLeafKernel:
        return PythonLeafKernel(leaf, ctx, key[-1])

    def reusable(self, kernel: LeafKernel, leaf: K.LeafFunc) -> bool:
        """A kernel serves a leaf of equal IR at the same places only: its code is compiled with
        its leaf's file and lines, and its errors name them."""
        assert isinstance(kernel, PythonLeafKernel)
        return kernel.leaf is leaf or _places(kernel.leaf) == _places(leaf)


def _places(leaf: K.LeafFunc) -> list[Loc]:
    """Where the leaf, its parameters, statements and expressions are (not part of its IR's repr)."""
    return [leaf.loc, *(p.loc for p in leaf.params), *(s.loc for s in K.walk_stmts(leaf.body)),
            *(e.loc for e in K.walk_all_exprs(leaf.body))]
