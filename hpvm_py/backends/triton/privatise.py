"""Privatised counting atomics on the gpu target: the histogram leaf without global contention.

A buffer that a leaf only updates by `atomic_add`/`atomic_sub` of a constant whose old value is
unused (the cpu backend's `privatisable` rule, restricted to integer elements and constant
amounts) is a count per index. Each program then keeps a private block of counts, one lane per
element of the buffer (NB, a power of two, fixed at the launch), adds `tl.histogram` of each
block of instances' indices to it, and after ITERS blocks of instances merges it into the buffer
with one masked atomic add per nonzero element. Integer sums wrap the same way in any order, so
the result is the literal kernel's. An index outside the buffer, which the literal kernel would
write out of bounds, counts nowhere.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ir import kernel as K
from ...passes.fold import fold_expr
from ...types import PtrType, ScalarType
from ..cpu.accesses import privatisable
from . import values as V

# Buffers of at most this many elements are privatised (one register block of counts per program).
MAX_PRIVATE_ELEMENTS = 4096


@dataclass(frozen=True)
class PrivateCount:
    """A buffer counted privately: its element type; the constant of each of its atomics is read
    from the IR at the site."""

    name: str
    elem: ScalarType


def private_counts(leaf: K.LeafFunc) -> list[PrivateCount]:
    """The leaf's buffers updated only by constant integer adds (and subs) whose results are
    unused."""
    found = []
    params = {p.name: p.type for p in leaf.params}
    atomics = [e for e in K.walk_all_exprs(leaf.body) if isinstance(e, K.Atomic)]
    for name, kind in privatisable(leaf).items():
        t = params[name]
        assert isinstance(t, PtrType)
        mine = [a for a in atomics if a.ptr.name == name]
        if kind != "add" or t.elem.is_float or t.elem.bits < 32 or \
                not all(isinstance(fold_expr(a.value), K.Const) for a in mine):
            continue
        found.append(PrivateCount(name, t.elem))
    return found


class PrivateCounts:
    """Mixed into the generator: uses its emit/fresh/index/names and its `private` list."""

    private: list[PrivateCount]

    def _counts(self, name: str) -> str:
        return f"{self.names[name]}__counts"

    def private_init(self) -> None:
        for p in self.private:
            self.emit(f"{self._counts(p.name)} = tl.zeros([NB_{self.names[p.name]}], {V.reg(p.elem)})")

    def count_privately(self, e: K.Atomic, m: str) -> str:
        """One atomic add of a constant: a histogram of the block's indices, scaled by it."""
        amount = fold_expr(e.value)
        assert isinstance(amount, K.Const)
        step = -int(amount.value) if e.op == "sub" else int(amount.value)
        elem = next(p.elem for p in self.private if p.name == e.ptr.name)
        step %= 1 << elem.bits  # a sub as its wrapped-around addend (counts wrap like the atomics)
        if elem.is_signed and step >= 1 << (elem.bits - 1):
            step -= 1 << elem.bits  # e.g. subtracting -2**31 from an i32 adds -2**31
        name = self.names[e.ptr.name]
        index = self.index(e.index, m)
        hist = self.fresh("hist")
        # 0 <= index < count as one unsigned compare; masked-off lanes' indices are never read
        self.emit(f"{hist} = tl.histogram({index}.to(tl.int32), NB_{name}, "
                  f"mask={m} & ({index}.to(tl.uint64, bitcast=True) < {name}__count))")
        counts = self._counts(e.ptr.name)
        self.emit(f"{counts} = {counts} + {hist}.to({V.reg(elem)}) * {V.constant(step, elem)}")
        return "ZERO"  # the old value is unused (privatisable)

    def private_merge(self) -> None:
        for p in self.private:
            name = self.names[p.name]
            counts = self._counts(p.name)
            at = self.fresh("bin")
            self.emit(f"{at} = tl.arange(0, NB_{name})")
            self.emit(f"tl.atomic_add({name} + {at}, {counts}, mask=({at} < {name}__count) & "
                      f"({counts} != 0))")
