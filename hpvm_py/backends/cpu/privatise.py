"""Privatised atomics: a buffer updated only by commutative atomics whose old values are unused
(accesses.privatisable) gets one private copy per partition of a launch. The driver variant for it
updates the copy with plain loads and stores; afterwards each copy is merged into the real buffer
with atomics, so that other launches updating the same buffer at the same time stay correct.
"""
from __future__ import annotations

from typing import Any

from llvmlite import ir

from ...types import ScalarType
from ..base import symbol_name
from .lltypes import I64, PTR, VOID, mem_type

MERGE_SUFFIX = ".merge."  # the merge function of parameter p is <leaf>.merge.<p>


def identity(kind: str, elem: ScalarType) -> Any:
    """The value a private copy starts from: merging it changes nothing."""
    if kind == "add" and elem.is_float:
        # -0.0, not +0.0: x + -0.0 is x for every x, but -0.0 + +0.0 is +0.0, so a copy starting
        # at +0.0 (and skipped by the merge while it holds +0.0) would keep a -0.0 element at
        # -0.0 where the instances' additions of +0.0 (or subtractions of -0.0) make it +0.0
        return -0.0
    if kind in ("add", "or", "xor"):
        return 0
    if kind == "and":
        return -1 if elem.is_signed else elem.max_value()
    if kind == "min":
        return elem.max_value()
    return elem.min_value()


def build_merge(module: ir.Module, name: str, kind: str, elem: ScalarType) -> ir.Function:
    """void merge(ptr target, ptr copy, i64 count): target[i] op= copy[i] atomically, skipping the
    elements of the copy that still hold the identity (bit for bit)."""
    fn = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I64]), name=symbol_name(name))
    target, copy, count = fn.args
    target.name, copy.name, count.name = "target", "copy", "count"
    t = mem_type(elem)
    entry = fn.append_basic_block("entry")
    loop = fn.append_basic_block("element")
    update = fn.append_basic_block("update")
    latch = fn.append_basic_block("next")
    done = fn.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", count, ir.Constant(I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(I64, name="i")
    i.add_incoming(ir.Constant(I64, 0), entry)
    value = b.load(b.gep(copy, [i], source_etype=t), typ=t, name="value")
    bits = value if not elem.is_float else b.bitcast(value, ir.IntType(elem.bits))
    unit = identity(kind, elem)
    # a float identity is compared by its bits (-0.0: the sign bit alone), not as a float, for
    # which -0.0 == +0.0
    unit_bits = 1 << (elem.bits - 1) if elem.is_float else unit
    changed = b.icmp_unsigned("!=", bits, ir.Constant(bits.type, unit_bits))
    b.cbranch(changed, update, latch)
    b.position_at_end(update)
    b.atomic_rmw(_rmw_op(kind, elem), b.gep(target, [i], source_etype=t), value, "seq_cst")
    b.branch(latch)
    b.position_at_end(latch)
    following = b.add(i, ir.Constant(I64, 1), name="i.next")
    i.add_incoming(following, latch)
    b.cbranch(b.icmp_signed("<", following, count), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return fn


def _rmw_op(kind: str, elem: ScalarType) -> str:
    if elem.is_float:
        return "fadd"  # only sums of floats are privatised
    if kind in ("min", "max"):
        return kind if elem.is_signed else "u" + kind
    return kind
