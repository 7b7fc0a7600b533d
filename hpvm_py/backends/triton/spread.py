"""The Triton generator's spread loops: a reduction loop (reductions.py) of a leaf without
replication dims runs on all the lanes of its program instead of repeating in each.
(docs/architecture.md, "Module notes": backends/triton/spread.py)"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ...ir import kernel as K
from ...types import ScalarType
from . import values as V
from .reductions import Accumulator, ReductionLoop

# (value, iteration) pairs of one float accumulator: the one the sequential fold keeps of two
_PAIR = '''

@triton.jit
def {name}(x, i, y, j):
    """Of two (value, iteration) pairs, the one `acc = {call}` keeps in sequence: a NaN (of
    two, the {nan}), else the {more} value (of two equal ones, the {tie})."""
    x_nan = x != x
    y_nan = y != y
    take_y = tl.where(x_nan | y_nan, y_nan & (~x_nan | (j {nan_cmp} i)),
                      (y {cmp} x) | ((y == x) & (j {tie_cmp} i)))
    return tl.where(take_y, y, x), tl.where(take_y, j, i)
'''

_BITWISE = '''

@triton.jit
def _lanes_{op}(x, y):
    return x {symbol} y
'''
_SYMBOL = {"and": "&", "or": "|", "xor": "^"}


def _pair_helper(acc: Accumulator) -> tuple[str, str]:
    """The name and source of the pair combiner of a float accumulator."""
    later = acc.first  # max(acc, e) keeps the later of equal values and the earlier NaN
    name = f"_{acc.op}_ties_{'later' if later else 'earlier'}"
    source = _PAIR.format(
        name=name, call=f"{acc.op}(acc, e)" if acc.first else f"{acc.op}(e, acc)",
        more="greater" if acc.op == "max" else "smaller", cmp=">" if acc.op == "max" else "<",
        nan="earlier" if later else "later", nan_cmp="<" if later else ">",
        tie="later" if later else "earlier", tie_cmp=">" if later else "<")
    return name, source


def _to_word(value: str, t: ScalarType) -> str:
    """A scalar accumulator value as the int64 word of a split loop's row (its bits)."""
    if t.is_float:
        return f"{value}.to(tl.int64, bitcast=True)" if t.bits == 64 else \
            f"{value}.to(tl.int32, bitcast=True).to(tl.int64)"
    return f"{value}.to(tl.int64, bitcast={t.bits == 64})"


def _from_word(word: str, t: ScalarType) -> str:
    """The accumulator value whose bits a row's word holds (_to_word's inverse)."""
    if t.is_float:
        return f"{word}.to(tl.float64, bitcast=True)" if t.bits == 64 else \
            f"{word}.to(tl.int32).to(tl.float32, bitcast=True)"
    return f"{word}.to({V.reg(t)}, bitcast={t.bits == 64})"


def _identity(acc: Accumulator) -> int | float:
    t = acc.type
    if t.is_float:
        return float("-inf") if acc.op == "max" else float("inf")
    return {"add": 0, "or": 0, "xor": 0, "and": -1 if t.is_signed else t.max_value(),
            "max": t.min_value(), "min": t.max_value()}[acc.op]


class SpreadLoops:
    """Mixed into the generator: uses its emit/fresh/expr/assign/loop_range, its names and types,
    `checked`, and `combiners` (the helpers the kernel file needs, name -> source)."""

    failures: tuple[str, str, str, str] | None = None  # in a chunk (checked): bad, site, index, limit

    def spread_for(self, r: ReductionLoop) -> None:
        s = r.loop
        self.emit(f"# for {s.var} in range(...) spread over the lanes: lane j runs iteration c + j of")
        self.emit("# each chunk c of BLOCK iterations; the lanes' partial results are combined after it")
        if self.split:
            self.emit("# ... split over SPLIT programs: this one takes chunks part, part + SPLIT, ...")
        start, step, trip = self.loop_range(s, "m0")
        partials = {acc.name: self._partial(acc) for acc in r.accumulators}
        chunk, k, act = self.fresh("c"), self.fresh("k"), self.fresh("act")
        first, stride = ("part * BLOCK", "SPLIT * BLOCK") if self.split else ("0", "BLOCK")
        failed = self.fresh("failed") if self.checked else ""
        if self.checked:  # a chunk that failed is the last: later ones hold later iterations (a
            # range(2**62) read past a buffer's end never ended)
            self.emit(f"{failed} = Z64 != 0")
            self.emit(f"{chunk} = Z64 + {first}")
            self.emit(f"while ({chunk} < {trip}) & ~{failed}:")
        else:
            self.emit(f"for {chunk} in range({first}, {trip}, {stride}):")
        self.indent += 1
        self.emit(f"{k} = {chunk} + tl.arange(0, BLOCK).to(tl.int64)")
        self.emit(f"{act} = {k} < {trip}")
        t = self.types[s.var]
        assert isinstance(t, ScalarType)
        self.emit(f"{self.names[s.var]} = ({start} + {k}.to({V.reg(t)}) * {step})")
        if self.checked:
            self._open_failures()
        accumulators = {acc.name: acc for acc in r.accumulators}
        for st in s.body:
            assert isinstance(st, K.Assign)
            acc = accumulators.get(st.target)
            if acc is not None:
                self._fold(acc, partials[acc.name], k, act)
                continue
            code = self.expr(st.value, act)
            lanes = any(isinstance(e, K.Load) or isinstance(e, K.Var) and e.name in r.per_lane
                        for e in K.walk_exprs(st.value))
            self.emit(f"{self.names[st.target]} = {code if lanes else self.broadcast(code)}")
        if self.checked:
            assert self.failures is not None
            self.emit(f"{failed} = _any({self.failures[0]})")
            self._close_failures()
            self.emit(f"{chunk} = {chunk} + {stride}")
        self.indent -= 1
        for acc in r.accumulators:
            self._combine(acc, partials[acc.name])
        if self.split:
            self._split_combine(r, partials)
        for acc in r.accumulators:
            self._fold_result(acc, partials[acc.name][0])

    def _partial(self, acc: Accumulator) -> tuple[str, str | None]:
        """The lanes' partial result of an accumulator (and, for floats, its iterations)."""
        value = self.fresh("lanes")
        self.emit(f"{value} = {self.broadcast(V.constant(_identity(acc), acc.type))}")
        if not acc.type.is_float:
            return value, None
        at = self.fresh("at")
        self.emit(f"{at} = ZERO - 1")
        return value, at

    def _fold(self, acc: Accumulator, partial: tuple[str, str | None], k: str, act: str) -> None:
        """One iteration per lane: the active lanes fold their element into their partial."""
        value, at = partial
        if at is None:
            with self._bound({acc.name: value}):
                self.emit(f"{value} = {V.choose(acc.type, act, self.expr(acc.update, act), value)}")
            return
        name, source = _pair_helper(acc)
        self.combiners[name] = source
        element = self.expr(acc.element, act)
        new, new_at = self.fresh("v"), self.fresh("j")
        self.emit(f"{new}, {new_at} = {name}({value}, {at}, {element}, {k})")
        self.emit(f"{value} = {V.choose(acc.type, act, new, value)}")
        self.emit(f"{at} = tl.where({act}, {new_at}, {at})")

    def _combine(self, acc: Accumulator, partial: tuple[str, str | None]) -> None:
        """The lanes' partial results combined into one (in the same names)."""
        value, at = partial
        if at is not None:
            name, _ = _pair_helper(acc)
            self.emit(f"{value}, {at} = tl.reduce(({value}, {at}), 0, {name})")
        elif acc.op in _SYMBOL:
            self.combiners[f"_lanes_{acc.op}"] = _BITWISE.format(op=acc.op, symbol=_SYMBOL[acc.op])
            self.emit(f"{value} = tl.reduce({value}, 0, _lanes_{acc.op})")
        elif acc.op == "add":  # tl.sum widens 8- and 16-bit integers: the sum wraps back
            self.emit(f"{value} = tl.sum({value}, 0).to({V.reg(acc.type)})")
        else:
            self.emit(f"{value} = tl.{acc.op}({value}, 0)")

    def _fold_result(self, acc: Accumulator, value: str) -> None:
        """The combined result folded into the accumulator by the leaf's own update."""
        lanes = f"{acc.name}.lanes"  # no local has a dot in its name
        with self._bound({lanes: value}):
            self.assign(acc.name, acc.folding(K.Var(name=lanes, type=acc.type)))

    # -- split over SPLIT programs per parent instance (the module docstring) ---------------------

    def _split_combine(self, r: ReductionLoop, partials: dict[str, tuple[str, str | None]]) -> None:
        """Each program leaves its combined partial results and draws a ticket; the last one
        reads every program's, combines them in the same names and goes on with the rest of the
        leaf inside `if last:` (the loop is a top-level statement, so the kernel ends inside it)."""
        words: list[tuple[str, ScalarType | None]] = []  # a row's words: names, None for iterations
        for acc in r.accumulators:
            value, at = partials[acc.name]
            words += [(value, acc.type)] + ([(at, None)] if at is not None else [])
        names = [name for name, _ in words]
        e = self.emit
        e(f"record = SPLIT_AREA + parent * (1 + SPLIT * {len(words)})  # ticket counter, SPLIT rows")
        e("last = True  # SPLIT = 1: the only program")
        e("if SPLIT > 1:")
        e(f"    row = record + 1 + part * {len(words)}")
        for w, (name, t) in enumerate(words):
            e(f"    tl.store(row + {w}, {name if t is None else _to_word(name, t)})")
        e("    # release: this row is visible to the last ticket's program, which acquires it")
        e('    last = tl.atomic_add(record, 1, sem="acq_rel") == SPLIT - 1')
        e("if last:  # the last program to finish combines the rows and runs the rest of the leaf")
        self.indent += 1
        e("if SPLIT > 1:")
        self.indent += 1
        e(f"rows = record + 1 + tl.arange(0, BLOCK).to(tl.int64) * {len(words)}")
        e("drawn = tl.arange(0, BLOCK) < SPLIT")
        for acc in r.accumulators:
            value, at = partials[acc.name]
            w = names.index(value)
            e(f"{value} = tl.where(drawn, {_from_word(f'tl.load(rows + {w}, mask=drawn, volatile=True)', acc.type)}, "
              f"{self.broadcast(V.constant(_identity(acc), acc.type))})")
            if at is not None:
                e(f"{at} = tl.load(rows + {w + 1}, mask=drawn, other=-1, volatile=True)")
            self._combine(acc, partials[acc.name])
        e("tl.store(record, 0)  # the counter, zero again for this launch's next run")
        self.indent -= 1

    @contextmanager
    def _bound(self, codes: dict[str, str]) -> Iterator[None]:
        """Reads of these locals generate the given code instead."""
        saved = self.names
        self.names = {**saved, **codes}
        try:
            yield
        finally:
            self.names = saved

    # -- checked variant: a chunk reports its first failure ---------------------------------------

    def _open_failures(self) -> None:
        bad, site, index, limit = (self.fresh(n) for n in ("bad", "site", "at", "lim"))
        self.emit(f"{bad} = FALSE")
        for name in (site, index, limit):
            self.emit(f"{name} = ZERO")
        self.failures = (bad, site, index, limit)

    def record_failure(self, bad: str, index: str, site: int, limit: str) -> None:
        """An access's failing lanes (`bad`) whose first failure it is, kept for the chunk's end."""
        assert self.failures is not None
        seen, sites, indices, limits = self.failures
        first = self.fresh("first")
        self.emit(f"{first} = {bad} & ~{seen}")
        self.emit(f"{sites} = tl.where({first}, {site}, {sites})")
        self.emit(f"{indices} = tl.where({first}, {index}, {indices})")
        self.emit(f"{limits} = tl.where({first}, {limit}, {limits})")
        self.emit(f"{seen} = {seen} | {first}")
        if self.stops:  # the lane stops here (codegen.py)
            self.emit(f"live = live & ~{first}")

    def _close_failures(self) -> None:
        assert self.failures is not None
        bad, site, index, limit = self.failures
        self.emit(f"_report(ERR, {bad}, {index}, {site}, {limit}, BLOCK)")
        self.failures = None
