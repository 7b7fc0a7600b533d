"""Random well-typed hpvm-py programs, as Python source, for differential testing.

A program is one or two leaves around inputs `a`, `b` (read only), a scalar `s`, and outputs `out`
(one element per instance) and `hist` (commutative atomics only), so every run is deterministic
and race free whatever the order of instances. Bodies mix arithmetic on every scalar type, casts,
comparisons, lazy boolean operators, conditional expressions, nested if / for / while with
break/continue, and atomics. Integer edge cases (wrapping, zero divisors, huge shifts) and float
edge cases (inf, NaN, -0.0, saturating casts) are all defined by the language, so any difference
between targets is a bug.

generate() takes its decisions from a Choices (tests/differential/choices.py): hypothesis's draws
in tests/test_differential.py (programs()), a seeded random.Random in tests/differential/runner.py.
Its variants, and pingpong_program() and stream_program(), give the runner's other categories.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from differential.choices import Choices, HypothesisChoices

INT_TYPES = ["i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64"]
FLOAT_TYPES = ["f16", "f32", "f64", "bf16"]
TYPES = INT_TYPES + FLOAT_TYPES
RANGES = {"i8": (-128, 127), "i16": (-2**15, 2**15 - 1), "i32": (-2**31, 2**31 - 1),
          "i64": (-2**63, 2**63 - 1), "u8": (0, 255), "u16": (0, 2**16 - 1), "u32": (0, 2**32 - 1),
          "u64": (0, 2**64 - 1)}
FLOAT_LITERALS = ["0.0", "-0.0", "1.5", "-2.25", "3.0", "0.1", "1e30", "-1e-30", "65504.0", "70000.0",
                  "1e300", "-7.5"]
ATOMICS = ["atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_or", "atomic_and", "atomic_xor"]


@dataclass
class Program:
    source: str
    in_types: tuple[str, str, str]  # a, b, s
    out_type: str
    hierarchical: bool
    chained: bool
    description: str = ""
    block: tuple[int, ...] = ()  # tiles_program's block extents (x, y, z)


@dataclass
class _Scope:
    variables: dict[str, str] = field(default_factory=dict)  # name -> type
    counter: int = 0
    # indices the body relies on later (instance ids, coordinates): never reassigned
    fixed: set[str] = field(default_factory=lambda: {"i", "n"})

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


class _Builder:
    def __init__(self, c: Choices, scope: _Scope):
        self.c = c
        self.scope = scope
        self.lines: list[str] = []
        # one kind of atomic per program: each kind commutes with itself, not with the others
        self.atomic = c.pick(ATOMICS)

    def emit(self, indent: int, text: str) -> None:
        self.lines.append("    " * indent + text)

    # -- expressions ------------------------------------------------------------------------

    def literal(self, t: str) -> str:
        if t in FLOAT_TYPES:
            return f"hpvm.{t}({self.c.pick(FLOAT_LITERALS)})"
        lo, hi = RANGES[t]
        if self.c.flag():
            value = self.c.pick([0, 1, 2, 3, 7, -1, -3, lo, hi, 63, 64])
        else:
            value = self.c.integer(lo, hi)
        value = min(max(value, lo), hi)
        return f"hpvm.{t}({value})"

    def expr(self, t: str, depth: int) -> str:
        choices = ["literal", "var", "cast"]
        if depth > 0:
            choices += ["binary", "binary", "unary", "minmax", "select"]
            choices.append("math" if t in FLOAT_TYPES else "bits")
        kind = self.c.pick(choices)
        same = [v for v, vt in self.scope.variables.items() if vt == t]
        if kind == "var" and same:
            return self.c.pick(same)
        if kind == "cast" or (kind == "var" and not same):
            others = list(self.scope.variables.items())
            if others and self.c.flag():
                name, _ = self.c.pick(others)
                return f"hpvm.{t}({name})"
            if depth > 0:
                return f"hpvm.{t}({self.expr(self.c.pick(TYPES), depth - 1)})"
            return self.literal(t)
        if kind == "literal":
            return self.literal(t)
        if kind == "binary":
            ops = ["+", "-", "*", "//", "%"]
            ops += ["&", "|", "^", "<<", ">>"] if t in INT_TYPES else ["/"]
            op = self.c.pick(ops)
            s_type = self.scope.variables.get("s")
            if op in ("//", "%") and (s_type == t or t in INT_TYPES and s_type in INT_TYPES) \
                    and self.c.flag():
                # by the launch's scalar, or an expression of it (cast to t): cpu and nvptx test
                # it once for a power of two, and cpu divides by others through a reciprocal
                divisor = self.c.pick(["s", "(s * 2)", "(s + 1)"]
                                      + (["(s << 3)"] if s_type in INT_TYPES else []))
                if s_type != t:
                    divisor = f"hpvm.{t}({divisor})"
                return f"({self.expr(t, depth - 1)} {op} {divisor})"
            return f"({self.expr(t, depth - 1)} {op} {self.expr(t, depth - 1)})"
        if kind == "unary":
            if t in INT_TYPES and self.c.flag():
                return f"(~{self.expr(t, depth - 1)})"
            if t.startswith("u"):
                return f"abs({self.expr(t, depth - 1)})"
            return self.c.pick([f"(-{self.expr(t, depth - 1)})", f"abs({self.expr(t, depth - 1)})"])
        if kind == "minmax":
            fn = self.c.pick(["min", "max"])
            return f"{fn}({self.expr(t, depth - 1)}, {self.expr(t, depth - 1)})"
        if kind == "select":
            return f"({self.expr(t, depth - 1)} if {self.cond(depth - 1)} else {self.expr(t, depth - 1)})"
        if kind == "bits":
            return self.bit_trick(t, depth)
        fn = self.c.pick(["math.sqrt(abs({}))", "math.floor({})", "math.ceil({})",
                                        "hpvm.math.fmin({}, {})", "hpvm.math.fmax({}, {})",
                                        "math.copysign({}, {})", "hpvm.math.round({})"])
        args = [self.expr(t, depth - 1) for _ in range(fn.count("{}"))]
        return fn.format(*args)

    def bit_trick(self, t: str, depth: int) -> str:
        """An integer idiom a backend rewrites into one machine instruction (a rotate becomes a
        funnel shift, an average a halving add, a product's top half a mul.hi), by a literal
        count or one from the launch's scalar: where such rewrites go wrong, the targets
        differ."""
        bits = (RANGES[t][1] - RANGES[t][0] + 1).bit_length() - 1
        a, b = self.expr(t, depth - 1), self.expr(t, depth - 1)
        s_type = self.scope.variables.get("s")
        counts = [str(k) for k in (1, 3, bits // 2, bits - 1)] + (["s"] if s_type in INT_TYPES else [])
        k = f"hpvm.{t}({self.c.pick(counts)})"
        return self.c.pick([
            f"(({a} << {k}) | ({a} >> (hpvm.{t}({bits}) - {k})))",  # rotate
            f"({a} & (hpvm.{t}(0) - {a}))",  # the lowest set bit
            f"(({a} + {b}) >> hpvm.{t}(1))",  # average (wraps)
            f"({a} ^ ({a} >> hpvm.{t}({bits - 1})))",  # by the sign
            f"(({a} * {b}) >> hpvm.{t}({bits // 2}))"])  # a product's upper half

    def cond(self, depth: int) -> str:
        kind = self.c.pick(["compare", "compare", "compare", "and", "or", "not"]
                                         if depth > 0 else ["compare"])
        if kind == "compare":
            t = self.c.pick(TYPES)
            op = self.c.pick(["<", "<=", ">", ">=", "==", "!="])
            return f"({self.expr(t, max(0, depth - 1))} {op} {self.expr(t, max(0, depth - 1))})"
        if kind == "not":
            return f"(not {self.cond(depth - 1)})"
        op = "and" if kind == "and" else "or"
        return f"({self.cond(depth - 1)} {op} {self.cond(depth - 1)})"

    # -- statements -------------------------------------------------------------------------

    def block(self, indent: int, budget: int, in_loop: bool) -> None:
        count = self.c.integer(1, max(1, budget))
        for _ in range(count):
            self.statement(indent, budget - 1, in_loop)

    def statement(self, indent: int, budget: int, in_loop: bool) -> None:
        kinds = ["assign", "assign", "reassign", "atomic"]
        if budget > 0:
            kinds += ["if", "for", "while"]
        if in_loop:
            kinds += ["break", "continue"]
        kind = self.c.pick(kinds)
        if kind == "assign" or (kind == "reassign" and not self.scope.variables):
            t = self.c.pick(TYPES)
            name = self.scope.fresh("v")
            # deeper now and then: ptxas fuses chains of three operations (VIMNMX3, IADD3, LOP3),
            # and its fold of a negation into VIMNMX3 dropped the sign (reproducers/plain-1820096542)
            self.emit(indent, f"{name} = {self.expr(t, self.c.pick([2, 2, 3]))}")
            self.scope.variables[name] = t
        elif kind == "reassign":
            name, t = self.c.pick(sorted(self.scope.variables.items()))
            value = self.expr(t, 2)
            if name in self.scope.fixed or name.startswith("w"):  # indices and loop counters stay intact
                name = self.scope.fresh("v")
                self.scope.variables[name] = t
            self.emit(indent, f"{name} = hpvm.{t}({value})")
        elif kind == "atomic":
            fn = self.atomic
            index = f"hpvm.i64({self.expr(self.c.pick(INT_TYPES), 1)}) % 16"
            self.emit(indent, f"hpvm.{fn}(hist, {index}, {self.expr('i32', 1)})")
        elif kind == "if":
            self.emit(indent, f"if {self.cond(2)}:")
            self.block(indent + 1, budget - 1, in_loop)
            if self.c.flag():
                self.emit(indent, "else:")
                self.block(indent + 1, budget - 1, in_loop)
        elif kind == "for":
            var = self.scope.fresh("k")
            bounds = self.c.pick(["3", "0, 4", "5, 0, -2", "hpvm.i32(2), 6, 2"])
            self.emit(indent, f"for {var} in range({bounds}):")
            self.scope.variables[var] = "i32" if bounds.startswith("hpvm.i32") else "i64"
            self.block(indent + 1, budget - 1, True)
        elif kind == "while":
            var = self.scope.fresh("w")
            self.emit(indent, f"{var} = 0")
            self.scope.variables[var] = "i64"
            self.emit(indent, f"while {var} < 3 and {self.cond(1)}:")
            self.emit(indent + 1, f"{var} += 1")  # first, so that `continue` cannot loop forever
            self.block(indent + 1, budget - 1, True)
        else:
            self.emit(indent, kind)


HEADER = [
    "import math",
    "import hpvm_py as hpvm",
    "from hpvm_py import In, InOut, Out, Ptr, i32, i64, " + ", ".join(sorted(set(TYPES) - {"i32", "i64"})),
    "",
    "",
]
# guards of a partial `Out` store: the elements they skip keep what the buffer held before
INDEX_GUARDS = ["i < n - 1", "i > 0", "i % 3 != 1", "i > 0 and i < n - 1"]


def node_hint(hints: dict[str, str], node: str) -> str:
    return f", hint=\"{hints[node]}\"" if node in hints else ""


def generate(c: Choices, *, partial: bool = False, hints: dict[str, str] | None = None,
             chained: bool | None = None) -> Program:
    """A program of tests/test_differential.py's shape. `partial`: the leaf writes `out` only
    under a guard and the root declares it `Out`, so targets must keep the skipped elements.
    `hints`: placements of the nodes `body`, `sink`, `group` (a graph mixing targets)."""
    hints = hints or {}
    a_t, b_t, s_t, out_t = (c.pick(TYPES) for _ in range(4))
    hierarchical = c.flag()
    chained = c.flag() if chained is None else chained
    scope = _Scope(variables={"i": "i64", "n": "i64", "x0": a_t, "x1": b_t, "s": s_t})
    body = _Builder(c, scope)
    if hierarchical:
        body.emit(1, "me = hpvm.get_node()")
        body.emit(1, "i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * "
                     "hpvm.get_num_node_instances_x(me) + hpvm.get_node_instance_id_x(me)")
    else:
        body.emit(1, "i = hpvm.instance_id(0)")
    body.emit(1, "x0 = a[i]")
    body.emit(1, "x1 = b[(i * 7 + 3) % n]")
    body.block(1, c.integer(1, 4), False)
    store = f"out[i] = hpvm.{out_t}({body.expr(out_t, 3)})"
    if partial:
        guard = c.pick(INDEX_GUARDS + ["data"])
        body.emit(1, f"if {body.cond(1) if guard == 'data' else guard}:")
        body.emit(2, store)
    else:
        body.emit(1, store)
    ret = ""
    if chained:
        ret_t = c.pick(TYPES)
        body.emit(1, f"return hpvm.{ret_t}({body.expr(ret_t, 2)})")
        ret = f" -> {ret_t}"
    lines = HEADER + [
        "@hpvm.leaf",
        f"def body(a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, "
        f"out: Out[Ptr[{out_t}]], out_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64, "
        f"s: {s_t}, n: i64){ret}:",
        *body.lines,
        "",
    ]
    args = ("a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out, out_bytes=out_bytes, hist=hist, "
            "hist_bytes=hist_bytes, s=s, n=n")
    out_mode = "Out" if partial else "InOut"
    params = (f"a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, out: {out_mode}[Ptr[{out_t}]], "
              f"out_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64, out2: Out[Ptr[i64]], "
              f"out2_bytes: i64, s: {s_t}, n: i64, p: i64, l: i64")
    if chained:
        lines += [
            "",
            "@hpvm.leaf",
            f"def sink(v: {ret_t}, out2: Out[Ptr[i64]], out2_bytes: i64, n: i64):",
            "    me = hpvm.get_node()",
        ]
        if hierarchical:
            lines.append("    i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * "
                         "hpvm.get_num_node_instances_x(me) + hpvm.get_node_instance_id_x(me)")
        else:
            lines.append("    i = hpvm.get_node_instance_id_x(me)")
        lines += ["    out2[i] = hpvm.i64(v)", ""]
    inner_grid = "l" if hierarchical else "n"
    inner = [f"    first = hpvm.node(body, grid={inner_grid}, {args}{node_hint(hints, 'body')})"]
    if chained:
        inner.append(f"    hpvm.node(sink, grid={inner_grid}, v=first.out[0], out2=out2, "
                     f"out2_bytes=out2_bytes, n=n{node_hint(hints, 'sink')})")
    if hierarchical:
        lines += ["", "@hpvm.graph", f"def group({params}):", *inner, "",
                  "", "@hpvm.graph", f"def root({params}):",
                  "    hpvm.node(group, grid=p, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out, "
                  "out_bytes=out_bytes, hist=hist, hist_bytes=hist_bytes, out2=out2, "
                  f"out2_bytes=out2_bytes, s=s, n=n, p=p, l=l{node_hint(hints, 'group')})", ""]
    else:
        lines += ["", "@hpvm.graph", f"def root({params}):", *inner, ""]
    return Program("\n".join(lines), (a_t, b_t, s_t), out_t, hierarchical, chained)


def programs():
    """generate() as a hypothesis strategy (tests/test_differential.py)."""
    from hypothesis import strategies as st

    return st.composite(lambda draw: generate(HypothesisChoices(draw)))()


def pingpong_program(c: Choices) -> Program:
    """A 3-point stencil step from `src` to `dst` (both of one type) that the host launches
    several times, swapping the buffers: what one launch leaves in `dst` the next one reads.
    The neighbours are clamped at the ends by min/max, or by moving the offset back by the
    amount it overshoots (as image filters clamp their windows; proven through the offsets'
    affine forms). The store may skip the ends, as a Jacobi iteration keeps its boundary."""
    t, s_t = c.pick(TYPES), c.pick(TYPES)
    scope = _Scope(variables={"i": "i64", "n": "i64", "x0": t, "x1": t, "x2": t, "s": s_t})
    body = _Builder(c, scope)
    body.emit(1, "i = hpvm.instance_id(0)")
    clamp = c.pick(["min/max", "moved back"])
    # (x0 at i - 1 clamped to 0, x1 at i, x2 at i + 1 clamped to n - 1)
    lines = {"min/max": ["x0 = src[max(i - 1, 0)]", "x1 = src[i]", "x2 = src[min(i + 1, n - 1)]"],
             "moved back": ["lo = i - 1", "if i - 1 < 0:", "    lo -= i - 1", "x0 = src[lo]",
                            "x1 = src[i]",
                            "hi = i + 1", "if i + 1 > n - 1:", "    hi = hi - (i + 1) + n - 1",
                            "x2 = src[hi]"]}[clamp]
    for line in lines:
        body.emit(1, line)
    body.block(1, c.integer(1, 3), False)
    store = f"dst[i] = hpvm.{t}({body.expr(t, 3)})"
    guard = c.pick(["i > 0 and i < n - 1", "i < n - 1", None])
    if guard:
        body.emit(1, f"if {guard}:")
        body.emit(2, store)
    else:
        body.emit(1, store)
    params = (f"src: In[Ptr[{t}]], src_bytes: i64, dst: Out[Ptr[{t}]], dst_bytes: i64, "
              f"hist: InOut[Ptr[i32]], hist_bytes: i64, s: {s_t}, n: i64")
    lines = HEADER + [
        "@hpvm.leaf", f"def step({params}):", *body.lines, "", "",
        "@hpvm.graph", f"def root({params}):",
        "    hpvm.node(step, grid=n, src=src, src_bytes=src_bytes, dst=dst, dst_bytes=dst_bytes, "
        "hist=hist, hist_bytes=hist_bytes, s=s, n=n)", "",
    ]
    return Program("\n".join(lines), (t, t, s_t), t, False, False, f"guard: {guard}; clamp: {clamp}")


def stream_program(c: Choices) -> Program:
    """A two-stage stream: `body` (grid n) loads `a[i + k]` and writes `out`; `tail` (one
    instance) returns `out[m]` and a `hist` count as an i64. Per item, k = 0 and m = n - 1 stay in
    range; another k or m makes that item fail in that stage. Either stage may sit at the bottom
    of a chain of internal nodes, as HPVM-C nests every leaf: a wrapper, and for `body` possibly
    a grid of blocks of a few lanes under it (i = block * lanes + lane, guarded by i < n), which
    the stream launches as the leaf itself (rt/stream/stage_launch.py). `body` returns its
    instance's id + 1, or its input k unchanged: a forwarded output (passes/passthrough.py), which
    a GPU stream then knows on the host and runs whole, chains and checked kernels included
    (rt/stream/items.py)."""
    a_t, b_t, s_t, out_t = (c.pick(TYPES) for _ in range(4))
    shape = c.pick(["leaf", "wrapper", "blocks"])
    tail_wrapped = c.flag()
    lanes = c.integer(1, 5)
    forwards = c.flag()
    scope = _Scope(variables={"i": "i64", "n": "i64", "x0": a_t, "x1": b_t, "s": s_t})
    body = _Builder(c, scope)
    inner = 1
    if shape == "blocks":
        body.emit(1, "me = hpvm.get_node()")
        body.emit(1, "i = hpvm.get_node_instance_id_x(hpvm.get_parent_node(me)) * "
                     "hpvm.get_num_node_instances_x(me) + hpvm.get_node_instance_id_x(me)")
        body.emit(1, "if i < n:")
        inner = 2
    else:
        body.emit(1, "i = hpvm.instance_id(0)")
    body.emit(inner, "x0 = a[i + k]")
    body.emit(inner, "x1 = b[(i * 7 + 3) % n]")
    body.block(inner, c.integer(1, 3), False)
    body.emit(inner, f"out[i] = hpvm.{out_t}({body.expr(out_t, 3)})")
    if forwards:
        body.emit(1, "return k")
    else:  # 1 from the first instance: what a chain's levels bind up (another instance's is not)
        body.emit(1, "return i + 1")
    buffers = (f"a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, out: InOut[Ptr[{out_t}]], "
               f"out_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64")
    body_params = f"{buffers.replace('out: InOut', 'out: Out')}, s: {s_t}, k: i64, n: i64"
    body_args = ("a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out, out_bytes=out_bytes, hist=hist, "
                 "hist_bytes=hist_bytes, s=s, k=k, n=n")
    tail_params = (f"ready: i64, out: In[Ptr[{out_t}]], out_bytes: i64, hist: In[Ptr[i32]], hist_bytes: i64, "
                   "m: i64")
    lines = HEADER + [
        "@hpvm.leaf", f"def body({body_params}) -> i64:", *body.lines, "", "",
        "@hpvm.leaf", f"def tail({tail_params}) -> i64:",
        "    return hpvm.i64(out[m]) + hpvm.i64(hist[(m + 16) % 16]) + ready", "", "",
    ]
    first_stage = "body"
    if shape == "blocks":
        lines += ["@hpvm.graph", f"def blocks({body_params}) -> i64:",
                  f"    b0 = hpvm.node(body, grid={lanes}, {body_args})", "    return b0.out[0]", "", "",
                  "@hpvm.graph", f"def body_wrapper({body_params}) -> i64:",
                  f"    w = hpvm.node(blocks, grid=(n + {lanes - 1}) // {lanes}, {body_args})",
                  "    return w.out[0]", "", ""]
        first_stage = "body_wrapper"
    elif shape == "wrapper":
        lines += ["@hpvm.graph", f"def body_wrapper({body_params}) -> i64:",
                  f"    w = hpvm.node(body, grid=n, {body_args})", "    return w.out[0]", "", ""]
        first_stage = "body_wrapper"
    last_stage = "tail"
    if tail_wrapped:
        lines += ["@hpvm.graph", f"def tail_wrapper({tail_params}) -> i64:",
                  "    t = hpvm.node(tail, ready=ready, out=out, out_bytes=out_bytes, hist=hist, "
                  "hist_bytes=hist_bytes, m=m)", "    return t.out[0]", "", ""]
        last_stage = "tail_wrapper"
    grid = "" if first_stage != "body" else "grid=n, "
    lines += [
        "@hpvm.graph",
        f"def root({buffers}, s: {s_t}, k: i64, m: i64, n: i64) -> i64:",
        "    st = hpvm.streaming",
        f"    first = hpvm.node({first_stage}, {grid}a=st(a), a_bytes=st(a_bytes), b=st(b), "
        "b_bytes=st(b_bytes), out=st(out), out_bytes=st(out_bytes), hist=st(hist), "
        "hist_bytes=st(hist_bytes), s=st(s), k=st(k), n=st(n))",
        f"    last = hpvm.node({last_stage}, ready=st(hpvm.all_to_all(first.out[0])), out=st(out), "
        "out_bytes=st(out_bytes), hist=st(hist), hist_bytes=st(hist_bytes), m=st(m))",
        "    return last.out[0]", "",
    ]
    return Program("\n".join(lines), (a_t, b_t, s_t), out_t, False, True,
                   f"body: {shape}{' returning k' if forwards else ''}, "
                   f"tail: {'wrapper' if tail_wrapped else 'leaf'}")


BYTES = {t: int(t[1:]) // 8 if t[1:].isdigit() else 2 for t in TYPES}  # bf16: 2


def grid_of_blocks(params: str, leaf_only: str, body: list[str], passed: str, leaf_passed: str,
                   block: list[int], extents: list[str]) -> list[str]:
    """A program's source: the leaf `body` (its parameters `params`, then `leaf_only`) in a grid
    of `block` instances, under a root that launches as many blocks as `extents` hold."""
    def grid(items: list[str]) -> str:
        return items[0] if len(items) == 1 else f"({', '.join(items)})"

    return HEADER + [
        "@hpvm.leaf", f"def body({params}{leaf_only}):", *body, "", "",
        "@hpvm.graph", f"def blocks({params}):",
        f"    hpvm.node(body, grid={grid([str(k) for k in block])}, {passed}{leaf_passed})", "", "",
        "@hpvm.graph", f"def root({params}):",
        f"    hpvm.node(blocks, grid={grid([f'{e} // {k}' for e, k in zip(extents, block)])}, {passed})", "",
    ]


def tiles_program(c: Choices) -> Program:
    """CUDA-style memory access in a 1-, 2- or 3-D leaf under a grid of blocks: the inputs seen
    through `hpvm.view` (indexed `A[z, y, x]` or `A[z][y][x]`), a row pointer `b + offset`, an
    index loaded from data, a pointer walked by `+=` in a loop (possibly left by `break`) or
    counted down by `-=`, atomics through an offset pointer, and a shaped scratch tile shared by
    the block: written, then after `barrier()` read at a neighbour, reduced along x in a uniform
    `while` with a barrier per step, passed around in rounds between barriers (a round may be
    left by a uniform `break` or `continue`), or exchanged through `out` itself; and a flat scratch
    row reached by a pointer offset, read at a neighbour after a barrier. Every index
    stays in bounds, so the targets must agree bit for bit. The launch passes
    (s, depth, rows, cols); the leaf also gets `plane = rows * cols`, a node input computed by
    the internal node."""
    a_t, b_t, s_t, out_t, tile_t = (c.pick(TYPES) for _ in range(5))
    dims = c.pick([1, 2, 2, 3])
    block = [c.pick([1, 2, 4, 8]), c.pick([1, 2, 4]), c.pick([1, 2])][:dims]
    lanes, coords = ["tx", "ty", "tz"][:dims], ["x", "y", "z"][:dims]
    extents = ["cols", "rows", "depth"][:dims]
    # row-major (depth, rows, cols): the last index is x
    shape = ", ".join(reversed(extents))
    flat_lower = {1: "0", 2: "x", 3: "y * cols + x"}[dims]  # the element within the outermost row
    outer, outer_extent = coords[-1], extents[-1]
    row_length = {1: "1", 2: "cols", 3: "plane"}[dims]
    scope = _Scope(variables={"s": s_t}, fixed={"i", "n", "g", *lanes, *coords})
    body = _Builder(c, scope)

    def at(index: list[str]) -> str:  # index in x, y, z order -> an access of a view
        index = list(reversed(index))
        return f"[{', '.join(index)}]" if c.flag() else "".join(f"[{k}]" for k in index)

    for d, (lane, coord, size) in enumerate(zip(lanes, coords, block)):
        body.emit(1, f"{lane} = hpvm.instance_id({d})")
    body.emit(1, "parent = hpvm.get_parent_node(hpvm.get_node())")
    for lane, coord, size, axis in zip(lanes, coords, block, "xyz"):
        body.emit(1, f"{coord} = hpvm.get_node_instance_id_{axis}(parent) * {size} + {lane}")
        scope.variables[lane] = scope.variables[coord] = "i64"
    body.emit(1, f"A = hpvm.view(a, ({shape},))" if dims == 1 else f"A = hpvm.view(a, ({shape}))")
    body.emit(1, f"O = hpvm.view(out, ({shape},))" if dims == 1 else f"O = hpvm.view(out, ({shape}))")
    row_start = {1: "0", 2: "y * cols", 3: "z * plane + y * cols"}[dims]
    body.emit(1, f"brow = b + {row_start}")
    body.emit(1, f"x0 = A{at(coords)}")
    body.emit(1, "x1 = brow[(x * 7 + 3) % cols]")
    scope.variables.update(x0=a_t, x1=b_t)
    gathered = c.integer(0, dims - 1)  # an index loaded from data, in range by a floor modulo
    body.emit(1, f"g = hpvm.i64(x1) % {extents[gathered]}")
    body.emit(1, f"x2 = A{at([('g' if k == gathered else v) for k, v in enumerate(coords)])}")
    scope.variables.update(g="i64", x2=a_t)
    walk = c.pick(["loop", "break", "down"])
    if walk == "down":  # the element mirrored through the whole array
        body.emit(1, "p = a + (depth * rows * cols - 1)")
        body.emit(1, f"p -= {outer} * {row_length} + {flat_lower}")
        body.emit(1, "x3 = p[0]")
    else:
        body.emit(1, "p = a + 0")
        if walk == "loop":
            body.emit(1, f"for k in range({outer}):")
        else:
            body.emit(1, f"for k in range({outer_extent}):")
            body.emit(2, f"if k == {outer}:")
            body.emit(3, "break")
        body.emit(2, f"p += {row_length}")
        body.emit(1, f"x3 = p[{flat_lower}]")
    scope.variables["x3"] = a_t
    body.emit(1, f"hpvm.{body.atomic}(hist + 8, hpvm.i64({body.expr(c.pick(INT_TYPES), 1)}) % 8, "
                 f"{body.expr('i32', 1)})")
    tile_shape = ", ".join(str(k) for k in reversed(block))
    count = 1
    for k in block:
        count *= k
    body.emit(1, f"tile = hpvm.malloc({count * BYTES[tile_t]}, hpvm.{tile_t}, shape=({tile_shape},))")
    body.block(1, c.integer(1, 3), False)
    mine = at(lanes)
    body.emit(1, f"tile{mine} = hpvm.{tile_t}({body.expr(tile_t, 2)})")
    body.emit(1, "hpvm.barrier()")
    exchange = c.pick(["neighbour", "reduce", "rounds", "global"])
    shifted = [f"({lane} + {c.integer(0, size)}) % {size}" for lane, size in zip(lanes, block)]
    if exchange == "neighbour":
        body.emit(1, f"n0 = tile{at(shifted)}")
    elif exchange == "reduce":  # a tree along x: every step's condition is the same in the block
        body.emit(1, f"stride = {block[0] // 2}")
        body.emit(1, "while stride > 0:")
        body.emit(2, "if tx < stride:")
        body.emit(3, f"tile{mine} = hpvm.{tile_t}(tile{mine} + tile{at(['tx + stride', *lanes[1:]])})")
        body.emit(2, "hpvm.barrier()")
        body.emit(2, "stride = stride // 2")
        body.emit(1, f"n0 = tile{at(['0', *lanes[1:]])}")
    elif exchange == "global":  # through `out`: the barrier orders global memory too
        neighbour = [f"{coord} - {lane} + {shift}" for coord, lane, shift in zip(coords, lanes, shifted)]
        body.emit(1, f"O{at(coords)} = hpvm.{out_t}(tile{mine} + {body.expr(tile_t, 1)})")
        body.emit(1, "hpvm.barrier()")
        body.emit(1, f"n0 = hpvm.{tile_t}(O{at(neighbour)})")
        body.emit(1, "hpvm.barrier()")  # before any instance writes its element again
    else:
        body.emit(1, f"for r in range({c.integer(1, 3)}):")
        leave = c.pick([None, "break", "continue"])
        if leave:  # a condition of the loop counter and the launch's sizes: the same in the block
            body.emit(2, "if r == rows % 3:")
            body.emit(3, leave)
        body.emit(2, f"n0 = tile{at(shifted)}")
        body.emit(2, "hpvm.barrier()")
        scope.variables["n0"] = tile_t
        body.emit(2, f"tile{mine} = hpvm.{tile_t}(n0 + {body.expr(tile_t, 1)})")
        body.emit(2, "hpvm.barrier()")
    scope.variables["n0"] = tile_t
    if c.flag():  # flat scratch reached through a pointer to this instance's row of the block
        row_t = c.pick(TYPES)
        row_start = "0" if dims == 1 else f"ty * {block[0]}" if dims == 2 else \
            f"(tz * {block[1]} + ty) * {block[0]}"
        body.emit(1, f"flat = hpvm.malloc({count * BYTES[row_t]}, hpvm.{row_t})")
        body.emit(1, f"frow = flat + {row_start}")
        body.emit(1, f"frow[tx] = hpvm.{row_t}({body.expr(row_t, 2)})")
        body.emit(1, "hpvm.barrier()")
        body.emit(1, f"n1 = frow[(tx + {c.integer(1, block[0])}) % {block[0]}]")
        scope.variables["n1"] = row_t
    body.block(1, c.integer(1, 3), False)
    body.emit(1, f"O{at(coords)} = hpvm.{out_t}({body.expr(out_t, 3)})")
    if c.flag():  # read back and bumped through a pointer to the same element
        body.emit(1, f"q = out + ({outer} * {row_length} + {flat_lower})")
        body.emit(1, f"q[0] = hpvm.{out_t}(q[0] + hpvm.{out_t}({body.expr(out_t, 1)}))")
    buffers = (f"a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, "
               f"out: InOut[Ptr[{out_t}]], out_bytes: i64, hist: InOut[Ptr[i32]], hist_bytes: i64")
    sizes = "depth: i64, rows: i64, cols: i64"
    passed = ("a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, out=out, out_bytes=out_bytes, hist=hist, "
              "hist_bytes=hist_bytes, s=s, depth=depth, rows=rows, cols=cols")

    lines = grid_of_blocks(f"{buffers}, s: {s_t}, {sizes}", ", plane: i64", body.lines, passed,
                           ", plane=rows * cols", block, extents)
    return Program("\n".join(lines), (a_t, b_t, s_t), out_t, True, False,
                   f"{dims}-D blocks of {'x'.join(map(str, block))}, walk: {walk}, tile: {exchange}",
                   tuple(block))
