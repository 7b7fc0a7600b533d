"""Random programs whose indices come from data, for testing the launch-time bounds proof.

Every program has the same graph: `produce` (grid n) and `first` (one instance) read `src` and
send an i64 each to `consume` (grid n): one value per instance over a one-to-one edge (`v`) and
one value over an all-to-all edge (`u`). The generated body of `consume` indexes `data`, `out`
and malloc'd scratch `s` with expressions built from those values, loaded values, atomics' old
values, loop variables, chains of loop-carried variables, offsets clamped to a row or a grid as
image filters clamp their windows (with limits sometimes one off, and a variable of the offset
changed before the access), neighbours chosen by a row's parity as a Bayer demosaic chooses them
(`%` and `& 1`, `==` and `!=`, the last branch known only by elimination; rows sometimes one too
many or starting at -1, the row sometimes changed after its parity was tested), narrow wrapping
arithmetic (i8, u8,
i16, i32, u32), division and modulo by values that may be zero or negative, shifts, float casts,
conditional expressions and min/max/abs; loops leave by data-dependent break, continue or
return; guards compare indices with right and wrong limits. Remote accesses (remote_load,
remote_store, remote_atomic_add) name ranks that are provably 0, 0 only at run time, or not 0: the
test process is a world of one rank. So some launches are proven in
bounds (unchecked code runs), some are not, and some really go out of bounds.

n is 1: with one instance the first failing access is well defined on every target (the order
of instances, and of loops interchanged with them, is free), and plain stores do not race.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

from hypothesis import strategies as st

SRC, DATA, OUT, SCRATCH = 4, 16, 16, 8  # elements of each buffer (i64)
NARROW = ["i8", "u8", "i16", "i32", "u32"]
PRODUCERS = ["src[i]", "src[i] * 2 - 3", "src[i] + 5", "src[i] // 3"]
FIRSTS = ["src[1]", "src[1] - src[2]", "src[3] % 7", "min(src[0], src[2])"]


@dataclass
class BoundsProgram:
    source: str
    description: str = ""


class _Body:
    def __init__(self, draw):
        self.draw = draw
        self.lines: list[str] = []
        self.readable = ["i", "v", "u", "acc"]  # i64 values an expression may use
        self.assignable: list[str] = []  # locals a statement may overwrite
        self.counter = itertools.count()

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def pick(self, options):
        return self.draw(st.sampled_from(options))

    # -- expressions (all i64) --------------------------------------------------------------

    def expr(self, depth: int) -> str:
        kinds = ["var", "var", "const"]
        if depth > 0:
            kinds += ["load", "arith", "arith", "divmod", "shift", "narrow", "select", "minmax",
                      "float", "scratch"]
        kind = self.pick(kinds)
        sub = depth - 1
        if kind == "var":
            return self.pick(self.readable)
        if kind == "const":
            return str(self.draw(st.sampled_from([0, 1, 2, 3, 7, 15, 16, 17, -1, -5])))
        if kind == "load":
            if self.draw(st.booleans()):
                return f"data[{self.expr(sub)} % {DATA}]"  # provable: Python's % is in [0, 16)
            return f"data[{self.expr(sub)}]"
        if kind == "scratch":
            return f"s[{self.expr(sub)} % {SCRATCH}]"
        if kind == "arith":
            op = self.pick(["+", "-", "*", "&"])
            rhs = str(self.draw(st.integers(-3, 4))) if op == "*" else self.expr(sub)
            return f"({self.expr(sub)} {op} {rhs})"
        if kind == "divmod":
            return f"({self.expr(sub)} {self.pick(['//', '%'])} {self.expr(sub)})"
        if kind == "shift":
            return f"({self.expr(sub)} {self.pick(['>>', '<<'])} {self.expr(0)})"
        if kind == "narrow":
            t = self.pick(NARROW)
            op = self.pick(["+", "-", "*"])
            return f"i64(hpvm.{t}({self.expr(sub)}) {op} hpvm.{t}({self.expr(sub)}))"
        if kind == "select":
            return f"({self.expr(sub)} if {self.cond(sub)} else {self.expr(sub)})"
        if kind == "minmax":
            fn = self.pick(["min", "max", "abs"])
            if fn == "abs":
                return f"abs({self.expr(sub)})"
            return f"{fn}({self.expr(sub)}, {self.expr(sub)})"
        return f"i64(hpvm.f64({self.expr(sub)}) * {self.pick(['0.5', '1.5', '-2.0', '1e30'])})"

    def cond(self, depth: int) -> str:
        kind = self.pick(["compare", "compare", "range", "data", "not"] if depth > 0 else ["compare", "range"])
        if kind == "compare":
            return f"({self.expr(depth)} {self.pick(['<', '<=', '>', '>=', '==', '!='])} {self.expr(depth)})"
        if kind == "range":
            e = self.expr(depth)
            return f"({e} >= 0 and {e} < {self.limit()})"
        if kind == "data":
            return f"(data[{self.expr(0)} % {DATA}] {self.pick(['==', '<', '>'])} {self.draw(st.integers(-2, 12))})"
        return f"(not {self.cond(depth - 1)})"

    def limit(self, size: int = OUT) -> str:
        """A guard's limit: mostly right, sometimes one too many (a real out-of-bounds access)."""
        return str(size + self.draw(st.sampled_from([0, 0, 0, 1, -1])))

    # -- statements -------------------------------------------------------------------------

    def block(self, indent: int, budget: int, in_loop: bool) -> None:
        for _ in range(self.draw(st.integers(1, max(1, budget)))):
            self.statement(indent, budget - 1, in_loop)

    def nested(self, indent: int, budget: int, in_loop: bool) -> None:
        """A nested block: what it defines may not be assigned on every path, so it stays inside."""
        readable, assignable = list(self.readable), list(self.assignable)
        self.block(indent, budget, in_loop)
        self.readable, self.assignable = readable, assignable

    def statement(self, indent: int, budget: int, in_loop: bool) -> None:
        kinds = ["assign", "reassign", "load", "store", "scratch", "atomic", "guarded", "guarded",
                 "remote", "clamp", "clamp", "parity", "parity"]
        if budget > 0:
            kinds += ["if", "for", "while", "chain"]
        if in_loop:
            kinds += ["jump", "jump"]
        kind = self.pick(kinds)
        if kind == "assign" or (kind == "reassign" and not self.assignable):
            name = self.fresh("x")
            self.emit(indent, f"{name} = {self.expr(2)}")
            self.readable.append(name)
            self.assignable.append(name)
        elif kind == "reassign":
            self.emit(indent, f"{self.pick(self.assignable)} = {self.expr(2)}")
        elif kind == "load":
            self.emit(indent, f"acc = acc + data[{self.expr(2)}]")
        elif kind == "store":
            self.emit(indent, f"out[{self.expr(2)}] = {self.expr(1)}")
        elif kind == "scratch":
            if self.draw(st.booleans()):
                self.emit(indent, f"s[{self.expr(2)}] = {self.expr(1)}")
            else:
                self.emit(indent, f"acc = acc + s[{self.expr(2)}]")
        elif kind == "atomic":
            name = self.fresh("x")
            self.emit(indent, f"{name} = hpvm.atomic_add(out, {self.expr(2)}, {self.expr(0)})")
            self.readable.append(name)  # the old value: any i64
        elif kind == "guarded":
            self.guarded(indent)
        elif kind == "remote":
            self.remote(indent)
        elif kind == "clamp":
            self.clamp(indent)
        elif kind == "parity":
            self.parity(indent)
        elif kind == "if":
            self.emit(indent, f"if {self.cond(2)}:")
            self.nested(indent + 1, budget, in_loop)
            if self.draw(st.booleans()):
                self.emit(indent, "else:")
                self.nested(indent + 1, budget, in_loop)
        elif kind == "for":
            var = self.fresh("k")
            bounds = self.pick(["4", "0, 5", "6, -1, -2", "0, v", "u, 3", f"0, {OUT} + 2"])
            self.emit(indent, f"for {var} in range({bounds}):")
            readable = list(self.readable)
            self.readable.append(var)
            self.nested(indent + 1, budget, True)
            self.readable = readable  # the loop may run zero times
        elif kind == "while":
            var = self.fresh("w")
            self.emit(indent, f"{var} = 0")
            self.emit(indent, f"while {var} < {self.draw(st.integers(1, 6))}:")
            self.emit(indent + 1, f"{var} = {var} + 1")  # first: `continue` cannot loop forever
            self.readable.append(var)
            self.nested(indent + 1, budget, True)
        elif kind == "chain":
            self.chain(indent)
        else:
            jump = self.pick(["break", "continue", "return"])
            self.emit(indent, f"if {self.cond(1)}:")
            self.emit(indent + 1, jump)

    def guarded(self, indent: int) -> None:
        """An access behind a guard that may prove it (a variable or the same expression)."""
        target = self.pick(["out", "data", "s"])
        size = {"out": OUT, "data": DATA, "s": SCRATCH}[target]
        e = self.expr(2)
        if self.draw(st.booleans()):
            name = self.fresh("t")
            self.emit(indent, f"{name} = {e}")
            self.readable.append(name)
            e = name
        self.emit(indent, f"if {e} >= 0 and {e} < {self.limit(size)}:")
        if target == "data":
            self.emit(indent + 1, f"acc = acc + data[{e}]")
        else:
            self.emit(indent + 1, f"{target}[{e}] = {self.expr(1)}")

    def edge(self, value: int) -> int:
        """A clamp's limit: mostly right, sometimes one off either way."""
        return value + self.draw(st.sampled_from([0, 0, 0, 1, -1]))

    def bounded_var(self, indent: int, span: int, below: int) -> str:
        """A new variable in [-below, span - below), from data: both sides of a clamp."""
        name = self.fresh("q")
        self.emit(indent, f"{name} = {self.expr(1)} % {span} - {below}")
        self.readable.append(name)
        self.assignable.append(name)
        return name

    def clamp(self, indent: int) -> None:
        """An offset clamped into a row (or a grid of rows of 4) by if/elif chains that move it
        by the amount it overshoots, as the edge-detection filters do: in bounds on each path,
        not by the join of the paths' intervals. Then, sometimes, a variable of the offset is
        changed and the access subtracts it (exact only for a proof that kept the old value)."""
        target = self.pick(["out", "data", "s"])
        size = {"out": OUT, "data": DATA, "s": SCRATCH}[target]
        width = 4 if self.draw(st.booleans()) else size
        name = self.fresh("o")
        col, kc = self.bounded_var(indent, width + 6, 3), self.draw(st.integers(-3, 3))
        ce = f"({col} + {kc})"
        if width < size:
            row, kr = self.bounded_var(indent, size // width + 4, 2), self.draw(st.integers(-2, 2))
            re = f"({row} + {kr})"
            self.emit(indent, f"{name} = {re} * {width} + {ce}")
            self.emit(indent, f"if {re} < {self.edge(0)}:")
            self.emit(indent + 1, f"{name} = {ce}")
            self.emit(indent, f"elif {re} > {self.edge(size // width - 1)}:")
            self.emit(indent + 1, f"{name} = {self.edge(size // width - 1)} * {width} + {ce}")
        else:
            self.emit(indent, f"{name} = {ce}")
        self.emit(indent, f"if {ce} < {self.edge(0)}:")
        self.emit(indent + 1, f"{name} -= {ce}")
        self.emit(indent, f"elif {ce} > {self.edge(width - 1)}:")
        self.emit(indent + 1, f"{name} = {name} - {ce} + {self.edge(width - 1)}")
        index = name
        if col in self.assignable and self.draw(st.booleans()):
            self.emit(indent, f"{col} = {col} + {self.draw(st.integers(1, 9))}")
            index = f"{name} - {col} + {self.draw(st.integers(-1, 2)) - kc}"
        if target == "data":
            self.emit(indent, f"acc = acc + data[{index}]")
        else:
            self.emit(indent, f"{target}[{index}] = {self.expr(1)}")

    def parity(self, indent: int) -> None:
        """Neighbours chosen by a row's parity, as a Bayer demosaic chooses them: the row below
        only on even rows, the row above only on odd ones (the last branch is odd only by
        elimination of the others). In bounds when the rows are [0, size) with size even; the
        rows sometimes reach one further or start at -1 (really out of bounds: -1 is odd in
        Python's `%`), and the row sometimes changes between its test and the access."""
        target = self.pick(["out", "data", "s"])
        size = {"out": OUT, "data": DATA, "s": SCRATCH}[target]
        below = self.draw(st.sampled_from([0, 0, 0, 1]))
        row = self.bounded_var(indent, self.edge(size) + below, below)
        other = self.bounded_var(indent, 2, 0)
        even = self.pick([f"{row} % 2 == 0", f"({row} & 1) == 0", f"{row} % 2 != 1", f"0 == {row} % 2"])
        odd = self.pick([f"{row} % 2 == 1", f"({row} & 1) != 0", f"{row} % 2 != 0", f"1 == ({row} & 1)"])
        flip = self.pick([f"{other} % 2 == 0", f"{other} % 2 == 1"])

        def access(at: int, index: str) -> None:
            if row in self.assignable and self.draw(st.integers(0, 5)) == 0:
                self.emit(at, f"{row} = {row} + 1")  # its old parity no longer holds
            if target == "data":
                self.emit(at, f"acc = acc + data[{index}]")
            else:
                self.emit(at, f"{target}[{index}] = {self.expr(1)}")

        self.emit(indent, f"if {even} and {flip}:")
        access(indent + 1, f"{row} + 1")
        self.emit(indent, f"elif {even}:")
        access(indent + 1, f"{row}")
        self.emit(indent, f"elif {odd} and {flip}:")
        access(indent + 1, f"{row} - 1")
        self.emit(indent, "else:")
        access(indent + 1, f"{row} - 1")

    def remote(self, indent: int) -> None:
        """A remote access in a world of one rank: its rank must be 0."""
        rank = self.pick(["0", "0", f"{self.expr(1)} % 1", self.expr(1), f"min(max({self.expr(1)}, 0), 0)",
                          f"(0 if {self.cond(1)} else 1)"])
        which = self.pick(["load", "store", "atomic"])
        if which == "load":
            self.emit(indent, f"acc = acc + hpvm.remote_load(data, {self.expr(2)}, {rank})")
        elif which == "store":
            self.emit(indent, f"hpvm.remote_store(out, {self.expr(2)}, {self.expr(1)}, {rank})")
        else:
            name = self.fresh("x")
            self.emit(indent, f"{name} = hpvm.remote_atomic_add(out, {self.expr(2)}, {self.expr(0)}, {rank})")
            self.readable.append(name)

    def chain(self, indent: int) -> None:
        """Values passed down a chain of loop-carried variables, one step per iteration."""
        links = [self.fresh("c") for _ in range(self.draw(st.integers(2, 5)))]
        for name in links:
            self.emit(indent, f"{name} = 0")
        var = self.fresh("k")
        self.emit(indent, f"for {var} in range({self.draw(st.integers(1, len(links) + 2))}):")
        target = self.pick(["out", "s"])
        self.emit(indent + 1, f"{target}[{links[-1]}] = {var}")
        for dst, src in zip(reversed(links), reversed(links[:-1])):
            self.emit(indent + 1, f"{dst} = {src}")
        self.emit(indent + 1, f"{links[0]} = {self.expr(1)}")
        self.readable += links
        self.assignable += links


@st.composite
def bounds_programs(draw) -> BoundsProgram:
    body = _Body(draw)
    body.emit(1, "i = hpvm.instance_id(0)")
    body.emit(1, "s = hpvm.malloc(m, i64)")
    body.emit(1, "acc = 0")
    body.block(1, draw(st.integers(2, 4)), False)
    body.emit(1, "res[0] = acc")
    produce, first = draw(st.sampled_from(PRODUCERS)), draw(st.sampled_from(FIRSTS))
    source = "\n".join([
        "import hpvm_py as hpvm",
        "from hpvm_py import In, InOut, Ptr, i64",
        "",
        "",
        "@hpvm.leaf",
        "def produce(src: In[Ptr[i64]], src_bytes: i64) -> i64:",
        "    i = hpvm.instance_id(0)",
        f"    return {produce}",
        "",
        "",
        "@hpvm.leaf",
        "def first(src: In[Ptr[i64]], src_bytes: i64) -> i64:",
        f"    return {first}",
        "",
        "",
        "@hpvm.leaf",
        "def consume(v: i64, u: i64, data: In[Ptr[i64]], data_bytes: i64, out: InOut[Ptr[i64]], "
        "out_bytes: i64, res: InOut[Ptr[i64]], res_bytes: i64, m: i64):",
        *body.lines,
        "",
        "",
        "@hpvm.graph",
        "def root(src: In[Ptr[i64]], src_bytes: i64, data: In[Ptr[i64]], data_bytes: i64, "
        "out: InOut[Ptr[i64]], out_bytes: i64, res: InOut[Ptr[i64]], res_bytes: i64, n: i64, m: i64):",
        "    p = hpvm.node(produce, grid=n, src=src, src_bytes=src_bytes)",
        "    f = hpvm.node(first, src=src, src_bytes=src_bytes)",
        "    hpvm.node(consume, grid=n, v=p.out[0], u=hpvm.all_to_all(f.out[0]), data=data, "
        "data_bytes=data_bytes, out=out, out_bytes=out_bytes, res=res, res_bytes=res_bytes, m=m)",
        "",
    ])
    return BoundsProgram(source)


