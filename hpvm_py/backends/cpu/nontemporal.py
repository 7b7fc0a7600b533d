"""Non-temporal stores, for launches that write far more than the caches hold.
(docs/architecture.md, "Module notes": backends/cpu/nontemporal.py)"""
from __future__ import annotations

import platform
import re
from dataclasses import dataclass

from llvmlite import ir

from ...ir import kernel as K
from ...passes.uniform import Uniformity
from ...types import PtrType, ScalarType
from ..base import NodeContext
from .intrinsics import declare
from .lltypes import I1, I64, VOID
from .loop_plan import Forall, Plan, x_coefficient

LINE_BYTES = 64
# sfence orders the stores; other targets keep normal stores
SUPPORTED = platform.machine() in ("x86_64", "AMD64")
SUFFIX = ".nontemporal"  # the name of the driver with them: the leaf's, then this
_SCOPE = "hpvm.nontemporal store"


@dataclass(frozen=True)
class NtStore:
    """A store that may bypass the caches, and its index as the driver evaluates it before the
    x loop: locals replaced by their definitions, so it reads only instance ids, instance counts,
    constants and uniform scalar parameters."""

    store: K.Store
    index: K.Expr
    elem_bytes: int


def nt_stores(leaf: K.LeafFunc, ctx: NodeContext, plan: Plan) -> dict[int, list[NtStore]]:
    """id(forall) -> its qualifying stores, for the foralls at the top level of the plan (those
    inside group-level loops or conditions run again or partly: their output may be read soon)."""
    if not SUPPORTED or not ctx.level_dims or ctx.level_dims[0] == 0:
        return {}
    written = _write_only_buffers(leaf)
    if not written:
        return {}
    scalars = {p.name for p, mode in zip(leaf.params, ctx.input_modes)
               if mode in ("uniform", "per_parent") and not isinstance(p.type, PtrType)}
    uni = Uniformity(leaf, ctx.input_modes, frozenset())
    defs = _definitions(plan.body)
    position = {id(s): i for i, s in enumerate(plan.body)}
    found: dict[int, list[NtStore]] = {}
    for forall in (item for item in plan.items if isinstance(item, Forall)):
        stores = []
        for stmt in forall.body:
            if not isinstance(stmt, K.Store) or stmt.ptr.name not in written:
                continue
            index = _inline(stmt.index, defs, position[id(stmt)])
            if index is not None and _evaluable(index, scalars) and \
                    x_coefficient(index, {}, uni, set(), 0) == 1:
                stores.append(NtStore(stmt, index, written[stmt.ptr.name]))
        if stores:
            found[id(forall)] = stores
    return found


def nt_bytes(leaf: K.LeafFunc, stores: dict[int, list[NtStore]]) -> dict[int, int]:
    """Parameter index -> bytes the qualifying stores into it write per instance."""
    index = {p.name: i for i, p in enumerate(leaf.params)}
    per_instance: dict[int, int] = {}
    for store in (s for group in stores.values() for s in group):
        i = index[store.store.ptr.name]
        per_instance[i] = per_instance.get(i, 0) + store.elem_bytes
    return per_instance


def _write_only_buffers(leaf: K.LeafFunc) -> dict[str, int]:
    """Buffer parameters whose only use is as the pointer of stores -> element bytes. Not loaded
    (a read of a line just written non-temporally would go to memory), and not used otherwise."""
    buffers = {p.name: p.type.elem.nbytes for p in leaf.params if isinstance(p.type, PtrType)}
    for stmt in K.walk_stmts(leaf.body):
        exprs = K.child_exprs(stmt)
        if isinstance(stmt, K.Store):
            if stmt.rank is not None:  # a store into a peer's copy: its own rules, left alone
                buffers.pop(stmt.ptr.name, None)
            exprs = exprs[1:]  # the stored-to pointer itself
        for e in exprs:
            for sub in K.walk_exprs(e):
                if isinstance(sub, K.Var):
                    buffers.pop(sub.name, None)
    return buffers


def _definitions(body: K.Block) -> dict[str, tuple[int, K.Expr]]:
    """Locals assigned exactly once, by a top-level statement -> (its position, the value)."""
    counts = K.assignments(body)
    return {s.target: (i, s.value) for i, s in enumerate(body)
            if isinstance(s, K.Assign) and counts[s.target] == 1}


def _inline(e: K.Expr, defs: dict[str, tuple[int, K.Expr]], before: int) -> K.Expr | None:
    """e with every local that has a definition replaced by its value, recursively; None when a
    definition runs at or after position `before` (the local would read as zero or stale)."""
    if isinstance(e, K.Var) and e.name in defs:
        position, value = defs[e.name]
        return _inline(value, defs, position) if position < before else None
    children = [_inline(c, defs, before) for c in K.child_exprs(e)]
    if any(c is None for c in children):
        return None
    return K.rebuild(e, children)


def _evaluable(e: K.Expr, scalars: set[str]) -> bool:
    """Whether e is integer arithmetic (+, -, *, casts) on instance ids and counts, constants and
    uniform scalar parameters. In such an expression the index moves by exactly its x coefficient
    per x instance, up to wrap-around of a type of 8 bits or more, which moves the address by a
    multiple of 256 bytes: the alignment of every store follows from the first one's."""
    for sub in K.walk_exprs(e):
        t = sub.type
        if not (isinstance(t, ScalarType) and t.is_int and t.bits >= 8):
            return False
        if isinstance(sub, K.Var):
            if sub.name not in scalars:
                return False
        elif isinstance(sub, K.BinOp):
            if sub.op not in ("add", "sub", "mul"):
                return False
        elif not isinstance(sub, (K.Const, K.InstanceId, K.NumInstances, K.Cast)):
            return False
    return True


# -- code generation ---------------------------------------------------------------------------


def marker(module: ir.Module) -> ir.values.MDValue:
    """The `!noalias` list that marks qualifying stores through the optimiser."""
    domain = module.add_metadata([ir.MetaDataString(module, "hpvm.nontemporal")])
    scope = module.add_metadata([ir.MetaDataString(module, _SCOPE), domain])
    return module.add_metadata([scope])


class _AlignedAt(ir.instructions.Instruction):
    """`call void @llvm.assume(i1 true) ["align"(ptr base, i64 LINE_BYTES, i64 offset)]`: the
    address base - offset starts a cache line. (llvmlite has no operand bundles.)"""

    def __init__(self, block: ir.Block, assume: ir.Function, base: ir.Value, offset: ir.Value):
        super().__init__(block, VOID, "call", [assume, base, offset])

    def descr(self, buf: list[str]) -> None:
        assume, base, offset = self.operands
        buf.append(f"call void {assume.get_reference()}(i1 true) [ \"align\"(ptr "
                   f"{base.get_reference()}, i64 {LINE_BYTES}, i64 {offset.get_reference()}) ]\n")


def assume_line_start(b: ir.IRBuilder, base: ir.Value, byte_offset: ir.Value) -> None:
    """Tell LLVM that base + byte_offset is the start of a cache line."""
    assume = declare(b.module, "llvm.assume", VOID, [I1])
    b._insert(_AlignedAt(b.block, assume, base, b.sub(ir.Constant(I64, 0), byte_offset)))


def store_fence(b: ir.IRBuilder) -> None:
    b.call(declare(b.module, "llvm.x86.sse.sfence", VOID, []), [])


def mark_nontemporal(text: str) -> str:
    """Optimised IR with its marked stores made non-temporal. Plain stores only: a store after a
    conditional return is vectorised as a masked store, which has no non-temporal form."""
    scope = re.search(r'^!(\d+) = !\{!"' + re.escape(_SCOPE) + r'", !\d+\}$', text, re.M)
    if scope is None:
        return text  # the optimiser removed every marked store
    lists = {m.group(1) for m in re.finditer(r"^!(\d+) = !\{([^}]*)\}$", text, re.M)
             if f"!{scope.group(1)}" in m.group(2).split(", ")}
    tag = 1 + max(int(n) for n in re.findall(r"^!(\d+) = ", text, re.M))
    marked = re.compile(r"^(\s+store [^\n]*!noalias !(\d+)\b[^\n]*)$", re.M)
    text = marked.sub(lambda m: m.group(1) + (f", !nontemporal !{tag}" if m.group(2) in lists
                                              else ""), text)
    return f"{text}\n!{tag} = !{{i32 1}}\n"
