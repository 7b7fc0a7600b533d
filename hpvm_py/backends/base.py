"""The contract between the runtime and a backend (docs/backends.md, "The backend contract").

A target is a `Backend` subclass listed in `registry.TARGETS`. It compiles one `LeafKernel` per
(leaf function, NodeContext, checked) through the caches every backend shares (in memory, and on
disk for what is costly to make), and the executor launches that kernel once per firing of the
node, for all its dynamic instances, including all instances of replicated ancestors.

Where a leaf sits (its `NodeContext`: instance space and value layouts) is ir/context.py's.
"""
from __future__ import annotations

import functools
import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, ClassVar, Hashable, Protocol

import numpy as np

from ..errors import ExecutionError
from ..ir.context import NodeContext
from ..ir.kernel import LeafFunc, shown_name
from ..support import cache, profile, stats
from ..support.loc import Loc
from ..support.version import VERSION


@dataclass
class BufferArg:
    """A pointer argument: the memory object as the backend's device sees it.

    `address` is the base address on the target device, `nbytes` the object's real size (the
    executor has already checked that the size argument the user passed does not exceed it). Host
    memory also has a flat NumPy view of its elements, `host_array()`: given as `array`, or made
    on first use by `view(obj)` (compiled kernels need only the address, and a launch on a buffer
    never seen would otherwise make a view no one reads: several microseconds for a tensor).
    Device memory has neither.
    """

    obj: Any
    address: int
    nbytes: int
    array: np.ndarray | None  # the view, once made
    view: Callable[[Any], np.ndarray] | None = field(default=None, repr=False, compare=False)
    elem: Any = field(default=None, repr=False, compare=False)  # the view's element type (host)

    @property
    def on_host(self) -> bool:
        return self.array is not None or self.view is not None

    def host_array(self) -> np.ndarray | None:
        """The NumPy view (made now if need be); None for device memory."""
        if self.array is None and self.view is not None:
            self.array, self.view = self.view(self.obj), None
        return self.array


class PreparedLaunch(Protocol):
    """One launch of a kernel, packed: run() runs it; a replay (rt/replay.py) patches its scalars
    (set_uniform) and runs it again while `reusable`. A `copyable` one also gives copy(): the same
    launch on its own packed parameters, whose buffers set_buffer() points elsewhere (a
    recording's launches for other buffers of the same sizes)."""

    reusable: bool
    copyable: bool

    def run(self) -> None:
        ...

    def set_uniform(self, i: int, value: Any) -> None:
        ...

    def set_buffer(self, i: int, arg: BufferArg) -> None:
        ...

    def copy(self) -> "PreparedLaunch":
        ...


class LeafKernel:
    """A leaf compiled for one NodeContext on one target.

    A kernel that `prepares` packs a launch with prepare() and runs it with run(); launch() is
    exactly that. One that does not (the python target's, a collective) overrides launch().
    """

    # prepare() is there: launches can be recorded and replayed, and streamed stages started
    prepares: ClassVar[bool] = True
    # where the executor hands this kernel its buffers; None: where its node's target runs
    device: str | None = None

    def prepare(self, args: list[Any], outputs: list[np.ndarray | None],
                extents: list[tuple[int, ...]]) -> PreparedLaunch:
        """Everything a launch needs, packed; run() may be called again with patched scalars."""
        raise NotImplementedError(f"{type(self).__name__} launches without prepare()")

    def variant(self, args: list[Any], extents: list[tuple[int, ...]]) -> Hashable:
        """Which form of its code prepare() packs for these arguments (None: always the same).
        A prepared launch may take another launch's scalars (set_uniform) only where both have
        the same variant: the gpu target's row masks and quads are safe for some guard bounds
        only (backends/triton/rowguard.py). Streams key their kept launches by it; a replay
        keys every integer argument, and one computed per launch that a bounds proof reads
        keeps a GPU launch from being recorded (rt/replay.py)."""
        return None

    def launch(self, args: list[Any], outputs: list[np.ndarray | None],
               extents: list[tuple[int, ...]]) -> None:
        """Run every dynamic instance.

        args: one per parameter: BufferArg for pointers, a NumPy scalar for uniform scalars, a
        NumPy array for per_parent / per_instance scalars (on the GPU targets also a CUDA tensor
        of their memory form, read in place). outputs: one per output port, an array
        of the output's dtype of length P (per_parent) or P * L (per_instance), or None (unused).
        extents: extents[k] is the tuple of extents of level k (len == level_dims[k]).
        """
        self.prepare(args, outputs, extents).run()


# (repr of the leaf's IR, the context's key, then the backend's variant: checked, ...)
CacheKey = tuple[Any, ...]


class Backend:
    """A target. Subclasses set `name` and the properties below and implement build(); the
    memory cache, the disk cache, availability and emit() have their shared form here."""

    name: ClassVar[str]
    # the kernel checks every access itself: no bounds proof, no checked variant (python)
    checks_accesses: ClassVar[bool] = False
    # kernels are built when they launch, for the device they run on (the gpu target: Triton's
    # JIT): where the target cannot run, a launch cannot compile its leaves either
    compiles_at_launch: ClassVar[bool] = False
    # launches of a graph compiled for this target are recorded for replay (rt/replay.py)
    replays: ClassVar[bool] = True
    # a stream of its leaves on one device may run whole items (rt/stream/items.py): its kernels
    # read a uniform input from a producer's device array, queued on a CUDA stream
    whole_items: ClassVar[bool] = False
    # what `hpvmc compile --emit KIND` writes for this target's leaves: KIND -> file suffix
    emits: ClassVar[dict[str, str]] = {}
    # the stats() counter of memory-cache hits (None: not counted)
    memory_hits: ClassVar[str | None] = None
    # the subpackages of backends/ whose source is part of every disk-cache key (code_version)
    code_packages: ClassVar[tuple[str, ...]] = ()

    # compiled kernels by CacheKey, one table per subclass (so per target), least recently used
    # first. Only MEMORY_KEPT are kept: a leaf whose IR changes as the program runs (a watched
    # global changed each step, a graph made per step with its constants in it) has a new key
    # each time, and a compiled graph holds its own kernels anyway (the disk cache has the rest)
    _memory: ClassVar[dict[CacheKey, LeafKernel]] = {}
    MEMORY_KEPT: ClassVar[int] = 256
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._memory = {}
        cls._lock = threading.Lock()

    # -- availability ------------------------------------------------------------------------

    def available(self) -> bool:
        """Whether its kernels can run here."""
        return True

    def why_unavailable(self) -> str:
        """Why available() is false (what is missing, what to do)."""
        return f"the {self.name} backend reports that it cannot run here"

    def compilable(self) -> bool:
        """Whether leaves can be compiled here (some toolchains work without their device)."""
        return self.available()

    # -- compiling ---------------------------------------------------------------------------

    def compile_leaf(self, leaf: LeafFunc, ctx: NodeContext, checked: bool = False) -> LeafKernel:
        """The kernel of `leaf` in `ctx`, from the memory cache or built (and kept)."""
        key = (repr(leaf), ctx.key()) + self.variant(checked)
        with self._lock:
            kernel = self._memory.pop(key, None)
            if kernel is not None:
                self._memory[key] = kernel  # (again, as the most recently used)
        if kernel is not None and self.reusable(kernel, leaf):
            if self.memory_hits is not None:
                stats.bump(self.memory_hits)
            if profile.on:
                profile.complete("cache", f"kernel cache hit {shown_name(leaf)}", profile.now(),
                                 args={"target": self.name, "checked": checked})
            return self.for_leaf(kernel, leaf)
        if profile.on:
            with profile.span("compile", f"{self.name} {shown_name(leaf)}", args={"checked": checked}):
                kernel = self.build(leaf, ctx, checked, key)
        else:
            kernel = self.build(leaf, ctx, checked, key)
        with self._lock:
            found = self._memory.get(key)
            if found is None or not self.reusable(found, leaf):
                self._memory[key] = found = kernel
                while len(self._memory) > self.MEMORY_KEPT:
                    del self._memory[next(iter(self._memory))]  # the least recently used
            return found

    def variant(self, checked: bool) -> tuple[Any, ...]:
        """What else than the IR and the context a kernel depends on (part of its cache key)."""
        return (checked,)

    def build(self, leaf: LeafFunc, ctx: NodeContext, checked: bool, key: CacheKey) -> LeafKernel:
        """Compile the kernel (the memory cache missed)."""
        raise NotImplementedError

    def reusable(self, kernel: LeafKernel, leaf: LeafFunc) -> bool:
        """Whether a kernel built for IR equal to `leaf`'s serves `leaf` (through for_leaf)."""
        return True

    def for_leaf(self, kernel: LeafKernel, leaf: LeafFunc) -> LeafKernel:
        """A cached kernel for `leaf`, whose IR equals the one it was built for (locations are
        not part of the IR: a compiled kernel reports errors at its own leaf's lines)."""
        return kernel

    def disk_cached(self, parts: tuple[str, ...], suffix: str, make: Callable[[], bytes],
                    counter: str, check: Callable[[bytes], str | None] | None = None) -> bytes:
        """An artifact from the disk cache (support/cache.py) under the hash of `parts`, or made
        by make(), counted in stats() as `counter`, and stored. `check` says what is wrong with a
        cached artifact, if anything (it is then made again)."""
        key = cache.content_key(*parts)
        data = cache.load(key, suffix, check)
        if data is None:
            if profile.on:
                with profile.span("compile", f"{counter} ({suffix})"):
                    data = make()
            else:
                data = make()
            stats.bump(counter)
            cache.store(key, suffix, data)
        return data

    def versions(self) -> tuple[str, str]:
        """What a disk-cache key holds besides the content: the package's version and a hash of
        this backend's code generators' source (objects built by other code never match)."""
        return VERSION, code_version(type(self).code_packages)

    # -- emitting ----------------------------------------------------------------------------

    def emit(self, kind: str, leaf: LeafFunc, ctx: NodeContext) -> str:
        """The generated code `hpvmc compile --emit KIND` writes, for a KIND in `emits`."""
        raise NotImplementedError(f"the {self.name} backend emits no {kind}")

    def emit_variants(self, kind: str, leaf: LeafFunc, ctx: NodeContext) -> dict[str, str]:
        """`hpvmc compile --emit KIND --variants`: the other versions of emit()'s code that a
        launch may run instead, by a short name, each text opening with a comment that says when
        it runs; none by default."""
        return {}


# What every backend's output depends on besides its own subpackage, relative to hpvm_py/: the
# modules beside base.py (jit.py's O3 pipeline, softhalf.py), the IR and its semantics, the types
# and the backend passes (the clip and bounds passes decide which checks the code keeps). An edit
# there changes generated code, so it must change the disk cache's keys as well.
SHARED_CODE = ("backends", "ir", "passes", "types.py")


@functools.cache
def code_version(packages: tuple[str, ...]) -> str:
    """A hash of the source of these subpackages of backends/ and of SHARED_CODE (what a cached
    artifact made by their code depends on)."""
    digest = hashlib.sha256()
    for path in code_files(packages):
        digest.update(str(path.relative_to(_PACKAGE)).encode() + b"\0")
        digest.update(path.read_bytes())
    return digest.hexdigest()


_PACKAGE = Path(__file__).resolve().parent.parent  # hpvm_py/


def code_files(packages: tuple[str, ...]) -> list[Path]:
    """The source files code_version() hashes."""
    files: list[Path] = []
    for package in packages:
        files += sorted((_PACKAGE / "backends" / package).glob("*.py"))
    for shared in SHARED_CODE:
        path = _PACKAGE / shared
        files += sorted(path.glob("*.py")) if path.is_dir() else [path]
    return files


MAX_SCRATCH_BYTES = 2**63 - 1  # what the mallocs of one leaf may add up to (docs/language.md)


def scratch_past_limit(leaf: LeafFunc, loc: Loc | None) -> ExecutionError:
    """The launch error of mallocs whose sizes add up past MAX_SCRATCH_BYTES, at the malloc that
    crosses it (every target says the same)."""
    return ExecutionError(f"{shown_name(leaf)}: could not allocate the malloc scratch: the sizes "
                          "of this leaf's mallocs add up to more than 2**63 - 1 bytes", loc)


def negative_malloc(leaf: LeafFunc, nbytes: int, loc: Loc | None) -> ExecutionError:
    """The launch error of a malloc of a negative size, at that malloc (every target says the
    same)."""
    return ExecutionError(f"{shown_name(leaf)}: could not allocate the malloc scratch: a negative "
                          f"size ({nbytes})", loc)


def symbol_name(name: str) -> str:
    """The identifier form of an IR name (a leaf's, a parameter's) for generated code. Python
    identifiers may be any Unicode letters, and a name read from .hpvm text any characters
    (`@"a b"`, `@a.b`, `@"1x"`), but llvmlite looks symbols up by ASCII name, PTX symbols are
    identifiers (LLVM's NVPTX backend aborts the process on a space, ptxas refuses a dot, a
    leading digit or a lone `_`) and Triton refuses other kernel names: each other character
    becomes _u<hex>_, as does a first character that cannot start one (ASCII identifiers, every
    name the front end makes but `_`, are their own form)."""
    if _IDENTIFIER.fullmatch(name):
        return name
    escaped = "".join(c if c.isascii() and (c.isalnum() or c == "_") else f"_u{ord(c):x}_"
                      for c in name)
    if _IDENTIFIER.fullmatch(escaped):
        return escaped
    return f"_u{ord(escaped[0]):x}_{escaped[1:]}" if escaped else "_u_"


_IDENTIFIER = re.compile(r"[A-Za-z][A-Za-z0-9_]*|_[A-Za-z0-9_]+")  # as PTX spells them


def unparenthesized(text: str) -> str:
    """Generated code `text` without the parentheses around all of it, for a place that delimits
    it already (a call's argument): Python refuses code nested more than 200 parentheses deep, and
    a call around a parenthesised operation (a bf16 rounding, an implicit cast) would nest two per
    level of the user's expression, which may be 128 deep (the python and gpu targets' code)."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for k, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return text[1:-1] if k == len(text) - 1 else text
    return text


def shares_memory(args: list[Any], index: int) -> bool:
    """Whether buffer argument `index` of a launch overlaps another of its buffer arguments: both
    are the same memory (docs/language.md, "buffer-overlap"), so an instance reads its own atomic
    updates through the other one, which a private copy of the buffer (the cpu target's
    privatised atomics, the gpu target's private counts) would hide until its merge."""
    buf = args[index]
    begin, end = buf.address, buf.address + buf.nbytes
    return any(type(other) is BufferArg and j != index and other.address < end and
               begin < other.address + other.nbytes for j, other in enumerate(args))
