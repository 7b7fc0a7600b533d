"""Loads, stores and atomics, optionally bounds-checked.

In checked mode every access compares its index with the number of valid elements; a failing
access is skipped (a load yields 0) and the first failure is recorded in the launch's error slot
by a cold out-of-line function, so the in-range path stays short. The cpu target's checked
drivers also stop after a failure (`stop`, `key`, `leave_when_stopped`): python stops at the first.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from llvmlite import ir

from ...ir import kernel as K
from ...support.loc import UNKNOWN
from ...types import PtrType, ScalarType
from ..access_errors import RANK_SITES
from . import arith, mathfns, nontemporal
from .lltypes import I64, PTR, VOID, from_mem, load, mem_type, to_mem, zero
from .lowering import Lowering
from .parallel import PRIVATE_ACCESS

# The error slot: [site + 1 (0 while no failure), index, limit], i64 each (a rank outside the
# world: bounds.RANK_SITES + site + 1, rank, world size).
ERROR_SLOT_WORDS = 3
# The cpu target gives each partition of a launch a slot of its own: the three words above, the
# key of the instances running (their parent's place in instance order, p * leaves + o_begin *
# the instances in one step of the outermost dimension; checked drivers write it per parent), and
# the offset in bytes from the slot to the launch's stop word. The host reports the failure of
# the smallest key.
CPU_KEY_WORD, CPU_STOP_WORD, CPU_SLOT_WORDS = 3, 4, 5

_INT_RMW = {"add": "add", "sub": "sub", "xchg": "xchg", "and": "and", "or": "or", "xor": "xor"}
_FLOAT_RMW = {"add": "fadd", "sub": "fsub", "xchg": "xchg"}  # min/max: a compare-exchange loop
# i1 elements are bytes holding 0 or 1; what each op stores converts to i1 (`old + v != 0`), so
# on bytes it is a bitwise op that keeps them 0 or 1 (a byte `add` would store 2)
_BOOL_RMW = {"add": "or", "sub": "xor", "min": "and", "max": "or", "xchg": "xchg", "and": "and",
             "or": "or", "xor": "xor"}


@dataclass
class Heap:
    """The hidden arguments of a leaf with remote accesses (backends/heapview.py)."""

    bases: ir.Value  # ptr to world_size i64 heap bases
    rank: ir.Value   # i64, this process's rank
    world: ir.Value  # i64, the world size


@dataclass
class Pointer:
    """A memory object as generated code sees it."""

    base: ir.Value
    elem: ScalarType
    limit: ir.Value | None = None  # number of valid elements (checked mode)
    private: bool = False  # a copy owned by one thread: atomics need no atomicity


class Memory:
    def __init__(self, module: ir.Module, checked: bool, sites: dict[int, int],
                 error_slot: ir.Value | None, lowering: Lowering):
        self.module = module
        self.lowering = lowering
        self.checked = checked
        self.sites = sites
        self.error_slot = error_slot
        self.nontemporal: frozenset[int] = frozenset()  # ids of Store nodes emitted so now
        self.heap: Heap | None = None  # set by the driver of a leaf with remote accesses
        # set by the cpu target's checked driver: the launch's stop word (the smallest key of a
        # recorded failure) and the key of the instances running now (their parent's place in
        # instance order); every loop leaves once a failure at or before that key is recorded
        self.stop: ir.Value | None = None
        self.key: ir.Value | None = None
        self.cpu_slots = False  # the cpu target's slots: the reporter also lowers the stop word

    # -- the three kinds of access -----------------------------------------------------------
    # `rank` (an i64) makes an access remote: to that rank's twin of the buffer

    def load(self, b: ir.IRBuilder, node: K.Load, ptr: Pointer, index: ir.Value,
             name: str, rank: ir.Value | None = None) -> ir.Value:
        def access() -> ir.Value:
            t = ptr.elem
            return load(b, self._address(b, self._on(b, ptr, rank), index), t, name,
                        align=mem_type_size(t))

        return self._guard(b, node, ptr, index, access, zero(ptr.elem), rank)

    def store(self, b: ir.IRBuilder, node: K.Store, ptr: Pointer, index: ir.Value,
              value: ir.Value, rank: ir.Value | None = None) -> None:
        def access() -> None:
            t = ptr.elem
            stored = b.store(to_mem(b, value, t), self._address(b, self._on(b, ptr, rank), index),
                             align=mem_type_size(t))
            if id(node) in self.nontemporal:
                stored.set_metadata("noalias", nontemporal.marker(self.module))

        self._guard(b, node, ptr, index, access, None, rank)

    def atomic(self, b: ir.IRBuilder, node: K.Atomic, ptr: Pointer, index: ir.Value,
               value: ir.Value, name: str, rank: ir.Value | None = None) -> ir.Value:
        t = ptr.elem

        def access() -> ir.Value:
            address = self._address(b, self._on(b, ptr, rank), index)
            ordering = self.lowering.atomic_ordering
            if ptr.private:
                return _plain_rmw(b, node.op, t, address, value, name, self.lowering)
            if t.name == "bf16" or (t.is_float and node.op not in _FLOAT_RMW):
                return _cas_rmw(b, node.op, t, address, value, name, self.lowering)
            op = (_BOOL_RMW if t.is_bool else _FLOAT_RMW if t.is_float else _INT_RMW).get(node.op)
            if op is None:  # integer min/max
                op = ("" if t.is_signed else "u") + node.op
            stored = to_mem(b, value, t)
            old = b.atomic_rmw(op, address, stored, ordering)
            return from_mem(b, old, t, name=name)

        return self._guard(b, node, ptr, index, access, zero(t), rank)

    # -- helpers -----------------------------------------------------------------------------

    def _on(self, b: ir.IRBuilder, ptr: Pointer, rank: ir.Value | None) -> Pointer:
        """ptr itself, or its twin on `rank` (Iris: bases[rank] + (ptr - bases[my rank]))."""
        if rank is None:
            return ptr
        heap = self.heap
        assert heap is not None
        peer = b.load(b.gep(heap.bases, [rank], source_etype=I64), typ=I64, name="base.peer")
        mine = b.load(b.gep(heap.bases, [heap.rank], source_etype=I64), typ=I64, name="base.mine")
        offset = b.sub(peer, mine, name=f"{ptr.base.name}.to.peer")
        return Pointer(self.lowering.remote_base(b, ptr.base, offset), ptr.elem, ptr.limit, ptr.private)

    @staticmethod
    def _address(b: ir.IRBuilder, ptr: Pointer, index: ir.Value) -> ir.Value:
        # inbounds: an access outside its memory object is already an error of the program
        return b.gep(ptr.base, [index], inbounds=True, source_etype=mem_type(ptr.elem),
                     name=f"{ptr.base.name}.at")

    def _guard(self, b: ir.IRBuilder, node: K.Expr | K.Stmt, ptr: Pointer, index: ir.Value,
               access: Callable[[], ir.Value | None], fallback: ir.Value | None,
               rank: ir.Value | None) -> ir.Value | None:
        """In checked mode: the access only when its index (and rank) are in range, else the
        first failure recorded: (site + 1, index, limit), or for a rank outside the world
        (RANK_SITES + site + 1, rank, world size)."""
        if not self.checked:
            return access()
        assert ptr.limit is not None and self.error_slot is not None
        ok_bb = b.append_basic_block("inbounds")
        bad_bb = b.append_basic_block("outofbounds")
        end_bb = b.append_basic_block("access.end")
        ok = b.icmp_unsigned("<", index, ptr.limit)
        site: ir.Value = ir.Constant(I64, self.sites[id(node)])
        bad_value, limit = index, ptr.limit
        if rank is not None:
            assert self.heap is not None
            rank_ok = b.icmp_unsigned("<", rank, self.heap.world, name="rank.ok")
            ok = b.and_(ok, rank_ok)
            site = b.select(rank_ok, site, ir.Constant(I64, RANK_SITES + self.sites[id(node)]))
            bad_value = b.select(rank_ok, index, rank)
            limit = b.select(rank_ok, ptr.limit, self.heap.world)
        b.cbranch(ok, ok_bb, bad_bb)
        b.position_at_end(bad_bb)
        b.call(self.reporter(), [self.error_slot, site, bad_value, limit])
        b.branch(end_bb)
        b.position_at_end(ok_bb)
        value = access()
        ok_end = b.block
        b.branch(end_bb)
        b.position_at_end(end_bb)
        if fallback is None or value is None:
            return None
        phi = b.phi(value.type, name=value.name)
        phi.add_incoming(value, ok_end)
        phi.add_incoming(fallback, bad_bb)
        return phi

    def leave_when_stopped(self, b: ir.IRBuilder, exit_bb: ir.Block) -> None:
        """Where the driver stops: branch to exit_bb once a failure at or before the current
        key is recorded (a loop's test, so that no loop runs on after a failure)."""
        if self.stop is not None and self.key is not None:
            leave_when_stopped(b, self.stop, self.key, exit_bb)

    def reporter(self) -> ir.Function:
        """void hpvm.out_of_bounds(ptr slot, i64 site, i64 index, i64 limit): keep the first."""
        existing = self.module.globals.get("hpvm.out_of_bounds")
        if isinstance(existing, ir.Function):
            return existing
        fn = ir.Function(self.module, ir.FunctionType(VOID, [PTR, I64, I64, I64]),
                         name="hpvm.out_of_bounds")
        fn.linkage = "internal"
        fn.attributes.add("cold")
        fn.attributes.add("noinline")
        slot, site, index, limit = fn.args
        slot.name, site.name, index.name, limit.name = "slot", "site", "index", "limit"
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        first = b.cmpxchg(slot, ir.Constant(I64, 0), b.add(site, ir.Constant(I64, 1)), "seq_cst")
        won = b.extract_value(first, 1, name="first")
        with b.if_then(won):
            b.store(index, b.gep(slot, [ir.Constant(I64, 1)], source_etype=I64))
            b.store(limit, b.gep(slot, [ir.Constant(I64, 2)], source_etype=I64))
            if self.cpu_slots:
                key = b.load(b.gep(slot, [ir.Constant(I64, CPU_KEY_WORD)], source_etype=I64),
                             typ=I64, name="key")
                b.atomic_rmw("min", stop_word(b, slot), key, "monotonic")
        b.ret_void()
        return fn


def leave_when_stopped(b: ir.IRBuilder, stop: ir.Value, key: ir.Value,
                       exit_bb: ir.Block) -> None:
    """Branch to exit_bb once the stop word is at or before key (cpu target)."""
    running = b.append_basic_block("running")
    word = b.load_atomic(stop, "monotonic", 8, typ=I64, name="stop")
    b.cbranch(b.icmp_signed(">", word, key), running, exit_bb)
    b.position_at_end(running)


def stop_word(b: ir.IRBuilder, slot: ir.Value) -> ir.Value:
    """The address of the launch's stop word, from a partition's slot (cpu target)."""
    offset = b.load(b.gep(slot, [ir.Constant(I64, CPU_STOP_WORD)], source_etype=I64), typ=I64)
    return b.gep(slot, [offset], source_etype=ir.IntType(8), name="stop.word")


def buffer_limit(b: ir.IRBuilder, leaf: K.LeafFunc, input_modes: tuple[str, ...],
                 scalars: dict[str, ir.Value], index: int, nbytes: ir.Value) -> ir.Value:
    """Valid elements of pointer parameter `index` (checked mode): the size argument after the
    pointer (when it is a uniform integer), never more than the real size `nbytes` of the memory
    object, never negative."""
    param = leaf.params[index]
    assert isinstance(param.type, PtrType)
    size = nbytes
    if index + 1 < len(leaf.params) and input_modes[index + 1] == "uniform":
        nxt = leaf.params[index + 1]
        if isinstance(nxt.type, ScalarType) and nxt.type.is_int and not nxt.type.is_bool:
            given = scalars[nxt.name]
            if nxt.type.bits < 64:
                given = b.sext(given, I64) if nxt.type.is_signed else b.zext(given, I64)
            size = b.select(b.icmp_signed("<", given, nbytes), given, nbytes)
            size = b.select(b.icmp_signed("<", size, ir.Constant(I64, 0)), ir.Constant(I64, 0),
                            size)
    return b.udiv(size, ir.Constant(I64, mem_type_size(param.type.elem)), name=f"{param.name}.limit")


def mem_type_size(t: ScalarType) -> int:
    return max(1, t.bits // 8)


def _plain_rmw(b: ir.IRBuilder, op: str, t: ScalarType, address: ir.Value, value: ir.Value,
               name: str, lowering: Lowering) -> ir.Value:
    """Read-modify-write of a thread-private copy (merged into the real buffer after the launch)."""
    raw = b.load(address, typ=mem_type(t))
    old = from_mem(b, raw, t, name=name)
    stored = b.store(to_mem(b, _combine(b, op, t, old, value, lowering), t), address)
    for instr in (raw, stored):  # instances may update the same element: keep them ordered
        setattr(instr, PRIVATE_ACCESS, True)
    return old


def _combine(b: ir.IRBuilder, op: str, t: ScalarType, old: ir.Value, value: ir.Value,
             lowering: Lowering) -> ir.Value:
    """What an atomic op stores, given the old content. Float min/max are fmin/fmax: a NaN
    operand is ignored and -0 < +0, so the result does not depend on the instances' order."""
    if op == "xchg":
        return value
    if op in ("min", "max"):
        return mathfns.call(b, "f" + op if t.is_float else op, t, [old, value], t, lowering.math)
    if op in ("add", "sub"):
        return arith.binop(b, op, t, old, value, UNKNOWN, lowering.math)
    return {"and": b.and_, "or": b.or_, "xor": b.xor}[op](old, value)


def _cas_rmw(b: ir.IRBuilder, op: str, t: ScalarType, address: ir.Value, value: ir.Value,
             name: str, lowering: Lowering) -> ir.Value:
    """A float atomic that atomicrmw lacks (bf16 anything, min/max with our signed-zero and NaN
    rules) as a compare-exchange loop on the element's raw bits."""
    bits, memory = ir.IntType(t.bits), mem_type(t)

    def decode(raw: ir.Value, result_name: str = "") -> ir.Value:
        return from_mem(b, raw if memory == bits else b.bitcast(raw, memory), t, name=result_name)

    def encode(v: ir.Value) -> ir.Value:
        raw = to_mem(b, v, t)
        return raw if memory == bits else b.bitcast(raw, bits)

    entry = b.block
    loop = b.append_basic_block("cas.rmw")
    done = b.append_basic_block("cas.rmw.end")
    initial = b.load_atomic(address, "monotonic", t.bits // 8, typ=bits)
    b.branch(loop)
    b.position_at_end(loop)
    seen = b.phi(bits, name="seen")
    seen.add_incoming(initial, entry)
    new = encode(_combine(b, op, t, decode(seen), value, lowering))
    ordering = lowering.atomic_ordering
    pair = b.cmpxchg(address, seen, new, ordering, ordering)
    seen.add_incoming(b.extract_value(pair, 0), loop)
    b.cbranch(b.extract_value(pair, 1), done, loop)
    b.position_at_end(done)
    return decode(seen, name)
