"""The Triton generator's control flow: returns, ifs and loops. A uniform condition or loop stays
scalar Triton control flow; a divergent one becomes masks (codegen.py's module docstring): an if
adds its condition to the mask terms, a loop whose trip count differs per lane runs to the block's
maximum with the lanes that are done masked off, and break/continue/return clear lanes from the
masks of the statements after them."""
from __future__ import annotations

from ...ir import kernel as K
from ...types import ScalarType
from . import values as V
from .rowguard import conjunction

# False in every program, yet no compile-time constant to Triton (program ids are never negative).
NEVER = "(tl.program_id(0) < 0)"


class Loop:
    """Mask state of one enclosing loop."""

    def __init__(self, brk: str | None, cnt: str | None):
        self.brk = brk
        self.cnt = cnt


class ControlFlow:
    """Mixed into the generator: uses its emit/fresh/expr/block/mask and its mask terms."""

    def return_(self, s: K.Return) -> None:
        m = self.mask()
        for j, value in enumerate(s.values):
            code = self.expr(value, m)
            if self.full() or not self.live and m == "m0":
                self.emit(f"ret{j} = {self.broadcast(code) if self.uniform.expr(value) else code}")
            else:
                self.emit(f"ret{j} = {V.choose(value.type, m, code, f'ret{j}')}")
        if self.live:
            self.emit(f"live = live & ~{m}")

    def if_(self, s: K.If) -> None:
        if self.uniform.expr(s.cond):
            self.emit(f"if {self._uniform_cond(s)}:")
            self._uniform_arms(s)
            return
        m = self.mask()
        if self.rows and s is self.leaf.body[self.row_guard.position]:
            self._row_guard(m)
            return
        c = self.fresh("c")
        self.emit(f"{c} = {self.expr(s.cond, m)}")
        self.terms.append(c)
        self.block(s.then)
        self.terms.pop()
        if s.orelse:
            self.terms.append(f"~{c}")
            self.block(s.orelse)
            self.terms.pop()

    def _uniform_cond(self, s: K.If) -> str:
        cond = self.expr(s.cond, "m0")
        if _accesses_memory(s.then + s.orelse) and not self._constant(s.cond):
            # as in while_: a condition of runtime values that Triton 3.6 folds to false late
            # (`u8(s) != u8(s)`) leaves dead memory accesses that its TritonGPUCoalesce pass
            # fails on. A condition of constants it folds early, and with NEVER added its
            # ConvertTritonGPUToLLVM failed on a loop in the dead branch: left as it is.
            cond = f"({cond}) | {NEVER}"
        return cond

    def _uniform_arms(self, s: K.If) -> None:
        """The arms of a uniform `if`, after its `if` line. An `else` holding only another uniform
        `if` (an elif chain) is written `elif`, at the same depth: written `else: if`, a chain of
        100 would pass Python's limit of 100 indentation levels. (A uniform condition reads no
        memory, so it emits no lines of its own.)"""
        while True:
            self.indent += 1
            self.block(s.then)
            self.emit("pass")
            self.indent -= 1
            inner = s.orelse[0] if len(s.orelse) == 1 else None
            if not isinstance(inner, K.If) or not self.uniform.expr(inner.cond):
                break
            self.emit(f"elif {self._uniform_cond(inner)}:")
            s = inner
        if s.orelse:
            self.emit("else:")
            self.indent += 1
            self.block(s.orelse)
            self.emit("pass")
            self.indent -= 1

    def _row_guard(self, m: str) -> None:
        """The leaf's trailing guard in the `rows` variant (rowguard.py): its body runs on the
        lanes that pass the row conjuncts (loads masked by those, locals assigned on every lane);
        stores also need the x conjuncts."""
        guard, s = self.row_guard, self.leaf.body[self.row_guard.position]
        rows, columns = self.fresh("c"), self.fresh("c")
        self.emit(f"{rows} = {self.expr(conjunction(guard.rows), m)}")
        self.emit(f"{columns} = {self.expr(conjunction(guard.columns), m)}")
        self.terms.append(rows)
        self.columns = columns
        self.block(s.then)
        self.columns = None
        self.terms.pop()

    def _constant(self, e: K.Expr) -> bool:
        """Whether e is built from constants and locals assigned once from such expressions."""
        names = getattr(self, "_constant_names", None)
        if names is None:
            names = self._constant_names = constant_locals(self.leaf)
        return _built_from(e, names)

    def _loop_state(self, body: K.Block) -> Loop:
        jumps = [st for st in K.walk_stmts(body) if isinstance(st, (K.Break, K.Continue))
                 and self._jump_targets(body, st)]
        brk = self.fresh("brk") if any(isinstance(j, K.Break) for j in jumps) else None
        cnt = self.fresh("cnt") if any(isinstance(j, K.Continue) for j in jumps) else None
        if brk:
            self.emit(f"{brk} = FALSE")
        if cnt:
            self.emit(f"{cnt} = FALSE")
        return Loop(brk, cnt)

    @staticmethod
    def _jump_targets(body: K.Block, jump: K.Stmt) -> bool:
        """Whether `jump` (inside body) leaves this loop rather than a loop nested in it."""
        def visit(block: K.Block) -> bool | None:
            for st in block:
                if st is jump:
                    return True
                if isinstance(st, K.If):
                    for sub in (st.then, st.orelse):
                        found = visit(sub)
                        if found is not None:
                            return found
                elif isinstance(st, (K.For, K.While)):
                    if any(x is jump for x in K.walk_stmts(st.body)):
                        return False
            return None
        return bool(visit(body))

    def _enter_body(self, loop: Loop) -> None:
        self.loops.append(loop)
        if loop.cnt:
            self.emit(f"{loop.cnt} = FALSE")
        if loop.brk:
            self.terms.append(f"~{loop.brk}")
        if loop.cnt:
            self.terms.append(f"~{loop.cnt}")

    def _leave_body(self, loop: Loop) -> None:
        if loop.cnt:
            self.terms.pop()
        if loop.brk:
            self.terms.pop()
        self.loops.pop()

    def loop_range(self, s: K.For, m: str) -> tuple[str, str, str]:
        """Emits the start, step and trip count (int64) of s's range under mask m; their names."""
        t = self.types[s.var]
        assert isinstance(t, ScalarType)
        start, stop, step = (self.fresh(n) for n in ("start", "stop", "step"))
        self.emit(f"{start} = {self.expr(s.start, m)}")
        self.emit(f"{stop} = {self.expr(s.stop, m)}")
        self.emit(f"{step} = {self.expr(s.step, m)}")
        trip = self.fresh("trip")
        if t.is_signed:
            self.emit(f"{trip} = _trip({start}.to(tl.int64), {stop}.to(tl.int64), {step}.to(tl.int64))")
        else:
            self.emit(f"{trip} = _trip_unsigned({start}.to(tl.uint64), {stop}.to(tl.uint64), "
                      f"{step}.to(tl.uint64))")
        return start, step, trip

    def for_(self, s: K.For) -> None:
        t = self.types[s.var]
        assert isinstance(t, ScalarType)
        bounds_uniform = all(self.uniform.expr(x) for x in (s.start, s.stop, s.step))
        m = self.mask()
        start, step, trip = self.loop_range(s, m)
        loop = self._loop_state(s.body)
        k = self.fresh("k")
        trips = trip if bounds_uniform else f"tl.max(tl.where({m}, {trip}, 0), 0)"
        # Triton's `for` cannot exit early: a loop that break, return or (checked variant) a
        # failing access may leave is a `while` that stops once no lane is left in it (run to its
        # trip count, `for k in range(2**62)` left by a break after 4 trips would never end)
        leaves = loop.brk is not None or self.stops and _accesses_memory(s.body) or \
            any(isinstance(st, K.Return) for st in K.walk_stmts(s.body))
        if leaves:
            inside = " & ".join(self.terms + ([f"~{loop.brk}"] if loop.brk else [])
                                + ([] if bounds_uniform else [f"({k} < {trip})"]))
            self.emit(f"{k} = Z64")
            self.emit(f"while ({k} < {trips}) & _any({inside}):")
        else:
            self.emit(f"for {k} in range(0, {trips}):")
        self.indent += 1
        if not bounds_uniform:
            act = self.fresh("act")
            self.emit(f"{act} = {k} < {trip}")
            self.terms.append(act)
        self._enter_body(loop)
        value = f"({start} + ({k} + Z64).to({V.reg(t)}) * {step})"
        name = self.names[s.var]
        if self._uniform_var(s.var):
            self.emit(f"{name} = {value}")
        else:
            self.emit(f"{name} = tl.where({self.mask()}, {value}, {name})")
        self.block(s.body)
        self.emit(f"{k} = {k} + 1" if leaves else "pass")
        self._leave_body(loop)
        if not bounds_uniform:
            self.terms.pop()
        self.indent -= 1

    def while_(self, s: K.While) -> None:
        # in the checked variant a failing access leaves the loop too (codegen.py's `stops`)
        escapes = self.stops and _accesses_memory([s]) or \
            any(isinstance(st, (K.Break, K.Continue, K.Return)) for st in K.walk_stmts(s.body))
        if self.uniform.expr(s.cond) and not escapes:
            # `| NEVER`: a condition false on entry for Triton's constants (instance counts of a
            # small or skinny grid, integer arguments equal to 1) leaves a loop body that Triton
            # 3.6's dataflow finds dead, and its TritonGPUCoalesce pass then fails on the memory
            # accesses there (PassManager::run failed); NEVER is false but not a constant to it.
            self.emit(f"while ({self.expr(s.cond, 'm0')}) | {NEVER}:")
            self.indent += 1
            self.block(s.body)
            self.emit("pass")
            self.indent -= 1
            return
        loop = self._loop_state(s.body)
        m = self.mask()
        w = self.fresh("w")
        self.emit(f"{w} = {m} & {self.expr(s.cond, m)}")
        self.emit(f"while _any({w}):")
        self.indent += 1
        saved = self.terms
        # `live` too: a lane that returns in the body must skip the rest of this iteration
        self.terms = [w, "live"] if self.live else [w]
        self._enter_body(loop)
        self.block(s.body)
        self._leave_body(loop)
        still = [w] + (["live"] if self.live else []) + ([f"~{loop.brk}"] if loop.brk else [])
        self.emit(f"{w} = {' & '.join(still)}")
        self.emit(f"{w} = {w} & {self.expr(s.cond, w)}")
        self.terms = saved
        self.indent -= 1


def _accesses_memory(block: K.Block) -> bool:
    """Whether a block loads, stores or updates memory (nested statements included)."""
    return any(isinstance(st, K.Store) for st in K.walk_stmts(block)) or \
        any(isinstance(e, (K.Load, K.Atomic)) for e in K.walk_all_exprs(block))


def constant_locals(leaf: K.LeafFunc) -> set[str]:
    """The locals assigned exactly once, from constants and other such locals (never a parameter,
    a loop variable, an instance id or count, or memory)."""
    values: dict[str, list[K.Expr]] = {}
    loop_vars = set()
    for st in K.walk_stmts(leaf.body):
        if isinstance(st, K.Assign):
            values.setdefault(st.target, []).append(st.value)
        elif isinstance(st, K.For):
            loop_vars.add(st.var)
    params = {p.name for p in leaf.params}
    names = {n for n, vs in values.items() if len(vs) == 1 and n not in params and n not in loop_vars}
    while True:
        kept = {n for n in names if _built_from(values[n][0], names)}
        if kept == names:
            return names
        names = kept


def _built_from(e: K.Expr, constant_names: set[str]) -> bool:
    for sub in K.walk_exprs(e):
        if isinstance(sub, (K.Load, K.Atomic, K.CallHelper, K.InstanceId, K.NumInstances, K.Malloc)):
            return False
        if isinstance(sub, K.Var) and sub.name not in constant_names:
            return False
    return True
