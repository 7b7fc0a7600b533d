"""Kernel IR -> Triton source: one program runs a block of a leaf's dynamic instances.
(docs/architecture.md, "Module notes": backends/triton/codegen.py)"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from ...errors import CompileError
from ...ir import kernel as K
from ...passes.uniform import Uniformity
from ...support import settings
from ...types import PtrType, ScalarType, bf16, f32
from ..base import NodeContext, symbol_name
from ..access_errors import Access
from . import values as V
from .accesses import MemoryAccesses
from .controlflow import ControlFlow, Loop
from .dotmatch import DotLoop
from .dottiles import DotTiles
from .gridtiles import GridTiles, TileUniformity
from .mathcalls import SUGGESTION, MathCalls, unsupported
from .prelude import HEADER, INTERPRETER_IMPORT, QUAD_HELPERS, gpu_identity_helpers, library_helper
from .passes import (OPTIMISATIONS, PASSES, dot_loop, masked_in_loops, needs_live,
                     private_buffers, row_guard, spread_loops)
from .privatise import PrivateCount, PrivateCounts
from .quads import QuadAccesses, quad_loads, with_centres
from .reductions import without
from .rowguard import weakened
from .remote_access import HEAP_ARGUMENTS, RemoteAccesses
from .scratch import Scratch, scratches
from .spread import SpreadLoops

# Lanes of a leaf with barriers (all instances of a parent in one program) at most.
MAX_GROUP_LANES = 4096
_ATOMIC_TYPES = ("i32", "u32", "i64", "u64", "f32", "f64")


@dataclass
class TritonSource:
    """Generated code of one leaf for one NodeContext, and how to call it."""

    text: str
    kernel: str  # the @triton.jit function's name
    grouped: bool  # one program per parent instance (barriers, malloc)
    checked: bool
    arguments: dict[str, str]  # parameter -> Triton type ("*fp32", "i64", "constexpr")
    sites: list[Access] = field(default_factory=list)  # the checked accesses, by site number
    scratch: list[Scratch] = field(default_factory=list)
    dot: DotLoop | None = None  # a tl.dot kernel: one program per block of (row, column) coordinates
    private: list[PrivateCount] = field(default_factory=list)  # buffers counted per program
    tiles: bool = False  # programs over TX x TY tiles of the combined grid (gridtiles.py)
    # the leaf with its trailing guard cut to the row conjuncts, which a launch proves before it
    # runs the `rows` variant (rowguard.py); None: the leaf has no such guard
    row_guard: K.LeafFunc | None = None
    rows: bool = False  # this text masks the guard's loads by its row conjuncts only
    # groups of the guard's neighbouring loads that the rows variant may serve from quads of
    # lanes (quads.py), and whether this text does
    quad_groups: int = 0
    # row_guard with the groups' centres loaded too: proven before a launch runs quads (None where
    # every centre is a quad-mate's load, which row_guard's proof covers)
    quad_proof: K.LeafFunc | None = None
    quads: bool = False
    spread: bool = False  # reduction loops run over the program's lanes (spread.py)
    # the spread loop may be split over SPLIT programs per parent instance (spread.py), each
    # leaving this many 64-bit words of partial results; 0: it may not (SPLIT is no parameter)
    split_words: int = 0

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()


DOT_PRECISIONS = ("ieee", "tf32x3")  # HPVM_DOT_PRECISION's values: tl.dot's input_precision


def dot_precision() -> str:
    """HPVM_DOT_PRECISION: how tl.dot kernels multiply f32 (docs/backends.md)."""
    value = settings.DOT_PRECISION.get()
    if value not in DOT_PRECISIONS:
        raise CompileError(f"HPVM_DOT_PRECISION={value!r}: expected one of {', '.join(DOT_PRECISIONS)}")
    return value


def generate(leaf: K.LeafFunc, ctx: NodeContext, checked: bool, interpreted: bool,
             fixed_grid: bool = False, optimised: bool = True,
             precision: str = "ieee", rows: bool = False, quads: bool = False) -> TritonSource:
    """The kernel file; `interpreted`: for Triton's interpreter (library math through NumPy);
    `fixed_grid`: the leaf's own extents are compile-time constants (a variant for small grids, so
    the per-lane ids cost shifts and masks rather than divisions); `optimised`, the first that
    applies: a recognised dot loop becomes a tl.dot kernel (dotmatch.py), counting atomics are
    privatised per program (privatise.py), a leaf under a replicated parent runs in tiles of the
    combined grid (gridtiles.py). Never in the checked variant, which reports accesses one
    instance at a time; without `optimised`, the literal translation (what a launch falls back
    to when the optimised kernel does not suit it). Reduction loops of one-instance leaves are
    spread over the lanes in every variant (spread.py). Those decisions are the backend passes'
    (passes.py), which run first and note them in the leaf. `precision`: tl.dot's input_precision
    (HPVM_DOT_PRECISION). `rows`: a grid-tiles leaf's trailing guard masks its loads by its row
    conjuncts only (rowguard.py; for launches whose proof of `row_guard` holds); `quads`, with
    `rows`: its neighbouring loads come from quads of lanes (quads.py; for launches whose x
    extents `quads_fit`)."""
    optimised = optimised and not checked
    label = "checked" if checked else "optimised" if optimised else "literal"
    ready = PASSES.final(leaf, ctx, skip=frozenset() if optimised else OPTIMISATIONS, label=label)
    return _Generator(ready, ctx, checked, interpreted, fixed_grid, precision, rows, quads).run()


_TRITON_TYPE = {"i1": "i1", "i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "u8": "u8",
                "u16": "u16", "u32": "u32", "u64": "u64", "f16": "fp16", "bf16": "i16", "f32": "fp32",
                "f64": "fp64"}


def _pointer(elem: ScalarType) -> str:
    return "*" + _TRITON_TYPE[elem.name]


def _negation_operand(e: K.BinOp) -> K.Expr | None:
    """y of an integer `0 - y`, `y * -1` or `-1 * y`: LLVM makes each a negation, which goes
    through _ineg as a written one does (prelude.py says why)."""
    if e.type.is_float:
        return None
    if e.op == "sub" and isinstance(e.lhs, K.Const) and e.lhs.value == 0:
        return e.rhs
    if e.op == "mul":
        for minus_one, other in ((e.lhs, e.rhs), (e.rhs, e.lhs)):
            if isinstance(minus_one, K.Const) and minus_one.value == -1:
                return other
    return None


def kernel_name(name: str) -> str:
    """The generated code's name of a leaf parameter or local."""
    return "v_" + "".join(c if c.isalnum() or c == "_" else "_" for c in symbol_name(name))


class _Generator(ControlFlow, MemoryAccesses, RemoteAccesses, MathCalls, GridTiles, DotTiles,
                 PrivateCounts, SpreadLoops, QuadAccesses):
    def __init__(self, leaf: K.LeafFunc, ctx: NodeContext, checked: bool, interpreted: bool,
                 fixed_grid: bool, precision: str, rows: bool = False, quads: bool = False):
        self.interpreted = interpreted
        self.precision = precision
        self.fixed_grid = fixed_grid
        self.leaf = leaf
        self.ctx = ctx
        self.checked = checked
        self.dot = dot_loop(leaf, ctx)  # the backend passes' decisions (passes.py)
        self.zero = "ZERO"  # an int64 zero block of the shape of the lanes being generated
        # (ASCII: Triton refuses other identifiers as a kernel's name)
        self.kernel = "k_" + "".join(c if c.isalnum() else "_" for c in symbol_name(leaf.name))
        self.scratch = scratches(leaf, ctx.input_modes, SUGGESTION)
        masked = masked_in_loops(leaf.body)
        self.grouped = self.dot is None and (bool(self.scratch) or any(
            isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body)))
        if self.dot is not None:  # the loop that used the scratch tiles and barriers is replaced
            self.scratch = []
        self.private = private_buffers(leaf)
        self.tiles = bool(leaf.noted("gridtiles"))
        self.row_guard = row_guard(leaf, ctx)  # (noted in grid-tiles leaves only)
        self.rows = rows and self.row_guard is not None
        self.columns: str | None = None  # while the guard's body is generated: its x conjuncts
        found = None if self.row_guard is None else \
            quad_loads(leaf, self.row_guard, ctx.level_dims, ctx.input_modes)
        self.quad_groups = len(found.groups) if found else 0
        self.quad_proof = None if found is None or self.row_guard is None or found.covered else \
            weakened(with_centres(leaf, self.row_guard, found), self.row_guard)
        self.quads = found if self.rows and quads else None  # QuadLoads, in the quads variant
        # a group's centre, the name of its parts and its loads' mask terms (quads.py)
        self.quad_centres: dict[int, tuple[str, str, tuple[str, ...]]] = {}
        # (group, an element's place from its quad's first lane) -> its load past the quad's ends
        self.quad_edges: dict[tuple[int, int], tuple[str, tuple[str, ...]]] = {}
        if self.dot is not None or self.tiles:
            self.uniform: Uniformity = TileUniformity(leaf, ctx.input_modes, masked, frozenset({0, 1}))
        else:
            self.uniform = Uniformity(leaf, ctx.input_modes, frozenset(), masked)
        # one instance per program, whose lanes are idle: reduction loops may use them (in every
        # variant: it suits any launch, and the checked one reports in sequential order)
        self.spread, split = spread_loops(leaf, self.uniform)
        # lanes are instances: the checked variant stops a lane at its first failure, as python
        # stops the instance (left running on the masked load's 0, `while a[j] == 0: j += 1`
        # never ended), so `live` also holds the lanes that have not failed
        self.stops = checked and not self.spread
        self.live = needs_live(leaf) or self.stops
        if self.spread:  # their loop variables and temporaries are per lane; the rest as before
            per_lane = frozenset().union(*(r.per_lane for r in self.spread))
            self.uniform = Uniformity(without(leaf, self.spread), ctx.input_modes, frozenset(),
                                      masked | per_lane)
        # the checked variant keeps one program per parent: its reports come in loop order
        self.split = not checked and split
        self.combiners: dict[str, str] = {}  # the spread loops' helpers: name -> source
        self.types: dict[str, ScalarType | PtrType] = {p.name: p.type for p in leaf.params}
        self.types.update(leaf.locals)  # type: ignore[arg-type]
        self.names = {name: kernel_name(name) for name in self.types}
        self.lines: list[str] = []
        self.indent = 1
        self.counter = 0
        self.terms: list[str] = []
        self.loops: list[Loop] = []
        self.sites: list[Access] = []
        self.library: set[str] = set()
        self.arguments = self._arguments()

    # -- output -------------------------------------------------------------------------------

    def emit(self, text: str) -> None:
        self.lines.append("    " * self.indent + text)

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"_{base}{self.counter}"

    def run(self) -> TritonSource:
        self._check_supported()
        body_start = len(self.lines)
        if self.private:  # ITERS blocks of instances per program, then one merge of the counts
            self.private_init()
            self.emit("for it in range(ITERS):")
            self.indent += 1
        self.terms = ["live" if self.live else "m0"]
        if self.dot:
            self.dot_kernel_body()
        else:
            self._grid_tile_prologue() if self.tiles else self._prologue()
            # the checked variant keeps each lane's first failure and reports the lowest failing
            # lane's at the end, as python reports the first failing instance (reported as they
            # came, a later lane failing in an earlier loop trip won)
            if self.stops:
                self._open_failures()
            self.block(self.leaf.body)
            if self.stops:
                self._close_failures()
        self._epilogue()
        if self.private:
            self.indent -= 1
            self.private_merge()
        body = self.lines[body_start:]
        self.lines = self.lines[:body_start]
        header = [HEADER + gpu_identity_helpers(self.interpreted)
                  + (QUAD_HELPERS if self.quads else "")
                  + (INTERPRETER_IMPORT if self.interpreted else "")]
        for name in sorted(self.library | self._library_in_helpers(body)):
            header.append(library_helper(name, self.interpreted))
        header += [self.combiners[name] for name in sorted(self.combiners)]
        text = "".join(header) + "\n\n@triton.jit\n" + self._signature() + "\n".join(body) + "\n"
        return TritonSource(text=text, kernel=self.kernel, grouped=self.grouped,
                            checked=self.checked, arguments=self.arguments, sites=self.sites,
                            scratch=self.scratch, dot=self.dot, private=self.private,
                            tiles=self.tiles, spread=bool(self.spread),
                            row_guard=(None if self.row_guard is None
                                       else weakened(self.leaf, self.row_guard)),
                            rows=self.rows, quad_groups=self.quad_groups,
                            quad_proof=self.quad_proof,
                            quads=self.quads is not None,
                            split_words=self.spread[0].words if self.split else 0)

    def _arguments(self) -> dict[str, str]:
        """The kernel's parameters in order, with their Triton types (as kernel.py passes them)."""
        args: dict[str, str] = {}
        for p, mode in zip(self.leaf.params, self.ctx.input_modes):
            name = self.names[p.name]
            if mode == "buffer":
                assert isinstance(p.type, PtrType)
                args[name] = _pointer(p.type.elem)
                if self.checked:
                    args[f"{name}__limit"] = "i64"
            elif mode == "uniform":
                args[f"{name}__arg"] = "i64"
            else:
                assert isinstance(p.type, ScalarType)
                args[f"{name}__arg"] = _pointer(f32 if p.type == bf16 else p.type)
        for j, (out, mode) in enumerate(zip(self.leaf.outputs, self.ctx.output_modes)):
            if mode != "unused":
                assert isinstance(out.type, ScalarType)
                args[f"out{j}"] = _pointer(out.type)
        for scratch in self.scratch:
            name = self.names[scratch.name]
            args[f"{name}__base"] = _pointer(scratch.elem)
            args[f"{name}__stride"] = "i64"
            if self.checked:
                args[f"{name}__limit"] = "i64"
        for level, dims in enumerate(self.ctx.level_dims):
            kind = "constexpr" if level == 0 and self.fixed_grid else "i64"
            args.update({f"E{level}_{d}": kind for d in range(dims)})
        if any(K.remote_accesses(self.leaf.body)):
            args.update(HEAP_ARGUMENTS)
        args["LB"] = args["L"] = "i64"
        if self.checked:
            args["ERR"] = "*i64"
        if self.split:
            args["SPLIT_AREA"] = "*i64"
        args["BLOCK"] = "constexpr"
        if self.dot:
            args.update(BM="constexpr", BN="constexpr", BK="constexpr", GROUP="constexpr")
        if self.tiles:
            args.update(TX="constexpr", TY="constexpr")
        for p in self.private:
            args.update({f"{self.names[p.name]}__count": "i64", f"NB_{self.names[p.name]}": "constexpr"})
        if self.private:
            args.update(ITERS="i64", LANES32="constexpr")
        if self.split:
            args["SPLIT"] = "constexpr"
        return args

    def _signature(self) -> str:
        params = [name if kind != "constexpr" else f"{name}: tl.constexpr"
                  for name, kind in self.arguments.items()]
        doc = f'    """Leaf {self.leaf.name} ({self.leaf.loc}), {self.ctx.key()}."""\n'
        return f"def {self.kernel}({', '.join(params)}):\n" + doc

    @staticmethod
    def _library_in_helpers(body: list[str]) -> set[str]:
        """Library functions the prelude's own helpers call (float // and % use fmod)."""
        text = "\n".join(body)
        return {"fmod"} if "_ffloordiv(" in text or "_fmod_py(" in text else set()

    # -- what cannot be expressed -----------------------------------------------------------------

    def _check_supported(self) -> None:
        for stmt in K.walk_stmts(self.leaf.body):
            if isinstance(stmt, (K.Print, K.Breakpoint)):
                what = "print()" if isinstance(stmt, K.Print) else "breakpoint()"
                raise CompileError(f"{what} is supported only by target='python'", stmt.loc)
        for e in K.walk_all_exprs(self.leaf.body):
            if isinstance(e, K.CallHelper):
                raise unsupported(f"a call of helper {e.func} that was not inlined", e.loc)
            if isinstance(e, K.Atomic):
                elem = self._elem(e.ptr)
                native = e.op in ("add", "sub", "xchg")
                by_cas = elem.is_float and (e.op in ("min", "max") or (elem.bits == 16 and native))
                if not by_cas and (elem.name not in _ATOMIC_TYPES or (elem.is_float and not native)):
                    raise unsupported(f"atomic_{e.op} on a {elem} buffer", e.loc)

    # -- prologue / epilogue ------------------------------------------------------------------

    def _prologue(self) -> None:
        e = self.emit
        if self.private:  # lane arithmetic in 32 bits when the launch's extents allow (kernel.py)
            e("pid = tl.program_id(0)")
            e("if not LANES32:")
            e("    pid = pid.to(tl.int64)")
        else:
            e("pid = tl.program_id(0).to(tl.int64)")
        if self.split:  # SPLIT programs per parent instance share its spread loop (spread.py)
            e("part = pid % SPLIT")
            e("pid = pid // SPLIT")
        e("parent = pid // LB")
        block = "((pid % LB) * ITERS + it)" if self.private else "(pid % LB)"
        e(f"lin = {block} * BLOCK + tl.arange(0, BLOCK).to(pid.dtype)")
        e("m0 = lin < L")
        e("ZERO = tl.zeros([BLOCK], tl.int64)")
        e("FALSE = lin < 0")
        e("Z64 = tl.zeros([], tl.int64)")
        dims0 = self.ctx.level_dims[0] if self.ctx.level_dims else 0
        rest = "lin"
        for d in range(dims0):  # leaf ids: lanes, int64 values whatever the lane arithmetic's width
            last = d == dims0 - 1
            e(f"id0_{d} = ({rest}" + ("" if last else f" % E0_{d}") + ").to(tl.int64)")
            if not last:
                e(f"rest0_{d} = {rest} // E0_{d}")
                rest = f"rest0_{d}"
        rest = "parent"
        for level in range(1, len(self.ctx.level_dims)):  # ancestors' ids: uniform
            dims = self.ctx.level_dims[level]
            count = " * ".join(f"E{level}_{d}" for d in range(dims)) or "1"
            e(f"lin{level} = {rest} % ({count})")
            e(f"rest{level} = {rest} // ({count})")
            inner = f"lin{level}"
            for d in range(dims):
                last = d == dims - 1
                e(f"id{level}_{d} = ({inner}" + ("" if last else f" % E{level}_{d}") + ").to(tl.int64)")
                if not last:
                    e(f"in{level}_{d} = {inner} // E{level}_{d}")
                    inner = f"in{level}_{d}"
            rest = f"rest{level}"
        self._prologue_values()

    def _prologue_values(self) -> None:
        """Parameters, scratch slices, locals and outputs, once the lanes' ids are known."""
        self._uniform_params()
        self._lane_values()

    def _uniform_params(self) -> None:
        for p, mode in zip(self.leaf.params, self.ctx.input_modes):
            if mode == "uniform":
                assert isinstance(p.type, ScalarType)
                name = self.names[p.name]
                self.emit(f"{name} = {self._from_bits(f'{name}__arg', p.type)}")

    def _lane_values(self) -> None:
        """Per-parent and per-instance parameters, scratch slices, locals, outputs."""
        e = self.emit
        for p, mode in zip(self.leaf.params, self.ctx.input_modes):
            if mode in ("buffer", "uniform"):
                continue
            assert isinstance(p.type, ScalarType)
            name = self.names[p.name]
            # arrays of values; bf16 ones arrive as f32 values (kernel.py)
            stored = f32 if p.type == bf16 else p.type
            at = "parent * L + lin, mask=m0"
            if mode == "per_parent":  # a block where tiles span parents (masked like one)
                at = "parent, mask=m0" if self.tiles or self.dot else "parent"
            e(f"{name} = {V.from_memory(f'tl.load({name}__arg + {at})', stored)}")
        for scratch in self.scratch:  # this parent instance's slice
            name = self.names[scratch.name]
            e(f"{name} = {name}__base + parent * {name}__stride")
        for name, t in self.leaf.locals.items():
            if isinstance(t, ScalarType):
                shape = "[]" if self._uniform_var(name) else "[BLOCK]"
                e(f"{self.names[name]} = tl.zeros({shape}, {V.reg(t)})")
        for j, (out, mode) in enumerate(zip(self.leaf.outputs, self.ctx.output_modes)):
            assert isinstance(out.type, ScalarType)
            e(f"ret{j} = tl.zeros([BLOCK], {V.reg(out.type)})")
        if self.live:
            e("live = m0")

    def _from_bits(self, arg: str, t: ScalarType) -> str:
        """A uniform scalar argument, passed as the integer of its bits."""
        wide = f"({arg} + Z64)"
        if t.is_bool:
            return f"({wide} != 0)"
        if not t.is_float:
            return f"{wide}.to({V.reg(t)})"
        if t.bits == 64:
            return f"{wide}.to(tl.float64, bitcast=True)"
        return f"{wide}.to(tl.int32).to(tl.float32, bitcast=True)"

    def _epilogue(self) -> None:
        for j, (out, mode) in enumerate(zip(self.leaf.outputs, self.ctx.output_modes)):
            assert isinstance(out.type, ScalarType)
            value = V.to_memory(f"ret{j}", out.type)
            if mode == "per_instance":
                self.emit(f"tl.store(out{j} + parent * L + lin, {value}, mask=m0)")
            elif mode == "per_parent":
                self.emit(f"tl.store(out{j} + parent + ZERO, {value}, mask=m0 & (lin == 0))")

    # -- masks --------------------------------------------------------------------------------

    def mask(self) -> str:
        if len(self.terms) == 1:
            return self.terms[0]
        name = self.fresh("m")
        self.emit(f"{name} = {' & '.join(self.terms)}")
        return name

    def full(self) -> bool:
        """Every lane in the grid runs the current statement (no divergence so far)."""
        return self.terms == ["m0"]

    # -- statements ---------------------------------------------------------------------------

    def block(self, stmts: K.Block) -> None:
        for stmt in stmts:
            self.stmt(stmt)

    def stmt(self, s: K.Stmt) -> None:
        if isinstance(s, K.Assign):
            if not isinstance(s.value, K.Malloc):  # the prologue set malloc'ed pointers
                self.assign(s.target, s.value)
        elif isinstance(s, K.Store):
            self.store(s)
        elif isinstance(s, K.ExprStmt):
            self.emit(f"{self.fresh('x')} = {self.expr(s.value, self.mask())}")
        elif isinstance(s, K.If):
            self.if_(s)
        elif isinstance(s, K.For):
            spread = next((r for r in self.spread if r.loop is s), None)
            if spread is not None:
                self.spread_for(spread)
            else:
                self.for_(s)
        elif isinstance(s, K.While):
            self.while_(s)
        elif isinstance(s, K.Break):
            loop = self.loops[-1]
            assert loop.brk is not None
            self.emit(f"{loop.brk} = {loop.brk} | {self.mask()}")
        elif isinstance(s, K.Continue):
            loop = self.loops[-1]
            assert loop.cnt is not None
            self.emit(f"{loop.cnt} = {loop.cnt} | {self.mask()}")
        elif isinstance(s, K.Return):
            self.return_(s)
        elif isinstance(s, K.Barrier):
            self.emit("tl.debug_barrier()")
        else:
            raise unsupported(type(s).__name__, s.loc)

    def assign(self, target: str, value: K.Expr) -> None:
        name = self.names[target]
        m = self.mask()
        code = self.expr(value, m)
        if self._uniform_var(target):
            self.emit(f"{name} = {code}")
        elif self.full() or self.columns is not None:  # (a row guard's locals: nothing reads them after it)
            self.emit(f"{name} = {self.broadcast(code)}" if self.uniform.expr(value)
                      else f"{name} = {code}")
        else:
            self.emit(f"{name} = {V.choose(value.type, m, code, name)}")

    @staticmethod
    def broadcast(code: str) -> str:
        """A uniform value as a block."""
        return f"tl.broadcast_to({code}, [BLOCK])"

    # -- expressions --------------------------------------------------------------------------

    def _uniform_var(self, name: str) -> bool:
        return self.uniform.expr(K.Var(name=name, type=self.types[name]))

    def expr(self, e: K.Expr, m: str) -> str:
        """Code for e, whose loads and atomics run under mask m (lazy operands under narrower masks)."""
        if isinstance(e, K.Const):
            assert isinstance(e.type, ScalarType)
            return V.constant(e.value, e.type)
        if isinstance(e, K.Var):
            return self.names[e.name]
        t = e.type
        if isinstance(e, K.BinOp):
            assert isinstance(t, ScalarType)
            coordinate = self.combined_coordinate(e)
            if coordinate is not None:
                return coordinate
            negated = _negation_operand(e)
            if negated is not None:
                return V.unary("neg", t, self.expr(negated, m))
            return V.binop(e.op, t, self.expr(e.lhs, m), self.expr(e.rhs, m), e.loc,
                           scalar_divisor=self.uniform.expr(e.rhs))
        if isinstance(e, K.UnaryOp):
            assert isinstance(t, ScalarType)
            return V.unary(e.op, t, self.expr(e.operand, m))
        if isinstance(e, K.Compare):
            return V.compare(e.op, self.expr(e.lhs, m), self.expr(e.rhs, m), e.lhs.type)
        if isinstance(e, K.Logical):
            return self.logical(e, m)
        if isinstance(e, K.Select):
            return self.select(e, m)
        if isinstance(e, K.Cast):
            assert isinstance(t, ScalarType) and isinstance(e.value.type, ScalarType)
            return V.cast(self.expr(e.value, m), e.value.type, t)
        if isinstance(e, K.Load):
            elem = self._elem(e.ptr)
            if self.quads is not None and id(e) in self.quads.members:
                return V.from_memory(self.quad_load(e, m), elem)
            index = self.index(e.index, m)
            rank = self.rank(e.rank, m)
            access = self.guard(e, index, m, rank)
            return V.from_memory(f"tl.load({self.address(e.ptr, index, rank, access)}, mask={access}, "
                                 "other=0)", elem)
        if isinstance(e, K.Atomic):
            return self.atomic(e, m)
        if isinstance(e, K.MathCall):
            return self.math(e, m)
        if isinstance(e, K.InstanceId):
            return self.instance_id(e)
        if isinstance(e, K.NumInstances):
            assert isinstance(t, ScalarType)
            dims = self.ctx.level_dims[e.level] if e.level < len(self.ctx.level_dims) else 0
            value = f"E{e.level}_{e.dim}" if e.dim < dims else "1"
            return f"({value} + Z64).to({V.reg(t)})"
        if isinstance(e, K.NumDims):
            assert isinstance(t, ScalarType)
            dims = self.ctx.level_dims[e.level] if e.level < len(self.ctx.level_dims) else 0
            return V.constant(dims, t)
        raise unsupported(type(e).__name__, e.loc)

    def instance_id(self, e: K.InstanceId) -> str:
        assert isinstance(e.type, ScalarType)
        dims = self.ctx.level_dims[e.level] if e.level < len(self.ctx.level_dims) else 0
        if e.dim >= dims:
            return V.constant(0, e.type)
        code = f"id{e.level}_{e.dim}"
        return code if e.type.name == "i64" else f"{code}.to({V.reg(e.type)})"

    def _safe(self, e: K.Expr) -> bool:
        """Evaluating e touches no memory (so it may run for lanes that would skip it)."""
        return not any(isinstance(x, (K.Load, K.Atomic)) for x in K.walk_exprs(e))

    def logical(self, e: K.Logical, m: str) -> str:
        op = "&" if e.op == "land" else "|"
        lhs = self.expr(e.lhs, m)
        if self._safe(e.rhs):
            return f"({lhs} {op} {self.expr(e.rhs, m)})"
        a = self.fresh("l")
        self.emit(f"{a} = {lhs}")
        inner = self.fresh("m")
        self.emit(f"{inner} = {m} & {a}" if e.op == "land" else f"{inner} = {m} & ~{a}")
        return f"({a} {op} {self.expr(e.rhs, inner)})"

    def select(self, e: K.Select, m: str) -> str:
        cond = self.expr(e.cond, m)
        if self._safe(e.if_true) and self._safe(e.if_false):
            return V.choose(e.type, cond, self.expr(e.if_true, m), self.expr(e.if_false, m))
        c = self.fresh("s")
        self.emit(f"{c} = {cond}")
        mt, mf = self.fresh("m"), self.fresh("m")
        self.emit(f"{mt} = {m} & {c}")
        self.emit(f"{mf} = {m} & ~{c}")
        return V.choose(e.type, c, self.expr(e.if_true, mt), self.expr(e.if_false, mf))
