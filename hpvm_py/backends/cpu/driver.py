"""The driver function of a leaf: loops over parent instances and leaf instances, body inlined.

    for p in [p_begin, p_end):              ancestor ids and per_parent inputs, hoisted
      (group kind) group setup: scratch from malloc, zeroed per-instance storage
      (row kind)   for z, y (or blocks of rows): for each tile of x: group setup
        the plan's items: group-level code, and foralls over the group's instances
        with the leaf body inlined into the innermost (x) loop

The x loop is a plain counted loop over consecutive instances, so LLVM's loop vectoriser sees
`c[x] = a[x] + b[x]`. The driver variant with non-temporal stores (nontemporal.py) runs the x loops
of qualifying stores in three parts, non-temporal stores only over whole cache lines.
"""
from __future__ import annotations

from typing import Callable

from llvmlite import ir

from ...ir import kernel as K
from ...types import PtrType
from ..base import NodeContext, symbol_name
from . import loop_plan as P
from .abi import DIMS_PER_LEVEL, PRIVATE_SUFFIX, ArgLayout
from .codegen import Emitter, Frame, ancestor_ids, uniform_divisors
from .lltypes import I8, I64, PTR, VOID, load, mem_type, reg_type
from .lowering import HOST
from .memory import CPU_KEY_WORD, Heap, Memory, Pointer, buffer_limit, leave_when_stopped, stop_word
from .nontemporal import LINE_BYTES, NtStore, assume_line_start, nt_stores, store_fence
from .parallel import mark_parallel
from .privatise import MERGE_SUFFIX, build_merge
from .storage import TILE_WIDTH, GroupStorage

_DIM_NAMES = "xyz"
class DriverBuilder(GroupStorage):
    def __init__(self, module: ir.Module, leaf: K.LeafFunc, ctx: NodeContext, plan: P.Plan,
                 checked: bool, sites: dict[int, int], private: frozenset[str], name: str,
                 nontemporal: bool = False):
        self.module = module
        self.leaf = leaf
        self.ctx = ctx
        self.plan = plan
        self.checked = checked
        self.private = private
        self.layout = ArgLayout.of(leaf)
        self.dims = ctx.level_dims[0] if ctx.level_dims else 0
        fnty = ir.FunctionType(VOID, [PTR, PTR, I64, I64, I64, I64, PTR])
        self.fn = ir.Function(module, fnty, name=symbol_name(name))
        for arg, arg_name in zip(self.fn.args, ("args", "extents", "p_begin", "p_end", "o_begin",
                                                "o_end", "error")):
            arg.name = arg_name
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        self.memory = Memory(module, checked, sites, self.fn.args[6], HOST)
        self.memory.cpu_slots = True
        self.em = Emitter(self.b, leaf, ctx.level_dims, ctx.output_modes, self.memory, HOST)
        self.arrays: dict[str, ir.Value] = {}  # per-instance storage of INSTANCE locals
        self.done: ir.Value | None = None
        self.stop: ir.Value | None = None  # the launch's stop word, where this driver stops
        # scalar parameters read from arrays: the parameter and the array's address
        self.per_parent: list[tuple[K.Param, ir.Value]] = []
        self.per_instance: list[tuple[K.Param, ir.Value]] = []
        self.level_counts: list[ir.Value] = []  # instances per level
        self.leaf_count: ir.Value = ir.Constant(I64, 1)
        self.group_size: ir.Value = ir.Constant(I64, 1)  # instances per group
        self.ranges: dict[int, tuple[ir.Value | None, ir.Value | None]] = {}  # clipped ranges
        self.nontemporal = nontemporal
        self.nt_stores = nt_stores(leaf, ctx, plan) if nontemporal else {}  # by id(forall)
        self.forall_nt: list[NtStore] = []  # those of the forall being emitted

    # -- the function ------------------------------------------------------------------------

    def build(self) -> ir.Function:
        b = self.b
        self._allocas()
        self._load_extents()
        self._load_params()
        p_begin, p_end, o_begin, o_end = self.fn.args[2:6]
        storage = self._allocate_arrays()
        # stop after a failure, as python does (memory.py): checked drivers in every loop; those
        # with malloc scratch, which a group may fail to get, in the loops over groups and rows
        if self.checked or self.plan.mallocs:
            self.stop = stop_word(b, self.fn.args[6])
        if self.checked:
            self.memory.stop = self.stop
        divisors = uniform_divisors(self.leaf, self.ctx.input_modes)
        self.em.by_divisors(divisors, lambda: self.counted_loop(
            p_begin, p_end, "p", lambda p: self._parent(p, o_begin, o_end)), reciprocals=True)
        if storage is not None:
            b.call(self._libc("free"), [storage])
        if self.nontemporal:
            store_fence(b)
        b.ret_void()
        return self.fn

    def _allocas(self) -> None:
        for name, t in self.leaf.locals.items():
            if isinstance(t, PtrType) or self.plan.storage.get(name) == P.INSTANCE:
                continue
            self.em.slots[name] = self.b.alloca(reg_type(t), name=name)

    def _load_extents(self) -> None:
        ext = self.fn.args[1]
        counts_per_level = []
        for level, ndims in enumerate(self.ctx.level_dims):
            total: ir.Value = ir.Constant(I64, 1)
            for d in range(ndims):
                slot = self.b.gep(ext, [ir.Constant(I64, level * DIMS_PER_LEVEL + d)],
                                  source_etype=I64)
                n = self.b.load(slot, typ=I64, name=f"n{_DIM_NAMES[d]}{level}")
                self.em.counts[(level, d)] = n
                total = self.b.mul(total, n, name=f"count{level}") if d else n
            counts_per_level.append(total)
        self.level_counts = counts_per_level
        self.leaf_count = counts_per_level[0] if counts_per_level else ir.Constant(I64, 1)
        self.split = self._split_dim()

    def _split_dim(self) -> ir.Value:
        """The leaf dimension whose [o_begin, o_end) the launch's partitions divide: the
        outermost one with more than one instance, x when none has (kernel.py picks the same).
        Not simply the outermost: a (n, 1) leaf under one parent would run on one thread."""
        split: ir.Value = ir.Constant(I64, 0)
        for d in range(1, self.dims):
            many = self.b.icmp_signed(">", self.em.counts[(0, d)], ir.Constant(I64, 1))
            split = self.b.select(many, ir.Constant(I64, d), split, name="split")
        return split

    def _by_split(self, o_begin: ir.Value, o_end: ir.Value,
                  emit: Callable[[list[tuple[ir.Value, ir.Value]]], None]) -> None:
        """emit(each dimension's [begin, end) in this partition). Twice for a leaf of two or
        three dimensions: split in its outermost dimension (the usual case: the others whole,
        from a constant 0, as LLVM's loops want; an x loop of unknown start cost short rows up
        to 18%), or further in (the dimensions outside it then have one instance). A group is
        never divided (kernel.py: splittable): every range whole."""
        b, zero = self.b, ir.Constant(I64, 0)
        whole = [(zero, self.em.counts[(0, d)]) for d in range(self.dims)]
        if self.plan.kind == "group" or self.dims == 0:
            emit(whole)
            return
        if self.dims == 1:
            emit([(o_begin, o_end)])
            return
        inner = []
        for d, (first, count) in enumerate(whole):
            here = b.icmp_signed("==", self.split, ir.Constant(I64, d))
            inner.append((b.select(here, o_begin, first, name=f"{_DIM_NAMES[d]}.first"),
                          b.select(here, o_end, count, name=f"{_DIM_NAMES[d]}.last")))
        outermost = b.icmp_signed("==", self.split, ir.Constant(I64, self.dims - 1))
        self.em.if_then_else(outermost, lambda: emit(whole[:-1] + [(o_begin, o_end)]),
                             lambda: emit(inner))

    def _error_word(self, index: int) -> ir.Value:
        return self.b.gep(self.fn.args[6], [ir.Constant(I64, index)], source_etype=I64)

    def _slot(self, index: int, name: str) -> ir.Value:
        return self.b.gep(self.fn.args[0], [ir.Constant(I64, index)], source_etype=I64,
                          name=f"{name}.slot")

    def _load_params(self) -> None:
        b = self.b
        for i, (param, mode) in enumerate(zip(self.leaf.params, self.ctx.input_modes)):
            slot = self._slot(i, param.name)
            if isinstance(param.type, PtrType):
                base = b.load(slot, typ=PTR, name=param.name)
                self.em.pointers[param.name] = Pointer(base, param.type.elem,
                                                       private=param.name in self.private)
            elif mode == "uniform":
                self.em.scalars[param.name] = load(b, slot, param.type, param.name)
            else:
                array = b.load(slot, typ=PTR, name=f"{param.name}.array")
                (self.per_parent if mode == "per_parent" else self.per_instance).append((param, array))
        if self.checked:  # after the loop: a limit reads the size parameter that follows
            for i, param in enumerate(self.leaf.params):
                if isinstance(param.type, PtrType):
                    self.em.pointers[param.name].limit = self._buffer_limit(i)
        self.em.outputs = [b.load(self._slot(self.layout.output_slot(j), f"out{j}"), typ=PTR,
                                  name=f"out.{port.name or j}")
                           for j, port in enumerate(self.leaf.outputs)]
        if self.layout.remote:
            first = self.layout.heap_slot
            self.memory.heap = Heap(bases=b.load(self._slot(first, "bases"), typ=PTR, name="bases"),
                                    rank=b.load(self._slot(first + 1, "rank"), typ=I64, name="rank"),
                                    world=b.load(self._slot(first + 2, "world"), typ=I64, name="world"))

    def _buffer_limit(self, index: int) -> ir.Value:
        name = self.leaf.params[index].name
        nbytes = self.b.load(self._slot(self.layout.nbytes_slot(index), f"{name}.nbytes"),
                             typ=I64, name=f"{name}.nbytes")
        return buffer_limit(self.b, self.leaf, self.ctx.input_modes, self.em.scalars, index,
                            nbytes)

    # -- one parent instance -----------------------------------------------------------------

    def _parent(self, p: ir.Value, o_begin: ir.Value, o_end: ir.Value) -> None:
        b = self.b
        self.em.parent = p
        if self.stop is not None:
            self._key(p, o_begin)
        self._ancestor_ids(p)
        for param, array in self.per_parent:
            address = b.gep(array, [p], source_etype=mem_type(param.type))
            self.em.scalars[param.name] = load(b, address, param.type, param.name)
        self._evaluate_bounds()
        if self.plan.kind == "row":
            self._rows(o_begin, o_end)
            return
        group_end = self.fn.append_basic_block("group.end")
        scratch = self._group_start(group_end)
        self._items(self.plan.items, self._instances_nest(o_begin, o_end))
        if not b.block.is_terminated:
            b.branch(group_end)
        b.position_at_end(group_end)
        if scratch is not None:
            b.call(self._libc("free"), [scratch])  # null after a failed calloc: free ignores it

    def _key(self, p: ir.Value, o_begin: ir.Value) -> None:
        """The place in instance order of this parent's instances here: p * leaves + o_begin *
        the instances in one step of the split dimension (kernel.py orders failures by it)."""
        b = self.b
        step: ir.Value = ir.Constant(I64, 1)
        for d in range(self.dims - 1):
            below = b.icmp_signed(">", self.split, ir.Constant(I64, d))
            step = b.mul(step, b.select(below, self.em.counts[(0, d)], ir.Constant(I64, 1)))
        key = b.add(b.mul(p, self.leaf_count), b.mul(o_begin, step), name="key")
        b.store(key, self._error_word(CPU_KEY_WORD))
        self.memory.key = key

    def _evaluate_bounds(self) -> None:
        """The instance range each dimension keeps after index-range clipping (clip.py)."""
        b = self.b
        self.ranges = {}
        int_max = ir.Constant(I64, (1 << 63) - 1)
        for bound in self.plan.bounds:
            value = self.em.expr(bound.value, f"{_DIM_NAMES[bound.dim]}.bound")
            if bound.offset:  # value + 1, saturating: `x > INT64_MAX` keeps nothing
                value = b.select(b.icmp_signed("==", value, int_max), int_max,
                                 b.add(value, ir.Constant(I64, 1)))
            lo, hi = self.ranges.get(bound.dim, (None, None))
            if bound.lower:
                lo = value if lo is None else _smax(b, lo, value)
            else:
                hi = value if hi is None else _smin(b, hi, value)
            self.ranges[bound.dim] = (lo, hi)

    def _clipped(self, d: int, begin: ir.Value, end: ir.Value) -> tuple[ir.Value, ir.Value]:
        lo, hi = self.ranges.get(d, (None, None))
        if lo is not None:
            begin = _smax(self.b, begin, lo, f"{_DIM_NAMES[d]}.begin")
        if hi is not None:
            end = _smin(self.b, end, hi, f"{_DIM_NAMES[d]}.end")
        return begin, end

    def _ancestor_ids(self, p: ir.Value) -> None:
        ancestor_ids(self.b, p, self.ctx.level_dims, self.level_counts, self.em)

    # -- the row kind: groups are tiles of x in one or a few rows ------------------------------

    def _rows(self, o_begin: ir.Value, o_end: ir.Value) -> None:
        """for z: for y (or each block of plan.rows rows): for each tile of x: the group's items.
        The split dimension runs over [o_begin, o_end)."""
        rows, width = self.plan.rows, ir.Constant(I64, TILE_WIDTH)

        def level(d: int, ranges: list[tuple[ir.Value, ir.Value]]) -> None:
            begin, end = self._clipped(d, *ranges[d])
            if d == 0:
                self.counted_loop(begin, end, "tile", lambda x0: self._tile(None, x0, end),
                                  step=width)
            elif d == 1 and rows > 1:
                def block(y0: ir.Value) -> None:
                    limit = self.b.add(y0, ir.Constant(I64, rows))
                    y1 = _smin(self.b, limit, end, "rows.end")
                    x0, x1 = self._clipped(0, *ranges[0])
                    self.counted_loop(x0, x1, "tile",
                                      lambda x: self._tile((y0, y1), x, x1), step=width)

                self.counted_loop(begin, end, "rows", block, step=ir.Constant(I64, rows))
            else:
                def inner(v: ir.Value) -> None:
                    self.em.ids[(0, d)] = v
                    level(d - 1, ranges)

                self.counted_loop(begin, end, _DIM_NAMES[d], inner)

        self._by_split(o_begin, o_end, lambda ranges: level(self.dims - 1, ranges))

    def _tile(self, rows: tuple[ir.Value, ir.Value] | None, x0: ir.Value, x_end: ir.Value) -> None:
        """One group: x in [x0, x0 + width) (clipped), in the rows [y0, y1) when given."""
        b = self.b
        width = TILE_WIDTH
        x1 = _smin(b, b.add(x0, ir.Constant(I64, width)), x_end, "tile.end")
        group_end = self.fn.append_basic_block("tile.done")
        self._group_start(group_end)

        def columns(base: ir.Value, instance: Callable[[], None]) -> None:
            def at(x: ir.Value) -> None:
                self.em.ids[(0, 0)] = x
                self._instance(b.add(base, b.sub(x, x0), name="slot"), instance)

            self.instance_loop(x0, x1, at)

        def nest(instance: Callable[[], None]) -> None:
            if rows is None:
                columns(ir.Constant(I64, 0), instance)
                return
            y0, y1 = rows

            def row(y: ir.Value) -> None:
                self.em.ids[(0, 1)] = y
                columns(b.mul(b.sub(y, y0), ir.Constant(I64, width)), instance)

            self.counted_loop(y0, y1, "y", row)

        self._items(self.plan.items, nest)
        if not b.block.is_terminated:
            b.branch(group_end)
        b.position_at_end(group_end)

    # -- group-level items -------------------------------------------------------------------

    def _instances_nest(self, o_begin: ir.Value,
                        o_end: ir.Value) -> Callable[[Callable[[], None]], None]:
        """Loops over every instance of the group (the split dimension over [o_begin, o_end))."""
        def nest(instance: Callable[[], None]) -> None:
            if self.dims == 0:
                self._instance(ir.Constant(I64, 0), instance)
                return

            def level(d: int, ranges: list[tuple[ir.Value, ir.Value]]) -> None:
                begin, end = self._clipped(d, *ranges[d])

                def at(v: ir.Value) -> None:
                    self.em.ids[(0, d)] = v
                    if d == 0:
                        self._instance(self._linear(), instance)
                    else:
                        level(d - 1, ranges)

                if d == 0:
                    self.instance_loop(begin, end, at)
                else:
                    self.counted_loop(begin, end, _DIM_NAMES[d], at)

            self._by_split(o_begin, o_end, lambda ranges: level(self.dims - 1, ranges))

        return nest

    def _linear(self) -> ir.Value:
        """lin = x + nx * (y + ny * z)"""
        b = self.b
        ids, counts = self.em.ids, self.em.counts
        lin = ids[(0, self.dims - 1)]
        for d in range(self.dims - 2, -1, -1):
            lin = b.add(b.mul(lin, counts[(0, d)]), ids[(0, d)], name="lin")
        return lin

    def _items(self, items: list[P.Item], nest: Callable[[Callable[[], None]], None]) -> None:
        for item in items:
            if self.b.block.is_terminated:
                return
            self._item(item, nest)

    def _item(self, item: P.Item, nest: Callable[[Callable[[], None]], None]) -> None:
        em = self.em
        if isinstance(item, P.Forall):
            self.forall_nt = self.nt_stores.get(id(item), [])
            nest(lambda: self._forall_body(item))
            self.forall_nt = []
        elif isinstance(item, P.GroupAssign):
            em.stmt(item.stmt)
        elif isinstance(item, P.GroupJump):
            em.stmt(item.stmt)
        elif isinstance(item, P.GroupIf):
            em.if_then_else(em.expr(item.stmt.cond, "cond"), lambda: self._items(item.then, nest),
                            lambda: self._items(item.orelse, nest))
        elif isinstance(item, P.GroupFor):
            em.for_loop(item.stmt, lambda: self._items(item.body, nest))
        else:
            assert isinstance(item, P.GroupWhile)
            em.while_loop(item.stmt, lambda: self._items(item.body, nest))

    # -- one instance ------------------------------------------------------------------------

    def _instance(self, slot: ir.Value, body: Callable[[], None]) -> None:
        b = self.b
        em = self.em
        lin = slot if self.plan.kind != "row" else self._linear()
        flat = b.add(b.mul(em.parent, self.leaf_count), lin, name="flat")
        end = self.fn.append_basic_block("instance.end")
        done = None
        if self.done is not None:
            done = b.gep(self.done, [slot], source_etype=I8, name="done")
            live = self.fn.append_basic_block("instance")
            b.cbranch(b.icmp_unsigned("!=", b.load(done, typ=I8), ir.Constant(I8, 0)), end, live)
            b.position_at_end(live)
        for name, array in self.arrays.items():
            t = self.leaf.locals[name]
            em.slots[name] = b.gep(array, [slot], source_etype=reg_type(t), name=f"{name}.slot")
        for param, array in self.per_instance:
            address = b.gep(array, [flat], source_etype=mem_type(param.type))
            em.scalars[param.name] = load(b, address, param.type, param.name)
        em.frame = Frame(slot=slot, lin=lin, flat=flat, exit=end, done=done)
        body()
        em.frame = None
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(end)
        for name in self.arrays:
            del em.slots[name]
        for param, _ in self.per_instance:
            del em.scalars[param.name]

    def _forall_body(self, forall: P.Forall) -> None:
        em = self.em
        mentioned = P.mentions(forall.body)
        defined_here = {s.target for s in forall.body if isinstance(s, K.Assign)}
        for name in self.leaf.locals:
            storage = self.plan.storage.get(name)
            if name not in mentioned or isinstance(self.leaf.locals[name], PtrType):
                continue
            if storage == P.REG or (storage == P.REMAT and name in defined_here):
                em.zero_local(name)
        for name in self._remat_needed(mentioned, defined_here):
            definition = self.plan.remat[name]
            em.b.store(em.expr(definition.value, name), em.slots[name])
        em.block(forall.body)

    def _remat_needed(self, mentioned: set[str], defined_here: set[str]) -> list[str]:
        """Rematerialised locals this forall reads, with what they read, in definition order."""
        needed: set[str] = set()
        stack = [n for n in mentioned if self.plan.storage.get(n) == P.REMAT and
                 n not in defined_here]
        while stack:
            name = stack.pop()
            if name in needed:
                continue
            needed.add(name)
            stack.extend(n for n in P.names(self.plan.remat[name].value)
                         if self.plan.storage.get(n) == P.REMAT)
        return [n for n in self.plan.remat if n in needed]

    # -- loops -------------------------------------------------------------------------------

    def counted_loop(self, begin: ir.Value, end: ir.Value, name: str,
                     body: Callable[[ir.Value], None], step: ir.Value | None = None
                     ) -> ir.Instruction:
        """for iv in range(begin, end, step): body(iv). Returns the back-edge branch."""
        b = self.b
        preheader = b.block
        head = self.fn.append_basic_block(f"{name}.loop")
        body_bb = self.fn.append_basic_block(f"{name}.body")
        latch = self.fn.append_basic_block(f"{name}.next")
        done = self.fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(begin, preheader)
        b.cbranch(b.icmp_signed("<", iv, end), body_bb, done)
        b.position_at_end(body_bb)
        body(iv)
        if not b.block.is_terminated:
            b.branch(latch)
        b.position_at_end(latch)
        key = self.memory.key
        if self.stop is not None and key is not None and (self.checked or name != "x"):
            leave_when_stopped(b, self.stop, key, done)
        iv.add_incoming(b.add(iv, step or ir.Constant(I64, 1), name=f"{name}.step"), b.block)
        back_edge = b.branch(head)
        b.position_at_end(done)
        return back_edge

    def instance_loop(self, begin: ir.Value, end: ir.Value, body: Callable[[ir.Value], None]
                      ) -> None:
        """The x loop over instances, declared free of dependences between iterations. Groups
        of the group kind are GPU-style blocks (16 to 256 wide): their x loops are not
        interleaved (tiled sgemm 11.3 -> 9.8 ms), others are (stencil 8% faster: parallel.py)."""
        if self.forall_nt:
            self._split_loop(begin, end, body, self.forall_nt)
        else:
            self._x_loop(begin, end, body)

    def _split_loop(self, begin: ir.Value, end: ir.Value, body: Callable[[ir.Value], None],
                    stores: list[NtStore]) -> None:
        """The x loop of qualifying stores in the non-temporal driver, in three parts: normal
        stores up to the first cache-line start, non-temporal ones over whole lines, normal ones
        for the rest. Lines written in part by non-temporal stores are slow (the 7-point stencil,
        one such line per row, ran 2x slower instead of 10% faster). When the stores do not
        all start lines at the same x, normal stores do everything."""
        b = self.b
        addresses = [self._nt_address(s, begin) for s in stores]
        split = self._line_start(begin, end, stores, addresses)
        whole_lines = ir.Constant(I64, -(LINE_BYTES // min(s.elem_bytes for s in stores)))
        stop = b.add(split, b.and_(b.sub(end, split), whole_lines), name="nt.end")
        self._x_loop(begin, split, body)

        def nontemporal() -> None:
            for store, address in zip(stores, addresses):
                base = self.em.pointers[store.store.ptr.name].base
                moved = b.mul(b.sub(split, begin), ir.Constant(I64, store.elem_bytes))
                assume_line_start(b, base, b.add(b.sub(address, b.ptrtoint(base, I64)), moved))
            self.memory.nontemporal = frozenset(id(s.store) for s in stores)
            self._x_loop(split, stop, body)
            self.memory.nontemporal = frozenset()

        self.em.if_then_else(b.icmp_signed("<", split, stop), nontemporal, None)
        self._x_loop(stop, end, body)

    def _x_loop(self, begin: ir.Value, end: ir.Value, body: Callable[[ir.Value], None]) -> None:
        first = len(self.fn.blocks)
        back_edge = self.counted_loop(begin, end, "x", body)
        mark_parallel(self.fn, first, back_edge,
                      interleave=self.plan.kind != "group" and not _inner_loops(self.fn, first,
                                                                                back_edge))

    def _nt_address(self, store: NtStore, x: ir.Value) -> ir.Value:
        """The address (as i64) a qualifying store writes for instance x of this loop."""
        b = self.b
        self.em.ids[(0, 0)] = x  # the index reads no local: only ids, counts and parameters
        index = self.em.index(store.index)
        ptr = self.em.pointers[store.store.ptr.name]
        return b.ptrtoint(b.gep(ptr.base, [index], source_etype=mem_type(ptr.elem)), I64)

    def _line_start(self, begin: ir.Value, end: ir.Value, stores: list[NtStore],
                    addresses: list[ir.Value]) -> ir.Value:
        """The first x from which every qualifying store writes at the start of a cache line (the
        first store's line decides it), or end when they never all do."""
        b = self.b
        line = ir.Constant(I64, LINE_BYTES - 1)
        head = b.udiv(b.and_(b.sub(ir.Constant(I64, 0), addresses[0]), line),
                      ir.Constant(I64, stores[0].elem_bytes))
        x = _smin(b, b.add(begin, head), end, "line.x")
        aligned: ir.Value = ir.Constant(ir.IntType(1), 1)
        for store, address in zip(stores, addresses):
            moved = b.mul(b.sub(x, begin), ir.Constant(I64, store.elem_bytes))
            offset = b.and_(b.add(address, moved), line)
            aligned = b.and_(aligned, b.icmp_unsigned("==", offset, ir.Constant(I64, 0)))
        return b.select(aligned, x, end, name="nt.begin")


def _inner_loops(fn: ir.Function, first: int, latch: ir.Instruction) -> bool:
    """Whether the loop of fn.blocks[first:] whose back edge is `latch` has a loop inside (a
    cycle among those blocks without that edge). Such an instance loop is not interleaved: with
    the hint, LLVM 22's vectoriser hit an assertion that aborted the process (a data-dependent
    negative-step range around a guarded load: tests/test_loop_exits_adversarial.py)."""
    blocks = fn.blocks[first:]
    inside = {id(block) for block in blocks}
    successors = {id(block): [op for op in block.terminator.operands if isinstance(op, ir.Block)
                              and id(op) in inside]
                  if block.terminator is not None and block.terminator is not latch else []
                  for block in blocks}
    # a depth-first walk without recursion (a long body has more blocks than Python's recursion
    # limit); state 1: on the path walked, 2: done
    state: dict[int, int] = {}
    for root in blocks:
        if id(root) in state:
            continue
        state[id(root)] = 1
        path = [(root, iter(successors[id(root)]))]
        while path:
            block, rest = path[-1]
            succ = next(rest, None)
            if succ is None:
                state[id(block)] = 2
                path.pop()
            elif state.get(id(succ)) == 1:
                return True
            elif id(succ) not in state:
                state[id(succ)] = 1
                path.append((succ, iter(successors[id(succ)])))
    return False


def _smax(b: ir.IRBuilder, x: ir.Value, y: ir.Value, name: str = "") -> ir.Value:
    return b.select(b.icmp_signed(">", x, y), x, y, name=name)


def _smin(b: ir.IRBuilder, x: ir.Value, y: ir.Value, name: str = "") -> ir.Value:
    return b.select(b.icmp_signed("<", x, y), x, y, name=name)


def build_nontemporal_driver(module: ir.Module, leaf: K.LeafFunc, ctx: NodeContext, plan: P.Plan,
                             name: str) -> None:
    """The (unchecked) driver whose qualifying stores (nontemporal.py) are marked to become
    non-temporal."""
    DriverBuilder(module, leaf, ctx, plan, False, {}, frozenset(), name, nontemporal=True).build()


def build_drivers(module: ir.Module, leaf: K.LeafFunc, ctx: NodeContext, plan: P.Plan,
                  checked: bool, sites: dict[int, int], private: dict[str, str]) -> None:
    """The driver, and when some buffers can be privatised (buffer -> merge class), the variant
    that updates private copies of them and the functions that merge the copies back."""
    DriverBuilder(module, leaf, ctx, plan, checked, sites, frozenset(), leaf.name).build()
    if not private:
        return
    DriverBuilder(module, leaf, ctx, plan, checked, sites, frozenset(private),
                  leaf.name + PRIVATE_SUFFIX).build()
    for param in leaf.params:
        if param.name in private:
            assert isinstance(param.type, PtrType)
            build_merge(module, leaf.name + MERGE_SUFFIX + param.name, private[param.name],
                        param.type.elem)

