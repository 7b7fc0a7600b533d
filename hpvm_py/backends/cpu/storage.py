"""A driver's storage (driver.py): per-instance arrays of a group's locals, allocated once per
driver call, and the malloc scratch of each group, with every size checked for overflow so that a
wrapped total never allocates a block smaller than its accesses; a failed allocation is reported
in the error slot and the group (or the call) is skipped."""
from __future__ import annotations

from llvmlite import ir

from ...ir import kernel as K
from ...types import PtrType, ScalarType
from . import loop_plan as P
from .intrinsics import declare
from .lltypes import I8, I64, PTR, VOID
from .memory import Pointer

# x instances per group of the row kind: per-instance arrays of rows * TILE_WIDTH values stay in L1.
TILE_WIDTH = 512
MALLOC_FAILED_SITE = -2  # recorded as -1 in the error slot
NEGATIVE_MALLOC_SITE = -3  # a malloc of a negative size (its size and number are reported)
STORAGE_ALLOC = -1  # the failed allocation was per-instance storage (else: the malloc's number)


class GroupStorage:
    """Mixed into DriverBuilder: uses its builder, function, plan, emitter and memory."""

    def _allocate_arrays(self) -> ir.Value | None:
        """Per-instance storage for one group, in one block allocated once per driver call."""
        b = self.b
        size = ir.Constant(I64, self.plan.rows * TILE_WIDTH) if self.plan.kind == "row" \
            else self.leaf_count
        self.group_size = size
        # (local, bytes per instance); None stands for the "returned" flags
        arrays: list[tuple[str | None, int]] = [
            (n, _reg_size(self.leaf.locals[n]))
            for n, s in self.plan.storage.items() if s == P.INSTANCE]
        if self.plan.needs_done:
            arrays.append((None, 1))
        if not arrays:
            return None
        offsets = []
        total: ir.Value = ir.Constant(I64, 0)
        overflow: ir.Value = ir.Constant(ir.IntType(1), 0)
        for name, elem_bytes in arrays:
            offsets.append(total)
            nbytes, o1 = self._checked_op("umul", size, ir.Constant(I64, elem_bytes))
            aligned, o2 = self._padded(nbytes)
            total, o3 = self._checked_op("sadd", total, aligned)
            overflow = b.or_(overflow, b.or_(o1, b.or_(o2, o3)))
        requested = b.select(overflow, ir.Constant(I64, -1), total)  # -1: beyond 2**63 - 1
        fail_bb = self.fn.append_basic_block("storage.failed")
        storage = self._checked_alloc("malloc", [total], "storage", fail_bb, invalid=overflow,
                                      requested=requested, detail=ir.Constant(I64, STORAGE_ALLOC))
        with b.goto_block(fail_bb):
            b.ret_void()
        for (name, _), offset in zip(arrays, offsets):
            array = b.gep(storage, [offset], source_etype=I8, name=f"{name or 'done'}.all")
            if name is None:
                self.done = array
            else:
                self.arrays[name] = array
        return storage

    def _padded(self, nbytes: ir.Value) -> tuple[ir.Value, ir.Value]:
        """nbytes rounded up to 64, and whether nbytes is negative or the rounding overflows."""
        b = self.b
        padded, overflow = self._checked_op("sadd", nbytes, ir.Constant(I64, 63))
        bad = b.or_(b.icmp_signed("<", nbytes, ir.Constant(I64, 0)), overflow)
        return b.and_(padded, ir.Constant(I64, -64)), bad

    def _checked_op(self, op: str, a: ir.Value, b: ir.Value) -> tuple[ir.Value, ir.Value]:
        """a op b on i64 with llvm.*.with.overflow: (result, overflowed)."""
        pair = getattr(self.b, f"{op}_with_overflow")(a, b)
        return self.b.extract_value(pair, 0), self.b.extract_value(pair, 1)

    def _checked_alloc(self, fn_name: str, args: list[ir.Value], name: str, fail_bb: ir.Block,
                       invalid: ir.Value | None, requested: ir.Value, detail: ir.Value,
                       site: ir.Value = ir.Constant(I64, MALLOC_FAILED_SITE)) -> ir.Value:
        """Allocate; when the result is null (or `invalid` holds) report `requested` bytes and
        `detail` (which allocation: a malloc's number, or STORAGE_ALLOC) at `site`
        (MALLOC_FAILED_SITE, or NEGATIVE_MALLOC_SITE), and go to fail_bb."""
        b = self.b
        fn = self._libc(fn_name)
        ptr = b.call(fn, args, name=name)
        failed = b.icmp_unsigned("==", ptr, ir.Constant(PTR, None))
        if invalid is not None:
            # LLVM may delete an allocation it can do without, null check included: a size that
            # cannot be allocated is reported from its own test.
            failed = b.or_(failed, invalid)
        ok_bb = b.append_basic_block(f"{name}.ok")
        bad_bb = b.append_basic_block(f"{name}.failed")
        b.cbranch(failed, bad_bb, ok_bb)
        b.position_at_end(bad_bb)
        b.call(self.memory.reporter(), [self.fn.args[6], site, requested, detail])
        b.branch(fail_bb)
        b.position_at_end(ok_bb)
        return ptr

    def _libc(self, name: str) -> ir.Function:
        signatures = {"malloc": (PTR, [I64]), "calloc": (PTR, [I64, I64]), "free": (VOID, [PTR])}
        ret, args = signatures[name]
        return declare(self.module, name, ret, args)

    def _group_start(self, group_end: ir.Block) -> ir.Value | None:
        """Zero the group's storage and allocate its malloc scratch (zeroed, shared).

        Every malloc of the body shares one calloc'ed block (each part 64-byte aligned), so there
        is one allocation to check and free; on failure the group is skipped and reported.
        """
        b = self.b
        for name, storage in self.plan.storage.items():
            if storage == P.GROUP and name in self.em.slots:
                self.em.zero_local(name)
        for name, array in self.arrays.items():
            size = b.mul(self.group_size, ir.Constant(I64, _reg_size(self.leaf.locals[name])))
            self._memset(array, size)
        if self.done is not None:
            self._memset(self.done, self.group_size)
        if not self.plan.mallocs:
            return None
        sizes = []
        total: ir.Value = ir.Constant(I64, 1)  # calloc(0) may return null: ask for a byte more
        invalid: ir.Value = ir.Constant(ir.IntType(1), 0)
        culprit: ir.Value = ir.Constant(I64, 0)  # the first malloc that makes the total invalid
        negative: ir.Value = ir.Constant(I64, 0)  # its size when that is negative, else 0
        for number, assign in enumerate(self.plan.mallocs):
            assert isinstance(assign.value, K.Malloc)
            nbytes = self.em.expr(assign.value.nbytes, f"{assign.target}.bytes")
            # every size and the running total must stay in [0, 2**63): a wrapped total would
            # allocate a small block that the accesses overrun
            aligned, o1 = self._padded(nbytes)
            sizes.append((b.sub(total, ir.Constant(I64, 1)), nbytes))
            total, o2 = self._checked_op("sadd", total, aligned)
            bad = b.or_(o1, o2)
            first = b.and_(bad, b.not_(invalid))
            culprit = b.select(first, ir.Constant(I64, number), culprit)
            below = b.icmp_signed("<", nbytes, ir.Constant(I64, 0))
            negative = b.select(first, b.select(below, nbytes, ir.Constant(I64, 0)), negative)
            invalid = b.or_(invalid, bad)
        # a negative size is reported as itself (every target's message), past 2**63 - 1 as -1
        is_negative = b.icmp_signed("<", negative, ir.Constant(I64, 0))
        requested = b.select(invalid, b.select(is_negative, negative, ir.Constant(I64, -1)),
                             b.sub(total, ir.Constant(I64, 1)), name="scratch.requested")
        site = b.select(is_negative, ir.Constant(I64, NEGATIVE_MALLOC_SITE),
                        ir.Constant(I64, MALLOC_FAILED_SITE))
        total = b.select(invalid, ir.Constant(I64, 1), total, name="scratch.bytes")
        scratch = self._checked_alloc("calloc", [total, ir.Constant(I64, 1)], "scratch", group_end,
                                      invalid=invalid, requested=requested, detail=culprit,
                                      site=site)
        for assign, (offset, nbytes) in zip(self.plan.mallocs, sizes):
            ptr_type = self.leaf.locals[assign.target]
            assert isinstance(ptr_type, PtrType)
            ptr = b.gep(scratch, [offset], source_etype=I8, name=assign.target)
            limit = b.udiv(nbytes, ir.Constant(I64, max(1, ptr_type.elem.bits // 8)),
                           name=f"{assign.target}.limit") if self.checked else None
            self.em.pointers[assign.target] = Pointer(ptr, ptr_type.elem, limit)
        return scratch

    def _memset(self, ptr: ir.Value, nbytes: ir.Value) -> None:
        fn = self.module.declare_intrinsic("llvm.memset", [PTR, I64])
        self.b.call(fn, [ptr, ir.Constant(I8, 0), nbytes, ir.Constant(ir.IntType(1), 0)])


def _reg_size(t: object) -> int:
    """Bytes of one value in per-instance storage (register form: 16-bit floats take 4)."""
    assert isinstance(t, ScalarType)
    if t.is_float:
        return 8 if t.bits == 64 else 4
    return max(1, t.bits // 8)
