"""The Triton generator's memory accesses: masked loads' indices, stores and atomics, each
masked by its lanes and, in the checked variant, by its buffer's bounds (codegen.py uses it)."""
from __future__ import annotations

from ...ir import kernel as K
from ...types import PtrType, ScalarType
from ..access_errors import Access
from . import values as V
from .mathcalls import unsupported

_BITS = {16: "tl.int16", 32: "tl.int32", 64: "tl.int64"}
_ATOMIC_FN = {"add": "tl.atomic_add", "sub": "tl.atomic_add", "min": "tl.atomic_min",
              "max": "tl.atomic_max", "xchg": "tl.atomic_xchg", "and": "tl.atomic_and",
              "or": "tl.atomic_or", "xor": "tl.atomic_xor"}


class MemoryAccesses:
    """Mixed into the generator: uses its emit/fresh/mask/expr, its names, types and sites, and
    in the checked variant its record_failure (spread.py)."""

    def store(self, s: K.Store) -> None:
        elem = self._elem(s.ptr)
        m = self.mask()
        index = self.index(s.index, m)
        value = self.expr(s.value, m)
        rank = self.rank(s.rank, m)
        if self.columns is not None:  # under a row guard, a store needs its x conjuncts too
            m = f"{m} & {self.columns}"
        access = self.guard(s, index, m, rank)
        self.emit(f"tl.store({self.address(s.ptr, index, rank, access)}, {V.to_memory(value, elem)}, "
                  f"mask={access})")

    # -- memory -------------------------------------------------------------------------------

    def _elem(self, ptr: K.Var) -> ScalarType:
        t = self.types[ptr.name]
        assert isinstance(t, PtrType)
        return t.elem

    def index(self, e: K.Expr, m: str) -> str:
        """An access index as a block of int64 (scalars broadcast: the mask is a block)."""
        code = self.expr(e, m)
        name = self.fresh("i")
        self.emit(f"{name} = {code}.to(tl.int64) + {self.zero}")
        return name

    def guard(self, access: Access, index: str, m: str, rank: str | None = None) -> str:
        """The mask of one access; in the checked variant, also the report of a failure (of a
        remote access's rank first)."""
        if not self.checked:
            return m
        buf = self.names[access.ptr.name]
        ok = self.fresh("ok")
        self.emit(f"{ok} = ({index} >= 0) & ({index} < {buf}__limit)")
        self.sites.append(access)
        site = len(self.sites) - 1
        if rank is not None:
            m = self.rank_guard(rank, m, site)
        if self.failures is not None:  # reported at the kernel's or a spread chunk's end (spread.py)
            self.record_failure(f"{m} & ~{ok}", index, site, f"{buf}__limit")
        else:
            self.emit(f"_report(ERR, {m} & ~{ok}, {index}, {site}, {buf}__limit, BLOCK)")
        return f"{m} & {ok}"

    def atomic(self, e: K.Atomic, m: str) -> str:
        if any(p.name == e.ptr.name for p in self.private):
            return self.count_privately(e, m)
        elem = self._elem(e.ptr)
        index = self.index(e.index, m)
        value = self.expr(e.value, m)
        rank = self.rank(e.rank, m)
        access = self.guard(e, index, m, rank)
        if elem.is_float and (e.op in ("min", "max") or elem.bits == 16):
            if rank is not None:  # the compare-and-swap loop addresses this rank's buffer only
                raise unsupported(f"remote_atomic_add on {elem.name}", e.loc)
            return self._float_cas(e.op, e.ptr, index, value, access)
        if e.op == "sub":  # a float negation flips the sign of zero: x - 0.0 keeps a -0.0
            value = V.unary("neg", elem, value)
        old = self.fresh("old")
        self.emit(f"{old} = {_ATOMIC_FN[e.op]}({self.address(e.ptr, index, rank, access)}, "
                  f"tl.broadcast_to({V.to_memory(value, elem)}, [BLOCK]), mask={access})")
        return V.from_memory(old, elem)

    def _float_cas(self, op: str, ptr: K.Var, index: str, value: str, access: str) -> str:
        """A float atomic as a compare-and-swap loop on the element's bits: min/max as fmin/fmax
        (Triton's own compare the bits as integers), and add/sub/xchg on f16 and bf16 (which
        Triton's interpreter cannot update in place), computed in f32 and rounded like any f16 or
        bf16 operation. tl.atomic_cas takes no mask, so lanes with nothing left to do swap an
        element a pending lane owns with itself (cmp == val: no change)."""
        elem = self._elem(ptr)
        bits = _BITS[elem.bits]
        base = self.names[ptr.name]
        cur, new, pending, first, seen = (self.fresh(x) for x in ("cur", "new", "pend", "first", "seen"))

        def as_bits(code: str) -> str:
            return code if elem.name == "bf16" else f"{code}.to({bits}, bitcast=True)"

        def as_value(code: str) -> str:
            memory = code if elem.name == "bf16" else f"{code}.to({V.MEMORY[elem.name]}, bitcast=True)"
            return V.from_memory(memory, elem)

        def update() -> None:
            old = as_value(cur)
            result = {"min": f"_minnum({old}, {value})", "max": f"_maxnum({old}, {value})",
                      "add": f"({old} + {value})", "sub": f"({old} - {value})",
                      "xchg": f"tl.broadcast_to({value}, [BLOCK])"}[op]
            self.emit(f"{new} = {as_bits(V.to_memory(result, elem))}")

        self.emit(f"{cur} = {as_bits(f'tl.load({base} + {index}, mask={access}, other=0, volatile=True)')}")
        update()
        self.emit(f"{pending} = {access} & ({new} != {cur})")
        self.emit(f"while _any({pending}):")
        self.indent += 1
        self.emit(f"{first} = tl.max(tl.where({pending}, {index}, -1), 0)")
        self.emit(f"{seen} = tl.atomic_cas({base}.to(tl.pointer_type({bits})) + "
                  f"tl.where({pending}, {index}, {first}), {cur}, tl.where({pending}, {new}, {cur}))")
        self.emit(f"{pending} = {pending} & ({seen} != {cur})")
        self.emit(f"{cur} = tl.where({pending}, {seen}, {cur})")
        update()
        self.emit(f"{pending} = {pending} & ({new} != {cur})")
        self.indent -= 1
        return as_value(cur)
