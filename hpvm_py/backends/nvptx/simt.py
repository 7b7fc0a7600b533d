"""The kernel of a leaf on nvptx: one GPU thread per dynamic instance (SIMT).
(docs/architecture.md, "Module notes": backends/nvptx/simt.py)"""
from __future__ import annotations

import dataclasses
from typing import Callable

from llvmlite import ir

from ...ir import kernel as K
from ...passes.lanes import LaneLoop
from ...types import PtrType, ScalarType, i64
from ..base import NodeContext, symbol_name
from ..cpu.codegen import Emitter, Frame, ancestor_ids, divided_in_loops, uniform_divisors
from ..cpu.intrinsics import declare
from ..cpu.lltypes import I32, I64, I8, PTR, VOID, from_mem, load, mem_type, reg_type
from ..cpu.lowering import Lowering
from ..cpu.memory import Heap, Memory, Pointer, buffer_limit, mem_type_size
from .abi import KernelLayout
from .mathlib import LibdeviceMath
from .scratch import SCRATCH_ALIGN, Scratch, scratch_of

GROUP, FLAT = "group", "flat"
STATIC_SCRATCH = "hpvm_scratch"
DYNAMIC_SCRATCH = "hpvm_dynamic_scratch"  # PTX names: no dots
_DIM_NAMES = "xyz"


def mapping_of(leaf: K.LeafFunc) -> str:
    mallocs = any(isinstance(e, K.Malloc) for e in K.walk_all_exprs(leaf.body))
    barriers = any(isinstance(s, K.Barrier) for s in K.walk_stmts(leaf.body))
    return GROUP if mallocs or barriers else FLAT


def nvvm_barrier(b: ir.IRBuilder) -> None:
    fn = declare(b.module, "llvm.nvvm.barrier.cta.sync.aligned.all", VOID, [I32])
    b.call(fn, [ir.Constant(I32, 0)])


def global_remote_base(b: ir.IRBuilder, base: ir.Value, offset: ir.Value) -> ir.Value:
    """A buffer's twin on another rank's GPU: the translated address is a global-memory address
    (the peer's heap is mapped into this GPU's address space), back as a generic pointer."""
    address = b.add(b.ptrtoint(base, I64), offset, name=f"{base.name}.peer.address")
    peer = b.inttoptr(address, ir.PointerType(addrspace=1), name=f"{base.name}.peer.global")
    return b.addrspacecast(peer, PTR, name=f"{base.name}.peer")


def high_product(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
    """mul.hi.u32 of two i32. Written as a 64-bit product, a loop-invariant operand's zero
    extension is hoisted out of the loop, and instruction selection, which sees one block at a
    time, then makes a 64-bit multiply (several instructions) instead of mul.wide."""
    i32 = ir.IntType(32)
    return b.asm(ir.FunctionType(i32, [i32, i32]), "mul.hi.u32 $0, $1, $2;", "=r,r,r", [x, y],
                 False)


NVPTX_LOWERING = Lowering(math=LibdeviceMath(), atomic_ordering="monotonic", barrier=nvvm_barrier,
                          remote_base=global_remote_base, high_product=high_product)


LANE, LANES = "hpvm.lane", "hpvm.lanes"  # the lanes kernel's own locals (no Python name has a dot)


def lanes_name(leaf: K.LeafFunc) -> str:
    """The lanes kernel's function name, beside the leaf's own in one module."""
    return f"{leaf.name}__lanes"


def build_kernel(module: ir.Module, leaf: K.LeafFunc, ctx: NodeContext, checked: bool,
                 sites: dict[int, int], lanes: LaneLoop | None = None) -> None:
    """The kernel function `leaf.name` (marked as a kernel) in module, and with `lanes` also the
    kernel `lanes_name(leaf)` that splits that loop over the threads of a block per instance."""
    SimtBuilder(module, leaf, ctx, checked, sites).build()
    if lanes is not None:
        body = list(leaf.body)
        body[lanes.index] = _split_nest(leaf.body[lanes.index], len(lanes.loops))
        twin = dataclasses.replace(leaf, name=lanes_name(leaf), body=body,
                                   locals={**leaf.locals, LANE: i64, LANES: i64})
        SimtBuilder(module, twin, ctx, checked, sites).build_lanes()


def _split_nest(loop: K.Stmt, depth: int) -> K.For:
    """The nest with its innermost loop (`depth` loops down) starting at the lane's iteration and
    stepping by the block's width times its step; the outer loops as they were."""
    assert isinstance(loop, K.For)
    if depth > 1:
        return dataclasses.replace(loop, body=[_split_nest(loop.body[0], depth - 1)])
    lane, width = K.Var(name=LANE, type=i64), K.Var(name=LANES, type=i64)
    step = loop.step
    return dataclasses.replace(
        loop, start=K.BinOp(op="add", lhs=loop.start,
                            rhs=K.BinOp(op="mul", lhs=lane, rhs=step, type=i64), type=i64),
        step=K.BinOp(op="mul", lhs=step, rhs=width, type=i64))


class SimtBuilder:
    def __init__(self, module: ir.Module, leaf: K.LeafFunc, ctx: NodeContext, checked: bool,
                 sites: dict[int, int]):
        self.module = module
        self.leaf = leaf
        self.ctx = ctx
        self.layout = KernelLayout.of(leaf, ctx)
        self.mapping = mapping_of(leaf)
        self.scratch = scratch_of(leaf, ctx) if self.mapping == GROUP else Scratch((), 0)
        self.dims = ctx.level_dims[0] if ctx.level_dims else 0
        self.fn = ir.Function(module, ir.FunctionType(VOID, self.layout.types(leaf, ctx)),
                              name=symbol_name(leaf.name))
        _mark_kernel(module, self.fn)
        self.b = ir.IRBuilder(self.fn.append_basic_block("entry"))
        error = self.fn.args[self.layout.error]
        error.name = "error"
        self.memory = Memory(module, checked, sites, error, NVPTX_LOWERING)
        self.em = Emitter(self.b, leaf, ctx.level_dims, ctx.output_modes, self.memory,
                          NVPTX_LOWERING)
        self.checked = checked
        self.per_parent: list[tuple[K.Param, ir.Value]] = []
        self.per_instance: list[tuple[K.Param, ir.Value]] = []
        self.level_counts: list[ir.Value] = []
        self.parents: ir.Value = ir.Constant(I64, 1)
        self.leaf_count: ir.Value = ir.Constant(I64, 1)
        self.body = [s for s in leaf.body if not any(s is m for m in self.scratch.mallocs)]
        self.divisors = uniform_divisors(leaf, ctx.input_modes)

    # -- the function ------------------------------------------------------------------------

    def build(self) -> None:
        for name, t in self.leaf.locals.items():
            if not isinstance(t, PtrType):
                self.em.slots[name] = self.b.alloca(reg_type(t), name=name)
        self._extents()
        self._params()
        if self.mapping == GROUP:
            self._group()
        else:
            self._flat()

    def build_lanes(self) -> None:
        """One block per instance (x fastest, then y, z, the parents); the block's threads split
        the loop that passes/lanes.py cleared: lane t starts at iteration t and steps by the
        block's width. Every lane runs the statements around the loop (the same values)."""
        for name, t in self.leaf.locals.items():
            if not isinstance(t, PtrType):
                self.em.slots[name] = self.b.alloca(reg_type(t), name=name)
        self._extents()
        self._params()
        b = self.b
        rest = _sreg(b, "ctaid.x")
        ids = []
        for d in range(self.dims):
            n = self.em.counts[(0, d)]
            ids.append(b.urem(rest, n, name=f"{_DIM_NAMES[d]}.lane"))
            rest = b.udiv(rest, n)
        lane, width = _sreg(b, "tid.x"), _sreg(b, "ntid.x")

        def start(_lin: ir.Value) -> None:
            b.store(lane, self.em.slots[LANE])
            b.store(width, self.em.slots[LANES])

        self._instance(ids, rest, start)
        b.ret_void()

    def _arg(self, index: int, name: str) -> ir.Value:
        arg = self.fn.args[index]
        arg.name = name
        return arg

    def _extents(self) -> None:
        b = self.b
        for level, ndims in enumerate(self.ctx.level_dims):
            total: ir.Value = ir.Constant(I64, 1)
            for d in range(ndims):
                n = self._arg(self.layout.extent(level, d), f"n{_DIM_NAMES[d]}{level}")
                self.em.counts[(level, d)] = n
                total = b.mul(total, n, name=f"count{level}") if d else n
            self.level_counts.append(total)
            if level == 0:
                self.leaf_count = total
            else:
                self.parents = b.mul(self.parents, total, name="parents") \
                    if level > 1 else total

    def _params(self) -> None:
        b = self.b
        for i, (param, mode) in enumerate(zip(self.leaf.params, self.ctx.input_modes)):
            arg = self._arg(i, param.name)
            if isinstance(param.type, PtrType):
                self.em.pointers[param.name] = Pointer(arg, param.type.elem)
            elif mode == "uniform":
                assert isinstance(param.type, ScalarType)
                self.em.scalars[param.name] = from_mem(b, arg, param.type, name=f"{param.name}.value")
            else:
                (self.per_parent if mode == "per_parent" else self.per_instance).append((param, arg))
        if self.checked:
            for i in self.layout.buffers:
                nbytes = self._arg(self.layout.nbytes(i), f"{self.leaf.params[i].name}.nbytes")
                self.em.pointers[self.leaf.params[i].name].limit = buffer_limit(
                    b, self.leaf, self.ctx.input_modes, self.em.scalars, i, nbytes)
        self.em.outputs = [self._arg(self.layout.output(j), f"out.{port.name or j}")
                           for j, port in enumerate(self.leaf.outputs)]
        if self.layout.remote:
            first = self.layout.heap
            self.memory.heap = Heap(bases=self._arg(first, "bases"), rank=self._arg(first + 1, "rank"),
                                    world=self._arg(first + 2, "world"))

    # -- mappings ----------------------------------------------------------------------------

    def _group(self) -> None:
        b = self.b
        ids = [_sreg(b, f"tid.{_DIM_NAMES[d]}") for d in range(self.dims)]
        parent = _sreg(b, "ctaid.x")
        self._instance(ids, parent, self._group_scratch)
        b.ret_void()

    def _flat(self) -> None:
        """One instance per thread when its (x, y, (z, parent)) is in range: straight-line code
        (a grid-stride loop would hoist every address computation out of a one-trip loop)."""
        b = self.b
        counts = [self.em.counts.get((0, d), ir.Constant(I64, 1)) for d in range(3)]
        x = _global_index(b, "x")
        inside = b.icmp_unsigned("<", x, counts[0])
        # y, and the (z, parent) pairs, are always 0 where the leaf has no such dimension and no
        # parent: the launcher's block and grid are 1 there, and nothing needs checking
        y = zp = ir.Constant(I64, 0)
        if self.dims >= 2:
            y = b.add(self._arg(self.layout.y_offset, "y.offset"), _global_index(b, "y"))
            inside = b.and_(inside, b.icmp_unsigned("<", y, counts[1]))
        if self.dims == 3 or len(self.ctx.level_dims) > 1:
            zp = b.add(self._arg(self.layout.zp_offset, "zp.offset"), _global_index(b, "z"))
            outer = b.mul(counts[2], self.parents, name="zp.count")  # (z, parent) pairs
            inside = b.and_(inside, b.icmp_unsigned("<", zp, outer))
        run = self.fn.append_basic_block("instance")
        done = self.fn.append_basic_block("done")
        b.cbranch(inside, run, done)
        b.position_at_end(run)
        if self.dims == 3 and len(self.ctx.level_dims) > 1:
            z, parent = b.urem(zp, counts[2], name="z"), b.udiv(zp, counts[2], name="p")
        elif self.dims == 3:
            z, parent = zp, ir.Constant(I64, 0)
        else:
            z, parent = ir.Constant(I64, 0), zp
        self._instance([x, y, z][:self.dims], parent, None)
        b.branch(done)
        b.position_at_end(done)
        b.ret_void()

    def _strided_loop(self, begin: ir.Value, step: ir.Value, end: ir.Value, name: str,
                      body: Callable[[ir.Value], None]) -> None:
        """for iv in range(begin, end, step): body(iv), unsigned."""
        b = self.b
        preheader = b.block
        head = self.fn.append_basic_block(f"{name}.loop")
        body_bb = self.fn.append_basic_block(f"{name}.body")
        after = self.fn.append_basic_block(f"{name}.done")
        b.branch(head)
        b.position_at_end(head)
        iv = b.phi(I64, name=name)
        iv.add_incoming(begin, preheader)
        b.cbranch(b.icmp_unsigned("<", iv, end), body_bb, after)
        b.position_at_end(body_bb)
        body(iv)
        iv.add_incoming(b.add(iv, step, name=f"{name}.next"), b.block)
        b.branch(head)
        b.position_at_end(after)

    # -- one instance ------------------------------------------------------------------------

    def _instance(self, ids: list[ir.Value], parent: ir.Value,
                  setup: Callable[[ir.Value], None] | None) -> None:
        b, em = self.b, self.em
        em.parent = parent
        ancestor_ids(b, parent, self.ctx.level_dims, self.level_counts, em)
        for param, array in self.per_parent:
            address = b.gep(array, [parent], source_etype=mem_type(param.type))
            em.scalars[param.name] = load(b, address, param.type, param.name)
        for d, value in enumerate(ids):
            value.name = _DIM_NAMES[d]
            em.ids[(0, d)] = value
        lin = self._linear(ids)
        flat = b.add(b.mul(parent, self.leaf_count), lin, name="flat")
        for param, array in self.per_instance:
            address = b.gep(array, [flat], source_etype=mem_type(param.type))
            em.scalars[param.name] = load(b, address, param.type, param.name)
        for name in em.slots:
            em.zero_local(name)
        if setup is not None:
            setup(lin)
        end = self.fn.append_basic_block("instance.end")
        em.frame = Frame(slot=lin, lin=lin, flat=flat, exit=end, done=None)
        em.by_divisors(self.divisors, lambda: em.block(self.body),
                       reciprocals=divided_in_loops(self.leaf, self.divisors))
        em.frame = None
        if not b.block.is_terminated:
            b.branch(end)
        b.position_at_end(end)

    def _linear(self, ids: list[ir.Value]) -> ir.Value:
        """lin = x + nx * (y + ny * z)"""
        if not ids:
            return ir.Constant(I64, 0)
        lin = ids[-1]
        for d in range(len(ids) - 2, -1, -1):
            lin = self.b.add(self.b.mul(lin, self.em.counts[(0, d)]), ids[d], name="lin")
        return lin

    # -- shared memory -----------------------------------------------------------------------

    def _group_scratch(self, lin: ir.Value) -> None:
        """Pointers into the group's shared memory for each malloc, zeroed by the block."""
        if not self.scratch.mallocs:
            return
        b = self.b
        if self.scratch.static_bytes is not None:
            base = _shared_array(self.module, STATIC_SCRATCH, max(SCRATCH_ALIGN, self.scratch.static_bytes))
        else:
            base = _shared_array(self.module, DYNAMIC_SCRATCH, None)
        # generic pointers into shared memory: LLVM infers the shared address space back
        generic = b.addrspacecast(base, PTR, name="scratch")
        offset: ir.Value = ir.Constant(I64, 0)
        mask = ir.Constant(I64, -SCRATCH_ALIGN)
        for assign in self.scratch.mallocs:
            assert isinstance(assign.value, K.Malloc)
            ptr_type = self.leaf.locals[assign.target]
            assert isinstance(ptr_type, PtrType)
            nbytes = self.em.expr(assign.value.nbytes, f"{assign.target}.bytes")
            nbytes = b.select(b.icmp_signed("<", nbytes, ir.Constant(I64, 0)),
                              ir.Constant(I64, 0), nbytes)
            ptr = b.gep(generic, [offset], source_etype=I8, inbounds=True, name=assign.target)
            limit = b.udiv(nbytes, ir.Constant(I64, mem_type_size(ptr_type.elem)),
                           name=f"{assign.target}.limit") if self.checked else None
            self.em.pointers[assign.target] = Pointer(ptr, ptr_type.elem, limit)
            offset = b.and_(b.add(offset, b.add(nbytes, ir.Constant(I64, SCRATCH_ALIGN - 1))), mask)
        # malloc'ed memory starts zeroed: the block clears it in 4-byte words, then waits
        words = b.lshr(offset, ir.Constant(I64, 2), name="scratch.words")

        def clear(i: ir.Value) -> None:
            b.store(ir.Constant(I32, 0), b.gep(generic, [i], source_etype=I32))

        self._strided_loop(lin, self.leaf_count, words, "clear", clear)
        nvvm_barrier(b)


def _shared_array(module: ir.Module, name: str, nbytes: int | None) -> ir.GlobalVariable:
    existing = module.globals.get(name)
    if isinstance(existing, ir.GlobalVariable):
        return existing
    gv = ir.GlobalVariable(module, ir.ArrayType(I8, nbytes or 0), name=name, addrspace=3)
    if nbytes is not None:
        gv.linkage = "internal"
        gv.initializer = ir.Constant(gv.value_type, ir.Undefined)  # shared memory has no initialiser
    gv.align = SCRATCH_ALIGN
    return gv


def _sreg(b: ir.IRBuilder, register: str) -> ir.Value:
    """A special register (tid.x, ctaid.y, ntid.z, nctaid.x, ...), as i64."""
    fn = declare(b.module, f"llvm.nvvm.read.ptx.sreg.{register}", I32, [])
    return b.zext(b.call(fn, []), I64, name=register.replace(".", "_"))


def _global_index(b: ir.IRBuilder, dim: str) -> ir.Value:
    """ctaid * ntid + tid in one dimension."""
    return b.add(b.mul(_sreg(b, f"ctaid.{dim}"), _sreg(b, f"ntid.{dim}")), _sreg(b, f"tid.{dim}"),
                 name=f"{dim}.first")


def _mark_kernel(module: ir.Module, fn: ir.Function) -> None:
    annotations = module.add_named_metadata("nvvm.annotations")
    annotations.add(module.add_metadata([fn, "kernel", ir.Constant(I32, 1)]))
