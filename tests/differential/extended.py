"""Random leaves built from what the language allows and generator.py never writes.

generator.py's programs mix scalar types, casts and control flow in one leaf body. These add, on a
1-, 2- or 3-D grid: `@hpvm.func` helpers (several call sites, calls inside loops, conditions and
other helpers, tail returns from a final if/else, a helper given a pointer it reads or writes),
exactly rounded math functions at their domain edges (sqrt, fabs, floor, fmod, fma, ...), builtins
`round`/`int`/`float`/`bool`, integer powers `e ** k`, chained comparisons, truth values of numbers
(`if v:` with v a NaN), tuple and chained assignment (`p, q = q, p`, `u = w = e`), annotated
assignments, augmented assignment of locals and of buffer elements (`out[i] //= e`), `elif`
chains, typed narrow loop bounds (`range(hpvm.u8(...))`), loads at indices computed from data,
module-level constants (-0.0, inf, NaN among them), a bool buffer read and written, and two
outputs of any types carried over a one-to-one edge to a second leaf. Every access stays in
bounds and no two instances write one element, so every target must agree with the python target
bit for bit (any NaN equals any NaN).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

import hpvm_py as hpvm
from differential.choices import Choices
from differential.data import pattern, scalar, values
from differential.generator import FLOAT_TYPES, HEADER, INT_TYPES, TYPES, _Builder, _Scope

# module-level constants: (name suffix, Python text, kind); ints fit every signed type they meet
INT_GLOBALS = ["0", "1", "3", "7", "100", "127"]
FLOAT_GLOBALS = ["-0.0", "0.5", "1e-40", "3.0", "1e10", "float('inf')", "-float('inf')", "float('nan')",
                 "65504.0", "-2.5"]
# exactly rounded on every target (docs/language.md, "Arithmetic"): bit for bit comparable
EXACT_MATH = ["math.sqrt({})", "math.fabs({})", "math.floor({})", "math.ceil({})", "math.trunc({})",
              "hpvm.math.round({})", "math.fmod({}, {})", "math.copysign({}, {})", "hpvm.math.fma({}, {}, {})",
              "hpvm.math.fmin({}, {})", "hpvm.math.fmax({}, {})", "hpvm.math.min({}, {})",
              "hpvm.math.max({}, {})", "hpvm.math.abs({})", "np.sqrt({})", "np.fabs({})", "np.floor({})",
              "min({}, {}, {})", "max({}, {}, {})"]
PREDICATES = ["math.isnan({})", "math.isinf({})", "math.isfinite({})"]
# rounding edges of the narrow floats: f16 ties (2049 between 2048 and 2050, 65520 between 65504 and
# inf, half the smallest subnormal), bf16 ties (1 + 2**-8, 257, 65.5 * 2**120), f32 ties (1 + 2**-24)
NARROW_EDGES = ["2049.0", "65520.0", "65519.0", "2.9802322387695312e-08", "8.940696716308594e-08",
                "1.00390625", "257.0", "3.3961775292304063e+38", "1.0000000596046448", "-0.00006103515625",
                "6.097555160522461e-05", "9.183549615799121e-41"]
AUG_INT = ["+=", "-=", "*=", "//=", "%=", "&=", "|=", "^=", "<<=", ">>="]
AUG_FLOAT = ["+=", "-=", "*=", "/=", "//=", "%="]


@dataclass
class Helper:
    name: str
    params: list[str]  # types
    result: str


@dataclass
class BlindProgram:
    source: str
    dims: int
    grouped: bool  # the leaves sit in a replicated internal node of `p` instances
    types: dict[str, str]  # a, b, s, out, r0, r1


class _Blind(_Builder):
    """generator.py's builder with the constructs it leaves out."""

    def literal(self, t: str) -> str:
        if t in FLOAT_TYPES and self.c.integer(0, 3) == 0:
            return f"hpvm.{t}({self.c.pick(NARROW_EDGES)})"
        return super().literal(t)

    def __init__(self, c: Choices, scope: _Scope, helpers: list[Helper], globals_: dict[str, str],
                 leaf: bool, out_t: str = "", results: tuple[str, ...] = (), named: bool = False):
        super().__init__(c, scope)
        self.out_t = out_t  # the element type of `out` (the leaf's buffer stores)
        self.results = results  # the leaf's output types, for a return before its end
        self.named = named  # the leaf returns the NamedTuple `Res`
        self.helpers = helpers
        self.globals = globals_
        self.leaf = leaf  # atomics, loads and the buffers only in the leaf, never in a helper

    def returning(self, depth: int) -> str:
        """A return of the leaf's outputs: a tuple, or `Res` by position, by keyword in either
        order, or without the field that has a default."""
        values = [f"hpvm.{t}({self.expr(t, depth)})" if t != "bool" else self.cond(depth)
                  for t in self.results]
        if not self.named:
            return f"return {', '.join(values)}"
        form = self.c.pick(["position", "keyword", "swapped", "default"])
        if form == "position":
            return f"return Res({', '.join(values)})"
        if form == "default":
            return f"return Res(r0={values[0]})"
        pairs = [f"r{k}={v}" for k, v in enumerate(values)]
        return f"return Res({', '.join(reversed(pairs) if form == 'swapped' else pairs)})"

    def expr(self, t: str, depth: int) -> str:
        if depth > 0 and self.c.integer(0, 2) == 0:
            kinds = ["call", "pow", "math", "builtin", "global", "truth", "mixed", "mixed"] + (["gather"] if self.leaf else [])
            kind = self.c.pick(kinds)
            if kind == "call" and self.helpers:
                h = self.c.pick(self.helpers)
                args = ", ".join(f"hpvm.{p}({self.expr(p, depth - 1)})" for p in h.params)
                return f"hpvm.{t}({h.name}({args}))"
            if kind == "pow":  # its base calls no helper (each factor would call it again)
                k = self.c.integer(0, 8) if t in INT_TYPES else self.c.pick([0, 1, 2])
                helpers, self.helpers = self.helpers, []
                base = self.expr(t, depth - 1)
                self.helpers = helpers
                return f"({base} ** {k})"
            if kind == "math":
                fn = self.c.pick(EXACT_MATH)
                ft = t if t in FLOAT_TYPES else self.c.pick(FLOAT_TYPES)
                args = [self.expr(ft, depth - 1) for _ in range(fn.count("{}"))]
                return f"hpvm.{t}({fn.format(*args)})"
            if kind == "builtin":
                fn = self.c.pick(["round", "int", "float", "bool"])
                inner = self.expr(self.c.pick(TYPES), depth - 1)
                return f"hpvm.{t}({fn}({inner}))"
            if kind == "global":
                fits = [g for g, gt in self.globals.items()
                        if gt == "float" and t in FLOAT_TYPES or gt == "int" and (t in FLOAT_TYPES or t in INT_TYPES)]
                if fits:
                    g = self.c.pick(fits)
                    op = self.c.pick(["+", "-", "*", "//", "%"] + (["|", "^"] if t in INT_TYPES else []))
                    return f"({self.expr(t, depth - 1)} {op} {g})"
            if kind == "mixed":  # operands of two types: the common type of docs/language.md, "Typing"
                t1, t2 = self.c.pick(TYPES), self.c.pick(TYPES)
                ops = ["+", "-", "*", "//", "%", "/"]
                if t1 in INT_TYPES and t2 in INT_TYPES:
                    ops += ["&", "|", "^", "<<", ">>"]
                op = self.c.pick(ops)
                return f"hpvm.{t}({self.expr(t1, depth - 1)} {op} {self.expr(t2, depth - 1)})"
            if kind == "truth":
                v = self.expr(self.c.pick(TYPES), depth - 1)
                return f"({self.expr(t, depth - 1)} if {v} else {self.expr(t, depth - 1)})"
            if kind == "gather":  # an index loaded from data, in range by a floor modulo
                src, st = self.c.pick([("a", self.scope.variables["x0"]), ("b", self.scope.variables["x1"])])
                idx = self.expr(self.c.pick(INT_TYPES), depth - 1)
                return f"hpvm.{t}({src}[hpvm.i64({idx}) % n])"
        return super().expr(t, depth)

    def cond(self, depth: int) -> str:
        if depth > 0 and self.c.integer(0, 2) == 0:
            kind = self.c.pick(["chain", "truth", "not", "predicate"] + (["flag"] if self.leaf else []))
            if kind == "chain":
                t = self.c.pick(TYPES)
                ops = [self.c.pick(["<", "<=", ">", ">=", "==", "!="]) for _ in range(self.c.integer(2, 3))]
                text = self.expr(t, depth - 1)
                for op in ops:
                    text += f" {op} {self.expr(self.c.pick([t, self.c.pick(TYPES)]), depth - 1)}"
                return f"({text})"
            if kind == "truth":
                return f"({self.expr(self.c.pick(TYPES), depth - 1)})"
            if kind == "not":
                return f"(not {self.expr(self.c.pick(TYPES), depth - 1)})"
            if kind == "predicate":
                return self.c.pick(PREDICATES).format(self.expr(self.c.pick(FLOAT_TYPES), depth - 1))
            return self.c.pick(["fl", "(not fl)", f"f[hpvm.i64({self.expr('i64', depth - 1)}) % n]"])
        return super().cond(depth)

    def statement(self, indent: int, budget: int, in_loop: bool) -> None:
        kinds = ["tuple", "chain", "annotated", "augment", "augment"]
        if budget > 0:
            kinds += ["elif", "narrow_for"]
        if self.leaf:
            kinds += ["store", "return"]
        if self.c.integer(0, 2) == 0 or not self.scope.variables:
            start = len(self.lines)
            super().statement(indent, budget, in_loop)
            if not self.leaf and any("hpvm.atomic_" in line for line in self.lines[start:]):
                del self.lines[start:]  # a helper has no atomics (helper-no-intrinsics)
                self.emit(indent, "pass")
            return
        kind = self.c.pick(kinds)
        mutable = sorted((v, t) for v, t in self.scope.variables.items()
                         if v not in self.scope.fixed and not v.startswith(("w", "k")))
        if kind == "tuple":
            same_type = [(v, t) for v, t in mutable if t == (mutable[0][1] if mutable else None)]
            if len(same_type) >= 2 and self.c.flag():
                (p, t), (q, _) = same_type[0], self.c.pick(same_type[1:])
                if self.c.flag():  # a swap
                    self.emit(indent, f"{p}, {q} = {q}, {p}")
                else:  # each right side reads the old values
                    self.emit(indent, f"{p}, {q} = hpvm.{t}({q} + {p}), hpvm.{t}({p} - {q})")
                return
            t1, t2 = self.c.pick(TYPES), self.c.pick(TYPES)
            u1, u2 = self.scope.fresh("v"), self.scope.fresh("v")
            self.emit(indent, f"{u1}, {u2} = {self.expr(t1, 2)}, {self.expr(t2, 2)}")
            self.scope.variables.update({u1: t1, u2: t2})
        elif kind == "chain":
            t = self.c.pick(TYPES)
            u1, u2 = self.scope.fresh("v"), self.scope.fresh("v")
            self.emit(indent, f"{u1} = {u2} = {self.expr(t, 2)}")
            self.scope.variables.update({u1: t, u2: t})
        elif kind == "annotated":
            t = self.c.pick(TYPES)
            u = self.scope.fresh("v")
            self.emit(indent, f"{u}: hpvm.{t} = hpvm.{t}({self.expr(self.c.pick(TYPES), 2)})")
            self.scope.variables[u] = t
        elif kind == "augment" and mutable:
            v, t = self.c.pick(mutable)
            op = self.c.pick(AUG_FLOAT if t in FLOAT_TYPES else AUG_INT)
            self.emit(indent, f"{v} {op} hpvm.{t}({self.expr(self.c.pick(TYPES), 2)})")
        elif kind == "store":
            t = self.out_t
            op = self.c.pick(AUG_FLOAT if t in FLOAT_TYPES else AUG_INT)
            self.emit(indent, f"out[i] {op} hpvm.{t}({self.expr(t, 2)})")
        elif kind == "return":  # an early return, under a condition that differs between instances
            self.emit(indent, f"if {self.cond(2)}:")
            self.emit(indent + 1, self.returning(2))
        elif kind == "elif":
            self.emit(indent, f"if {self.cond(2)}:")
            self.block(indent + 1, budget - 1, in_loop)
            for _ in range(self.c.integer(1, 3)):
                self.emit(indent, f"elif {self.cond(2)}:")
                self.block(indent + 1, budget - 1, in_loop)
            if self.c.flag():
                self.emit(indent, "else:")
                self.block(indent + 1, budget - 1, in_loop)
        elif kind == "narrow_for":
            t = self.c.pick(INT_TYPES)
            var = self.scope.fresh("k")
            bounds = self.c.pick([f"hpvm.{t}({self.expr(t, 1)}) % hpvm.{t}(4)", f"hpvm.{t}(3)",
                                  f"hpvm.{t}(1), hpvm.{t}(5), hpvm.{t}(2)"]
                                 + ([f"hpvm.{t}(3), hpvm.{t}(-2), hpvm.{t}(-2)"] if t.startswith("i") else []))
            self.emit(indent, f"for {var} in range({bounds}):")
            self.scope.variables[var] = t
            self.block(indent + 1, budget - 1, True)
        else:
            self.emit(indent, "pass")


def _helper(c: Choices, k: int, helpers: list[Helper], globals_: dict[str, str]) -> tuple[Helper, list[str]]:
    params = [c.pick(TYPES) for _ in range(c.integer(1, 3))]
    result = c.pick(TYPES)
    # names the leaf uses too (the inliner must keep the caller's apart), sometimes reassigned
    names = [c.pick([f"p{j}", "i", "s", "x0", "v1", "k2"]) for j in range(len(params))]
    names = [n if n not in names[:j] else f"p{j}" for j, n in enumerate(names)]
    scope = _Scope(variables=dict(zip(names, params)), counter=2,  # past the names v1 and k2
                   fixed=set() if c.flag() else set(names))
    body = _Blind(c, scope, helpers, globals_, leaf=False)
    body.block(1, c.integer(1, 3), False)
    if c.flag():  # a tail return from each branch of a final if/else
        body.emit(1, f"if {body.cond(2)}:")
        body.block(2, 1, False)
        body.emit(2, f"return hpvm.{result}({body.expr(result, 2)})")
        body.emit(1, "else:")
        body.emit(2, f"return hpvm.{result}({body.expr(result, 2)})")
    else:
        body.emit(1, f"return hpvm.{result}({body.expr(result, 3)})")
    helper = Helper(f"h{k}", params, result)
    signature = ", ".join(f"{n}: {t}" for n, t in zip(names, params))
    return helper, ["@hpvm.func", f"def {helper.name}({signature}) -> {result}:", *body.lines, "", ""]


def blind_program(c: Choices) -> BlindProgram:
    a_t, b_t, s_t, out_t = (c.pick(TYPES) for _ in range(4))
    r0, r1 = (c.pick(TYPES + ["bool"]) for _ in range(2))  # outputs may be i1 on the edge too
    dims = c.pick([1, 2, 3])
    globals_: dict[str, str] = {}
    lines = list(HEADER)
    lines.insert(1, "import numpy as np")
    for k in range(c.integer(0, 3)):
        kind = c.pick(["int", "float"])
        lines.insert(-2, f"G{k} = {c.pick(INT_GLOBALS if kind == 'int' else FLOAT_GLOBALS)}")
        globals_[f"G{k}"] = kind
    helpers: list[Helper] = []
    for k in range(c.integer(0, 3)):
        helper, text = _helper(c, k, helpers, globals_)
        helpers.append(helper)
        lines += text
    pointer_helper = c.pick([None, "read", "write"])
    if pointer_helper == "read":
        lines += ["@hpvm.func", f"def fetch(p: Ptr[{a_t}], at: i64, m: i64) -> {a_t}:",
                  "    return p[at % m]", "", ""]
    elif pointer_helper == "write":
        op = c.pick(AUG_FLOAT if out_t in FLOAT_TYPES else AUG_INT)
        lines += ["@hpvm.func", f"def bump(p: Ptr[{out_t}], at: i64, v: {out_t}):",
                  f"    p[at] {op} v", "", ""]
    scope = _Scope(variables={"i": "i64", "n": "i64", "x0": a_t, "x1": b_t, "s": s_t},
                   fixed={"i", "n", "x", "y", "z", "fl"})
    named = c.flag()
    if named:  # outputs by name, the second with a default (a number, as the language asks)
        lines.insert(1, "import typing")
        lines += ["class Res(typing.NamedTuple):", f"    r0: {r0}", f"    r1: {r1} = {c.pick(['0', '1'] if r1 == 'bool' else ['0', '1', '3'])}",
                  "", ""]
    body = _Blind(c, scope, helpers, globals_, leaf=True, out_t=out_t, results=(r0, r1), named=named)
    ids = ["x", "y", "z"][:dims]
    for d, v in enumerate(ids):
        body.emit(1, f"{v} = hpvm.instance_id({d})" if c.flag() else
                  f"{v} = hpvm.get_node_instance_id_{'xyz'[d]}(hpvm.get_node())")
        scope.variables[v] = "i64"
    flat = {1: "x", 2: "y * hpvm.num_instances(0) + x",
            3: "(z * hpvm.get_num_node_instances_y(hpvm.get_node()) + y) * hpvm.num_instances(0) + x"}[dims]
    grouped = c.flag()  # under a replicated internal node: its instances take consecutive blocks
    if grouped:
        count = " * ".join(f"hpvm.num_instances({d})" for d in range(dims))
        flat = f"hpvm.get_node_instance_id_x(hpvm.get_parent_node(hpvm.get_node())) * {count} + {flat}"
    body.emit(1, f"i = {flat}")
    body.emit(1, "x0 = a[i]")
    body.emit(1, "x1 = b[(i * 7 + 3) % n]")
    body.emit(1, "fl = f[i]")
    if pointer_helper == "read":
        body.emit(1, "x2 = fetch(a, hpvm.i64(x1), n)")
        scope.variables["x2"] = a_t
    body.block(1, c.integer(2, 5), False)
    if pointer_helper == "write":
        body.emit(1, f"bump(out, i, hpvm.{out_t}({body.expr(out_t, 2)}))")
    body.emit(1, f"fo[i] = {body.cond(2)}")
    body.emit(1, body.returning(3))
    lines += [
        "@hpvm.leaf",
        f"def body(a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, f: In[Ptr[bool]], "
        f"f_bytes: i64, out: InOut[Ptr[{out_t}]], out_bytes: i64, fo: Out[Ptr[bool]], fo_bytes: i64, "
        f"hist: InOut[Ptr[i32]], hist_bytes: i64, s: {s_t}, n: i64) -> {'Res' if named else f'tuple[{r0}, {r1}]'}:",
        *body.lines, "", "",
        "@hpvm.leaf",
        f"def sink(v0: {r0}, v1: {r1}, o0: Out[Ptr[{r0}]], o0_bytes: i64, o1: Out[Ptr[{r1}]], o1_bytes: i64):",
    ]
    for d, v in enumerate(ids):
        lines.append(f"    {v} = hpvm.instance_id({d})")
    lines += [f"    i = {flat}", "    o0[i] = v0", "    o1[i] = v1", "", ""]
    extents = ["nx", "ny", "nz"][:dims]
    grid = extents[0] if dims == 1 else f"({', '.join(extents)})"
    buffers = (f"a: In[Ptr[{a_t}]], a_bytes: i64, b: In[Ptr[{b_t}]], b_bytes: i64, f: In[Ptr[bool]], "
               f"f_bytes: i64, out: InOut[Ptr[{out_t}]], out_bytes: i64, fo: Out[Ptr[bool]], fo_bytes: i64, "
               f"hist: InOut[Ptr[i32]], hist_bytes: i64, o0: Out[Ptr[{r0}]], o0_bytes: i64, "
               f"o1: Out[Ptr[{r1}]], o1_bytes: i64, s: {s_t}, n: i64, nx: i64, ny: i64, nz: i64, p: i64")
    nodes = [
        f"    first = hpvm.node(body, grid={grid}, a=a, a_bytes=a_bytes, b=b, b_bytes=b_bytes, f=f, "
        "f_bytes=f_bytes, out=out, out_bytes=out_bytes, fo=fo, fo_bytes=fo_bytes, hist=hist, "
        "hist_bytes=hist_bytes, s=s, n=n)",
        f"    hpvm.node(sink, grid={grid}, v0=first.out{'.r0' if named else '[0]'}, "
        f"v1=first.out{'.r1' if named else '[1]'}, o0=o0, o0_bytes=o0_bytes, "
        "o1=o1, o1_bytes=o1_bytes)", ""]
    if grouped:
        passed = ", ".join(f"{name}={name}" for name in ("a", "a_bytes", "b", "b_bytes", "f", "f_bytes", "out",
                                                        "out_bytes", "fo", "fo_bytes", "hist", "hist_bytes", "o0",
                                                        "o0_bytes", "o1", "o1_bytes", "s", "n", "nx", "ny", "nz", "p"))
        lines += ["@hpvm.graph", f"def group({buffers}):", *nodes, ""]
        nodes = [f"    hpvm.node(group, grid=p, {passed})", ""]
    lines += ["@hpvm.graph", f"def root({buffers}):", *nodes]
    return BlindProgram("\n".join(lines), dims, grouped, {"a": a_t, "b": b_t, "s": s_t, "out": out_t, "r0": r0, "r1": r1})


def run_blind(program: BlindProgram, module: Any, target: str, seed: int, extents: tuple[int, int, int],
              p: int = 1) -> dict[str, tuple[np.ndarray, str]]:
    """Launches `module.root` (program's source, imported) on `target` with inputs from `seed`;
    every buffer the launch writes, with its element type."""
    rng = np.random.default_rng(seed)
    nx, ny, nz = extents
    n = nx * ny * nz * (p if program.grouped else 1)
    t = program.types
    a, b = values(t["a"], n, rng), values(t["b"], n, rng)
    f = rng.random(n) < 0.5
    for array, name in ((a, "a"), (b, "b")):  # rounding edges of the narrower float types
        if t[name] in ("f32", "f64"):
            edges = np.array([float(e) for e in NARROW_EDGES], np.float64)
            picks = rng.random(n) < 0.25
            array[picks] = rng.choice(edges, n)[picks] * rng.choice([1.0, -1.0], n)[picks]
    r0, r1 = ("i1" if t[r] == "bool" else t[r] for r in ("r0", "r1"))
    out, o0, o1 = values(t["out"], n, rng), pattern(r0, n), pattern(r1, n)
    fo = np.zeros(n, np.bool_)
    hist = rng.integers(-5, 5, 16, dtype=np.int32)
    with hpvm.runtime(target):
        hpvm.wait(hpvm.launch(module.root, a, a.nbytes, b, b.nbytes, f, f.nbytes, out, out.nbytes, fo, fo.nbytes,
                              hist, hist.nbytes, o0, o0.nbytes, o1, o1.nbytes, scalar(t["s"], rng), n, nx, ny, nz, p))
    return {"out": (out, t["out"]), "fo": (fo, "i1"), "hist": (hist, "i32"), "o0": (o0, r0), "o1": (o1, r1)}
